"""The recipe kit: op functions are plain, self-contained, and the reproducer is what ran."""
from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from detconf.conformance.kit import Example, OpFunctionError, op_source
from detconf.engine.entry import Entry

ENTRY = Entry(id="add", op="torch.add", sentence="s", promise="deterministic")
HELPER_SCALE = 3


def add_op(x, y, *, alpha):
    return torch.add(x, y, alpha=alpha)


def uses_a_module_helper(x):
    return x * HELPER_SCALE


def make_closure():
    captured = 2

    def closure_op(x):
        return x * captured

    return closure_op


@pytest.mark.parametrize("op,needle", [
    (lambda x: x, "lambda"),
    (make_closure(), "closure"),
    (uses_a_module_helper, "HELPER_SCALE"),
    (torch.add, "plain def"),
])
def test_ops_that_would_not_reproduce_are_refused(op, needle):
    with pytest.raises(OpFunctionError, match=needle):
        op_source(op)


def test_attribute_names_are_not_taken_for_globals():
    # add_op's body reads torch.add; this module also has no global "add", but a recipe module
    # defines a recipe of the op's own name next to it: attributes must not count.
    assert "torch.add(x, y, alpha=alpha)" in op_source(add_op)


@settings(max_examples=5, database=None)
@given(st.data())
def test_the_reproducer_rebuilds_the_same_output(data):
    ex = Example(data.draw, ENTRY, {}, torch.device("cpu"))
    ex.tensor("x", (3,), torch.float32)
    ex.tensor("y", (3,), torch.float32)
    program = ex.program(add_op, alpha=ex.choice((1, 2)))
    namespace: dict = {}
    exec(compile(program.repro, "<repro>", "exec"), namespace)
    assert torch.equal(namespace["out"], program.fn(**program.inputs))
    assert program.meta["op_function"] == "add_op" and "alpha=" in program.meta["source"]


def _class_values(case: dict, stable) -> tuple:
    """The class draws of one example under ``stable`` (the draw function is never consulted
    for the value: a compiled case takes the kept one)."""
    ex = Example(lambda strategy: None, ENTRY, case, torch.device("cpu"))
    return ex.side(1, 50), ex.side(1, 50), ex.choice(("a", "b", "c", "d")), ex.integer(0, 1000)


def test_under_compile_every_call_form_of_a_case_draws_the_same_shape_class():
    # One shape class for all forms: the second form's graph is the first one's, so Inductor's
    # graph cache compiles the case once per mode instead of once per form.
    from detconf.conformance.kit import stable_draws

    with stable_draws(11) as stable:
        module = _class_values({"form": "nn.Module"}, stable)
        functional = _class_values({"form": "nn.functional"}, stable)
        again = _class_values({"form": "nn.Module"}, stable)
    assert module == functional == again


def test_under_compile_each_documented_condition_keeps_a_class_of_its_own():
    from detconf.conformance.kit import stable_draws

    with stable_draws(11) as stable:
        conditions = {flag: _class_values({"accumulate": flag, "form": "method"}, stable) for flag in (False, True)}
        assert _class_values({"accumulate": True, "form": "function"}, stable) == conditions[True]
    keys = {key[0] for key in stable._memo}
    assert keys == {(("accumulate", "False"),), (("accumulate", "True"),)}
    # Eager (no stable draws): every draw is Hypothesis's own.
    drawn = Example(lambda strategy: "hypothesis", ENTRY, {"form": "method"}, torch.device("cpu"))
    assert drawn.choice(("a", "b")) == "hypothesis"


def test_the_kits_quick_draws_take_the_choices_the_strategies_would():
    # The kit draws small integer ranges and options straight from the choice sequence where the
    # draw function offers it: the same values from the same choices as st.integers and
    # st.sampled_from, so the examples do not change with the path, and Hypothesis's replay
    # of a failing example (which draws through data.draw) reads them back the same.
    from hypothesis.internal.conjecture.data import ConjectureData

    def values(ex):
        return (ex.integer(1, 9), ex.choice(("a", "b", "c")), ex.side(2, 6), ex.dtype(("floating", "complex")),
                ex.kwarg("mode", ("sum", "mean")), ex.integer(0, 5000), ex.choice(("only",)),
                ex.tensor("x", (2,), torch.float32, contiguous=None).stride())

    choices = [7, 2, 3, 4, 1, 4321, 0, 1, 99]
    plain = ConjectureData.for_choices(choices)
    quick = ConjectureData.for_choices(choices)

    through_strategies = []

    def with_primitive(strategy, label=None):
        through_strategies.append(strategy)
        return quick.draw(strategy)

    with_primitive.draw_integer = quick.draw_integer
    slow_ex = Example(plain.draw, ENTRY, {}, torch.device("cpu"))
    quick_ex = Example(with_primitive, ENTRY, {}, torch.device("cpu"))
    assert quick_ex._draw_integer is not None and slow_ex._draw_integer is None
    assert values(quick_ex) == values(slow_ex)
    assert slow_ex.lines == quick_ex.lines  # the same seeds: the reproducer rebuilds the same tensors
    assert len(quick.choices) == len(plain.choices)
    # Not only the values: each choice is drawn with the strategy's own constraints (range, weights).
    assert [(n.type, n.value, n.constraints) for n in quick.nodes] == [(n.type, n.value, n.constraints) for n in plain.nodes]
    # Wide ranges too (the tensor's seed, integer(0, 5000): the strategy weights their bounds):
    # every draw above took the quick path.
    assert through_strategies == []


def test_the_harness_hands_recipes_the_quick_draw_in_both_readings():
    from hypothesis import given, settings, strategies as st

    from detconf.conformance import harness

    seen = []

    @settings(max_examples=3, database=None, derandomize=True)
    @given(st.data())
    def probe(data):
        draw = harness._drawer(data)
        seen.append(callable(getattr(draw, "draw_integer", None)) and draw(st.integers(0, 3)) in range(4))

    probe()
    assert seen and all(seen)


def test_where_the_strategys_constraints_cannot_be_read_the_kit_draws_through_the_strategy(monkeypatch):
    # Another Hypothesis whose choice sequence reads differently: the kit does not guess the
    # constraints, it leaves the draw to st.integers.
    from hypothesis.internal.conjecture.data import ConjectureData

    from detconf.conformance import kit

    kit.integer_constraints.cache_clear()
    monkeypatch.setattr(ConjectureData, "for_choices", classmethod(lambda cls, choices: 1 / 0))
    try:
        assert kit.integer_constraints(0, 5000) is None
        strategies = []

        def draw(strategy, label=None):
            strategies.append(repr(strategy).replace("_", ""))
            return 7

        draw.draw_integer = lambda **constraints: pytest.fail("guessed constraints")
        ex = Example(draw, ENTRY, {}, torch.device("cpu"))
        assert (ex.integer(0, 5000), ex.seed()) == (7, 7)
        assert strategies == [repr(st.integers(0, 5000)).replace("_", ""), repr(st.integers(0, 2**32 - 1)).replace("_", "")]
    finally:
        kit.integer_constraints.cache_clear()
