"""The layering the project promises: imports run one way, the vocabulary is torch-free,
the verdict is pure, and the results schema documents every word the code speaks."""
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

# layer -> project packages it must not import
FORBIDDEN = {
    "detconf": ("engine", "conformance", "reports", "conftest", "torch"),
    "engine": ("conformance", "reports", "conftest"),
    "conformance": ("reports", "conftest"),
    "reports": ("engine", "conformance", "conftest", "torch"),
}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def violations(layer: str, root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted((root / layer).rglob("*.py")):
        for module in sorted(imported_modules(path)):
            top = module.split(".")[0]
            if top in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(root)} imports {module}")
    return bad


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_imports_run_one_way(layer):
    assert violations(layer) == []


def test_the_import_check_catches_an_upward_import(tmp_path):
    planted = tmp_path / "engine" / "sneaky.py"
    planted.parent.mkdir()
    planted.write_text("def f():\n    from conformance import recipes\n    return recipes\n")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "x.py").write_text("import torch\nfrom engine.docspec import parse_docstring\n")
    assert violations("engine", tmp_path) == ["engine/sneaky.py imports conformance"]
    assert violations("reports", tmp_path) == ["reports/x.py imports engine.docspec", "reports/x.py imports torch"]


@pytest.mark.parametrize("module", ["detconf.vocabulary", "detconf.gc_pause", "engine.verdict", "engine.observation", "engine.entry",
                                    "engine.docspec", "reports.build", "reports.diff", "reports.drift",
                                    "reports.sensitivity", "reports.summary"])
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
