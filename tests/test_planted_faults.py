"""The harness can fail: planted faults get exactly the verdict they deserve,
through the whole path (recipe -> Hypothesis -> runner -> verdict -> row)."""
import pytest
from hypothesis import settings

from detconf.conformance.plan import Case
from detconf.conformance.harness import failure_message, judge
from detconf.engine.devices import backends
from tests.planted import planted_entry

FAST = settings(max_examples=5, derandomize=True, database=None, deadline=None)
CPU = backends()["cpu"]


def run(op, promise, mode, **kw):
    case = Case(planted_entry(op, promise, **{k: v for k, v in kw.items() if k in ("devices", "backward")}), "cpu", mode,
                kw.get("elsewhere"), kw.get("phase", "program"))
    return judge(case, CPU, hypothesis_settings=kw.get("settings", FAST))


def test_a_op_whose_bytes_change_every_call_is_nondeterministic():
    row = run("planted.changes_every_call", "deterministic", "error")
    assert row["verdict"] == "nondeterministic"
    assert row["observed"] == "nondeterministic"
    assert "bytes differ" in row["detail"]["mismatch"]
    assert row["detail"]["max_abs_diff"] >= 1.0
    message = failure_message(row, "conformance/test_documented.py::test_documented[x]")
    assert "nondeterministic" in message and "reproducer" not in message or "import torch" in message
    assert "rerun: pytest" in message


def test_a_nondeterministic_gradient_is_caught():
    row = run("planted.grad_changes_every_call", "deterministic", "error", backward=True)
    assert row["verdict"] == "nondeterministic"
    assert "grad[x]" in row["detail"]["mismatch"]


def test_b_documented_raise_that_stopped_raising_is_stale_doc():
    row = run("planted.deterministic", "raises", "error")
    assert row["verdict"] == "stale-doc"
    assert row["expected"] == "raises" and row["observed"] == "deterministic"


def test_b_documented_raise_missing_and_nondeterministic_is_missing_raise():
    row = run("planted.changes_every_call", "raises", "error")
    assert row["verdict"] == "missing-raise"


def test_c_raise_where_determinism_was_promised_is_undocumented_raise():
    row = run("planted.alerts", "deterministic", "error")
    assert row["verdict"] == "undocumented-raise"
    assert "does not have a deterministic implementation" in row["detail"]["raised"]


def test_d_warn_only_without_warning_is_missing_warning():
    row = run("planted.deterministic", "raises", "warn_only")
    assert row["verdict"] == "missing-warning"


def test_spurious_warning():
    row = run("planted.alerts", "deterministic", "warn_only")
    assert row["verdict"] == "spurious-warning"


@pytest.mark.parametrize("mode", ["error", "warn_only"])
def test_documented_raise_that_raises_conforms(mode):
    row = run("planted.alerts", "raises", mode)
    assert row["verdict"] == "conforms"
    assert row["observed"] == ("raised" if mode == "error" else "warned")
    assert row["examples"] >= 5 and row["runs"] == 2


def test_raise_documented_for_this_device_by_another_entry_conforms():
    row = run("planted.alerts", "deterministic", "error", devices=("cuda",), elsewhere="other-entry")
    assert row["verdict"] == "conforms" and row["detail"]["raise_documented_by"] == "other-entry"


def test_unsupported_and_harness_error():
    assert run("planted.not_implemented", "deterministic", "error")["verdict"] == "unsupported"
    row = run("planted.broken_recipe", "deterministic", "error")
    assert row["verdict"] == "harness-error" and "AttributeError" in row["detail"]["error"]


def test_positive_control_mode_off():
    assert run("planted.changes_every_call", "deterministic", "off")["verdict"] == "nondeterminism-seen"
    assert run("planted.deterministic", "deterministic", "off")["verdict"] == "no-difference-seen"


def test_entry_without_recipe_is_a_loud_harness_error():
    row = run("planted.nobody_wrote_this", "deterministic", "error")
    assert row["verdict"] == "harness-error" and row["observed"] == "no-recipe"
    assert "planted.nobody_wrote_this" in row["detail"]["error"]


def test_rows_are_json_safe():
    import json

    row = run("planted.changes_every_call", "deterministic", "error")
    assert json.loads(json.dumps(row)) == row


def test_deterministic_but_wrong_is_wrong_result():
    row = run("planted.wrong_when_deterministic", "deterministic", "error")
    assert row["verdict"] == "wrong-result"
    assert "vs default algorithm" in row["detail"]["wrong_result"]
    assert run("planted.deterministic", "deterministic", "error")["verdict"] == "conforms"


def test_tolerances_are_dtype_aware():
    import torch

    from detconf.engine.runner import compare_values

    a = [("out", torch.tensor([1.0, 2.0], dtype=torch.float16))]
    b = [("out", torch.tensor([1.0, 2.002], dtype=torch.float16))]
    assert compare_values(a, b) is None
    a32 = [("out", torch.tensor([1.0, 2.0]))]
    b32 = [("out", torch.tensor([1.0, 2.002]))]
    assert "max abs diff" in compare_values(a32, b32)
    nan = [("out", torch.tensor([float("nan")]))]
    assert compare_values(nan, nan) is None
    assert "values differ" in compare_values([("i", torch.tensor([1]))], [("i", torch.tensor([2]))])


def test_derandomized_cases_draw_the_same_examples_every_time():
    first = run("planted.deterministic", "deterministic", "error")
    again = run("planted.deterministic", "deterministic", "error")
    assert first["detail"]["fingerprints"] == again["detail"]["fingerprints"]
    assert len(set(first["detail"]["fingerprints"].values())) > 1, "examples vary within a case"


@pytest.mark.parametrize("check_id,mode,verdict,observed", [
    ("planted.lacks_a_dtype", "error", "unsupported", "unsupported"),
    ("planted.lacks_a_dtype", "off", "unsupported", "unsupported"),
    ("planted.check_crashes", "error", "harness-error", "error"),
    ("planted.promise_broken", "error", "violated", "broken"),
    ("planted.promise_broken", "off", "recorded", "broken"),
])
def test_check_outcomes_go_through_the_one_verdict(check_id, mode, verdict, observed):
    from detconf.engine.entry import Entry

    entry = Entry(id=check_id, op=check_id, sentence="planted", promise="behaves", source="planted")
    row = judge(Case(entry, "cpu", mode), CPU, hypothesis_settings=FAST)
    assert (row["verdict"], row["observed"]) == (verdict, observed)
    if verdict == "unsupported":
        assert "ComplexHalf" in row["detail"]["unsupported"]


def test_a_check_registered_without_shrinking_keeps_its_first_failing_example():
    """``check(shrinks=False)``: the failing example is run once more (Hypothesis's replay) and
    not shrunk; the same check registered as shrinking (the fault planted: the rule ignored) is
    tried again and again towards a smaller draw."""
    from detconf.engine.entry import Entry
    from tests.planted import BROKEN_DRAWS

    tries = {}
    for check_id in ("planted.broken_kept_as_seen", "planted.broken_shrinks"):
        BROKEN_DRAWS.clear()
        entry = Entry(id=check_id, op=check_id, sentence="planted", promise="behaves", source="planted")
        row = judge(Case(entry, "cpu", "error"), CPU, hypothesis_settings=FAST)
        assert (row["verdict"], row["observed"]) == ("violated", "broken")
        tries[check_id] = list(BROKEN_DRAWS)
    kept = tries["planted.broken_kept_as_seen"]
    first = next(i for i, value in enumerate(kept) if value >= 1000)
    assert kept[first:] == [kept[first]] * 2 and kept[first] > 1000, kept  # first sight, then the replay
    shrunk = tries["planted.broken_shrinks"]
    assert len(shrunk) > shrunk.index(next(v for v in shrunk if v >= 1000)) + 2 and shrunk[-1] == 1000, shrunk


# Reach: a verdict about a sentence is only true when the example reached its kernel ---------


def test_an_example_that_reaches_its_kernel_records_the_trace():
    row = run("planted.reaches_its_kernel", "deterministic", "error")
    assert row["verdict"] == "conforms"
    assert row["targets"] == ["aten.index_add"] and row["reach"] == 1.0
    assert row["dispatched"]["aten.index_add.default"] == row["examples"]
    assert row["detail"]["reached"] is True


@pytest.mark.parametrize("promise,mode,instead_of", [
    ("deterministic", "error", "conforms"),
    ("deterministic", "warn_only", "conforms"),
    ("raises", "error", "stale-doc"),  # the false finding reach exists to prevent
    ("raises", "warn_only", "missing-warning"),
    ("deterministic", "off", "no-difference-seen"),
])
def test_a_recipe_that_routes_around_its_kernel_is_not_reached(promise, mode, instead_of):
    row = run("planted.routes_around_its_kernel", promise, mode)
    assert row["verdict"] == "not-reached", row["detail"]
    assert row["reach"] == 0.0 and row["examples"] == FAST.max_examples  # it kept drawing: no example reached
    assert "aten.index_add.default" not in row["dispatched"] and "aten.mm.default" in row["dispatched"]
    # the same program judged without its targets would have passed as `instead_of`
    from detconf.engine.observation import Observation
    from detconf.engine.verdict import verdict_for
    obs = Observation(**{k: v for k, v in row["detail"].items()
                         if k in ("runs", "raised_runs", "warned_runs", "identical")})
    assert verdict_for(row["expected"], obs) == instead_of


def test_a_kernel_swap_is_caught():
    """The same call reaching a different operator than the one the sentence names."""
    row = run("planted.kernel_swapped", "deterministic", "error")
    assert row["verdict"] == "not-reached"
    assert "aten.scatter_add.default" in row["dispatched"]
    assert row["detail"]["targets"] == ["aten.index_add"] and row["detail"]["reached"] is False


def test_examples_that_miss_the_kernel_do_not_count_but_do_not_hide_those_that_reach():
    row = run("planted.reaches_sometimes", "deterministic", "error", settings=settings(FAST, max_examples=20))
    assert row["verdict"] == "conforms"
    assert 0 < row["reach"] < 1
    assert set(row["detail"]["verdicts_per_example"]) == {"conforms", "not-reached"}


def test_an_empty_index_does_not_count_as_reaching_although_it_dispatches_the_kernel():
    row = run("planted.empty_index", "raises", "error")
    assert row["verdict"] == "not-reached"
    assert "aten.index_add.default" in row["dispatched"]
    assert "empty index" in row["detail"]["unreachable"]


def test_a_documented_op_without_targets_is_a_loud_failure():
    row = run("planted.no_targets", "deterministic", "error")
    assert row["verdict"] == "harness-error" and row["observed"] == "no-target"
    assert "no targets for 'planted.no_targets'" in row["detail"]["error"]


def test_backward_only_reaches_a_kernel_the_mode_routes_around_in_the_whole_program():
    whole = run("planted.decomposes_under_the_mode", "deterministic", "error", backward=True)
    assert whole["phase"] == "program" and whole["verdict"] == "not-reached"
    assert "aten.avg_pool2d_backward.default" in whole["dispatched"]
    only = run("planted.decomposes_under_the_mode", "deterministic", "error", backward=True, phase="backward-only")
    assert only["phase"] == "backward-only" and only["verdict"] == "conforms" and only["reach"] == 1.0
    assert "aten.max_pool2d_with_indices_backward.default" in only["dispatched"]


def test_examples_that_could_not_run_do_not_count_in_reach():
    row = run("planted.not_implemented", "deterministic", "error")
    assert row["verdict"] == "unsupported"
    assert row["reach"] is None  # nothing ran: reach says nothing, rather than 0 %


def test_a_case_that_leaves_global_state_changed_is_a_harness_error_and_is_put_back():
    import torch

    from detconf.engine.determinism import capture_state

    before = capture_state().summary()
    row = run("planted.leaks_state", "deterministic", "error", settings=settings(FAST, max_examples=1))
    assert row["verdict"] == "harness-error"
    assert "cudnn_benchmark" in row["detail"]["error"]
    assert capture_state().summary() == before and torch.backends.cudnn.benchmark == before["cudnn_benchmark"]
