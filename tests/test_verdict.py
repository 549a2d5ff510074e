"""expected_outcome and verdict_for implement GUIDE.md §3, row by row."""
import pytest

from detconf.engine.entry import Entry
from detconf.engine.observation import Observation
from detconf.engine.verdict import expected_outcome, verdict_for, worst


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
        # It said, every run, that it has no deterministic implementation: it may differ.
        ("warn_only", obs(warnings=["w"], warned_runs=2, identical=False), "conforms"),
        ("warn_only", obs(warnings=["w"], warned_runs=1, identical=False), "nondeterministic"),
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
    from detconf.engine.runner import as_bytes

    t = torch.zeros(2)[::2]
    assert as_bytes(t).numel() == 4


# --- the whole table: every expectation × every class of observation ------------------

OBSERVATION_CLASSES = {
    "skipped": Observation(skipped="no device"),
    "harness-error": Observation(runs=2, error="TypeError: x"),
    "check-held": Observation(check=True, held=True),
    "check-broken": Observation(check=True, held=False),
    "check-informational": Observation(check=True, held=None),
    "check-unsupported": Observation(check=True, unsupported="complex32: not implemented for 'ComplexHalf'"),
    "raised-every-run": Observation(runs=2, raised="a", raised_runs=2),
    "raised-some-runs": Observation(runs=2, raised="a", raised_runs=1),
    "unsupported": Observation(runs=2, unsupported="not implemented"),
    "identical": Observation(runs=2, identical=True),
    "differs": Observation(runs=2, identical=False),
    "warned-every-run": Observation(runs=2, warnings=["w"], warned_runs=2, identical=True),
    "warned-every-run-differs": Observation(runs=2, warnings=["w"], warned_runs=2, identical=False),
    "warned-some-runs": Observation(runs=2, warnings=["w"], warned_runs=1, identical=True),
    "identical-but-wrong": Observation(runs=2, identical=True, wrong_result="vs default algorithm: x"),
}
# Columns: deterministic, raises, warns, deterministic-or-raises, deterministic-or-warns, holds, observe.
# "!" marks an impossible pairing (an op observation for a check entry): the function refuses it.
TABLE = """
skipped                  skipped            skipped       skipped          skipped            skipped            skipped   skipped
harness-error            harness-error      harness-error harness-error    harness-error      harness-error      harness-error harness-error
check-held               conforms           conforms      conforms         conforms           conforms           conforms  recorded
check-broken             violated           violated      violated         violated           violated           violated  recorded
check-informational      recorded           recorded      recorded         recorded           recorded           recorded  recorded
check-unsupported        unsupported        unsupported   unsupported      unsupported        unsupported        unsupported unsupported
raised-every-run         undocumented-raise conforms      undocumented-raise conforms         undocumented-raise !         harness-error
raised-some-runs         undocumented-raise missing-raise undocumented-raise undocumented-raise undocumented-raise !      harness-error
unsupported              unsupported        unsupported   unsupported      unsupported        unsupported        !         unsupported
identical                conforms           stale-doc     missing-warning  conforms           conforms           !         no-difference-seen
differs                  nondeterministic   missing-raise missing-warning  nondeterministic   nondeterministic   !         nondeterminism-seen
warned-every-run         spurious-warning   stale-doc     conforms         spurious-warning   conforms           !         no-difference-seen
warned-every-run-differs nondeterministic   missing-raise conforms         nondeterministic   conforms           !         nondeterminism-seen
warned-some-runs         spurious-warning   stale-doc     missing-warning  spurious-warning   spurious-warning   !         no-difference-seen
identical-but-wrong      wrong-result       stale-doc     missing-warning  wrong-result       wrong-result       !         no-difference-seen
"""
EXPECTATION_COLUMNS = ("deterministic", "raises", "warns", "deterministic-or-raises", "deterministic-or-warns",
                       "holds", "observe")
CELLS = [(line.split()[0], expected, cell)
         for line in TABLE.strip().splitlines()
         for expected, cell in zip(EXPECTATION_COLUMNS, line.split()[1:], strict=True)]


def test_the_table_covers_every_expectation_and_observation_class():
    from detconf.vocabulary import EXPECTATIONS

    assert set(EXPECTATION_COLUMNS) == set(EXPECTATIONS)
    assert {name for name, _, _ in CELLS} == set(OBSERVATION_CLASSES)
    assert len(CELLS) == len(OBSERVATION_CLASSES) * len(EXPECTATIONS)


@pytest.mark.parametrize("observation,expected,verdict", CELLS, ids=[f"{o}-{e}" for o, e, _ in CELLS])
def test_verdict_table(observation, expected, verdict):
    obs = OBSERVATION_CLASSES[observation]
    if verdict == "!":
        with pytest.raises(ValueError):
            verdict_for(expected, obs)
    else:
        assert verdict_for(expected, obs) == verdict


@pytest.mark.parametrize("observation,verdict", [("differs", "undocumented-nondeterminism"),
                                                 ("warned-every-run-differs", "undocumented-nondeterminism"),
                                                 ("identical", "conforms"), ("raised-every-run", "undocumented-raise")])
def test_unlisted_ops_name_their_nondeterminism_undocumented(observation, verdict):
    assert verdict_for("deterministic", OBSERVATION_CLASSES[observation], listed=False) == verdict


def test_unknown_expectation_is_refused():
    with pytest.raises(ValueError, match="unknown expectation"):
        verdict_for("maybe", OBSERVATION_CLASSES["identical"])


def test_observation_evidence_is_plain_json_without_harness_flags():
    import json

    obs = Observation(runs=2, identical=False, mismatch="out: 1 of 4 bytes differ", check=False, observed="x")
    evidence = obs.to_json()
    assert json.loads(json.dumps(evidence)) == evidence
    assert "check" not in evidence and "observed" not in evidence and evidence["identical"] is False


# -- one decision per example, one expectation per case ----------------------------------------
def test_a_conforming_example_whose_reference_disagrees_is_wrong_result():
    from detconf.engine.verdict import with_differential

    assert with_differential("conforms", "vs CPU reference: out differs") == "wrong-result"
    assert with_differential("conforms", None) == "conforms"
    assert with_differential("nondeterministic", "vs default algorithm") == "nondeterministic"
    obs = Observation(runs=2, identical=True, reached=True, wrong_result="vs default algorithm: out differs")
    assert verdict_for("deterministic", obs) == "wrong-result"


def _judge_counting(monkeypatch, op, expected=None):
    from hypothesis import settings

    from detconf.conformance import harness
    from detconf.conformance.plan import Case
    from detconf.engine import verdict
    from detconf.engine.devices import backend_for
    from tests.planted import planted_entry

    calls = []
    real = verdict.verdict_for
    monkeypatch.setattr(verdict, "verdict_for", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    case = Case(planted_entry(op, "deterministic"), "cpu", "error", **({"expected": expected} if expected else {}))
    row = harness.judge(case, backend_for("cpu"), hypothesis_settings=settings(max_examples=3, derandomize=True,
                                                                                database=None, deadline=None))
    return row, calls


def test_the_verdict_is_decided_once_per_example(monkeypatch):
    row, calls = _judge_counting(monkeypatch, "planted.deterministic")
    assert row["verdict"] == "conforms" and row["examples"] == 3
    assert len(calls) == 3  # the differential comparison runs on the decision, not on a second one
    row, calls = _judge_counting(monkeypatch, "planted.wrong_when_deterministic")
    assert row["verdict"] == "wrong-result" and len(calls) == row["examples"]


def test_a_case_carries_its_expectation_and_the_harness_judges_by_it(monkeypatch):
    import json

    from detconf.conformance.plan import Case
    from detconf.engine import verdict
    from tests.planted import planted_entry

    case = Case(planted_entry("planted.deterministic", "deterministic"), "cpu", "error")
    assert case.expected == "deterministic"
    assert Case.from_json(json.loads(json.dumps(case.to_json()))).expected == "deterministic"
    # Computed once, when the case is made: the harness does not ask again ...
    monkeypatch.setattr(verdict, "expected_outcome", lambda *a, **k: pytest.fail("expectation computed twice"))
    # ... and what the case carries decides: a planted expectation of a raise is not met.
    row, _ = _judge_counting(monkeypatch, "planted.deterministic", expected="raises")
    assert (row["expected"], row["verdict"]) == ("raises", "stale-doc")
