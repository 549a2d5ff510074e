"""The layering the project promises: imports run one way (the plugin and its conftest.py shim
too), no package imports itself in a circle, the vocabulary is torch-free, the verdict is pure,
and the results schema documents every word the code speaks (docs/architecture.md)."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from detconf import vocabulary

ROOT = Path(__file__).resolve().parent.parent

# layer -> project packages it must not import. Imports run one way: detconf <- engine <-
# conformance <- plugin; reports read files only (they may import detconf alone). The layers are
# the repository's top-level packages, imported as detconf's subpackages (detconf.engine, ...);
# "detconf" is detconf's own modules.
FORBIDDEN = {
    "detconf": ("engine", "conformance", "reports", "plugin", "conftest", "torch"),
    "engine": ("conformance", "reports", "plugin", "conftest"),
    "conformance": ("reports", "plugin", "conftest"),
    "reports": ("engine", "conformance", "plugin", "conftest", "torch"),
    "plugin": ("reports", "conftest"),
}
#: The design's packages: imported only as detconf.<name>, never by a top-level name of their
#: own (docs/architecture.md, "Installed names").
SUBPACKAGES = ("engine", "conformance", "reports", "plugin")
#: The plugin reads a few report modules, each named where it does (all torch-free, none
#: importing engine or conformance): plugin.results shows the end-of-run summary through
#: reports.safe, guards the report folder with reports.manifest, and builds the matrix in its
#: own process with reports.standby when the standby builder cannot answer.
ALLOWED = {
    "plugin/results.py": ("detconf.reports.safe", "detconf.reports.manifest", "detconf.reports.standby"),
}
#: The suite root's conftest.py hands pytest the plugin's hooks: it imports the plugin only.
SHIM = "conftest.py"
SHIM_MAY_IMPORT = ("plugin", "__future__")


def layer_of(module: str) -> str:
    """The layer a module belongs to: ``detconf.engine.runner`` -> ``engine``,
    ``detconf.vocabulary`` -> ``detconf``, ``torch.nn`` -> ``torch``."""
    parts = module.split(".")
    if parts[0] == "detconf" and len(parts) > 1 and parts[1] in SUBPACKAGES:
        return parts[1]
    return parts[0]


def _imported(path: Path, *, names: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.update([f"{node.module}.{alias.name}" for alias in node.names] if names else [node.module])
    return found


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    return _imported(path, names=False)


def imported_names(path: Path) -> set[str]:
    """:func:`imported_modules`, with each name a ``from`` import takes (``from detconf.reports
    import manifest`` is ``detconf.reports.manifest``): what an allowance names."""
    return _imported(path, names=True)


def _allowed(name: str, allowed: tuple[str, ...]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def _bare(module: str) -> bool:
    """An import of a design package by its own top-level name (``import engine``)."""
    return module.split(".")[0] in SUBPACKAGES


def violations(layer: str, root: Path = ROOT, allowed: dict | None = None) -> list[str]:
    allowed = ALLOWED if allowed is None else allowed
    bad = []
    for path in sorted((root / layer).rglob("*.py")):
        where = path.relative_to(root).as_posix()
        for module in sorted(imported_names(path)):
            if _bare(module):
                bad.append(f"{where} imports {module} by a top-level name (detconf.{module})")
            elif layer_of(module) in FORBIDDEN[layer] and not _allowed(module, allowed.get(where, ())):
                bad.append(f"{where} imports {module}")
    return bad


def shim_violations(root: Path = ROOT) -> list[str]:
    return [f"{SHIM} imports {module}" for module in sorted(imported_modules(root / SHIM))
            if layer_of(module) not in SHIM_MAY_IMPORT or _bare(module)]


# --- circles inside one package ------------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module):
    """Every import statement of a module, at any depth: an import inside a function closes a
    circle as surely as one at the top, only later (the circle is cut by moving what both sides
    need). Those under ``if TYPE_CHECKING:`` never run."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            stack.extend(ast.iter_child_nodes(node))


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (:func:`_imports`)."""
    files = {_module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the module's own package upwards
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            targets = [t.removeprefix("detconf.") if layer_of(t) == package else t for t in targets]
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def circles(package: str, root: Path = ROOT) -> list[str]:
    """Each import circle among the modules of ``package``, as ``a -> b -> a`` (starting at its
    first module in sorted order; each circle once)."""
    graph = import_graph(package, root)
    found: set[tuple[str, ...]] = set()

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph[path[-1]]):
            if nxt == path[0]:
                found.add(tuple(path))
            elif nxt not in path and nxt > path[0]:  # each circle from its smallest module
                walk(path + [nxt])

    for start in sorted(graph):
        walk([start])
    return [" -> ".join(c + (c[0],)) for c in sorted(found)]


#: Circles in the tree, each to be cut by moving what both sides need (not by importing inside
#: a function): none today, so a new circle fails.
KNOWN_CIRCLES: dict[str, list[str]] = {}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_imports_run_one_way(layer):
    assert violations(layer) == []


def test_the_root_conftest_is_a_shim_that_imports_the_plugin_only():
    assert shim_violations() == []
    assert len((ROOT / SHIM).read_text(encoding="utf-8").splitlines()) < 40


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_circle_inside_a_package(package):
    assert circles(package) == KNOWN_CIRCLES.get(package, [])


def test_the_import_check_catches_an_upward_import(tmp_path):
    planted = tmp_path / "engine" / "sneaky.py"
    planted.parent.mkdir()
    planted.write_text("def f():\n    from detconf.conformance import recipes\n    return recipes\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "x.py").write_text("import torch\nfrom detconf.engine.docspec import parse_docstring\n")
    assert violations("engine", tmp_path) == ["engine/sneaky.py imports detconf.conformance.recipes"]
    assert violations("reports", tmp_path) == ["reports/x.py imports detconf.engine.docspec.parse_docstring",
                                               "reports/x.py imports torch"]


def test_the_import_check_catches_a_design_package_imported_by_a_top_level_name(tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "old.py").write_text("from engine.docspec import parse_docstring\nimport reports.safe\n")
    assert violations("engine", tmp_path) == [
        "engine/old.py imports engine.docspec.parse_docstring by a top-level name (detconf.engine.docspec.parse_docstring)",
        "engine/old.py imports reports.safe by a top-level name (detconf.reports.safe)"]
    (tmp_path / "conftest.py").write_text("from plugin.options import pytest_addoption\n")
    assert shim_violations(tmp_path) == ["conftest.py imports plugin.options"]


def test_the_import_check_covers_the_plugin_and_its_shim(tmp_path):
    (tmp_path / "plugin").mkdir()
    # The allowance is by module and by report module: results.py may read reports.safe, and
    # nothing else may read any report module.
    (tmp_path / "plugin" / "results.py").write_text(
        "from detconf.reports.safe import terminal\nfrom detconf.reports import manifest\n\ndef f():\n"
        "    from detconf.reports.build import build\n    return build\n")
    (tmp_path / "plugin" / "header.py").write_text("import conftest\nfrom detconf.reports.safe import terminal\n")
    assert violations("plugin", tmp_path) == ["plugin/header.py imports conftest",
                                              "plugin/header.py imports detconf.reports.safe.terminal",
                                              "plugin/results.py imports detconf.reports.build.build"]
    (tmp_path / "conformance").mkdir()
    (tmp_path / "conformance" / "harness.py").write_text("def f():\n    import detconf.plugin.options\n")
    assert violations("conformance", tmp_path) == ["conformance/harness.py imports detconf.plugin.options"]
    (tmp_path / "conftest.py").write_text("from detconf.plugin.options import pytest_addoption\n"
                                          "from detconf.conformance import plan\n")
    assert shim_violations(tmp_path) == ["conftest.py imports detconf.conformance"]


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_circle_check_catches_a_planted_circle_inside_one_package(tmp_path):
    _package(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\n", "pkg/b.py": "import pkg.c\n",
                        "pkg/c.py": "import os\n"})
    assert circles("pkg", tmp_path) == []  # a chain is no circle
    (tmp_path / "pkg" / "c.py").write_text("from pkg.a import thing\n")
    assert circles("pkg", tmp_path) == ["pkg.a -> pkg.b -> pkg.c -> pkg.a"]


def test_the_circle_check_sees_function_level_relative_and_package_imports(tmp_path):
    _package(tmp_path, {"pkg/__init__.py": "", "pkg/catalog.py": "def load():\n    from pkg.checks import more\n",
                        "pkg/checks/__init__.py": "from ..catalog import DATA\nfrom . import one\n",
                        "pkg/checks/one.py": "from pkg.checks import other\n",
                        "pkg/other.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import catalog\n"})
    # catalog -> checks (its __init__: 'more' is no module) -> catalog; one -> checks is the
    # package's own (checks imports one): a circle too. TYPE_CHECKING imports never run.
    assert circles("pkg", tmp_path) == ["pkg.catalog -> pkg.checks -> pkg.catalog",
                                        "pkg.checks -> pkg.checks.one -> pkg.checks"]


@pytest.mark.parametrize("module", ["detconf.vocabulary", "detconf.gc_pause", "detconf.child", "detconf.engine.verdict", "detconf.engine.observation", "detconf.engine.entry",
                                    "detconf.engine.docspec", "detconf.reports.build", "detconf.reports.diff", "detconf.reports.drift",
                                    "detconf.reports.sensitivity", "detconf.reports.summary"])
def test_torch_free_modules_import_without_torch(module):
    code = f"import sys; sys.modules['torch'] = None\nimport {module}\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr.strip().splitlines()[-1:]


# --- vocabulary ------------------------------------------------------------------


def test_verdicts_are_ordered_worst_first_and_split_into_passing_and_failing():
    words = list(vocabulary.VERDICTS)
    assert words[: len(vocabulary.FAILING)] == list(vocabulary.FAILING)  # every failure is worse than any pass
    assert set(vocabulary.FAILING) | set(vocabulary.PASSING) == set(words)
    assert sorted(vocabulary.DISPLAY_ORDER) == sorted(words)
    assert all(vocabulary.meaning(v) and "\n" not in vocabulary.meaning(v) for v in words)
    assert vocabulary.is_passing("conforms") and not vocabulary.is_passing("harness-error")


def _schema_table(heading: str) -> list[list[str]]:
    """The rows of the Markdown table under ``heading`` in docs/results-schema.md."""
    text = (ROOT / "docs" / "results-schema.md").read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip().strip("`").replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def test_schema_doc_lists_every_verdict_in_order_with_its_meaning_and_class():
    rows = _schema_table("Verdicts")
    assert [r[0] for r in rows] == list(vocabulary.VERDICTS)
    for word, passing, meaning in rows:
        assert passing == ("yes" if vocabulary.is_passing(word) else "no"), word
        assert meaning == vocabulary.meaning(word), word


@pytest.mark.parametrize("heading,words", [
    ("Modes", vocabulary.MODES),
    ("Phases", tuple(vocabulary.PHASES)),
    ("Compile settings", tuple(vocabulary.COMPILE_SETTINGS)),
    ("Sources", tuple(vocabulary.SOURCES)),
    ("Promises", tuple(vocabulary.PROMISES)),
    ("Expectations", tuple(vocabulary.EXPECTATIONS)),
])
def test_schema_doc_lists_every_word(heading, words):
    assert [r[0] for r in _schema_table(heading)] == list(words)


def test_schema_doc_gives_each_phase_its_meaning():
    assert {r[0]: r[1] for r in _schema_table("Phases")} == vocabulary.PHASES


def test_schema_doc_gives_each_compile_setting_its_meaning():
    assert {r[0]: r[1] for r in _schema_table("Compile settings")} == vocabulary.COMPILE_SETTINGS


def test_reach_gates_only_passing_or_absence_verdicts():
    """Only verdicts that speak of the kernel's behaviour or its absence need reach; what a program
    did whatever its route (differed, raised, warned unasked) stands."""
    assert set(vocabulary.REACH_GATED) <= set(vocabulary.VERDICTS)
    assert not {"nondeterministic", "undocumented-raise", "spurious-warning", "wrong-result"} & set(vocabulary.REACH_GATED)
    assert not vocabulary.is_passing("not-reached")


def test_schema_doc_names_the_schema_version():
    text = (ROOT / "docs" / "results-schema.md").read_text(encoding="utf-8")
    assert f"(schema {vocabulary.SCHEMA_VERSION})" in text.splitlines()[0]


def test_published_results_use_only_documented_words():
    seen: dict[str, set[str]] = {"verdict": set(), "expected": set(), "mode": set(), "source": set(), "promise": set()}
    for path in (ROOT / "reports" / "published").rglob("results.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("record") == "result":
                for key in seen:
                    seen[key].add(row[key])
    assert seen["verdict"] <= set(vocabulary.VERDICTS)
    assert seen["expected"] <= set(vocabulary.EXPECTATIONS)
    assert seen["mode"] <= set(vocabulary.MODES)
    assert seen["source"] <= set(vocabulary.SOURCES)
    assert seen["promise"] <= set(vocabulary.PROMISES)
