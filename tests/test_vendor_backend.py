"""A backend from outside the repository, end to end.

``tests/vendor_backend`` is a complete distribution (``fakedev-detconf``, the example of
docs/backends.md): pip builds and installs it into a temporary folder, and the conformance suite
runs real cases through its ``detconf.backends`` entry points. ``fakedev`` has two devices of one
model whose tensors live on the CPU, counts its synchronize calls and brings a vendor profile;
``fakedev_skewed`` is the planted fault: its device 1 adds 1 to every floating-point result.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests import warm

ROOT = Path(__file__).resolve().parent.parent
DIST = Path(__file__).resolve().parent / "vendor_backend"


def _pip_available() -> str | None:
    out = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True)
    if out.returncode != 0:
        return "pip is not available to this Python"
    from tests.environments import wheel_building_missing

    return wheel_building_missing()


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    """fakedev-detconf, built by pip from a copy of its source and installed into a folder."""
    why = _pip_available()
    if why:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("vendor")
    source = base / "src"
    shutil.copytree(DIST, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    into = base / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                          "--no-index", "--target", str(into), str(source)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert (into / "fakedev_detconf-1.0.dist-info" / "entry_points.txt").is_file()
    return into


def run_suite(target: Path, tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[dict]]:
    results = tmp_path / "results.jsonl"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environ.update(PYTHONPATH=str(target), **(env or {}))
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider",
                          "--hypothesis-profile", "ci", "--results", str(results), "--no-report-build", *args],
                         cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    return out, [r for r in rows if r.get("record") == "result"]


def test_cases_run_on_both_devices_of_an_installed_backend(target, tmp_path):
    log = tmp_path / "sync.log"
    out, rows = run_suite(target, tmp_path, "--device", "fakedev", "--source", "torch-docs", "--source", "vendor",
                          "-k", "index_add or fakedev", "-n", "3", "--worker-memory", "1",
                          env={"FAKEDEV_FREE_GIB": "1.5,1.2", "FAKEDEV_SYNC_LOG": str(log)})
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    # The per-device cap: one worker of 1 GiB fits on each device, so -n 3 becomes 2.
    assert "-n 3 lowered to 2 (the per-device worker cap; fakedev: 2 device(s) with room for 1, 1 worker(s)" in text
    assert "from fakedev-detconf 1.0" in text
    assert {r["device"] for r in rows} == {"fakedev"}
    assert {(r["worker"], r["device_index"]) for r in rows} == {("gw0", 0), ("gw1", 1)}
    # Every case conforms, but integer histc (a version-ranged fact about CUDA, data/version-facts.json):
    # the CPU's histc, which the fake device runs, has no integer kernel.
    odd = [(r["entry_id"], r["verdict"]) for r in rows if r["verdict"] != "conforms"]
    assert odd == [("histc[integer,cuda]", "unsupported")] * len(odd), odd
    # The vendor profile's list ran, one entry through detconf's recipe, one through the vendor's own.
    vendor = {r["entry_id"] for r in rows if r["source"] == "vendor"}
    assert vendor == {"cumsum[fakedev]", "scaled_sum[fakedev]"}
    assert all(r["reach"] == 1.0 for r in rows if r["source"] == "vendor")
    # Device to device: every case whose program returned was compared with the other device.
    checked = [r for r in rows if r["d2d"]]
    assert checked and all(r["d2d"]["result"] == "same" and r["d2d"]["differing"] == 0 for r in checked)
    assert {tuple(r["d2d"]["devices"]) for r in checked} == {(0, 1), (1, 0)}
    assert all(r["d2d"] is None for r in rows if r["phase"] == "backward-only")
    # The backend's synchronize ran, in both workers.
    pids = log.read_text().split()
    assert len(pids) > len(rows) and len(set(pids)) >= 2


def test_the_device_to_device_check_catches_a_device_that_computes_other_bytes(target, tmp_path):
    out, rows = run_suite(target, tmp_path, "--device", "fakedev_skewed", "--source", "vendor",
                          "--source", "torch-docs", "-k", "scaled_sum or index_add", "-n", "0")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    program = [r for r in rows if r["phase"] == "program"]
    assert program and all(r["device_index"] == 0 for r in program)
    for row in program:
        # Each device is deterministic on its own: the verdict passes, the level between devices does not.
        assert row["verdict"] == "conforms"
        assert row["d2d"]["result"] == "differs" and row["d2d"]["devices"] == [0, 1]
        assert 0 < row["d2d"]["differing"] <= row["d2d"]["compared"]
    assert re.search(r"scaled_sum\[fakedev\] \(error\): conforms on fakedev_skewed:0, but \d+ of \d+ examples gave "
                     r"different bytes on fakedev_skewed:1", text)
    assert "d2d fakedev_skewed/error:" in text and "differs" in text
    # The matrix shows the level as a column of its own.
    results = tmp_path / "results.jsonl"
    report = tmp_path / "report"
    built = warm.reports("build", results, "--out", report, timeout=300)
    assert built.returncode == 0, built.stderr
    header = (report / "matrix.csv").read_text().splitlines()[0].split(",")
    assert "fakedev_skewed/error/d2d" in header
    assert "## Device to device" in (report / "matrix.md").read_text()
    summary = json.loads((report / "summary.json").read_text())
    assert {c["column"]: c["differs"] for c in summary["d2d"]}["fakedev_skewed/error"] == len(
        {r["entry_id"] for r in program if r["mode"] == "error"})
