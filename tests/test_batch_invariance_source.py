"""``--source batch-invariance``: batch invariance as cells of the suite's matrix — judged where
torch promises it (Inductor in a deterministic mode with ``batch_invariant`` on, torch >= 2.13),
recorded elsewhere; its known findings waive the CPU cells torch does not keep."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from detconf.conformance import batch_invariance as bi
from detconf.conformance.catalog import load_check_entries
from detconf.conformance.checks import batch_invariance as source
from detconf.conformance.findings import known_finding, load_findings
from detconf.findings_rule import torch_range
from detconf.engine.checks import CheckUnsupported, check_for, has_check
from detconf.vocabulary import DEFAULT_SOURCES, OPT_IN_SOURCES
from tests.test_batch_invariance import PLANTED, needs_setting
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
TORCH = str(torch.__version__)


def test_the_source_is_opt_in_and_every_op_of_the_promise_is_an_entry_with_a_check():
    assert "batch-invariance" in OPT_IN_SOURCES and "batch-invariance" not in DEFAULT_SOURCES
    entries = load_check_entries("batch-invariance")
    promise = bi.load_promise()
    assert [e.id for e in entries] == [f"batch-invariance:{op}" for op in promise.ops]
    for entry in entries:
        assert has_check("batch-invariance", entry.id) and entry.torch == promise.torch
        assert promise.text in entry.sentence


def test_the_setting_is_on_only_where_torch_promises_it():
    promise = bi.load_promise()
    on = {(mode, setting) for mode in ("error", "warn_only", "off") for setting in ("eager", "aot_eager", "inductor")
          if source.setting_for(mode, setting, promise, "2.13.0") == "on"}
    assert on == {("error", "inductor"), ("warn_only", "inductor")}
    assert source.setting_for("error", "inductor", promise, "2.12.1") == "off"  # before the setting existed


def _judged(cell: bi.Cell, *, setting="on", compile_setting="inductor"):
    return source.judge("sum", cell, setting=setting, compile_setting=compile_setting, promise=bi.load_promise(),
                        torch_version="2.13.0")


def test_the_judgement_fails_a_difference_only_where_promised():
    differs, same = bi.Cell(judged=1, differing=1, max_abs_diff=1e-3), bi.Cell(judged=1)
    assert _judged(differs).held is False and _judged(differs).observed == "batch-dependent"
    assert _judged(same).held is True and _judged(same).observed == "batch-invariant"
    for elsewhere in (dict(setting="off"), dict(setting="off", compile_setting="eager")):
        assert _judged(differs, **elsewhere).held is None and _judged(differs, **elsewhere).detail["promised"] is False
    with pytest.raises(CheckUnsupported, match="no example ran"):
        _judged(bi.Cell())


def _first_choice(strategy, label=None):
    """A draw that takes the smallest value: seed 0, the stream's first example (64 rows, first 5)."""
    return 0


@needs_setting
def test_a_planted_batch_dependent_op_fails_the_promised_cell_and_is_recorded_elsewhere(monkeypatch):
    """Through the registered check: an op whose rows depend on the batch size (deterministic
    run to run) is ``held=False`` compiled with Inductor under the mode, recorded in eager, and
    the real op of that entry holds (sum of 64 rows against their first 5)."""
    entry = next(e for e in load_check_entries("batch-invariance") if e.id == "batch-invariance:sum")
    check = check_for("batch-invariance", entry.id)
    real = check(_first_choice, entry, torch.device("cpu"), "error", compiler=types.SimpleNamespace(setting="inductor"))
    assert real.held is True and real.detail["example"] == {"batch": 64, "k": 5, "width": 129, "seed": real.detail["example"]["seed"]}
    monkeypatch.setitem(bi.OPS, "sum", PLANTED)
    seen = check(_first_choice, entry, torch.device("cpu"), "error", compiler=types.SimpleNamespace(setting="inductor"))
    assert seen.held is False and seen.observed == "batch-dependent" and seen.detail["max_abs_diff"] > 0
    eager = check(_first_choice, entry, torch.device("cpu"), "error", compiler=None)
    assert eager.held is None and eager.observed == "batch-dependent" and eager.detail["promised"] is False


def test_the_suites_findings_are_the_standalone_commands():
    """A CPU violation the suite waives is one the standalone command's data file records too,
    with the same range, devices, compile settings and facts. (The standalone command's matmul
    finding is not the suite's: it shows with the process's 2 threads, and the suite's xdist
    workers run 1; a suite run with ``-n 0`` on 2 or more cores may fail that cell, as torch
    does not keep the promise there.)"""
    suite = {(f.entry_id.removeprefix("batch-invariance:"), str(f.torch), tuple(f.devices), tuple(f.compile), f.why)
             for f in load_findings() if f.source == "batch-invariance"}
    standalone = {(f.entry_id, str(torch_range(f.torch)), f.devices, f.compile, f.why) for f in bi.load_promise().findings}
    assert suite and {s[:4] for s in suite} <= {s[:4] for s in standalone}
    assert all(any(s[4] == t[4] for t in standalone if t[:4] == s[:4]) for s in suite)


def test_a_suite_run_records_the_cells_where_nothing_is_promised(tmp_path):
    """The suite's layer_norm cells in mode error, eager and aot_eager: nothing is promised there,
    so both are ``recorded`` (batch_invariant stays off) and the run passes (before torch 2.13 the
    entries do not apply: skipped, saying so). The Inductor cell,
    judged, is run through the suite by ``tests/test_upstream.py``, whose every-CPU-finding test
    requires its verdict to be the known finding's (violated) and its script to reproduce it."""
    results = tmp_path / "r.jsonl"
    proc = warm.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-n", "0",
         "--hypothesis-profile", "ci", "--device", "cpu", "--no-report-build", "--results", str(results),
         "--source", "batch-invariance", "--mode", "error", "--compile", "eager", "--compile", "aot_eager",
         "-k", "layer_norm"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    cells = {(r["entry_id"], r["mode"], r["compile"]): r for r in rows if r["record"] == "result"}
    assert sorted(cells) == [("batch-invariance:layer_norm", "error", "aot_eager"),
                             ("batch-invariance:layer_norm", "error", "eager")]
    for row in cells.values():
        if not bi.load_promise().made_by(TORCH):  # the entries are those of torch >= 2.13: not applicable
            assert row["verdict"] == "skipped" and row["detail"]["needs_torch"] == ">=2.13", row
            continue
        assert row["verdict"] == "recorded" and row["detail"]["promised"] is False, row
        assert "batch_invariant=False" in row["detail"]["setting"] and row["detail"]["threads"] >= 1


def test_the_upstream_findings_test_covers_the_judged_cell():
    """The Inductor cell's end-to-end run lives in tests/test_upstream.py: it holds only while a
    CPU finding of this source is recorded for the installed torch."""
    from tests.test_upstream import _cpu_findings

    if not bi.load_promise().made_by(TORCH):
        pytest.skip(f"torch {TORCH} has no batch_invariant")
    assert any(f.source == "batch-invariance" and "inductor" in f.compile for f in _cpu_findings())
