"""The harness's shortcuts keep what it checks: the direct draw gives the examples ``data.draw``
gives, and falls back to ``data.draw`` where Hypothesis prints the draws."""
import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import detconf.conformance.harness as harness

STRATEGIES = (st.integers(0, 10**3), st.sampled_from(["a", "b", "c"]), st.booleans(), st.integers(-5, 5),
              st.floats(0, 1), st.lists(st.integers(0, 9), max_size=4))


def _draws(use_drawer: bool, seed: int = 7) -> list[list]:
    seen: list[list] = []

    @settings(max_examples=8, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def explore(data):
        draw = harness._drawer(data) if use_drawer else data.draw
        seen.append([draw(s) for s in STRATEGIES])

    hypothesis.seed(seed)(explore)()
    return seen


def test_direct_draw_gives_the_same_examples_as_data_draw():
    direct, plain = _draws(True), _draws(False)
    assert len(direct) == 8
    assert direct == plain
    assert len({repr(example) for example in direct}) > 1  # the examples differ from each other


def test_the_comparison_sees_different_examples():
    # The equality above is not vacuous: another seed draws other examples.
    assert _draws(False, seed=7) != _draws(False, seed=8)


def test_direct_draw_skips_the_per_draw_bookkeeping():
    @settings(max_examples=1, database=None, deadline=None)
    @given(st.data())
    def explore(data):
        draw = harness._drawer(data)
        assert draw != data.draw
        draw(st.integers(0, 3))
        assert data.count == 0  # data.draw numbers its draws for the report; the direct draw does not

    explore()


def _goes_through_data_draw(data) -> bool:
    """Does the harness's draw function number its draws as ``data.draw`` does (for the report)?"""
    draw = harness._drawer(data)
    before = data.count
    draw(st.integers(0, 3))
    return data.count == before + 1


def test_data_draw_where_hypothesis_prints_draws(monkeypatch):
    # The final replay of a failing example (and verbose mode) notes every draw: keep data.draw there.
    monkeypatch.setattr(harness, "_should_note", lambda: True)

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.data())
    def explore(data):
        assert _goes_through_data_draw(data)
        assert harness._drawer(data).draw_integer == data.conjecture_data.draw_integer  # the kit's quick draw

    explore()


def test_data_draw_when_hypothesis_lacks_the_hook(monkeypatch):
    monkeypatch.setattr(harness, "_should_note", None)

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.data())
    def explore(data):
        assert _goes_through_data_draw(data)

    explore()


def test_the_dispatch_trace_is_not_wrapped_in_a_dynamo_disable_per_operator():
    # torch wraps a dispatch mode's __torch_dispatch__ in torch._disable_dynamo unless the mode
    # opts out; the trace never runs under torch.compile, so it opts out (the wrapper doubled
    # the trace's cost per dispatched operator).
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from detconf.engine.trace import DispatchTrace

    class Plain(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def wrapped(mode) -> bool:  # torch._disable_dynamo's wrapper keeps the function as __wrapped__
        return hasattr(mode.__dict__["__torch_dispatch__"], "__wrapped__")

    if not wrapped(Plain):
        pytest.skip(f"torch {torch.__version__} does not wrap dispatch modes")
    assert not wrapped(DispatchTrace)
    with DispatchTrace() as trace:
        torch.ones(3).add(1)
    assert trace.ops == {"aten.ones.default": 1, "aten.add.Tensor": 1}


def test_a_failing_example_still_reports_its_draws():
    @settings(max_examples=5, derandomize=True, database=None, deadline=None)
    @given(st.data())
    def explore(data):
        value = harness._drawer(data)(st.integers(0, 10))
        assert value < 0

    with pytest.raises(AssertionError) as failed:
        explore()
    notes = "\n".join(getattr(failed.value, "__notes__", []))
    assert "Draw 1: 0" in notes


def _one_case(text: str):
    from detconf.conformance.plan import plan
    from detconf.engine import docspec

    return next(c for c in plan(docspec.installed_entries(), ["cpu"], ["error"]) if text in c.entry.id)


@pytest.mark.parametrize("database", [None, "memory"])
def test_an_example_database_key_only_where_there_is_a_database(database, monkeypatch):
    import hypothesis.core as core
    from hypothesis.database import InMemoryExampleDatabase

    from detconf.engine.devices import resolve_devices

    calls = []
    real = core.function_digest
    monkeypatch.setattr(core, "function_digest", lambda f: calls.append(f) or real(f))
    prof = settings(max_examples=2, deadline=None, database=None if database is None else InMemoryExampleDatabase())
    row = harness.judge(_one_case("index_copy"), resolve_devices(["cpu"])[0], runs=2, hypothesis_settings=prof)
    assert row["verdict"] == "conforms" and row["examples"] == 2
    # Without a database nothing hashes the test's source; with one, its key is still made.
    assert len(calls) == (0 if database is None else 1)
