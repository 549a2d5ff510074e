"""Planted ops for the harness's own tests: each misbehaves in one known way.

They are registered as recipes under names no documented entry uses, so the
full path (recipe → Hypothesis → runner → verdict) is exercised.
"""
import itertools

import torch
from hypothesis import strategies as st

from detconf.engine.entry import Entry
from detconf.engine.program import Program, recipe

_counter = itertools.count()


def planted_entry(op: str, promise: str, *, devices=(), backward=False) -> Entry:
    return Entry(id=op.rsplit(".", 1)[-1], op=op, sentence=f"planted: {op}", promise=promise,
                 devices=tuple(devices), backward=backward, source="torch-docs", list_name=promise)


def _x(draw, device):
    n = draw(st.integers(1, 6))
    return torch.arange(n, dtype=torch.float32, device=device)


@recipe("planted.changes_every_call", targets="aten.add")
def changes_every_call(draw, entry, case, device):
    """Adds a value that differs on every call: the bytes never repeat."""
    return Program(fn=lambda x: x + float(next(_counter)), inputs={"x": _x(draw, device)}, describe="x + counter")


@recipe("planted.grad_changes_every_call", targets="aten.mul")
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


@recipe("planted.deterministic", targets="aten.mul")
def deterministic(draw, entry, case, device):
    """Deterministic and silent: it never raises or warns."""
    return Program(fn=lambda x: x * 2, inputs={"x": _x(draw, device)}, describe="2x")


@recipe("planted.alerts", targets="aten.put_")
def alerts(draw, entry, case, device):
    """Triggers torch's own determinism alert (put_ with accumulate=False)."""

    def fn(x):
        return x.put_(torch.zeros(1, dtype=torch.long, device=x.device), torch.ones(1, device=x.device), accumulate=False)

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="put_(accumulate=False)")


@recipe("planted.not_implemented", targets="aten.mul")
def not_implemented(draw, entry, case, device):
    def fn(x):
        raise NotImplementedError("planted op is not implemented for 'Float'")

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="unsupported")


@recipe("planted.broken_recipe", targets="aten.mul")
def broken_recipe(draw, entry, case, device):
    def fn(x):
        return x.no_such_method()

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="harness bug")


@recipe("planted.wrong_when_deterministic", targets="aten.mul")
def wrong_when_deterministic(draw, entry, case, device):
    """Bitwise repeatable, but a different answer once deterministic mode is on."""

    def fn(x):
        return x * (3.0 if torch.are_deterministic_algorithms_enabled() else 2.0)

    return Program(fn=fn, inputs={"x": _x(draw, device) + 1}, describe="deterministic but wrong")


# Checks ------------------------------------------------------------------------

from detconf.engine.checks import CheckObservation, CheckUnsupported, check  # noqa: E402


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


#: The values ``planted.broken_*`` drew, in order: how many tries a failing case took.
BROKEN_DRAWS: list[int] = []


def _broken_from_1000(draw, entry, device, mode):
    """Fails where a drawn number (shrinking towards 0) is 1000 or more: shrunk, exactly 1000."""
    BROKEN_DRAWS.append(draw(st.integers(0, 2**30 - 1)))
    return CheckObservation(held=BROKEN_DRAWS[-1] < 1000, observed="broken")


# check() keeps its options on the function it registers: a function object for each.
check("planted.broken_shrinks", source="planted")(lambda *args: _broken_from_1000(*args))
check("planted.broken_kept_as_seen", source="planted", shrinks=False)(lambda *args: _broken_from_1000(*args))


# Reach ------------------------------------------------------------------------------------
# The documented kernel here is ``aten.index_add`` (index_add_op sums rows at repeated indices).


def _index_add_inputs(draw, device):
    n = draw(st.integers(2, 6))
    return {"x": torch.zeros(3, device=device), "index": torch.arange(n, device=device) % 3,
            "src": torch.arange(n, dtype=torch.float32, device=device)}


@recipe("planted.reaches_its_kernel", targets="aten.index_add")
def reaches_its_kernel(draw, entry, case, device):
    """Calls the documented kernel."""
    return Program(fn=lambda x, index, src: x.index_add(0, index, src), inputs=_index_add_inputs(draw, device),
                   describe="index_add")


@recipe("planted.routes_around_its_kernel", targets="aten.index_add")
def routes_around_its_kernel(draw, entry, case, device):
    """The same sums without the documented kernel (one-hot matrix product): deterministic, and about nothing."""

    def fn(x, index, src):
        onehot = torch.nn.functional.one_hot(index, 3).to(src.dtype)
        return x + src @ onehot

    return Program(fn=fn, inputs=_index_add_inputs(draw, device), describe="index_add routed around")


@recipe("planted.kernel_swapped", targets="aten.index_add")
def kernel_swapped(draw, entry, case, device):
    """The call the sentence names, silently dispatched to another operator (``scatter_add``)."""

    def fn(x, index, src):
        return x.scatter_add(0, index, src)

    return Program(fn=fn, inputs=_index_add_inputs(draw, device), describe="index_add swapped for scatter_add")


@recipe("planted.reaches_sometimes", targets="aten.index_add")
def reaches_sometimes(draw, entry, case, device):
    """Half the examples reach the kernel; the others take a shortcut."""
    shortcut = draw(st.booleans())
    inputs = _index_add_inputs(draw, device)
    if shortcut:
        return Program(fn=lambda x, index, src: x + 0, inputs=inputs, describe="shortcut")
    return Program(fn=lambda x, index, src: x.index_add(0, index, src), inputs=inputs, describe="index_add")


@recipe("planted.empty_index", targets="aten.index_add")
def empty_index(draw, entry, case, device):
    """Dispatches the kernel on an empty index, where kernels return before they run."""
    inputs = _index_add_inputs(draw, device)
    inputs["index"], inputs["src"] = inputs["index"][:0], inputs["src"][:0]
    return Program(fn=lambda x, index, src: x.index_add(0, index, src), inputs=inputs, describe="empty index",
                   meta={"unreachable": "empty index: the kernel returns before it runs"})


@recipe("planted.no_targets")
def no_targets(draw, entry, case, device):
    """A documented op whose recipe names no target operator."""
    return Program(fn=lambda x: x * 2, inputs={"x": _x(draw, device)}, describe="2x")


@recipe("planted.decomposes_under_the_mode", targets="aten.max_pool2d_with_indices_backward")
def decomposes_under_the_mode(draw, entry, case, device):
    """Like torch.nn.functional on CUDA: with the mode on during the forward it takes a
    decomposition, so the native backward kernel runs only when the forward ran outside it."""

    def fn(x):
        if torch.are_deterministic_algorithms_enabled():
            return torch.nn.functional.avg_pool2d(x, 2) * 1.0
        return torch.nn.functional.max_pool2d(x, 2)

    x = torch.arange(16, dtype=torch.float32, device=device).reshape(1, 1, 4, 4)
    return Program(fn=fn, inputs={"x": x}, grad_inputs=("x",), describe="decomposes under the mode")


@recipe("planted.one_form_misbehaves", targets="aten.add", forms=("good", "bad"))
def one_form_misbehaves(draw, entry, case, device):
    """Two call forms of one op; only the ``bad`` form drifts between runs."""
    if case["form"] == "bad":
        return Program(fn=lambda x: x + float(next(_counter)), inputs={"x": _x(draw, device)}, describe="bad form")
    return Program(fn=lambda x: x + 1.0, inputs={"x": _x(draw, device)}, describe="good form")


@recipe("planted.leaks_state", targets="aten.mul")
def leaks_state(draw, entry, case, device):
    """A recipe that flips cuDNN benchmarking while building its example (outside the runner's
    guard) and leaves it so."""
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    return Program(fn=lambda x: x * 2, inputs={"x": _x(draw, device)}, describe="leaks cudnn.benchmark")


# Compiled mode ----------------------------------------------------------------------------
# Faults that only the compiled path has: the eager program behaves, its compiled form does not.


@recipe("planted.alert_swallowed_when_compiled", targets="aten.put_")
def alert_swallowed_when_compiled(draw, entry, case, device):
    """Eager calls put_(accumulate=False), which raises / warns the alert; the compiled path
    computes something else and never alerts."""

    def fn(x):
        if torch.compiler.is_compiling():
            return x * 2
        return x.clone().put_(torch.zeros(1, dtype=torch.long, device=x.device), torch.ones(1, device=x.device),
                              accumulate=False)

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="alert swallowed when compiled")


@recipe("planted.drifts_when_compiled", targets="aten.mul")
def drifts_when_compiled(draw, entry, case, device):
    """Deterministic in eager; compiled, it adds fresh random noise on every call."""

    def fn(x):
        if torch.compiler.is_compiling():
            return x * 2 + torch.rand_like(x)
        return x * 2

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="drifts when compiled")


@recipe("planted.op_left_to_eager", targets="aten.index_add")
def op_left_to_eager(draw, entry, case, device):
    """Compiled, the documented op sits behind a graph break and runs in eager."""

    @torch.compiler.disable
    def eager_index_add(x, index, src):
        return x.index_add(0, index, src)

    def fn(x, index, src):
        return eager_index_add(x * 1, index, src)

    return Program(fn=fn, inputs=_index_add_inputs(draw, device), describe="index_add behind a graph break")


@recipe("planted.eager_low_precision_strays", targets="aten.mul")
def eager_low_precision_strays(draw, entry, case, device):
    """Eager rounds through bfloat16 (off by a lot for large values); the compiled path keeps the
    input's precision and matches a float64 reference."""

    def fn(x):
        if torch.compiler.is_compiling():
            return x * 2
        return (x.to(torch.bfloat16) * 2).to(x.dtype) + 1000.0 * (x.dtype != torch.float64)

    return Program(fn=fn, inputs={"x": _x(draw, device) + 1.5}, describe="eager strays in low precision")


@recipe("planted.wrong_when_compiled", targets="aten.mul")
def wrong_when_compiled(draw, entry, case, device):
    """Deterministic, but the compiled path computes another answer than eager and float64."""

    def fn(x):
        if torch.compiler.is_compiling():
            return x * 3
        return x * 2

    return Program(fn=fn, inputs={"x": _x(draw, device) + 1}, describe="wrong when compiled")
