"""The warm runner of inner ``python -m pytest`` runs (``tests/warm.py``): a forked child is the
process a fresh interpreter would be, and a command the fork could answer differently runs cold."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import warm
from tests.by_path import load_script
from tests.test_hostile_plugin import _env, runs_in

ROOT = Path(__file__).resolve().parents[1]
TWO = ["--source", "flag-api", "--device", "cpu", "--hypothesis-profile", "ci", "-p", "no:randomly", "-n", "0",
       "-k", "are_deterministic", "--no-report-build"]

PROBE = '''
import json, os, resource, sys, warnings
_seen = {
    "argv0": os.path.basename(sys.argv[0]), "path0": sys.path[0], "cwd": os.getcwd(),
    "marker": os.environ.get("WARM_MARKER"), "extra_on_path": os.environ["PROBE_DIR"] in sys.path,
    "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
    "address_space": resource.getrlimit(resource.RLIMIT_AS)[0],
    "repository_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("detconf", "tests", "conformance")),
    "orig_argv_tail": sys.orig_argv[1:3],
    "path": [p.replace(os.environ["PROBE_DIR"], "<probe>") for p in sys.path],
}
def pytest_sessionfinish(session):
    import hypothesis.configuration as hc
    where = hc.storage_directory("x")
    _seen["hypothesis_home"] = str(getattr(where, "home_directory", None) or os.path.dirname(str(where)))
    configure = sys.modules["detconf.plugin.configure"]
    _seen["plugin_loader"] = type(configure.__loader__).__name__
    _seen["plugin_code"] = [configure.pytest_configure.__code__.co_filename, configure.__cached__]
    with open(os.environ["PROBE_OUT"], "w") as f:
        json.dump(_seen, f)
    if os.environ.get("PROBE_KILL"):
        os.kill(os.getpid(), 9)
'''


def _probe(tmp_path: Path, name: str, *, cold: bool, fsize: int | None = None, extra: dict | None = None,
           cwd: Path = ROOT, address_space: int | None = None) -> tuple[subprocess.CompletedProcess, dict, Path]:
    folder = tmp_path / f"probe-{name}"
    folder.mkdir()
    (folder / "warm_probe.py").write_text(PROBE, encoding="utf-8")
    results = tmp_path / f"{name}.jsonl"
    env = _env({"PYTHONPATH": str(folder), "PROBE_DIR": str(folder), "PROBE_OUT": str(tmp_path / f"{name}.json"),
                "WARM_MARKER": name, **(extra or {})})
    before = dict(warm.stats)
    out = warm.run([sys.executable, "-m", "pytest", str(ROOT / "conformance"), "--rootdir", str(ROOT), "-q",
                    "-p", "no:cacheprovider", "-p", "warm_probe", *TWO, "--results", str(results)],
                   cwd=cwd, env=env, timeout=240, capture_output=True, text=True, fsize=fsize, cold=cold,
                   address_space=address_space)
    how = "cold" if warm.stats["cold"] > before["cold"] else "warm"
    seen = json.loads((tmp_path / f"{name}.json").read_text()) if (tmp_path / f"{name}.json").exists() else {}
    return out, dict(seen, ran=how), results


def _same_run(out: subprocess.CompletedProcess, results: Path) -> tuple:
    """What a run answered, without what differs between any two runs (ids, times)."""
    [run] = runs_in(results)
    verdicts = sorted((r["entry_id"], r["mode"], r["verdict"], r["observed"]) for r in run["rows"])
    summary = [line for line in out.stdout.splitlines() if line.startswith(("verdicts:", "cpu/", "detconf: "))]
    # Where Triton is installed (CUDA builds of torch 2.15), its nanobind modules report at exit the
    # objects the run froze as leaked, with their addresses: the same report in both, other numbers.
    stderr = [line for line in out.stderr.splitlines()
              if not line.startswith(("nanobind: ", " - leaked ", " - ... skipped", "See https://nanobind"))]
    return out.returncode, verdicts, summary, run["end"]["outcome"], stderr


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_run_answers_as_a_fresh_interpreter_and_sees_the_same_process(tmp_path):
    warm_out, warm_seen, warm_results = _probe(tmp_path, "w", cold=False)
    cold_out, cold_seen, cold_results = _probe(tmp_path, "c", cold=True)
    assert (warm_seen.pop("ran"), cold_seen.pop("ran")) == ("warm", "cold")
    assert warm_out.returncode == 0, warm_out.stdout[-2000:] + warm_out.stderr[-2000:]
    assert _same_run(warm_out, warm_results) == _same_run(cold_out, cold_results)
    assert "warnings summary" not in warm_out.stdout, warm_out.stdout[-2000:]  # none that a fresh run lacks
    for seen, name in ((warm_seen, "w"), (cold_seen, "c")):
        assert seen.pop("marker") == name and seen.pop("extra_on_path") is True
    # The forked child's repository modules run the code the server compiled from the same files
    # (warm_server.PrecompiledFinder); a fresh interpreter compiles or reads them itself.
    assert (warm_seen.pop("plugin_loader"), cold_seen.pop("plugin_loader")) == ("PrecompiledLoader", "SourceFileLoader")
    assert warm_seen == cold_seen  # argv, sys.path[0], folder, limits, no repository module before the plugin
    assert warm_seen["repository_modules"] == [] and warm_seen["path0"] == str(ROOT)


HELD = """
import json, os, string, sys  # string: loaded before the server's imports, which "rebinds" changes
sys.path.insert(0, os.path.dirname(os.environ["SERVER_FILE"]))
import warm_server as ws
root, case = sys.argv[1], sys.argv[2]
try:
    ws._preload_project("pytest", None, root=root, roots=("detconf.sub",))
except SystemExit as exc:
    print(json.dumps({"refused": str(exc)}))
    raise SystemExit(0)
server_sub = sys.modules["detconf.sub"]
if case == "touched":  # a file of the held modules changed since the server imported it
    with open(os.path.join(root, "detconf", "sub.py"), "a") as f:
        f.write("# changed\\n")
first = [os.environ["OTHER"], root] if case == "shadowed" else [root]  # another detconf first on the path
ws._Stash.hold()  # as a forked child starts
held_out = not any(name == "detconf" or name.startswith("detconf.") for name in sys.modules)
sys.path[:0] = first
import detconf.sub
print(json.dumps({"held_out": held_out, "same": sys.modules["detconf.sub"] is server_sub,
                  "file": sys.modules["detconf.sub"].__file__, "ran": open(os.environ["RAN"]).read().split()}))
"""


def _package(folder: Path, name: str, body: str = "") -> Path:
    """A ``detconf`` package whose modules note each run of their code in ``$RAN``."""
    (folder / "detconf").mkdir(parents=True)
    note = "import os\nwith open(os.environ['RAN'], 'a') as f:\n    f.write('{} ')\n"
    (folder / "detconf" / "__init__.py").write_text(note.format(f"{name}-init"), encoding="utf-8")
    (folder / "detconf" / "sub.py").write_text(note.format(f"{name}-sub") + body, encoding="utf-8")
    return folder


@pytest.mark.parametrize("case", ["unchanged", "touched", "shadowed", "rebinds", "rebinds-equal"])
def test_a_child_takes_the_servers_repository_modules_back_only_where_a_fresh_import_finds_them(tmp_path, case):
    """The server imports the repository's modules every run imports (warm_server.PROJECT) and a
    forked child starts without them (nothing of the repository in ``sys.modules``); when its code
    imports ``detconf``, it takes the server's modules back, their code not run again, only if
    the finders would find that very package and none of their files changed since. A file
    changed, or another ``detconf`` first on the path: the import runs as in a fresh interpreter.
    Imports that rebind anything in a module loaded before them (which a child would see before
    importing ``detconf``; not an equal plain value given again) make the server refuse to start,
    but for the effects it undoes and does again in the child (warm_server._Effects:
    tests/test_strategies.py's constants test)."""
    body = {"rebinds": "import string\nstring.capwords = None\n",  # another value: refused
            # an equal plain value given again (as time.tzset() gives time.tzname): nothing to see
            "rebinds-equal": "import string\nstring.whitespace = string.whitespace[:1] + string.whitespace[1:]\n"
            }.get(case, "")
    root = _package(tmp_path / "checkout", "server", body)
    other = _package(tmp_path / "other", "other")
    ran = tmp_path / "ran.txt"
    ran.write_text("")
    env = {**os.environ, "SERVER_FILE": str(warm.SERVER), "RAN": str(ran), "OTHER": str(other)}
    env.pop("DETCONF_TESTS_PROJECT", None)
    out = subprocess.run([sys.executable, "-c", HELD, str(root), case], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    if case == "rebinds":
        assert "changed string.capwords" in seen["refused"], seen
        return
    assert seen["held_out"] is True, seen
    if case in ("unchanged", "rebinds-equal"):
        assert seen == {"held_out": True, "same": True, "file": str(root / "detconf" / "sub.py"),
                        "ran": ["server-init", "server-sub"]}
    elif case == "touched":
        assert (seen["same"], seen["ran"]) == (False, ["server-init", "server-sub", "server-init", "server-sub"])
    else:
        assert seen["same"] is False and seen["file"] == str(other / "detconf" / "sub.py"), seen
        assert seen["ran"] == ["server-init", "server-sub", "other-init", "other-sub"], seen


def test_the_pytest_server_checks_the_repositorys_data_files_once_for_every_child(tmp_path):
    """The pytest server reads the catalog files and the known findings as a run's start does
    (each text checked against its schema, then remembered: ``datafiles._PASSED``), and a child
    takes those texts back only while none of them, nor a schema, changed: their files are
    among those it checks (warm_server._Stash)."""
    code = ("import json, sys\n"
            f"sys.path.insert(0, {str(warm.SERVER.parent)!r})\n"
            "import torch, hypothesis, warm_server as ws\n"
            "ws._preload_project('pytest', None)\n"
            "d, c, f = (sys.modules['detconf.conformance.' + n] for n in ('datafiles', 'catalog', 'findings'))\n"
            "texts = {t for _, t in d._PASSED}\n"
            "files = [c.data_file(s) for s in c.DATA_FILES] + [f.FINDINGS_FILE]\n"
            "print(json.dumps([all(p.read_text() in texts for p in files), len(d._PASSED) == len(files),\n"
            "                  all(str(p) in ws._Stash.stamps for p in files + list(d.SCHEMAS.glob('*.json')))]))\n")
    env = {k: v for k, v in os.environ.items() if k != "DETCONF_TESTS_PROJECT"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "[true, true, true]", out.stdout


HYPOTHESIS_STATE = """
def state():
    from hypothesis import settings
    from hypothesis._settings import default_variable
    name = settings._current_profile
    return [name, repr(settings()), sorted(settings._profiles), default_variable.value == settings._profiles.get(name)]
"""


def test_under_a_ci_variable_the_child_takes_the_suites_profiles_back_as_a_fresh_import_registers_them(tmp_path):
    """Where a CI service's variable is set, Hypothesis puts its own ``ci`` profile in force at
    import, and registering the suite's ``ci`` puts that one in force at once. The server undoes
    that too (warm_server._Effects): until a child imports ``detconf`` it has a fresh
    interpreter's Hypothesis settings, and taking the modules back registers the profiles
    without a warning ("Cannot register a settings profile when the current settings differ"),
    to the settings a fresh import gives. Each child command printed that warning in a CI run."""
    env = {k: v for k, v in os.environ.items() if k != "DETCONF_TESTS_PROJECT"}
    env["CI"] = "true"
    server = ("import json, sys, warnings\n"
              f"sys.path.insert(0, {str(warm.SERVER.parent)!r})\n"
              "import torch, hypothesis, warm_server as ws\n" + HYPOTHESIS_STATE +
              "before = state()\n"
              "ws._preload_project('pytest', None)\n"
              "held = state()\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    warnings.simplefilter('always')\n"
              "    ws._Effects.redo(ws._Stash.modules)\n"
              "print(json.dumps([before, held, state(), [str(w.message) for w in caught]]))\n")
    fresh = ("import json, warnings\n" + HYPOTHESIS_STATE +
             "warnings.simplefilter('always')\n"
             "import detconf.conformance.profiles\n"
             "print(json.dumps(state()))\n")
    seen = []
    for code in (server, fresh):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        seen.append(json.loads(out.stdout.splitlines()[-1]))
    (before, held, taken_back, warned), imported = seen
    assert before[0] == "ci" and before[3] is True, before
    assert held == before, "the server's Hypothesis is not a fresh interpreter's"
    assert warned == [] and taken_back == imported, (warned, taken_back, imported)
    assert taken_back[0] == "ci" and "max_examples=6" in taken_back[1], taken_back


def _warm_server_module():
    return load_script(warm.SERVER, "warm_server_under_test")


def test_a_precompiled_module_is_compiled_again_once_its_file_changed(tmp_path, monkeypatch):
    """The server's compiled code stands for a file only while the file's size and modification
    time are the ones it compiled (the check a bytecode file gets); then the file is read again.
    The compiled code is planted (another value than the file's) to tell the two apart."""
    server = _warm_server_module()
    package = tmp_path / "precompiled_probe_pkg"
    package.mkdir()
    source = package / "__init__.py"
    source.write_text("VALUE = 'from the file'\n", encoding="utf-8")
    compiled = server.compile_sources([str(package)])
    assert list(compiled) == [str(source)]
    mtime, size, _ = compiled[str(source)]
    compiled[str(source)] = (mtime, size, compile("VALUE = 'as compiled'\n", str(source), "exec"))
    finder = server.PrecompiledFinder(compiled)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    finder.install()
    try:
        module = __import__("precompiled_probe_pkg")
        assert (module.VALUE, type(module.__loader__).__name__) == ("as compiled", "PrecompiledLoader")
        del sys.modules["precompiled_probe_pkg"]
        source.write_text("VALUE = 'changed since'\n", encoding="utf-8")
        assert __import__("precompiled_probe_pkg").VALUE == "changed since"
    finally:
        sys.modules.pop("precompiled_probe_pkg", None)


def test_the_server_compiles_the_repositorys_packages_but_the_tests(tmp_path):
    server = _warm_server_module()
    folders = [Path(f).name for f in server.repository_packages()]
    assert {"detconf", "engine", "conformance", "plugin", "reports"} <= set(folders) and "tests" not in folders
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bad.py").write_text("def (:\n", encoding="utf-8")
    (broken / "good.py").write_text("X = 1\n", encoding="utf-8")
    assert list(server.compile_sources([str(broken)])) == [str(broken / "good.py")]  # bad.py fails where imported


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_the_folder_the_resource_limits_and_a_kill_are_the_childs_own(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    out, seen, _ = _probe(tmp_path, "k", cold=False, fsize=1 << 30, extra={"PROBE_KILL": "1"}, cwd=other,
                          address_space=64 << 30)
    assert seen["ran"] == "warm"
    assert out.returncode == -9  # killed by its own signal, as subprocess.run reports it
    assert seen["cwd"] == str(other) and seen["path0"] == str(other) and seen["fsize"] == 1 << 30
    assert seen["address_space"] == 64 << 30
    assert seen["hypothesis_home"] == str(other / ".hypothesis"), seen  # read from the child's folder


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_timeout_kills_the_child_and_raises_as_subprocess_run_does(tmp_path):
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "slow_probe.py").write_text("import time\ndef pytest_configure(config):\n    time.sleep(60)\n")
    before = dict(warm.stats)
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "slow_probe",
                  *TWO], env=_env({"PYTHONPATH": str(folder)}), timeout=1, capture_output=True)
    assert warm.stats["warm"] == before["warm"] + 1


def _distribution(folder: Path, name: str, groups: tuple[str, ...] = ("detconf.backends",),
                  module: str = "plain_backend") -> None:
    """An installed distribution ``name`` in ``folder`` as pip writes one: ``module``, and its
    ``*.dist-info`` with METADATA, RECORD and entry points of ``groups``."""
    (folder / f"{module}.py").write_text("backend = None\n")
    info = folder / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("".join(f"[{g}]\nprobe = {module}:backend\n\n" for g in groups))
    (info / "RECORD").write_text(f"{module}.py,,\n{info.name}/METADATA,,\n{info.name}/entry_points.txt,,\n"
                                 f"{info.name}/RECORD,,\n")


def _missing_sought() -> str:
    """A name the server's imports looked for and did not find (which names depends on the torch)."""
    import importlib.util

    sought = warm._server_for(warm.base_env()).sought()
    missing = sorted(n for n in sought if n.isidentifier() and not n.startswith("_") and n not in sys.modules
                     and importlib.util.find_spec(n) is None)
    assert missing, "the server's imports looked for no module they did not find"
    return missing[0]


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
@pytest.mark.parametrize("plant", ["OMP_NUM_THREADS", "PYTHONHASHSEED", "dist-info", "dist-info-torch-backends",
                                   "dist-info-sought-name", "dist-info-installed-name", "pth", "sought-module"])
def test_a_command_whose_imports_could_differ_runs_cold(tmp_path, plant):
    """An environment variable read while torch imports, or a PYTHONPATH folder that could have
    changed those imports (torch loads its backends' entry points, and looks for optional
    modules such as pandas): the fork could answer otherwise, so the command runs cold. So does a
    folder with an installed distribution that declares entry points of a group an import reads
    (``torch.backends``), or bears a name the imports looked for or the name of a distribution
    the interpreter has (an import may read its version), or one without METADATA. A folder of
    plain probe modules stays warm (the control)."""
    folder = tmp_path / "path"
    folder.mkdir()
    (folder / "plain_probe.py").write_text("")
    extra = {"PYTHONPATH": str(folder)}
    if plant in ("OMP_NUM_THREADS", "PYTHONHASHSEED"):
        extra[plant] = "1"
    elif plant == "dist-info":
        (folder / "vendor_backend-1.0.dist-info").mkdir()
    elif plant == "dist-info-torch-backends":
        _distribution(folder, "vendor-backend", groups=("detconf.backends", "torch.backends"))
    elif plant == "dist-info-sought-name":
        _distribution(folder, _missing_sought().replace("_", "-"))
    elif plant == "dist-info-installed-name":
        from importlib import metadata

        sought = {warm.warm_server._normal(n) for n in warm._server_for(warm.base_env()).sought()}
        installed = sorted(d.metadata["Name"] for d in metadata.distributions()
                           if d.metadata["Name"] and warm.warm_server._normal(d.metadata["Name"]) not in sought)
        assert installed, "every installed distribution bears a name the server's imports looked for"
        _distribution(folder, installed[0])
    elif plant == "pth":
        (folder / "extra.pth").write_text(str(tmp_path))
    else:
        (folder / f"{_missing_sought()}.py").write_text("")
    # Whether a command forks depends on its form, environment and path, not on what it asks
    # pytest: the shortest run (no torch imported) stands for any.
    cmd = [sys.executable, "-m", "pytest", "--version"]
    before = dict(warm.stats)
    control = warm.run(cmd, env=_env({"PYTHONPATH": str(tmp_path / "empty")}), timeout=240, capture_output=True)
    assert warm.stats["warm"] == before["warm"] + 1, "the control runs warm"
    planted = warm.run(cmd, env=_env(extra), timeout=240, capture_output=True)
    assert warm.stats["cold"] == before["cold"] + 1, f"{plant}: ran warm"
    assert control.returncode == 0, control.stdout[-2000:] + control.stderr[-2000:]
    assert planted.returncode == 0, planted.stdout[-2000:] + planted.stderr[-2000:]


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_folder_with_a_distribution_of_detconf_backends_only_is_forked(tmp_path):
    """A vendor's backend installed into a PYTHONPATH folder (``pip install --target``): entry
    points read only when the suite runs, a module no import looked for, a name the interpreter
    has no distribution of. Forked, and its child finds the backend's entry point as a fresh
    interpreter does."""
    folder = tmp_path / "path"
    folder.mkdir()
    _distribution(folder, "vendor-backend")
    code = ("from importlib.metadata import entry_points; "
            "print(sorted(e.value for e in entry_points(group='detconf.backends') if e.name == 'probe'))")
    env = _env({"PYTHONPATH": str(folder)})
    before = dict(warm.stats)
    forked = warm.run([sys.executable, "-c", code], env=env, timeout=240, capture_output=True)
    assert warm.stats["warm"] == before["warm"] + 1, "ran cold"
    fresh = warm.run([sys.executable, "-c", code], env=env, timeout=240, capture_output=True, cold=True)
    assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
    assert forked.stdout == fresh.stdout == "['plain_backend:backend']\n"


PYTHON_C = """
import json, os, sys, warnings
seen = {"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "orig_argv_tail": sys.orig_argv[1:2],
        "name": __name__, "filters": len(warnings.filters), "marker": os.environ.get("WARM_MARKER"),
        "repository_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("detconf", "tests", "conformance"))}
from hypothesis import settings
seen["profile"] = settings._current_profile
print(json.dumps(seen))
"""


def _ci_vars() -> dict:
    """The variables whose presence (any value: None) or value makes Hypothesis load its ``ci``
    profile at import: its own table where it has one, else its older rules (``CI``,
    ``TF_BUILD`` or ``GITLAB_CI`` set)."""
    from hypothesis import _settings

    return getattr(_settings, "_CI_VARS", {"CI": None, "TF_BUILD": None, "GITLAB_CI": None})


def _in_ci(env: dict) -> bool:
    """Whether Hypothesis, imported with ``env``, loads its ``ci`` profile (its own rule)."""
    return any(key in env and (value is None or env[key] == value) for key, value in _ci_vars().items())


def test_the_inductor_cache_folder_torch_names_itself_is_no_other_environment():
    """Inductor names its default cache folder in ``TORCHINDUCTOR_CACHE_DIR`` in its process's
    environment when it first asks for it: an inner run started afterwards has the folder named,
    which is the folder it would take unnamed, and shares the server started before. Another
    folder is another environment. The default is torch's own, asked where this torch has the
    function."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # torch 2.5: in runtime_utils
        from torch._inductor.runtime.runtime_utils import default_cache_dir
    env = {k: v for k, v in warm.base_env().items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    named = {**env, "TORCHINDUCTOR_CACHE_DIR": os.path.abspath(default_cache_dir())}
    assert warm._inductor_default_cache(env) == named["TORCHINDUCTOR_CACHE_DIR"]
    assert warm._fingerprint(named) == warm._fingerprint(env)
    for other in ({}, {"TMPDIR": "/somewhere/else"}, {"USER": "someone-else", "LOGNAME": "someone-else"}):
        # another folder; this folder where another temporary folder or user has another default
        unnamed = {**env, **other}
        folder = "/elsewhere" if not other else named["TORCHINDUCTOR_CACHE_DIR"]
        assert warm._fingerprint({**unnamed, "TORCHINDUCTOR_CACHE_DIR": folder}) != warm._fingerprint(unnamed), other


def test_a_variable_inductor_writes_before_it_reads_it_is_no_other_environment():
    """Inductor writes the address of one of its objects into ``_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR``
    before it loads a compiled kernel, whose initialisation reads it: a test process's first
    compile leaves it in its environment, and the inner runs it starts afterwards are no other
    environment (they started a second ``pytest`` and ``reports`` server a run), nor are the
    processes a forked run starts. Checked against
    this torch: Inductor's Python writes the variable first thing where it loads a kernel and
    nowhere reads it."""
    import ast
    import inspect

    import torch._inductor.codecache as codecache

    [name] = warm.warm_server.WRITTEN_BEFORE_READ
    tree = ast.parse(inspect.getsource(codecache))
    writers = [fn for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
               and any(isinstance(n, ast.Assign) and name in ast.unparse(n.targets[0]) for n in ast.walk(fn))]
    for fn in writers:  # none in a torch without the variable
        first = fn.body[0]
        assert isinstance(first, ast.Assign) and name in ast.unparse(first.targets[0]), (fn.name, ast.unparse(first))
    if name in inspect.getsource(codecache):
        assert writers, "this torch names the variable and writes it nowhere"
    folder = Path(codecache.__file__).parent
    readers = [p for p in folder.rglob("*.py") if name in p.read_text(encoding="utf-8") and p.name != "codecache.py"]
    assert not readers, readers
    env = {k: v for k, v in warm.base_env().items() if k != name}
    assert warm._fingerprint({**env, name: "139845777935392"}) == warm._fingerprint(env)
    # nor for the processes a forked run starts (detconf.child's, xdist's workers): their server's
    # environment is the one it started with, before the test process's first compile
    assert warm.warm_server.changed({**env, name: "139845777935392"}, env, warm.IMPORT_TIME) == []
    assert warm._fingerprint({**env, "_TORCHINDUCTOR_OTHER": "1"}) != warm._fingerprint(env)  # any other is read


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_python_c_line_forked_sees_what_a_fresh_one_sees_and_a_ci_variable_runs_it_cold(tmp_path):
    """``python -c CODE ARGS`` forked from the ``pytest`` server: its argv, ``sys.path[0]``, folder,
    environment and warning filters are a fresh one's. Hypothesis loads its ``ci`` profile at
    import where a CI service's variable is set: a command whose CI variables differ from the
    server's runs cold, and sees the profile a fresh interpreter sees (forked, it would see the
    server's). Every variable Hypothesis reads so is one the rule compares."""
    assert all(name.startswith(warm.IMPORT_TIME) for name in _ci_vars()), "a CI variable the rule misses"
    cmd = [sys.executable, "-c", PYTHON_C, "a b", "--x"]
    env = _env({"WARM_MARKER": "c"})
    before = dict(warm.stats)
    fresh = warm.run(cmd, cwd=tmp_path, env=env, cold=True, capture_output=True, timeout=120)
    forked = warm.run(cmd, cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert warm.stats["warm"] == before["warm"] + 1 and fresh.returncode == forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout) == json.loads(fresh.stdout)
    assert json.loads(forked.stdout)["argv"] == ["-c", "a b", "--x"] and json.loads(forked.stdout)["marker"] == "c"
    # the CI variables turned the other way round from the server's
    ci = {k: v for k, v in env.items() if k not in _ci_vars()} if _in_ci(env) else {**env, "CI": "true"}
    planted = warm.run(cmd, cwd=tmp_path, env=ci, capture_output=True, timeout=120)
    assert warm.stats["cold"] == before["cold"] + 2, "a command with other CI variables ran warm"
    assert json.loads(planted.stdout)["profile"] == ("ci" if _in_ci(ci) else "default")
    assert json.loads(planted.stdout)["profile"] != json.loads(forked.stdout)["profile"]


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_popen_forks_a_detconf_command_and_starts_any_other_as_given(tmp_path):
    """``warm.popen``: ``python -m detconf ARGS`` forked (its output and exit status a fresh
    one's; ``tests/test_hostile_round4_gpu.py`` G27/G28 signal such a ``gpu-run`` and its session),
    any other line, or one whose environment differs in a variable read at import, started as
    ``subprocess.Popen`` starts it."""
    help_line = [sys.executable, "-m", "detconf", "--help"]
    before = dict(warm.stats)
    # from the checkout, and from a folder where there is no detconf to run (not installed here)
    for cwd in (ROOT, tmp_path):
        forked = warm.popen(help_line, cwd=cwd, env=_env(), new_session=True)
        out, err = forked.communicate(timeout=120)
        fresh = subprocess.run(help_line, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120)
        assert (forked.returncode, out, err) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert "gpu-run" in out if cwd == ROOT else ("gpu-run" in out or "No module named detconf" in err)
    assert warm.stats["warm"] == before["warm"] + 2
    for cmd, env in (([sys.executable, "-c", "print('c')"], _env()), (help_line, _env({"OMP_NUM_THREADS": "1"}))):
        proc = warm.popen(cmd, cwd=ROOT, env=env)
        assert proc.communicate(timeout=120)[0].strip() and proc.returncode == 0
    assert warm.stats["cold"] == before["cold"] + 2, "started fresh: another line, another environment"


def test_cold_mode_runs_every_command_as_given(tmp_path):
    """``DETCONF_TESTS_COLD=1``: each command is ``subprocess.run`` as written (the way to check
    that the fork changes no answer: the whole harness passes both ways)."""
    code = ("import os, sys; sys.path.insert(0, %r); os.environ['DETCONF_TESTS_COLD'] = '1'\n"
            "from tests import warm\n"
            "out = warm.run([sys.executable, '-m', 'pytest', '--version'], capture_output=True)\n"
            "print(out.returncode, warm.stats['cold'], warm.stats['warm'], warm._servers == {})\n") % str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=_env())
    assert out.stdout.split() == ["0", "1", "0", "True"], out.stdout + out.stderr


# What the server's imports left behind: warnings it recorded and callbacks it registered for exit.
# Each script below plays a server (imports, then forks a child as the server does) in an
# interpreter of its own; PLANT, where set, takes the rule out.
SERVER_STATE = '''
import os, sys, warnings, weakref
sys.path.insert(0, sys.argv[1])
from tests import warm_server
if os.environ.get("PLANT") == "registry":
    warnings._filters_mutated = lambda: None  # the child's filters would count as the server's
if os.environ.get("PLANT") == "finalizers":
    warm_server._detach_finalizers = lambda: None
filters = list(warnings.filters)

def warn():
    warnings.warn("said once per place", UserWarning)

class Held:
    pass

server = os.getpid()

def said(what):
    print(what, "in the child" if os.getpid() != server else "in the server", flush=True)

held = [Held(), Held()]
warn()  # at the server's import: shown, and this place recorded in the module's registry
weakref.finalize(held[0], said, "the server's callback")
warm_server._detach_finalizers()
pid = os.fork()
if pid == 0:
    warm_server._fresh({"cwd": os.getcwd(), "env": dict(os.environ)}, [], filters, None)
    warn()  # a fresh interpreter has shown nothing from here yet
    weakref.finalize(held[1], said, "the child's callback")
    try:
        sys.exit(0)
    except SystemExit as exc:
        warm_server._exit(exc.code)
os.waitpid(pid, 0)
'''


def _server_state(tmp_path: Path, plant: str | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "server_state.py"
    script.write_text(SERVER_STATE, encoding="utf-8")
    env = _env({"PLANT": plant} if plant else {})
    return subprocess.run([sys.executable, str(script), str(ROOT)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_warning_the_server_recorded_is_shown_again_in_a_child(tmp_path):
    """The server's imports may warn, and a warning shown once per place is then recorded in that
    module's ``__warningregistry__``: a child shows it again where its own code warns there, as a
    fresh interpreter would (the child's filters are a new version: every registry the server
    filled is stale). Planted: the filters' version not moved on, the child shows nothing."""
    out = _server_state(tmp_path)
    assert out.returncode == 0, out.stderr
    shown = "UserWarning: said once per place"
    assert out.stderr.count(shown) == 2, out.stderr  # the server's, then the child's
    planted = _server_state(tmp_path, "registry")
    assert planted.stderr.count(shown) == 1, planted.stderr


def test_a_child_runs_the_exit_callbacks_of_its_own_code_and_not_those_of_the_servers_imports(tmp_path):
    """``weakref.finalize`` callbacks registered by the server's imports (torch's 174 operator
    libraries, each taken out of the dispatcher at exit) do not run at a child's exit; one that
    the child's own code registers does (a ``TemporaryDirectory`` removes its folder so). Planted:
    the server's callbacks left as they were, the child runs them too."""
    out = _server_state(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["the child's callback in the child"], out.stdout
    planted = _server_state(tmp_path, "finalizers")
    assert "the server's callback in the child" in planted.stdout.splitlines(), planted.stdout


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_child_starts_with_none_of_the_servers_exit_callbacks_and_runs_its_own(tmp_path):
    """A real forked ``python -c``: none of the ``weakref.finalize`` callbacks it holds at its start
    (the server's imports registered them: torch's) is one for its exit, and the folder its own
    ``TemporaryDirectory`` made is gone when it exits, as after a fresh interpreter."""
    code = ("import tempfile, weakref\n"
            "at_exit = sum(info.atexit for info in weakref.finalize._registry.values())\n"
            "d = tempfile.TemporaryDirectory(dir='.')\n"
            "print(at_exit, len(weakref.finalize._registry), d.name)")
    before = dict(warm.stats)
    for cold in (True, False):
        out = warm.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), cold=cold, capture_output=True,
                       timeout=120)
        assert out.returncode == 0 and len(out.stdout.split()) == 3, out.stderr
        at_exit, held, name = out.stdout.split()
        assert not (tmp_path / name).exists(), ("cold" if cold else "forked", out.stdout)
        assert at_exit == "0"
        if not cold:
            assert int(held) > 1, out.stdout  # the server's (torch's operator libraries) and the child's own
    assert warm.stats["warm"] == before["warm"] + 1


# -- the other flavours: python -m detconf.reports, python -I SCRIPT ---------------------------------

SEEN = '''
import importlib.util, json, os, sys, warnings
print(json.dumps({
    "argv": sys.argv[1:], "argv0": os.path.basename(sys.argv[0]), "path0": sys.path[0], "cwd": os.getcwd(),
    "orig_argv_tail": sys.orig_argv[1:], "isolated": sys.flags.isolated, "marker": os.environ.get("WARM_MARKER"),
    "path": sys.path[1:], "torch": "torch" in sys.modules, "name": __name__,
    "repository_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("detconf", "tests", "conformance")),
    "detconf_importable": importlib.util.find_spec("detconf") is not None, "filters": len(warnings.filters),
}))
sys.stdout.flush()
import atexit, threading, time
atexit.register(lambda: print("atexit ran"))
def _late():
    time.sleep(0.3)
    print("a thread that is not a daemon finished")
threading.Thread(target=_late).start()
print("unflushed at exit", end="")
if "--fail" in sys.argv:
    raise ValueError("planted")
if "--message" in sys.argv:
    sys.exit("planted message")
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
'''


def _seen(out: subprocess.CompletedProcess) -> dict:
    return json.loads(out.stdout.splitlines()[0])


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_an_isolated_script_forked_sees_what_a_fresh_one_sees_and_exits_as_it_does(tmp_path):
    """``python -I SCRIPT``, forked from the ``-I`` server that imported torch: the ``sys.path`` of
    a fresh ``-I`` run (the script's folder first only before Python 3.11) with nothing of the
    repository, its argv and ``-I`` flag, its exit status, an uncaught exception's traceback and
    status 1, ``sys.exit(message)``'s message and status 1, and at the exit (which the child takes
    without the interpreter's finalization) a thread waited for, ``atexit`` run and the buffered
    output flushed, as in a fresh interpreter."""
    folder = tmp_path / "script"
    folder.mkdir()
    script = folder / "seen.py"
    script.write_text("import torch  # what the server was told the script imports\n" + SEEN, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_"))}
    answers = {}
    for how in ("warm", "cold"):
        before = dict(warm.stats)
        runs = [warm.run([sys.executable, "-I", str(script), *args], cwd=tmp_path, env=dict(env, WARM_MARKER=how, **extra),
                         timeout=240, capture_output=True, cold=how == "cold", imports=("torch",))
                for args, extra in ((["a", "b"], {"PROBE_EXIT": "3"}), (["--fail"], {}), (["--message"], {}))]
        assert warm.stats[how] == before[how] + 3, how
        exited, failed, message = runs
        assert (exited.returncode, failed.returncode, message.returncode) == (3, 1, 1), exited.stderr + failed.stderr
        assert failed.stderr.strip().splitlines()[-1] == "ValueError: planted", failed.stderr
        assert message.stderr == "planted message\n", message.stderr
        for run in runs:  # the exit waits for the thread, runs atexit and flushes what is buffered
            assert run.stdout.splitlines()[1:] == ["unflushed at exita thread that is not a daemon finished",
                                                   "atexit ran"], (how, run.stdout)
        answers[how] = [_seen(run) for run in runs]
    for how, seen in answers.items():
        assert [s.pop("marker") for s in seen] == [how, how, how]
    warm_seen, cold_seen = answers["warm"], answers["cold"]
    assert warm_seen == cold_seen, (warm_seen, cold_seen)
    first = warm_seen[0]
    assert first["isolated"] == 1 and first["name"] == "__main__"
    assert (first["path0"] == str(folder)) is (sys.version_info < (3, 11))  # 3.11 on, -I implies -P
    assert first["argv"] == ["a", "b"] and first["orig_argv_tail"] == ["-I", str(script), "a", "b"]
    assert not first["detconf_importable"] and first["repository_modules"] == []


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
@pytest.mark.parametrize("plant", ["sought-module", "no-imports"])
def test_an_isolated_script_whose_imports_could_differ_runs_cold(tmp_path, plant):
    """A script whose folder holds a module named like one the ``-I`` server's imports looked
    for (it comes first on the script's ``sys.path``), or whose caller named no imports: cold. The
    same script from a folder of plain modules runs warm (the control)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_"))}
    plain, planted = tmp_path / "plain", tmp_path / "planted"
    for folder in (plain, planted):
        folder.mkdir()
        (folder / "plain_probe.py").write_text("")
    # what the server was told the control imports; the planted script, which runs cold (whether
    # a script forks depends on its folder and the imports named, not on what it does), does not
    (plain / "seen.py").write_text("import torch\n" + SEEN, encoding="utf-8")
    (planted / "seen.py").write_text(SEEN, encoding="utf-8")
    imports = ("torch",)
    if plant == "sought-module":
        before = dict(warm.stats)
        warm.run([sys.executable, "-I", str(plain / "seen.py")], cwd=tmp_path, env=env, timeout=240,
                 capture_output=True, imports=imports)
        assert warm.stats["warm"] == before["warm"] + 1, "the control runs warm"
        [server] = [s for k, s in warm._servers.items() if k[0] == "isolated" and k[1] == imports]
        name = sorted(n for n in server.sought() if n.isidentifier() and not n.startswith("_"))[0]
        (planted / f"{name}.py").write_text("")
    else:
        imports = ()
    before = dict(warm.stats)
    out = warm.run([sys.executable, "-I", str(planted / "seen.py")], cwd=tmp_path, env=env, timeout=240,
                   capture_output=True, imports=imports)
    assert warm.stats["cold"] == before["cold"] + 1, f"{plant}: ran warm"
    if plant == "no-imports":
        assert out.returncode == 0 and _seen(out)["argv0"] == "seen.py", out.stderr


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_reports_command_answers_as_a_fresh_one_without_torch(tmp_path, monkeypatch):
    """``python -m detconf.reports``, forked from the ``reports`` server (NumPy, pandas, pyarrow,
    matplotlib):
    a probe module run the same way sees the argv, ``sys.path``, folder and modules a fresh
    interpreter gives it (torch not imported, nothing of the repository); and the reports' own
    one-line error is the fresh one's, with its exit status."""
    folder = tmp_path / "probe"
    folder.mkdir()
    # the reports' modules import these at their top: the probe does too
    (folder / "warm_seen_probe.py").write_text("import numpy, pandas, pyarrow, pyarrow.compute, pyarrow.json\n" + SEEN,
                                               encoding="utf-8")
    monkeypatch.setattr(warm, "REPORTS_MODULES", (*warm.REPORTS_MODULES, "warm_seen_probe"))
    answers = {}
    for how in ("warm", "cold"):
        before = dict(warm.stats)
        env = _env({"PYTHONPATH": str(folder), "WARM_MARKER": how})
        probe = warm.run([sys.executable, "-m", "warm_seen_probe", "x"], cwd=tmp_path, env=env, timeout=240,
                         capture_output=True, cold=how == "cold")
        bad = warm.run([sys.executable, "-m", "detconf.reports", "build", str(tmp_path / "missing.jsonl"), "--out",
                        str(tmp_path / how)], cwd=ROOT, env=env, timeout=240, capture_output=True, cold=how == "cold")
        assert warm.stats[how] == before[how] + 2, how
        seen = _seen(probe)
        assert seen.pop("marker") == how and probe.returncode == 0, probe.stderr
        answers[how] = (seen, bad.returncode, bad.stdout, bad.stderr)
    assert answers["warm"] == answers["cold"]
    seen, code, _, err = answers["warm"]
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert seen["torch"] is False and seen["repository_modules"] == [] and seen["path0"] == str(tmp_path)
    assert seen["argv"] == ["x"] and seen["name"] == "__main__" and str(folder) in seen["path"]


def test_a_stopped_server_runs_its_preloads_finalizers_and_its_children_do_not(tmp_path):
    """A preload that makes a temporary folder (torch's script instantiator of
    ``torch.distributed.nn`` does, at import) removes it when the server stops, as a fresh
    interpreter does at its exit; a child forked meanwhile leaves it to the server. Planted (the
    server's end as before, its finalizers skipped): the folder stays."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "makes_a_folder.py").write_text(
        "import tempfile\nKEPT = tempfile.TemporaryDirectory(prefix='preload-')\n", encoding="utf-8")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**warm.base_env(), "PYTHONPATH": str(tmp_path / "mods"), "TMPDIR": str(temp)}
    server = warm._Server(env, "reports", ("makes_a_folder",))
    try:
        assert server.ready() is None
        [made] = temp.glob("preload-*")
        cmd = [sys.executable, "-c", "pass"]
        child = warm._forked(server, cmd, warm._form(cmd)[1], tmp_path, env, 60, subprocess.PIPE, subprocess.PIPE,
                             True, None)
        assert child.returncode == 0 and made.is_dir(), child.stderr
    finally:
        server.stop()
    assert server.proc.returncode == 0 and not made.exists()


def test_a_server_whose_preload_imports_xdist_refuses_to_start(tmp_path):
    # xdist.plugin copies sys.path at import for the workers it starts: imported in a server, an
    # inner -n run's workers would get the server's path, not the run's PYTHONPATH.
    socket_path = tmp_path / "s"
    out = subprocess.run([sys.executable, str(warm.SERVER), str(socket_path), "reports", "xdist.plugin"],
                         cwd=warm.ROOT, env=warm.base_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr[-2000:]
    [line] = out.stderr.splitlines()
    assert line.startswith("tests/warm_server.py: the preload imported xdist, ") and "xdist.plugin" in line, line
    assert not socket_path.exists()


# -- xdist's workers of a forked run -----------------------------------------------------------

WORKER_PROBE = '''
import json, os, sys
_seen = {
    "argv": list(sys.argv), "orig_argv": sys.orig_argv[1:], "cwd": os.getcwd(), "marker": os.environ.get("WARM_MARKER"),
    "dont_write_bytecode": sys.dont_write_bytecode, "stderr_write_through": sys.stderr.write_through,
    "main": sorted(k for k in vars(sys.modules["__main__"]) if not k.startswith("__")),
    "repository_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("detconf", "tests", "conformance")),
    "path": [p.replace(os.environ["PROBE_DIR"], "<probe>") for p in sys.path],
    "planted": os.environ.get("OMP_NUM_THREADS"), "cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
}
def pytest_configure(config):
    if not hasattr(config, "workerinput") and os.environ.get("PLANT_ENV"):
        # the controller changes a variable before its workers start
        os.environ[os.environ["PLANT_ENV"]] = os.environ.get("PLANT_VALUE", "3")
def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        import hypothesis.configuration as hc
        where = hc.storage_directory("x")
        _seen["hypothesis_home"] = str(getattr(where, "home_directory", None) or os.path.dirname(str(where)))
        with open(os.environ["PROBE_OUT"] + "." + worker, "w") as f:
            json.dump(_seen, f)
'''


def _worker_probe(tmp_path: Path, name: str, plant: str | None = None,
                  value: str | None = None) -> tuple[list[dict], list[dict]]:
    """A one-worker run with a probe plugin: what its worker saw, and the log's lines of its
    workers. ``plant``: a variable the controller sets (to ``value``, default "3") before its
    worker starts."""
    folder = tmp_path / f"probe-{name}"
    folder.mkdir()
    (folder / "worker_probe.py").write_text(WORKER_PROBE, encoding="utf-8")
    log = tmp_path / f"{name}.log"
    extra = {"PYTHONPATH": str(folder), "PROBE_DIR": str(folder), "PROBE_OUT": str(tmp_path / f"{name}.json"),
             "WARM_MARKER": name, "DETCONF_TESTS_WARM_LOG": str(log), **({"PLANT_ENV": plant} if plant else {}),
             **({"PLANT_VALUE": value} if value is not None else {})}
    args = [a if a != "0" else "1" for a in TWO]  # -n 1
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-p", "worker_probe",
                    *args, "--results", str(tmp_path / f"{name}.jsonl")], env=_env(extra), timeout=240,
                   capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    seen = [json.loads((tmp_path / f"{name}.json.gw0").read_text())]
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return seen, [line for line in lines if line["flavour"] == "xdist-worker"]


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_the_workers_of_a_forked_run_are_forked_and_see_what_fresh_workers_see(tmp_path):
    """A forked ``-n 1`` run's worker comes from its zygote (warm_server._workers_from): it sees
    the interpreter's arguments, path, folder, environment, ``__main__`` and streams that a worker
    started by execnet as ``python -u -c ...`` sees, with nothing of the repository imported
    before its plugins load. The fresh worker to compare with: a run whose controller sets a
    variable read while torch imports (``OMP_NUM_THREADS``) before its worker starts, which the
    zygote's imports did not see: that worker starts as execnet starts it."""
    warm_seen, warm_lines = _worker_probe(tmp_path, "w")
    fresh_seen, fresh_lines = _worker_probe(tmp_path, "f", plant="OMP_NUM_THREADS")
    assert [(line["warm"], line["why"]) for line in warm_lines] == [(True, None)]
    assert [(line["warm"], line["why"]) for line in fresh_lines] == [(False, "environment: OMP_NUM_THREADS")]
    assert (warm_seen[0].pop("planted"), fresh_seen[0].pop("planted")) == (None, "3")
    for seen, name in ((warm_seen, "w"), (fresh_seen, "f")):
        assert seen[0].pop("marker") == name
        assert seen[0].pop("hypothesis_home") == str(ROOT / ".hypothesis")
    assert warm_seen[0]["orig_argv"][:2] == ["-u", "-c"] and warm_seen[0]["argv"] == ["-c"]
    assert warm_seen == fresh_seen


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_worker_whose_compile_cache_folder_changed_is_forked(tmp_path):
    """The compile cache folder is read when a kernel is compiled, not at import: the plugin
    points it at the run's own folder before the workers start, and they are forked all the same."""
    # A folder of this test's own: torch 2.15's worker makes the folder it is told of (a relative
    # "3" was made in the checkout's root).
    folder = str(tmp_path / "cache-3")
    seen, lines = _worker_probe(tmp_path, "cache", plant="TORCHINDUCTOR_CACHE_DIR", value=folder)
    assert [(line["warm"], line["why"]) for line in lines] == [(True, None)]
    assert seen[0]["cache"] == folder


ZYGOTE = '''
import json, signal, sys, warnings
sys.path.insert(0, sys.argv[1])
from tests.by_path import load_script
server = load_script(sys.argv[2], "warm_server_zygote")
zygote, env, cwd = server._zygote(list(warnings.filters), list(sys.path), None)
echo = server.ForkedWorker([sys.executable, "-u", "-c", "import sys; line = sys.stdin.readline(); "
                            "sys.stdout.write(line.upper()); sys.stdout.flush(); sys.exit(int(line.split()[1]))"], zygote)
running = echo.poll()
echo.stdin.write(b"status 7\\n")
echo.stdin.flush()
answer = echo.stdout.readline().decode()
slow = server.ForkedWorker([sys.executable, "-u", "-c", "import time; time.sleep(60)"], zygote)
slow.kill()
print(json.dumps({"running": running, "answer": answer, "status": echo.wait(timeout=30),
                  "killed": slow.wait(timeout=30), "pids": echo.pid != slow.pid}))
'''


def test_the_zygote_forks_workers_with_their_pipes_and_reports_each_exit_status(tmp_path):
    """``ForkedWorker`` is what execnet keeps of a worker's process: its pipes carry the worker's
    streams, ``poll`` is None while it runs, ``wait`` gives its exit status, ``kill`` kills it."""
    out = subprocess.run([sys.executable, "-c", ZYGOTE, str(ROOT), str(warm.SERVER)], cwd=tmp_path,
                         env=warm.base_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"running": None, "answer": "STATUS 7\n", "status": 7,
                                                       "killed": -9, "pids": True}


def test_a_frame_is_read_without_the_next_one():
    """A worker that ends at once: its pid and its exit status are both in the socket when the
    pid is read, and the status must still be there for ``wait``."""
    import socket

    server = _warm_server_module()
    a, b = socket.socketpair()
    with a, b:
        server._frame(b, {"pid": 12})
        server._frame(b, {"returncode": 3})
        b.shutdown(socket.SHUT_WR)
        assert [server._read_frame(a)[0] for _ in range(3)] == [{"pid": 12}, {"returncode": 3}, None]


@pytest.mark.parametrize("args,starts", [
    (["-n", "2"], True), (["-n", "auto"], True), (["-n2"], True), (["--numprocesses=3"], True),
    (["--numprocesses", "4"], True), (["-n", "0"], False), (["-n0"], False), (["-q", "-k", "n"], False),
    (["--", "-n", "2"], False), ([], False)])
def test_which_arguments_start_workers(args, starts):
    assert _warm_server_module().starts_workers(args) is starts


# ----------------------------------------------------------------------------- detconf.child's processes

CHILD_TARGETS = '''
import os, sys


def seen(payload):
    text = sys.stdin.read() if payload.get("read") else None
    return {"argv": sys.argv, "path": sys.path[:3], "cwd": os.getcwd(), "var": os.environ.get("WARM_CHILD_VAR"),
            "stdin": text, "main": sys.modules["__main__"].__name__, "parent": os.getppid(), "pid": os.getpid()}


def dies(payload):
    print("going", file=sys.stderr)
    sys.stderr.flush()
    os._exit(7)
'''


@pytest.fixture
def child_targets(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "lib"
    (folder / "warmchildprobe").mkdir(parents=True)
    (folder / "warmchildprobe" / "__init__.py").write_text(CHILD_TARGETS)
    monkeypatch.setenv("WARM_CHILD_VAR", "set")
    return folder


def _child_lines(log: Path, target: str) -> list[dict]:
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [r for r in lines if r["flavour"] == "child" and r["command"] == [target]]


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_child_process_answers_as_a_fresh_one(child_targets, tmp_path, monkeypatch):
    """detconf.child's process, forked from this test process's server: the same argv, path, folder,
    environment, standard input and result as one detconf.child starts itself; its parent is the
    server, where the fresh one's is this process (so it was forked)."""
    from detconf import child

    log = tmp_path / "warm.jsonl"
    monkeypatch.setenv("DETCONF_TESTS_WARM_LOG", str(log))

    def ask():
        proc = child.Child("warmchildprobe:seen", {"read": True}, path=(child_targets,), cwd=tmp_path, stdin=True)
        proc.proc.stdin.write("to the child\n")
        return proc.result(timeout=120)

    forked = ask()
    with warm.children_cold():
        fresh = ask()
    assert [r["warm"] for r in _child_lines(log, "warmchildprobe:seen")] == [True, False]
    assert fresh["parent"] == os.getpid() != forked["parent"] and forked["pid"] != fresh["pid"]
    for result in (forked, fresh):
        del result["parent"], result["pid"]
    assert forked == fresh
    assert fresh["stdin"] == "to the child\n" and fresh["var"] == "set" and fresh["cwd"] == str(tmp_path)
    # an exit without a result: the same failure, status and last line of standard error
    failures = []
    for cold in (False, True):
        with warm.children_cold() if cold else contextlib.nullcontext():
            with pytest.raises(child.ChildFailed) as raised:
                child.Child("warmchildprobe:dies", None, path=(child_targets,)).result(timeout=120)
        failures.append((str(raised.value), raised.value.reason))
    assert failures[0] == failures[1] and "exited with 7" in failures[0][0] and failures[0][1] == "going"


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_forked_child_processes_run_side_by_side_and_a_timeout_kills_one(child_targets, tmp_path, monkeypatch):
    """The server forks a second child while the first waits for its standard input; a child
    that outlives its timeout is killed, as detconf.child kills its own."""
    from detconf import child

    log = tmp_path / "warm.jsonl"
    monkeypatch.setenv("DETCONF_TESTS_WARM_LOG", str(log))
    waiting = child.Child("warmchildprobe:seen", {"read": True}, path=(child_targets,), stdin=True)
    other = child.Child("warmchildprobe:seen", {}, path=(child_targets,)).result(timeout=60)
    assert other["stdin"] is None
    waiting.proc.stdin.write("later")
    assert waiting.result(timeout=60)["stdin"] == "later"
    sleeper = child.start_child("time:sleep", 60)
    with pytest.raises(child.ChildFailed, match="timed out after 1s"):
        child.finish_child(sleeper, timeout=1, what="sleep")
    assert sleeper.returncode == -9
    with pytest.raises(ProcessLookupError):
        os.kill(sleeper.pid, 0)
    assert [r["warm"] for r in _child_lines(log, "warmchildprobe:seen")] == [True, True]
    assert [r["warm"] for r in _child_lines(log, "time:sleep")] == [True]


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_child_processes_compared_across_processes_or_with_another_environment_start_fresh(child_targets, tmp_path,
                                                                                          monkeypatch):
    from detconf import child

    log = tmp_path / "warm.jsonl"
    monkeypatch.setenv("DETCONF_TESTS_WARM_LOG", str(log))
    planted = child.Child("warmchildprobe:seen", {}, path=(child_targets,),
                          env=child.child_env({"OMP_NUM_THREADS": "3"})).result(timeout=120)
    assert planted["parent"] == os.getpid()
    [line] = _child_lines(log, "warmchildprobe:seen")
    assert (line["warm"], line["why"]) == (False, "environment: OMP_NUM_THREADS")
    from tests.warm_server import why_not_forked

    for target in ("detconf.conformance.children:seeded_ops", "detconf.conformance.perturbed:serve",
                   "detconf.reports.standby:main"):
        assert why_not_forked(target, {}, [], ("OMP_",), {}, set()) == "a process compared with other processes, or a report's"
    shadow = tmp_path / "shadow"
    (shadow / "numpy").mkdir(parents=True)  # a package of a name the server's imports looked for
    assert why_not_forked("x:y", {}, [str(shadow)], ("OMP_",), {}, {"numpy"}) == "a folder first on sys.path"
    assert why_not_forked("x:y", {}, [str(child_targets)], ("OMP_",), {}, {"numpy"}) is None


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_suite_run_forks_the_processes_of_its_isolated_cases(tmp_path):
    """``--isolate`` (a fresh process per case) in a run forked from the server: each case's
    process is forked too, and the rows are those of cases run in the run's own process."""
    log = tmp_path / "warm.jsonl"
    env = {**warm.base_env(), "DETCONF_TESTS_WARM_LOG": str(log)}
    rows = {}
    for name, extra in (("inproc", []), ("isolated", ["--isolate"])):
        done = warm.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", *TWO[:8],
                         "-n", "0", "-k", "are_deterministic_algorithms_enabled and error", "--no-report-build",
                         "--results", str(tmp_path / f"{name}.jsonl"), *extra], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        rows[name] = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()
                      if '"record": "result"' in line]
    forks = _child_lines(log, "detconf.conformance.isolated:judge_payload")
    assert forks and all(r["warm"] for r in forks) and len(forks) == len(rows["isolated"])
    assert [r["verdict"] for r in rows["isolated"]] == [r["verdict"] for r in rows["inproc"]]
    assert all(r["detail"].get("isolated") for r in rows["isolated"])


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_gpu_run_forks_its_machine_probe_and_answers_as_a_fresh_one(tmp_path, monkeypatch):
    """``python -m detconf gpu-run`` forked from the server: the ``python -c`` that describes the
    machine is forked too, and the command says what a fresh one says."""
    log = tmp_path / "warm.jsonl"
    monkeypatch.setenv("DETCONF_TESTS_WARM_LOG", str(log))
    command = [sys.executable, "-m", "detconf", "gpu-run", "--device", "cpu", "--check"]
    forked = warm.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    fresh = warm.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, cold=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert "gpu-run: available: cpu" in forked.stdout
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["flavour"], r["warm"]) for r in lines] == [("python-c", True), ("pytest", True), ("pytest", False)]


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_only_a_plain_python_c_start_is_forked_in_such_a_child(tmp_path, monkeypatch):
    """What ``_route_python_starts`` installs in a forked ``python -m detconf`` child, here: a plain
    ``python -c`` is forked (its parent is the server), one that asks for a session of its own,
    a ``preexec_fn``, or a changed variable read at import starts as ``subprocess`` starts it."""
    import subprocess

    from tests import warm_server

    server = warm._server_for(warm.base_env(), "pytest")
    assert server is not None
    monkeypatch.setattr(subprocess, "Popen", subprocess.Popen)  # put back after the test
    monkeypatch.setattr(warm_server, "SERVED", {"socket": str(server.socket), "env": server.env})
    monkeypatch.setenv("DETCONF_TESTS_WARM_LOG", str(tmp_path / "warm.jsonl"))
    warm_server._route_python_starts({"import_time": list(warm.IMPORT_TIME)})
    parent = [sys.executable, "-c", "import os; print(os.getppid(), os.getsid(0) == os.getpid())"]
    seen = {}
    for name, kwargs in (("plain", {}), ("session", {"start_new_session": True}),
                         ("preexec", {"preexec_fn": lambda: None}), ("executable", {"executable": sys.executable}),
                         ("environment", {"env": {**os.environ, "OMP_NUM_THREADS": "3"}})):
        done = subprocess.run(parent, capture_output=True, text=True, timeout=120, **kwargs)
        assert done.returncode == 0, done.stderr
        ppid, own_session = done.stdout.split()
        seen[name] = (int(ppid) == os.getpid(), own_session == "True")
    assert seen == {"plain": (False, False), "session": (True, True), "preexec": (True, False),
                    "executable": (True, False), "environment": (True, False)}, seen
    lines = [json.loads(line) for line in (tmp_path / "warm.jsonl").read_text().splitlines()]
    assert [r["warm"] for r in lines] == [True, False, False, False, False]
    assert lines[4]["why"] == "environment: OMP_NUM_THREADS"
    assert subprocess.run(["true"]).returncode == 0  # not python: as subprocess runs it


STEP_PROBE = '''
import json, os


def pytest_sessionfinish(session):
    with open(os.environ["WARM_STEP_PROBE"], "w") as f:
        json.dump({"own_group": os.getpgid(0) == os.getpid(), "session_leader": os.getsid(0) == os.getpid()}, f)
'''


@pytest.mark.skipif(os.environ.get("DETCONF_TESTS_COLD") == "1", reason="every inner run is cold here")
def test_a_forked_gpu_run_forks_its_steps_each_in_a_process_group_of_its_own(tmp_path, monkeypatch):
    """gpu-run's documented step (``python -m pytest`` with ``detconf.gpurun._child_setup``),
    in a forked gpu-run: forked too, in a process group of its own as the step started fresh is,
    with the same step records."""
    (tmp_path / "plugins" / "warm_step_probe.py").parent.mkdir()
    (tmp_path / "plugins" / "warm_step_probe.py").write_text(STEP_PROBE)
    log = tmp_path / "warm.jsonl"
    monkeypatch.setenv("DETCONF_TESTS_WARM_LOG", str(log))
    seen = {}
    for name, cold in (("forked", False), ("fresh", True)):
        env = {**warm.base_env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "plugins"),
                                                                              os.environ.get("PYTHONPATH")])),
               "WARM_STEP_PROBE": str(tmp_path / f"{name}.json")}
        out = tmp_path / name
        done = warm.run([sys.executable, "-m", "detconf", "gpu-run", "--steps", "documented", "-n", "0", "--device",
                         "cpu", "--quiet", "--out", str(out), "--", "-k",
                         "are_deterministic_algorithms_enabled and cpu and error", "-p", "warm_step_probe"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, cold=cold)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        [step] = json.loads((out / "steps.json").read_text())
        seen[name] = (json.loads((tmp_path / f"{name}.json").read_text()), step["status"], step["exit_status"],
                      step["end_record"]["outcome"])
    assert seen["forked"] == seen["fresh"] == ({"own_group": True, "session_leader": False}, "passed", 0, "complete")
    steps = [r for r in (json.loads(line) for line in log.read_text().splitlines()) if r["flavour"] == "python-m-pytest"]
    assert [r["warm"] for r in steps] == [True]


# --------------------------------------------------------------------------------- shared servers

def test_the_workers_of_one_run_share_a_servers_folder_and_no_one_else_does(monkeypatch):
    """The folder of a shared server is the same for every xdist worker of one run and one key,
    another for another run or key, and none outside xdist or with ``DETCONF_TESTS_SHARED=0``."""
    key = ("pytest", (), (("HOME", "/root"),))
    monkeypatch.delenv("DETCONF_TESTS_SHARED", raising=False)
    for name in ("PYTEST_XDIST_TESTRUNUID", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(name, raising=False)
    assert warm._shared_folder(key) is None
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "a" * 32)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = warm._shared_folder(key)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert warm._shared_folder(key) == first and first.name.startswith("detconf-warm-aaaaaaaaaaaa-")
    assert warm._shared_folder(("reports", (), key[2])) != first
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "b" * 32)
    assert warm._shared_folder(key) != first
    monkeypatch.setenv("DETCONF_TESTS_SHARED", "0")
    assert warm._shared_folder(key) is None


PARENT = "import os, sys; print(os.getppid()); sys.exit(int(sys.argv[1]))\n"


def _forked_script(server, script, code: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-I", str(script), str(code)]
    return warm._forked(server, cmd, warm._form(cmd)[1], script.parent, warm.base_env(), 60,
                        subprocess.PIPE, subprocess.PIPE, True, None)


def test_a_shared_server_is_started_once_serves_every_worker_and_leaves_with_the_run(tmp_path):
    """Two workers ask for the same server: the first starts it, the second starts none and forks
    from it; neither's end stops it (the other may still run tests); once the process it watches
    (the run's controller; here a stand-in) is gone it leaves and removes its folder."""
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    run = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    folder = tmp_path / "shared"
    env = warm.base_env()
    owner = warm._Server(env, "isolated", ("json",), shared=folder, watch=run.pid)
    guest = warm._Server(env, "isolated", ("json",), shared=folder, watch=run.pid)
    try:
        assert owner.owner and owner.proc is not None and not guest.owner and guest.proc is None
        assert guest.ready() is None and owner.ready() is None
        first, second = _forked_script(owner, script, 0), _forked_script(guest, script, 3)
        assert (first.returncode, second.returncode) == (0, 3), first.stderr + second.stderr
        assert first.stdout == second.stdout == f"{owner.proc.pid}\n"  # both forked by the one server
        owner.stop(ending=True)
        guest.stop(ending=True)
        assert owner.proc.poll() is None and _forked_script(guest, script, 0).stdout == f"{owner.proc.pid}\n"
        run.stdin.close()
        run.wait()
        assert owner.proc.wait(timeout=30) == 0  # it looks every second
        assert not folder.exists()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        owner.stop()


def test_a_worker_waiting_for_a_shared_server_that_died_goes_cold_at_once(tmp_path):
    """The worker that would start the shared server died before it listened (its pid is gone):
    another worker waiting for it says so at once, not after the wait's three minutes."""
    folder = tmp_path / "shared"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / "pid").write_text(str(dead.pid))
    guest = warm._Server(warm.base_env(), "isolated", ("json",), shared=folder)
    assert not guest.owner and guest.proc is None
    start = time.monotonic()
    why = guest.ready(wait=60)
    assert why is not None and why.startswith("the warm server exited") and time.monotonic() - start < 10
