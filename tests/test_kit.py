"""The recipe kit: op functions are plain, self-contained, and the reproducer is what ran."""
from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from conformance.kit import Example, OpFunctionError, op_source
from engine.entry import Entry

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
