"""The recipe kit: the example builder and the helpers every recipe module uses.

A recipe is ``def name(draw, entry, case, device) -> Program``. It builds one
:class:`Example`, draws the small parameters (shapes, dtype, seeds, the share
of duplicate indices), adds the input tensors, and ends with
:meth:`Example.program`, handing over the *op function*: a plain module-level
Python function that runs the documented call::

    def put_op(x, index, source, *, accumulate):
        return x.put_(index, source, accumulate=accumulate)

    @recipe("torch.Tensor.put_")
    def put_(draw, entry, case, device):
        ex = Example(draw, entry, case, device)
        ...
        return ex.program(put_op, grads=("x", "source"), accumulate=accumulate)

The op function's positional parameters are the example's inputs (by name);
its keyword-only parameters are the constants the recipe drew, bound with
``functools.partial``. The reproducer is the input-building lines, the op
function's own source (``inspect.getsource``) and the call with those
constants, so it is exactly what ran. To keep it self-contained an op function
may use only ``torch``, ``F`` (``torch.nn.functional``), ``math`` and
``warnings`` from its module (or import what it needs inside its body), and
must not be a closure or a lambda; :meth:`Example.program` rejects anything
else when the recipe runs.
"""
from __future__ import annotations

import contextlib
import contextvars
import dis
import functools
import inspect
import math
import random
import textwrap
import types
import warnings
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from detconf.engine.comparison import Writes, admissible_set
from detconf.engine.entry import Entry
from detconf.engine.program import Program
from detconf.engine.strategies import (SEED_RANGE, DUPLICATE_SHARES, build_indices, build_tensor, float_dtypes, scale_limits,
                               seeds, threshold_limit, threshold_sides)

__all__ = [
    "NO_HALF", "REPRO_IMPORTS", "Example", "StableDraws", "ThresholdCover", "stable_draws", "OpFunctionError", "forward_backward", "index_put_parts", "ndims_for",
    "nn_module_op", "num_indices",
    "op_source", "pool_input", "shape", "target_side", "window",
]

# Dtypes some CPU kernels lack in torch 2.x (CUDA has them).
NO_HALF = (torch.float16, torch.bfloat16)

# What a reproducer starts with; op functions may use exactly these names.
REPRO_IMPORTS = (
    "import math",
    "import warnings",
    "",
    "import torch",
    "import torch.nn.functional as F",
    "from detconf.engine.strategies import build_indices, build_tensor",
)
_OP_GLOBALS = {"torch": torch, "F": F, "math": math, "warnings": warnings}


class StableDraws:
    """Under torch.compile, the examples of a case keep to one *shape class*.

    A compiled function is reused across examples only while Dynamo's guards hold (dtypes,
    ranks, sizes, layout, the constants of the call); every new class is a new compilation,
    and past Dynamo's recompile limit the function silently runs in eager. So in a compiled
    case the *class draws* of an example (dtype, sizes, integer and option choices, layout)
    take one value for the whole case, picked from the draw's options by a generator seeded
    with the case (the same in every process and on every machine), not Hypothesis's simplest
    example, which would pin every case to size-1 tensors. Hypothesis still makes every draw,
    so its choice sequence and constraints are the same in every example and replay. Values,
    seeds and the share of duplicate indices vary from example to example, so the runs still
    differ in what exposes nondeterminism. Each documented condition (the case's keyword
    values) has its own class; the call forms of a case share it, so a second form (``nn.Module``
    after ``nn.functional``) hands Inductor the graph it already compiled and its graph cache
    answers, instead of a second class compiled again.
    """

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._memo: dict[tuple[Any, ...], tuple[str, Any]] = {}

    def draw(self, key: tuple[Any, ...], take: Callable[[], Any], options: Sequence[Any]) -> Any:
        """The class value at ``key``; ``take()`` makes Hypothesis's draw all the same."""
        drawn = take()
        spelled = repr(list(options))
        kept = self._memo.get(key)
        if kept is None:
            value = self._rng.choice(list(options))
            self._memo[key] = (spelled, value)
            return value
        # Another draw at this place (the recipe took another branch): keep what Hypothesis drew.
        return kept[1] if kept[0] == spelled else drawn


@functools.lru_cache(maxsize=None)
def integer_constraints(lo: int, hi: int) -> dict[str, Any] | None:
    """The constraints ``st.integers(lo, hi)`` draws its one choice with in the installed
    Hypothesis (range, weights, shrink target), read once per range from a draw on a fixed
    choice sequence; None where that cannot be read (the kit then draws through the strategy)."""
    try:
        from hypothesis.internal.conjecture.data import ConjectureData

        data = ConjectureData.for_choices([lo])
        value = data.draw(st.integers(lo, hi))
        nodes = list(data.nodes)
    except Exception:  # noqa: BLE001 - another Hypothesis: the strategy's own draw stays
        return None
    if value != lo or len(nodes) != 1 or getattr(nodes[0], "type", None) != "integer":
        return None
    constraints = dict(nodes[0].constraints)
    if (constraints.get("min_value"), constraints.get("max_value")) != (lo, hi):
        return None
    return constraints


class ThresholdCover:
    """Which sides of its kernels' thresholds a case's examples have taken.

    In the stress and perturbation tiers a recipe whose kernel switches algorithm by a count
    (``THRESHOLDS`` in ``conformance/recipes.py``) sizes its examples at the counts just below and
    just above each switch (:func:`engine.strategies.threshold_sides`). Each side is taken by one
    example before any is drawn, so a case with as many examples as sides has every side (the
    stress profile's 2 examples cover the one switch per op, device and compile setting that the
    data holds). The side is a function of the case's example order, the same in every process
    of the perturbation tier; Hypothesis still makes the draw, so the choice sequence keeps its
    shape.
    """

    def __init__(self, *, compiled: bool) -> None:
        self.compiled = compiled
        self._taken: dict[tuple[Any, ...], set[int]] = {}

    def side(self, key: tuple[Any, ...], sides: Sequence[int], take: Callable[[], int]) -> int:
        """The side for the next example at ``key``: the first not yet taken, else ``take()``'s."""
        drawn = take()
        taken = self._taken.setdefault(key, set())
        left = [s for s in sides if s not in taken]
        value = left[0] if left else drawn
        taken.add(value)
        return value


_STABLE: contextvars.ContextVar[StableDraws | None] = contextvars.ContextVar("detconf_stable_draws", default=None)
_COVER: contextvars.ContextVar[ThresholdCover | None] = contextvars.ContextVar("detconf_threshold_cover", default=None)


@contextlib.contextmanager
def stable_draws(seed: int | None) -> Iterator[StableDraws | None]:
    """Keep the examples drawn inside the body to one shape class (see :class:`StableDraws`);
    ``seed=None``: no such constraint (eager). The body is one case: its examples also share a
    :class:`ThresholdCover` (a compiled case is one with a seed)."""
    cover_token = _COVER.set(ThresholdCover(compiled=seed is not None))
    try:
        if seed is None:
            yield None
            return
        stable = StableDraws(seed)
        token = _STABLE.set(stable)
        try:
            yield stable
        finally:
            _STABLE.reset(token)
    finally:
        _COVER.reset(cover_token)


class OpFunctionError(TypeError):
    """An op function whose source would not reproduce what ran (closure, lambda, foreign global)."""


# Instructions that read or write a module global (``co_names`` alone also holds attribute names).
_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})


def _global_names(code: types.CodeType) -> set[str]:
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_OPS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


@functools.cache
def op_source(op: Callable[..., Any]) -> str:
    """The op function's source, dedented, after checking it reproduces on its own."""
    name = getattr(op, "__name__", repr(op))
    if not isinstance(op, types.FunctionType) or name == "<lambda>":
        raise OpFunctionError(f"op function {name!r} must be a plain def, not {type(op).__name__} or a lambda")
    if op.__closure__:
        raise OpFunctionError(f"op function {name!r} is a closure: pass what it captures as keyword-only constants")
    if "<locals>" in op.__qualname__:
        raise OpFunctionError(f"op function {name!r} must be defined at module level")
    module_globals = op.__globals__
    for global_name in sorted(_global_names(op.__code__)):
        if global_name in module_globals and global_name not in _OP_GLOBALS:
            raise OpFunctionError(
                f"op function {name!r} uses the module global {global_name!r}; op functions may use only "
                f"{', '.join(sorted(_OP_GLOBALS))} (or import inside their body)")
        if global_name in _OP_GLOBALS and module_globals.get(global_name) is not _OP_GLOBALS[global_name]:
            raise OpFunctionError(f"op function {name!r}: {global_name!r} in its module is not the kit's")
    return textwrap.dedent(inspect.getsource(op)).rstrip()


class Example:
    """Collects the inputs of one example together with the Python lines that rebuild them."""

    def __init__(self, draw: Any, entry: Entry, case: dict[str, Any], device: torch.device) -> None:
        self.draw = draw
        self.entry = entry
        self.case = dict(case)
        self.device = torch.device(device)
        self.limits = scale_limits()
        self.inputs: dict[str, torch.Tensor] = {}
        self.lines: list[str] = []
        self.kwargs: dict[str, Any] = {}
        self.unreachable: str | None = None
        self._stable = _STABLE.get()
        # The choice sequence's own integer draw, where the draw function offers it (the
        # harness's does): what st.integers and st.sampled_from draw, without a strategy's
        # bookkeeping around each draw, which costs several times the draw.
        self._draw_integer: Callable[[int, int], int] | None = getattr(draw, "draw_integer", None)
        self._class_draws = 0
        self._class_key = tuple(sorted((k, repr(v)) for k, v in self.case.items() if k != "form"))
        if "form" in self.case:
            self.kwargs["form"] = self.case["form"]

    @property
    def form(self) -> str | None:
        """The call form this example runs in (declared with ``@recipe(..., forms=...)``), if any."""
        return self.case.get("form")

    def module_program(self, module: str, *, grads: Sequence[str] = (), note: str = "", args: Sequence[str] = ("x",),
                       params: Sequence[str] = (), **options: Any) -> Program:
        """The ``nn.Module`` form: ``torch.nn.<module>(**options)`` called on the inputs named in
        ``args``, its parameters named in ``params`` taken from the inputs (``torch.func.functional_call``),
        so that every run uses identical parameters and their gradients are compared."""
        return self.program(nn_module_op, grads=grads, note=note, module=module, options=options, args=tuple(args),
                            params=tuple(params))

    # -- small parameters -------------------------------------------------

    @property
    def large(self) -> bool:
        return self.limits.name in ("large", "stress")

    @property
    def stress(self) -> bool:
        """The stress tier: every size at the top of its range, the most colliding indices,
        overlapping windows (see :func:`engine.strategies.stress_scale`)."""
        return self.limits.name == "stress"

    def _int(self, lo: int, hi: int) -> int:
        """``st.integers(lo, hi)``'s draw: the same choice, straight from the choice sequence with
        the constraints the strategy draws it with in this Hypothesis (:func:`integer_constraints`:
        above 127 values the strategy weights the bounds)."""
        if self._draw_integer is not None:
            constraints = integer_constraints(lo, hi)
            if constraints is not None:
                return self._draw_integer(**constraints)
        return self.draw(st.integers(lo, hi))

    def threshold_side(self, quantity: str, switches: Iterable[dict[str, Any]]) -> int | None:
        """In the stress and perturbation tiers, a ``quantity`` (elements, indices) just below or
        just above one of ``switches`` (the op's ``THRESHOLDS`` records) that applies here: its
        device type, eager or compiled as the case is, its sides within
        :func:`engine.strategies.threshold_limit`. None in the normal tier or where none applies
        (nothing is drawn then, so the normal tier's examples are unchanged)."""
        limit = threshold_limit()
        if limit is None:
            return None
        cover = _COVER.get()
        compiled = cover.compiled if cover is not None else False
        sides = [side for sw in switches
                 if sw["quantity"] == quantity and sw["device"] == self.device.type
                 and (sw["compile"] != "eager") == compiled
                 for side in threshold_sides(int(sw["at"])) if side <= limit]
        if not sides:
            return None
        take = lambda: self._pick(sides)  # noqa: E731
        if cover is None:
            return take()
        key = (self.entry.op, quantity, tuple(sorted((k, repr(v)) for k, v in self.case.items())))
        return cover.side(key, sides, take)

    def seed(self) -> int:
        """A seed for a ``torch.Generator``: ``seeds()``'s draw (see :meth:`_int`)."""
        return self._int(SEED_RANGE[0], SEED_RANGE[1]) if self._draw_integer is not None else self.draw(seeds())

    def _pick(self, options: Sequence[Any]) -> Any:
        """``st.sampled_from(options)``'s draw: an index from the choice sequence (none for a
        single option, which the strategy takes as given)."""
        if len(options) == 1:
            return options[0]
        if self._draw_integer is not None and options:
            return options[self._draw_integer(0, len(options) - 1)]
        return self.draw(st.sampled_from(options))

    def _class_draw(self, take: Callable[[], Any], options: Sequence[Any]) -> Any:
        """A draw that decides the example's shape class (one value per compiled case)."""
        if self._stable is None:
            return take()
        self._class_draws += 1
        return self._stable.draw((self._class_key, self._class_draws), take, options)

    def integer(self, lo: int, hi: int) -> int:
        """A drawn int in ``[lo, hi]`` (shrinks to ``lo``); in the stress tier, ``hi``."""
        hi = max(lo, hi)
        if self.stress:
            return hi
        return self._class_draw(lambda: self._int(lo, hi), range(lo, hi + 1))

    def ndim(self, lo: int, hi: int) -> int:
        """A number of dimensions in ``[lo, hi]``; in the stress tier the fewest (one long axis
        carries the whole budget: the most writes per destination, the longest scan)."""
        return lo if self.stress else self.integer(lo, hi)

    def side(self, lo: int = 1, hi: int | None = None) -> int:
        """A dimension length; defaults to the scale's ``max_side``."""
        return self.integer(lo, self.limits.max_side if hi is None else hi)

    def choice(self, options: Sequence[Any]) -> Any:
        """One of ``options``; shrinks towards the first."""
        options = list(options)
        return self._class_draw(lambda: self._pick(options), options)

    def kwarg(self, name: str, options: Sequence[Any]) -> Any:
        """The case's value for ``name`` if the entry fixes it, else a drawn one. Recorded for ``describe``."""
        value = self.case[name] if name in self.case else self.choice(options)
        self.kwargs[name] = value
        return value

    def dtype(self, default: Iterable[str] = ("floating",), *, exclude: Iterable[torch.dtype] = (),
              exclude_on_cpu: Iterable[torch.dtype] = ()) -> torch.dtype:
        """A dtype of the entry's dtype classes (or ``default``), float32 first.

        Backward entries keep to differentiable (floating, complex) classes.
        """
        classes = tuple(self.entry.dtypes) or tuple(default)
        if self.entry.backward:
            classes = tuple(c for c in classes if c in ("floating", "complex")) or ("floating",)
        excluded = tuple(exclude) + (tuple(exclude_on_cpu) if self.device.type == "cpu" else ())
        options = _dtype_options(classes, self.device, excluded)
        return self._class_draw(lambda: self._pick(options), options)

    def spatial(self, n: int, *, mins: Sequence[int] | int = 1, budget: int | None = None) -> tuple[int, ...]:
        """``n`` sides, each at least its minimum, with about ``budget`` elements at most."""
        if isinstance(mins, int):
            mins = (mins,) * n
        budget = self.limits.max_numel if budget is None else max(1, budget)
        cap = max(1, min(self.limits.max_side, int(round(budget ** (1.0 / n))))) if n else 1
        return tuple(self.side(m, max(m, cap)) for m in mins)

    def batch(self) -> int:
        return self.side(1, 4 if self.large else 2)

    def channels(self, hi_small: int = 3, hi_large: int = 8) -> int:
        return self.side(1, hi_large if self.large else hi_small)

    # -- tensors -------------------------------------------------------------

    def tensor(self, name: str, shape: Sequence[int], dtype: torch.dtype, *, low: float = -10,
               high: float = 10, contiguous: bool | None = True, integral: bool = False,
               is_input: bool = True) -> torch.Tensor:
        """A seeded input tensor. ``contiguous=None`` draws the layout (contiguous first).

        ``integral=True`` draws integer values in ``[low, high]`` and casts them to
        ``dtype``: ties, for sort-like ops whose index outputs depend on tie-breaking.
        ``is_input=False`` only records how to rebuild it, for tensors that
        other inputs are derived from.
        """
        shape = tuple(int(s) for s in shape)
        if contiguous is None:
            contiguous = self.choice((True, False))
        seed = self.seed()
        dev = str(self.device)
        if integral:
            t = build_tensor(shape, torch.int64, seed, device=self.device, low=low, high=high,
                             contiguous=contiguous).to(dtype)
            src = (f"build_tensor({shape!r}, torch.int64, {seed}, device={dev!r}, low={low!r}, high={high!r}, "
                   f"contiguous={contiguous!r}).to({dtype})")
        else:
            t = build_tensor(shape, dtype, seed, device=self.device, low=low, high=high, contiguous=contiguous)
            src = (f"build_tensor({shape!r}, {dtype}, {seed}, device={dev!r}, low={low!r}, high={high!r}, "
                   f"contiguous={contiguous!r})")
        if not is_input:
            self.lines.append(f"{name} = {src}")
            return t
        return self.add(name, t, src)

    def indices(self, name: str | None, shape: Sequence[int] | int, size: int, *, unique: bool = False,
                duplicates: float | None = None, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        """Seeded indices into ``[0, size)``; the duplicate share is drawn unless given.

        ``name=None`` builds the tensor without making it an input (for
        tensors derived from it, such as ``divmod`` pairs).
        """
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(int(s) for s in shape)
        # The duplicate share exposes nondeterminism and changes no guard: drawn afresh every example.
        if duplicates is None:
            duplicates = max(DUPLICATE_SHARES) if self.stress else self._pick(DUPLICATE_SHARES)
        share = 0.0 if unique else duplicates
        seed = self.seed()
        t = build_indices(shape, size, seed, duplicates=share, unique=unique, device=self.device, dtype=dtype)
        if t.numel() == 0:
            self.unreachable = "empty index: the kernel returns before it runs"
        src = (f"build_indices({shape!r}, {size}, {seed}, duplicates={share!r}, unique={unique!r}, "
               f"device={str(self.device)!r}, dtype={dtype})")
        if name is None:
            self.lines.append(f"_indices = {src}")
            return t
        return self.add(name, t, src)

    def add(self, name: str, tensor: torch.Tensor, source: str) -> torch.Tensor:
        """Register ``tensor`` as input ``name``, rebuilt in the repro by ``source``."""
        if name in self.inputs:
            raise ValueError(f"input {name!r} added twice")
        self.inputs[name] = tensor
        self.lines.append(f"{name} = {source}")
        return tensor

    # -- the program ---------------------------------------------------------

    def program(self, op: Callable[..., Any], *, grads: Sequence[str] = (), meta: dict[str, Any] | None = None,
                note: str = "", compare: Sequence[Any] = (), **constants: Any) -> Program:
        """The runnable example: ``op(**inputs, **constants)``.

        ``op`` is a module-level function (see the module notes); ``constants``
        are its keyword-only arguments. ``grads`` are the inputs to
        differentiate when the entry is about backward; they must be
        floating-point or complex inputs. ``compare``: the outputs' comparison rules
        (:mod:`engine.comparison`) against references other than the runs.
        """
        source = op_source(op)
        call = f"{op.__name__}(" + ", ".join(
            [f"{n}={n}" for n in self.inputs] + [f"{k}={_literal(v)}" for k, v in constants.items()]) + ")"
        fn = functools.partial(op, **constants) if constants else op
        grad_inputs: tuple[str, ...] = ()
        if self.entry.backward:
            grad_inputs = tuple(g for g in grads if self.inputs[g].is_floating_point() or self.inputs[g].is_complex())
        full_meta = {"source": f"{source}\n\nout = {call}", "kwargs": dict(self.kwargs), "constants": dict(constants),
                     "op_function": op.__name__}
        if self.unreachable:
            full_meta["unreachable"] = self.unreachable
        full_meta.update(meta or {})
        return Program(fn=fn, inputs=dict(self.inputs), grad_inputs=grad_inputs, describe=self._describe(note),
                       repro=self._repro(source, call, grad_inputs), meta=full_meta, compare=tuple(compare))

    def _describe(self, note: str) -> str:
        parts = []
        for name, t in self.inputs.items():
            layout = "" if t.is_contiguous() or t.is_sparse else " non-contiguous"
            kind = " sparse" if t.is_sparse else (" quantized" if t.is_quantized else "")
            parts.append(f"{name}: {str(t.dtype).replace('torch.', '')}{list(t.shape)}{kind}{layout}")
        text = f"{self.entry.op} on {self.device}: " + (", ".join(parts) if parts else "no inputs")
        if self.kwargs:
            text += "; " + ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        if note:
            text += f"; {note}"
        return text

    def _repro(self, source: str, call: str, grad_inputs: tuple[str, ...]) -> str:
        lines = list(REPRO_IMPORTS) + [""] + self.lines + ["", "", source, "", ""]
        for g in grad_inputs:
            lines.append(f"{g}.requires_grad_()")
        lines.append(f"out = {call}")
        if grad_inputs:
            lines.append(f"# then backward through out with a seeded gradient; compare "
                         f"{', '.join(g + '.grad' for g in grad_inputs)}")
        return "\n".join(lines)


@functools.lru_cache(maxsize=256)
def _dtype_options(classes: tuple[str, ...], device: torch.device, excluded: tuple[torch.dtype, ...]) -> tuple[torch.dtype, ...]:
    """What ``float_dtypes(classes, device=device, exclude=excluded)`` samples from, in order (read
    once per combination: the strategy is built, and checks its arguments, on every call)."""
    return tuple(float_dtypes(classes, device=device, exclude=excluded).elements)


def _literal(value: Any) -> str:
    """Python source for a constant: dtypes and devices spelled as torch names, the rest by ``repr``."""
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


# ---------------------------------------------------------------------------
# Shape helpers shared by recipe modules


def nn_module_op(*, module, options, args, params, **inputs):
    """A ``torch.nn`` module, built and called (the ``nn.Module`` call form); its parameters are inputs."""
    m = getattr(torch.nn, module)(**options)
    call_args = tuple(inputs[a] for a in args)
    if params:
        return torch.func.functional_call(m, {p: inputs[p] for p in params}, call_args)
    return m(*call_args)


def forward_backward(forward: Any, backward: Any) -> Callable[[Entry, dict], Any]:
    """Targets that depend on the entry: ``forward`` for an entry about the op itself,
    ``backward`` for one about differentiating it."""

    def pick(entry: Entry, case: dict) -> Any:
        return backward if entry.backward else forward

    return pick


def ndims_for(entry: Entry, *, lo: int = 1, hi: int = 3) -> tuple[int, int]:
    """Input dimensionality allowed by the entry's qualifiers ("1d-input", "input dimension larger than one")."""
    quals = " ".join(entry.qualifiers)
    if "1d" in quals or "dim-1" in quals or "one-dim" in quals:
        return 1, 1
    if "larger" in quals or "multi" in quals or "nd-input" in quals or "gt-1" in quals:
        return max(lo, 2), max(hi, 2)
    return lo, hi


def shape(ex: Example, ndim: int, *, min_side: int = 1) -> tuple[int, ...]:
    """``ndim`` drawn sides within the scale's budget (``()`` for a scalar)."""
    return ex.spatial(ndim, mins=min_side) if ndim else ()


def target_side(ex: Example, lo: int = 1, *, others: int = 1) -> int:
    """Length of an indexed dimension: few targets, so duplicate indices collide.

    ``others`` is the product of the remaining sides; the whole tensor stays
    within the scale's ``max_numel``.
    """
    cap = ex.limits.max_bins if ex.large else ex.limits.max_side
    return ex.side(lo, max(lo, min(cap, ex.limits.max_numel // max(1, others))))


def num_indices(ex: Example, lo: int = 1) -> int:
    """How many indices: at least one, since on an empty index kernels return before they run."""
    return ex.integer(lo, ex.limits.max_indices)


def index_put_parts(ex: Example, dtype: torch.dtype) -> tuple[int, int]:
    """``x`` plus 1 or 2 index tensors (``idx0``, ``idx1``) and matching ``values``; returns (k, n)."""
    k = 1 if ex.stress else ex.integer(1, 2)  # stress: one index tensor over few targets
    rest = shape(ex, ex.ndim(0, 1))
    lead: tuple[int, ...] = ()
    for _ in range(k):
        lead += (target_side(ex, others=math.prod(lead) * math.prod(rest)),)
    ex.tensor("x", lead + rest, dtype, contiguous=None)
    n = ex.integer(1, min(ex.limits.max_indices, max(1, ex.limits.max_numel // max(1, math.prod(rest)))))
    if k == 1:
        ex.indices("idx0", n, lead[0])
    else:
        flat = ex.indices(None, n, lead[0] * lead[1])
        ex.add("idx0", flat // lead[1], f"_indices // {lead[1]}")
        ex.add("idx1", flat % lead[1], f"_indices % {lead[1]}")
    ex.tensor("values", (n,) + rest, dtype)
    return k, n


def pool_input(ex: Example, n: int, *, mins: int | Sequence[int] = 1, dtype: torch.dtype,
               batched: bool | None = None, integral: bool = False) -> tuple[int, ...]:
    """``x`` of shape ``(N, C, *spatial)`` (or unbatched ``(C, *spatial)``)."""
    if batched is None:
        batched = ex.choice((True, False))
    lead = (ex.batch(), ex.channels()) if batched else (ex.channels(),)
    sides = ex.spatial(n, mins=mins, budget=ex.limits.max_numel // math.prod(lead))
    full = lead + sides
    if integral:
        ex.tensor("x", full, dtype, low=0, high=4, contiguous=None, integral=True)
    else:
        ex.tensor("x", full, dtype, contiguous=None)
    return full


def window(ex: Example, sides: Sequence[int]) -> tuple[int, int, int]:
    """kernel, stride and padding for a window that fits ``sides``; stride < kernel overlaps windows."""
    k = ex.integer(1, min(3, min(sides)))
    if ex.stress:  # the widest window at stride 1: every input under k**d overlapping windows
        return k, 1, k // 2
    stride = ex.integer(1, k)
    padding = ex.integer(0, k // 2)
    return k, stride, padding


# ---------------------------------------------------------------------------
# Duplicate writes: where the docs leave the winner undefined (engine.comparison)

#: Why a recipe of an op whose duplicate writes have an undefined winner compares by admissible set.
UNDEFINED_WINNER = ("the docs leave the result of duplicate writes undefined: another device or algorithm may let "
                    "another write win")


def _ids(x: torch.Tensor) -> torch.Tensor:
    """Each element's flat position, in ``x``'s shape, on the CPU."""
    return torch.arange(x.numel()).reshape(x.shape)


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu()


def index_copy_writes(*, dim: int, x: str = "x", index: str = "index", source: str = "source") -> Any:
    """``x.index_copy(dim, index, source)``: slice ``j`` of ``source`` goes to slice ``index[j]``."""

    def writes(inputs):
        positions = _ids(inputs[x]).index_select(dim, _cpu(inputs[index]))
        return {"out": Writes(positions, _cpu(inputs[source]))}

    return admissible_set(writes, UNDEFINED_WINNER)


def index_put_writes(*, x: str = "x", indices: Sequence[str] = ("idx0",), values: str = "values") -> Any:
    """``x.index_put(tuple(indices), values)``: ``values`` (broadcast) go to ``x[indices]``."""

    def writes(inputs):
        positions = _ids(inputs[x])[tuple(_cpu(inputs[name]) for name in indices)]
        return {"out": Writes(positions, torch.broadcast_to(_cpu(inputs[values]), positions.shape))}

    return admissible_set(writes, UNDEFINED_WINNER)


def scatter_writes(*, dim: int, x: str = "x", index: str = "index", src: str = "src") -> Any:
    """``x.scatter(dim, index, src)``: ``src[i]`` (over ``index``'s shape) goes to the position
    ``index`` names along ``dim``."""

    def writes(inputs):
        idx = _cpu(inputs[index])
        positions = _ids(inputs[x]).gather(dim, idx)
        values = _cpu(inputs[src])[tuple(slice(0, s) for s in idx.shape)]
        return {"out": Writes(positions, values)}

    return admissible_set(writes, UNDEFINED_WINNER)


def put_writes(*, x: str = "x", index: str = "index", source: str = "source") -> Any:
    """``x.put_(index, source)`` on the flattened ``x`` (negative indices count from the end)."""

    def writes(inputs):
        n = max(1, inputs[x].numel())
        return {"out": Writes(_cpu(inputs[index]).reshape(-1) % n, _cpu(inputs[source]).reshape(-1))}

    return admissible_set(writes, UNDEFINED_WINNER)
