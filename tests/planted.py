"""Planted ops for the harness's own tests: each misbehaves in one known way.

They are registered as recipes under names no documented entry uses, so the
full path (recipe → Hypothesis → runner → verdict) is exercised.
"""
import itertools

import torch
from hypothesis import strategies as st

from engine.entry import Entry
from engine.program import Program, recipe

_counter = itertools.count()


def planted_entry(op: str, promise: str, *, devices=(), backward=False) -> Entry:
    return Entry(id=op.rsplit(".", 1)[-1], op=op, sentence=f"planted: {op}", promise=promise,
                 devices=tuple(devices), backward=backward, source="torch-docs", list_name=promise)


def _x(draw, device):
    n = draw(st.integers(1, 6))
    return torch.arange(n, dtype=torch.float32, device=device)


@recipe("planted.changes_every_call")
def changes_every_call(draw, entry, case, device):
    """Adds a value that differs on every call: the bytes never repeat."""
    return Program(fn=lambda x: x + float(next(_counter)), inputs={"x": _x(draw, device)}, describe="x + counter")


@recipe("planted.grad_changes_every_call")
def grad_changes_every_call(draw, entry, case, device):
    """Forward is deterministic; the gradient is not."""

    class Bump(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2 + float(next(_counter))

    return Program(fn=lambda x: Bump.apply(x), inputs={"x": _x(draw, device)}, grad_inputs=("x",),
                   describe="2x with a drifting gradient")


@recipe("planted.deterministic")
def deterministic(draw, entry, case, device):
    """Deterministic and silent: it never raises or warns."""
    return Program(fn=lambda x: x * 2, inputs={"x": _x(draw, device)}, describe="2x")


@recipe("planted.alerts")
def alerts(draw, entry, case, device):
    """Triggers torch's own determinism alert (put_ with accumulate=False)."""

    def fn(x):
        return x.put_(torch.zeros(1, dtype=torch.long, device=x.device), torch.ones(1, device=x.device), accumulate=False)

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="put_(accumulate=False)")


@recipe("planted.not_implemented")
def not_implemented(draw, entry, case, device):
    def fn(x):
        raise NotImplementedError("planted op is not implemented for 'Float'")

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="unsupported")


@recipe("planted.broken_recipe")
def broken_recipe(draw, entry, case, device):
    def fn(x):
        return x.no_such_method()

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="harness bug")


@recipe("planted.wrong_when_deterministic")
def wrong_when_deterministic(draw, entry, case, device):
    """Bitwise repeatable, but a different answer once deterministic mode is on."""

    def fn(x):
        return x * (3.0 if torch.are_deterministic_algorithms_enabled() else 2.0)

    return Program(fn=fn, inputs={"x": _x(draw, device) + 1}, describe="deterministic but wrong")


# Checks ------------------------------------------------------------------------

from engine.checks import CheckObservation, CheckUnsupported, check  # noqa: E402


@check("planted.lacks_a_dtype", source="planted")
def lacks_a_dtype(draw, entry, device, mode):
    """A torch that cannot make the dtype the promise is about."""
    draw(st.integers(0, 3))
    raise CheckUnsupported("complex32: \"fill_empty_deterministic_\" not implemented for 'ComplexHalf'")


@check("planted.check_crashes", source="planted")
def check_crashes(draw, entry, device, mode):
    draw(st.integers(0, 3))
    raise KeyError("our bug")


@check("planted.promise_broken", source="planted")
def promise_broken(draw, entry, device, mode):
    return CheckObservation(held=draw(st.integers(0, 3)) > 10, observed="broken")
