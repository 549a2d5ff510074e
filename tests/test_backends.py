"""Backends from entry points (engine.backends) and several devices per backend (engine.fleet).

Distributions are made for real here: a ``*.dist-info`` folder with ``METADATA`` and
``entry_points.txt`` on ``sys.path`` is what ``importlib.metadata`` finds for an installed
distribution. (tests/test_vendor_backend.py installs one with pip and runs the suite through it.)
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
import torch

from detconf.engine import backends as loader
from detconf.engine import devices, fleet
from detconf.engine.devices import Backend
from tests import warm

ROOT = Path(__file__).resolve().parent.parent


def make_distribution(where: Path, name: str, entry_points: dict[str, str], module: str = "", source: str = "") -> Path:
    """A distribution ``name`` 1.0 installed in folder ``where`` (add it to sys.path)."""
    info = where / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = ["[detconf.backends]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    if module:
        (where / f"{module}.py").write_text(source)
    return where


GOOD = '''
import torch
from detconf.engine.devices import Backend

def backend():
    return Backend("{name}", available=lambda: True, device_count=lambda: 2,
                   torch_device_for=lambda index: torch.device("cpu"))
'''


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Install distributions into a fresh folder on sys.path; forget their modules afterwards."""
    monkeypatch.setattr(loader, "_LOADED", {})
    made: list[str] = []

    def install(name, entry_points, module="", source=""):
        where = tmp_path / name
        make_distribution(where, name, entry_points, module, source)
        monkeypatch.syspath_prepend(str(where))
        if module:
            made.append(module)

    yield install
    for module in made:
        sys.modules.pop(module, None)


def test_the_built_in_backends_are_the_entry_points_detconf_declares():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][loader.GROUP]
    assert declared == dict(loader.BUILTINS)
    table = devices.backends()
    for name in ("cpu", "cuda", "mps", "npu"):
        assert table[name].origin == loader.BUILTIN_ORIGIN
    assert table["cpu"].describe()["available"] is True
    # The callers' view is unchanged: names, resolution, availability.
    assert loader.BUILTIN_DEVICES == ("cpu", "cuda", "mps", "npu") and set(loader.BUILTIN_DEVICES) <= set(table)
    assert devices.resolve_devices(["cpu"])[0].name == "cpu"
    assert "cpu" in devices.available_devices()


def test_a_distributions_backend_is_loaded_and_named_after_its_distribution(installed):
    installed("acme-detconf", {"acme": "acme_backend:backend"}, "acme_backend", GOOD.format(name="acme"))
    table = devices.backends()
    assert table["acme"].origin == "acme-detconf 1.0"
    assert list(table)[:4] == ["cpu", "cuda", "mps", "npu"]  # built-ins first
    assert "acme" in devices.available_devices()
    acme = devices.resolve_devices(["acme"])[0]
    assert acme.count() == 2
    assert acme.on(1).torch_device() == torch.device("cpu")


@pytest.mark.parametrize("value, source, problem", [
    ("nowhere_module:backend", "", "ModuleNotFoundError: No module named 'nowhere_module'"),
    ("bad_import:backend", "raise RuntimeError('vendor runtime not found\\nsecond line')\n",
     "RuntimeError: vendor runtime not found second line"),
    ("bad_object:backend", "backend = 42\n", "gave int, not a detconf.engine.devices.Backend"),
    ("bad_call:backend", "def backend():\n    raise OSError('no driver')\n", "OSError: no driver"),
    ("bad_name:backend", "from detconf.engine.devices import Backend\n\ndef backend():\n"
                         "    return Backend('Bad Name', available=lambda: True)\n", "gave a backend named 'Bad Name'"),
])
def test_a_broken_entry_point_is_one_line_naming_its_distribution(installed, value, source, problem):
    module = value.split(":")[0] if source else ""
    installed("broken-detconf", {"broken": value}, module, source)
    with pytest.raises(loader.BackendError) as err:
        devices.backends()
    message = str(err.value)
    assert "\n" not in message
    assert "broken-detconf 1.0" in message and problem in message, message
    with pytest.raises(devices.UnknownDevice):  # what the plugin turns into a usage error
        devices.resolve_devices(["cpu"])


def test_a_backend_claiming_a_built_in_name_is_a_conflict(installed):
    installed("rogue-detconf", {"cuda": "rogue_backend:backend"}, "rogue_backend", GOOD.format(name="cuda"))
    with pytest.raises(loader.BackendError, match=r"rogue-detconf 1.0 declares device 'cuda', which detconf already "
                                                   r"provides; uninstall one of them"):
        devices.backends()


def test_two_distributions_with_one_device_name_conflict(installed):
    installed("one-detconf", {"twin": "one_backend:backend"}, "one_backend", GOOD.format(name="twin"))
    installed("two-detconf", {"twin": "two_backend:backend"}, "two_backend", GOOD.format(name="twin"))
    with pytest.raises(loader.BackendError) as err:
        devices.backends()
    assert "one-detconf 1.0" in str(err.value) and "two-detconf 1.0" in str(err.value)


def test_the_privateuse1_fallback_yields_to_a_distributions_backend(installed, monkeypatch):
    monkeypatch.setattr(devices, "_privateuse1_name", lambda: "acmeone")
    assert devices.backends()["acmeone"].fallback  # the generic one, while nothing else provides it
    installed("acmeone-detconf", {"acmeone": "acmeone_backend:backend"}, "acmeone_backend", GOOD.format(name="acmeone"))
    chosen = devices.backends()["acmeone"]
    assert not chosen.fallback and chosen.origin == "acmeone-detconf 1.0" and chosen.count() == 2


def test_a_broken_backend_stops_the_run_with_one_usage_line(tmp_path):
    where = make_distribution(tmp_path / "dist", "broken-detconf", {"broken": "gone_module:backend"})
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(where)
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "--device", "cpu",
                          "--source", "torch-docs", "--collect-only", "-q"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == ["ERROR: backend entry point 'broken' (gone_module:backend) of broken-detconf 1.0 failed: "
                      "ModuleNotFoundError: No module named 'gone_module'"], out.stderr
    assert "Traceback" not in out.stderr + out.stdout


# ----------------------------------------------------------------------------- several devices
def test_worker_i_uses_device_i_mod_count():
    assert [fleet.worker_number(w) for w in ("gw0", "gw7", None, "main", "gwx")] == [0, 7, 0, 0, 0]
    assert [fleet.device_index(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert fleet.workers_per_device(5, 2) == [3, 2]
    two = Backend("twin", available=lambda: True, device_count=lambda: 2)
    bound = fleet.bind([two, devices.backends()["cpu"]], "gw3")
    assert [b.index for b in bound] == [1, 0]
    assert bound[1].torch_device() == torch.device("cpu")
    absent = Backend("gone", available=lambda: False, device_count=lambda: 4)
    assert fleet.bind([absent], "gw3")[0].index is None



@pytest.mark.parametrize("perturb, workers", [(False, 5), (True, 2)])
def test_the_perturbation_tier_lowers_the_workers_by_its_processes_memory(perturb, workers):
    """Under --perturb each worker judges a case in PROCESSES forked processes at once, each with
    its own memory on the device: a device with room for 5 workers of 1 GiB has room for 2."""
    from types import SimpleNamespace

    from detconf.plugin.devices import use_devices

    backend = Backend("big", available=lambda: True, device_count=lambda: 1, free_memory=lambda i: 5 * 2**30,
                      worker_memory=2**30)
    options = {"--worker-memory": None, "--perturb": perturb}
    config = SimpleNamespace(_detconf_backends=[backend], option=SimpleNamespace(numprocesses=8, tx=None),
                             getoption=options.get)
    use_devices(config)
    assert config.option.numprocesses == workers
    assert f"-n 8 lowered to {workers}" in config._detconf_worker_cap

def test_the_worker_cap_comes_from_free_memory():
    assert fleet.cap_from_room([3, 1]) == 3  # workers 0, 2 on device 0; worker 1 on device 1; a 4th needs device 1
    assert fleet.cap_from_room([2, 2]) == 4
    assert fleet.cap_from_room([0, 0]) == 1  # never below one worker
    free = {0: 5 * 2**30, 1: 2 * 2**30}
    backend = Backend("big", available=lambda: True, device_count=lambda: 2, free_memory=free.get,
                      worker_memory=2**30)
    assert fleet.worker_room(backend, None) == [5, 2]
    cap, why = fleet.worker_cap([backend])
    assert cap == 5 and "room for 5, 2 worker(s)" in why  # a 6th would be the third on device 1
    assert fleet.worker_cap([backend], need=3 * 2**30)[0] == 1  # --worker-memory 3: room [1, 0]
    # The perturbation tier: each worker's case in 2 processes at once, each needing the memory.
    assert fleet.worker_room(backend, None, processes=2) == [2, 1]
    cap, why = fleet.worker_cap([backend], processes=2)
    assert cap == 3 and "room for 2, 1 worker(s) of 1.00 GiB each in each of its 2 processes" in why
    unknown = Backend("dim", available=lambda: True, device_count=lambda: 2, free_memory=lambda i: None,
                      worker_memory=2**30)
    assert fleet.worker_cap([unknown]) is None
    assert fleet.worker_cap([devices.backends()["cpu"]]) is None  # no per-worker need: no cap


def test_the_peer_is_the_next_device_of_the_same_model():
    models = {0: "X1", 1: "Y2", 2: "X1"}
    mixed = Backend("mix", available=lambda: True, device_count=lambda: 3, device_model=models.get)
    assert [fleet.peer(mixed, i) for i in range(3)] == [2, None, 0]
    single = Backend("one", available=lambda: True)
    assert fleet.peer(single, 0) is None


def test_docs_backends_shows_the_test_distribution_file_for_file():
    import re

    text = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    shown = dict(re.findall(r"#### `([^`]+)`\n\n```[a-z]+\n(.*?)```", text, flags=re.S))
    dist = ROOT / "tests" / "vendor_backend"
    files = {p.relative_to(dist).as_posix() for p in dist.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert set(shown) == files
    for name, body in shown.items():
        assert body == (dist / name).read_text(encoding="utf-8"), name


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan", ""])
def test_a_bad_worker_memory_is_a_usage_error(value):
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PYTEST_")}
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider",
                          f"--worker-memory={value}", "--collect-only", "-q"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 4
    assert out.stderr.strip().splitlines() == [f"ERROR: --worker-memory must be a positive number of GiB, got {value!r}"]


@pytest.mark.parametrize("expected, warned, raised, compared", [
    ("deterministic", 0, False, True),
    ("deterministic-or-warns", 0, False, True),
    ("deterministic-or-warns", 2, False, False),   # it warned: the docs promise nothing more
    ("deterministic-or-raises", 0, True, False),
    ("warns", 2, False, False),                    # warn_only on a raises-list entry (resize_ quantized)
    ("observe", 0, False, False),                  # mode off
])
def test_the_device_to_device_check_is_only_for_bytes_the_docs_promise(expected, warned, raised, compared):
    from detconf.conformance.harness import _promised_deterministic
    from detconf.engine.runner import Observation

    obs = Observation(runs=2, warned_runs=warned, raised_runs=2 if raised else 0)
    assert _promised_deterministic(expected, obs) is compared


# ---------------------------------------------------------------------------
# Device facts are backend fields: each decides something, and a changed field changes it.


def test_why_a_device_is_unavailable_is_its_backends_own_sentence():
    table = devices.backends()
    if not torch.version.cuda and not getattr(torch.version, "hip", None):
        assert devices.unavailable_reason(table["cuda"], {}) == f"this torch ({torch.__version__}) is built without CUDA"
    assert devices.unavailable_reason("mps", {}).startswith("torch.backends.mps.is_available() is False")
    assert devices.unavailable_reason("nosuchdev", {}) == "torch.nosuchdev.is_available() is False"
    # The error the description met comes first; a backend without a reason of its own gets the
    # generic sentence, and one with a reason gets that reason (the field decides).
    assert devices.unavailable_reason(table["npu"], {"error": "RuntimeError: driver"}) == "RuntimeError: driver"
    plain = Backend("acme", available=lambda: False)
    assert devices.unavailable_reason(plain, {}) == "torch.acme.is_available() is False"
    planted = Backend("acme", available=lambda: False, why_unavailable=lambda: "the acme card is asleep")
    assert devices.unavailable_reason(planted, {}) == "the acme card is asleep"


def test_an_entry_runs_without_the_variables_its_device_reads_once():
    from dataclasses import replace

    cuda, cpu = devices.backend_for("cuda"), devices.backend_for("cpu")
    assert cuda.env_to_unset(("no-cublas-workspace-config",)) == ("CUBLAS_WORKSPACE_CONFIG",)
    assert cuda.env_to_unset(("sparse-dense",)) == () and cpu.env_to_unset(("no-cublas-workspace-config",)) == ()
    planted = replace(cpu, unset_for_qualifier=(("no-cublas-workspace-config", "CUBLAS_WORKSPACE_CONFIG"),))
    assert planted.env_to_unset(("no-cublas-workspace-config",)) == ("CUBLAS_WORKSPACE_CONFIG",)
    assert dict(cuda.environment) == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"} and cpu.environment == ()


def test_the_test_module_decides_isolation_from_the_backend_not_the_name():
    source = (ROOT / "conformance" / "test_documented.py").read_text(encoding="utf-8")
    assert "env_to_unset(case.entry.qualifiers)" in source and '"cuda"' not in source


def test_inductors_code_generator_is_a_backend_fact(monkeypatch):
    from detconf.engine.compiled import compile_unavailable

    assert (devices.inductor_codegen("cpu"), devices.inductor_codegen("cuda"), devices.inductor_codegen("mps")) == \
        ("cpp", "triton", None)
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    assert "C++ compiler" in compile_unavailable("inductor", "cpp")
    assert compile_unavailable("inductor", None) is None  # nothing to check first: the compile itself answers


def test_comparison_tolerances_are_the_devices_own_where_it_has_them():
    from types import SimpleNamespace

    from detconf.conformance import harness
    from detconf.engine import comparison

    ref = [("out", torch.tensor([1.0, 2.0]))]
    near = [("out", torch.tensor([1.0, 2.0 + 2e-6]))]
    assert comparison.compare(near, ref) is None  # within float32's default tolerance
    strict = Backend("acme", available=lambda: True, host=True, tolerances=((torch.float32, (0.0, 0.0)),))
    outcome, prog = SimpleNamespace(ops=frozenset()), SimpleNamespace(inputs={"x": torch.zeros(2)})
    precision = harness._precision(strict, outcome, prog, None)
    assert precision.tolerances == strict.tolerances
    assert "beyond rtol=0.0, atol=0.0" in comparison.compare(near, ref, precision=precision)
    default = harness._precision(devices.backend_for("cpu"), outcome, prog, None)
    assert default.tolerance(torch.float32) == comparison.TOLERANCES[torch.float32]


def test_the_host_is_a_backend_fact_and_the_host_type_is_named_once():
    assert devices.backend_for("cpu").is_host and not devices.backend_for("cuda").is_host
    assert Backend("acme", available=lambda: True, host=True).is_host
    assert loader.HOST == "cpu"


def _imports(path: Path) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("module, other", [("engine/backends.py", "detconf.engine.devices"),
                                           ("conformance/catalog.py", "detconf.conformance.checks")])
def test_no_import_circle_between_the_contract_and_its_users(module, other):
    """Anywhere in the file, at the top or inside a function: the contract does not import back."""
    assert not {name for name in _imports(ROOT / module) if name == other or name.startswith(other + ".")}


def test_the_import_circle_finder_sees_a_function_level_import(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from detconf.engine.devices import backends\n    return backends()\n")
    assert "detconf.engine.devices" in _imports(planted)


DEVICE_NAMES = {"cpu", "cuda", "mps", "npu", "xpu"}


def _device_name_comparisons(path: Path) -> list[int]:
    """Lines of ``path`` that compare something with a device name (``==``, ``!=``, ``in``)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        consts = [s.value for s in sides if isinstance(s, ast.Constant)]
        consts += [e.value for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set))
                   for e in s.elts if isinstance(e, ast.Constant)]
        if any(isinstance(c, str) and c in DEVICE_NAMES for c in consts):
            found.append(node.lineno)
    return found


def test_no_module_outside_the_device_modules_compares_a_device_name():
    """``x == "cuda"``, ``"cpu" != y``, ``x in ("cpu", "cuda")`` in engine/ and the harness side of
    conformance/: device facts are backend fields (engine/devices.py, engine/backends.py). The
    checks of promises that name CUDA (cuBLAS, cuDNN: ``checks/_support.py``, ``checks/seeds.py``;
    attention's flash, efficient and cuDNN backends and flex attention's CPU backward:
    ``checks/attention.py`` and its fresh-process target ``attention_children.py``), torch's
    per-device math settings (engine/mathmode.py) and the recipes and their kit are about a named
    device by nature."""
    allowed = {"engine/devices.py", "engine/backends.py", "engine/mathmode.py", "engine/strategies.py",
               "conformance/kit.py", "conformance/checks/_support.py", "conformance/checks/seeds.py",
               "conformance/checks/attention.py", "conformance/attention_children.py"}
    files = sorted((ROOT / "engine").glob("*.py")) + sorted((ROOT / "conformance").rglob("*.py"))
    found = [f"{p.relative_to(ROOT).as_posix()}:{line}" for p in files
             if p.relative_to(ROOT).as_posix() not in allowed and not p.name.startswith("recipes")
             for line in _device_name_comparisons(p)]
    assert not found, found


def test_the_device_name_finder_sees_each_spelling(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('a = backend.name != "cpu"\nb = "cuda" == d.type\nc = t in ("npu", "x")\nd = n == "cpux"\n')
    assert _device_name_comparisons(planted) == [1, 2, 3]


def test_a_distributions_vendor_profile_is_source_vendor(installed):
    source = GOOD.format(name="acme").replace(
        "from detconf.engine.devices import Backend", "from detconf.engine.devices import Backend, VendorProfile").replace(
        'torch.device("cpu"))', 'torch.device("cpu"), profile=VendorProfile("x.json", source="ascend"))')
    installed("acme-detconf", {"acme": "acme_profile:backend"}, "acme_profile", source)
    with pytest.raises(loader.BackendError, match="a vendor profile of source 'ascend'.*source 'vendor'"):
        devices.backends()


def test_the_ascend_list_is_the_npu_backends_vendor_profile(monkeypatch, tmp_path):
    from dataclasses import replace

    from detconf.conformance import catalog

    profile = devices.backend_for("npu").profile
    assert (profile.source, profile.recipes) == ("ascend", ("detconf.conformance.recipes_ascend",))
    assert profile.data_path().resolve() == catalog.data_file("ascend").resolve()
    assert catalog.load_entries("ascend") == catalog.read_entries_file(catalog.data_file("ascend"), source="ascend")
    assert catalog.vendor_profiles() == [] or all(p.source == "vendor" for _, p in catalog.vendor_profiles())
    # The profile decides: point it at another list and source ``ascend`` reads that one.
    other = tmp_path / "other.json"
    raw = catalog.data_file("ascend").read_text(encoding="utf-8")
    import json

    other.write_text(json.dumps(json.loads(raw)[:2]), encoding="utf-8")
    monkeypatch.setattr(devices, "ASCEND_PROFILE", replace(profile, data=str(other)))
    assert len(catalog.load_entries("ascend")) == 2


def test_the_entry_points_are_read_once_until_a_folder_on_the_path_changes(tmp_path, monkeypatch):
    """A run asks for the backends several times; the installed distributions' metadata is read
    again only when ``sys.path`` or a folder on it changed: a distribution installed into a
    folder already on the path, or removed from it, is seen at the next call."""
    import shutil

    monkeypatch.setattr(loader, "_LOADED", {})
    monkeypatch.setattr(loader, "_POINTS", [])
    reads = []
    real = loader.metadata.entry_points
    monkeypatch.setattr(loader.metadata, "entry_points", lambda **kw: reads.append(kw) or real(**kw))
    where = tmp_path / "site"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))
    assert "late" not in devices.backends() and "late" not in devices.backends()
    assert len(reads) == 1  # the second call read nothing
    make_distribution(where, "late-detconf", {"late": "late_backend:backend"}, "late_backend",
                      GOOD.format(name="late"))
    try:
        assert devices.backends()["late"].origin == "late-detconf 1.0"
        assert len(reads) == 2
        shutil.rmtree(where / "late_detconf-1.0.dist-info")
        assert "late" not in devices.backends()
    finally:
        sys.modules.pop("late_backend", None)
    assert len(reads) == 3
