"""expected_outcome and verdict_for implement GUIDE.md §3, row by row."""
import pytest

from engine.entry import Entry
from engine.runner import Observation
from engine.verdict import expected_outcome, verdict_for, worst


def entry(promise, devices=()):
    return Entry(id="e", op="torch.x", sentence="s", promise=promise, devices=devices)


@pytest.mark.parametrize(
    "promise,devices,device,mode,elsewhere,expected",
    [
        ("raises", (), "cpu", "error", False, "raises"),
        ("raises", (), "cpu", "warn_only", False, "warns"),
        ("raises", ("cuda",), "cuda", "error", False, "raises"),
        ("raises", ("cuda",), "cpu", "error", False, "deterministic"),
        ("raises", ("cuda",), "cpu", "warn_only", False, "deterministic"),
        ("deterministic", ("cpu",), "cpu", "error", False, "deterministic"),
        ("deterministic", ("cpu",), "cuda", "error", True, "raises"),
        ("deterministic", ("cpu",), "cuda", "warn_only", True, "warns"),
        ("deterministic", ("cpu",), "cpu", "error", True, "deterministic"),
        ("deterministic", (), "cpu", "off", False, "observe"),
        ("behaves", (), "cpu", "error", False, "holds"),
    ],
)
def test_expected_outcome(promise, devices, device, mode, elsewhere, expected):
    assert expected_outcome(entry(promise, devices), device, mode, raise_documented_elsewhere=elsewhere) == expected


def obs(**kw):
    base = dict(runs=2, identical=True)
    base.update(kw)
    return Observation(**base)


@pytest.mark.parametrize(
    "expected,observation,verdict",
    [
        ("raises", obs(raised="x", raised_runs=2, identical=None), "conforms"),
        ("raises", obs(), "stale-doc"),
        ("raises", obs(identical=False), "missing-raise"),
        ("raises", obs(raised="x", raised_runs=1, identical=None), "missing-raise"),
        ("raises", obs(unsupported="no", identical=None), "unsupported"),
        ("warns", obs(warnings=["w"], warned_runs=2), "conforms"),
        ("warns", obs(), "missing-warning"),
        ("warns", obs(warnings=["w"], warned_runs=1), "missing-warning"),
        ("warns", obs(raised="x", raised_runs=2, identical=None), "undocumented-raise"),
        ("deterministic", obs(), "conforms"),
        ("deterministic", obs(identical=False), "nondeterministic"),
        ("deterministic", obs(raised="x", raised_runs=2, identical=None), "undocumented-raise"),
        ("deterministic", obs(warnings=["w"], warned_runs=2), "spurious-warning"),
        ("deterministic", obs(warnings=["w"], warned_runs=2, identical=False), "nondeterministic"),
        ("deterministic", obs(error="TypeError: x", identical=None), "harness-error"),
        ("deterministic", obs(unsupported="no", identical=None), "unsupported"),
        ("observe", obs(identical=False), "nondeterminism-seen"),
        ("observe", obs(), "no-difference-seen"),
        ("observe", obs(raised="x", raised_runs=2, identical=None), "harness-error"),
    ],
)
def test_verdict_for(expected, observation, verdict):
    assert verdict_for(expected, observation) == verdict


def test_worst_prefers_failures_then_conforms():
    assert worst(["conforms", "nondeterministic", "stale-doc"]) == "nondeterministic"
    assert worst(["conforms", "unsupported"]) == "conforms"
    assert worst(["unsupported", "unsupported"]) == "unsupported"
    assert worst(["no-difference-seen", "nondeterminism-seen"]) == "nondeterminism-seen"
    assert worst([]) == "harness-error"
    with pytest.raises(ValueError):
        worst(["mystery"])


@pytest.mark.parametrize(
    "mode,observation,verdict",
    [
        ("error", obs(raised="x", raised_runs=2, identical=None), "conforms"),
        ("error", obs(), "conforms"),
        ("error", obs(identical=False), "nondeterministic"),
        ("error", obs(raised="x", raised_runs=1, identical=None), "undocumented-raise"),
        ("warn_only", obs(warnings=["w"], warned_runs=2), "conforms"),
        ("warn_only", obs(warnings=["w"], warned_runs=2, identical=False), "nondeterministic"),
        ("warn_only", obs(warnings=["w"], warned_runs=1), "spurious-warning"),
    ],
)
def test_general_contract_for_documented_sweep_ops(mode, observation, verdict):
    e = Entry(id="put", op="opinfo:put", sentence="s", promise="deterministic", qualifiers=("documented",), source="sweep")
    assert verdict_for(expected_outcome(e, "cpu", mode), observation) == verdict


def test_vendor_entries_get_the_general_contract_off_their_device():
    e = Entry(id="put_[npu]", op="torch.Tensor.put_", sentence="s", promise="deterministic", devices=("npu",),
              source="ascend")
    assert expected_outcome(e, "npu", "error") == "deterministic"
    assert expected_outcome(e, "cpu", "error") == "deterministic-or-raises"
    assert expected_outcome(e, "cpu", "warn_only") == "deterministic-or-warns"
    strict = Entry(id="x[cuda]", op="torch.x", sentence="s", promise="deterministic", devices=("cuda",))
    assert expected_outcome(strict, "cpu", "error") == "deterministic"


def test_strided_one_element_output_compares():
    import torch
    from engine.runner import as_bytes

    t = torch.zeros(2)[::2]
    assert as_bytes(t).numel() == 4
