"""Backends from entry points (engine.backends) and several devices per backend (engine.fleet).

Distributions are made for real here: a ``*.dist-info`` folder with ``METADATA`` and
``entry_points.txt`` on ``sys.path`` is what ``importlib.metadata`` finds for an installed
distribution. (tests/test_vendor_backend.py installs one with pip and runs the suite through it.)
"""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from engine import backends as loader
from engine import devices, fleet
from engine.devices import Backend

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
from engine.devices import Backend

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
    assert set(devices.KNOWN_DEVICES) <= set(table)
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
    ("bad_object:backend", "backend = 42\n", "gave int, not an engine.devices.Backend"),
    ("bad_call:backend", "def backend():\n    raise OSError('no driver')\n", "OSError: no driver"),
    ("bad_name:backend", "from engine.devices import Backend\n\ndef backend():\n"
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
    out = subprocess.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "--device", "cpu",
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
    out = subprocess.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider",
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
    from conformance.harness import _promised_deterministic
    from engine.runner import Observation

    obs = Observation(runs=2, warned_runs=warned, raised_runs=2 if raised else 0)
    assert _promised_deterministic(expected, obs) is compared
