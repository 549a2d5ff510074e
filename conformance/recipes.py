"""Recipes: one runnable example per documented op.

Find the recipe for an op by grepping its qualified name, e.g.
``@recipe("torch.Tensor.put_"``. Each recipe is
``def name(draw, entry, case, device) -> Program``: it draws the small
parameters of one example (shapes, dtype, a seed per tensor, the share of
duplicate indices), builds the input tensors on ``device`` and returns a
:class:`~engine.program.Program` whose ``fn`` runs the op exactly as the doc
sentence describes, with the case's keyword arguments.

Conventions shared by all recipes (see :class:`_Example`):

- The op is written once, as Python source; ``fn`` is compiled from that
  source and the same source is the ``repro``, so the reproducer cannot drift
  from what ran.
- Inputs are built from seeds (``engine.strategies.build_tensor`` /
  ``build_indices``), so a repro line rebuilds a tensor exactly.
- ``grad_inputs`` lists the differentiable float inputs only when the entry
  is about differentiation (``entry.backward``); recipes never call backward.
- Ops that draw random numbers get their randomness as an input
  (``_random_samples`` for fractional max pooling), so every run is a pure
  function of the inputs.
- Duplicate indices are *included* (at a drawn share) for ops whose result
  with duplicates is defined only by write order (``index_put`` and ``put_``
  with ``accumulate=False``, ``index_copy``, ``scatter``): the doc promises a
  deterministic algorithm (CUDA's deterministic mode sorts the indices and
  lets a fixed one win) or an error, so colliding writes are exactly what the
  promise is about. Either way the output must be bitwise identical across
  runs on the same input.
- Outputs that legitimately contain uninitialized memory (``torch.empty``,
  a growing ``resize_``) are marked ``meta["uninitialized"] = True``: they
  are deterministic only with deterministic mode on and
  ``torch.utils.deterministic.fill_uninitialized_memory`` set.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Iterable, Sequence

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from engine.entry import Entry
from engine.program import Program, recipe
from engine.strategies import (
    DUPLICATE_SHARES,
    build_indices,
    build_tensor,
    float_dtypes,
    scale_limits,
    seeds,
)

# Dtypes some CPU kernels lack in torch 2.x (CUDA has them).
_NO_HALF = (torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------
# The example builder shared by every recipe


class _Example:
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

    # -- small parameters -------------------------------------------------

    @property
    def large(self) -> bool:
        return self.limits.name == "large"

    def integer(self, lo: int, hi: int) -> int:
        """A drawn int in ``[lo, hi]`` (shrinks to ``lo``)."""
        return self.draw(st.integers(lo, max(lo, hi)))

    def side(self, lo: int = 1, hi: int | None = None) -> int:
        """A dimension length; defaults to the scale's ``max_side``."""
        return self.integer(lo, self.limits.max_side if hi is None else hi)

    def choice(self, options: Sequence[Any]) -> Any:
        """One of ``options``; shrinks towards the first."""
        return self.draw(st.sampled_from(list(options)))

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
        return self.draw(float_dtypes(classes, device=self.device, exclude=excluded))

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
        seed = self.draw(seeds())
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
        share = 0.0 if unique else (self.choice(DUPLICATE_SHARES) if duplicates is None else duplicates)
        seed = self.draw(seeds())
        t = build_indices(shape, size, seed, duplicates=share, unique=unique, device=self.device, dtype=dtype)
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

    def program(self, result: str, *, body: Sequence[str] = (), grads: Sequence[str] = (),
                meta: dict[str, Any] | None = None, note: str = "") -> Program:
        """Compile ``fn(**inputs)`` from source: ``body`` lines, then ``return result``.

        ``grads`` are the inputs to differentiate when the entry is about
        backward; they must be floating-point inputs.
        """
        params = ", ".join(self.inputs)
        src_lines = [f"def fn({params}):"] + [f"    {line}" for line in body] + [f"    return {result}"]
        fn_src = "\n".join(src_lines)
        namespace: dict[str, Any] = {"torch": torch, "F": F, "warnings": warnings}
        exec(compile(fn_src, f"<recipe {self.entry.op}>", "exec"), namespace)
        fn = namespace["fn"]
        fn.__doc__ = fn_src
        grad_inputs: tuple[str, ...] = ()
        if self.entry.backward:
            grad_inputs = tuple(g for g in grads if self.inputs[g].is_floating_point() or self.inputs[g].is_complex())
        describe = self._describe(note)
        repro = self._repro(fn_src, grad_inputs)
        full_meta = {"source": fn_src, "kwargs": dict(self.kwargs)}
        full_meta.update(meta or {})
        return Program(fn=fn, inputs=dict(self.inputs), grad_inputs=grad_inputs, describe=describe,
                       repro=repro, meta=full_meta)

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

    def _repro(self, fn_src: str, grad_inputs: tuple[str, ...]) -> str:
        lines = ["import torch", "import torch.nn.functional as F",
                 "from engine.strategies import build_indices, build_tensor", ""]
        lines += self.lines
        lines += ["", fn_src, ""]
        for g in grad_inputs:
            lines.append(f"{g}.requires_grad_()")
        call = ", ".join(f"{n}={n}" for n in self.inputs)
        lines.append(f"out = fn({call})")
        if grad_inputs:
            lines.append(f"# then backward through out with a seeded gradient; compare {', '.join(g + '.grad' for g in grad_inputs)}")
        return "\n".join(lines)


def _ndims_for(entry: Entry, *, lo: int = 1, hi: int = 3) -> tuple[int, int]:
    """Input dimensionality allowed by the entry's qualifiers ("1d-input", "input dimension larger than one")."""
    quals = " ".join(entry.qualifiers)
    if "1d" in quals or "dim-1" in quals or "one-dim" in quals:
        return 1, 1
    if "larger" in quals or "multi" in quals or "nd-input" in quals or "gt-1" in quals:
        return max(lo, 2), max(hi, 2)
    return lo, hi


def _shape(ex: _Example, ndim: int, *, min_side: int = 1) -> tuple[int, ...]:
    return ex.spatial(ndim, mins=min_side) if ndim else ()


def _target_side(ex: _Example, lo: int = 1, *, others: int = 1) -> int:
    """Length of an indexed dimension: few targets, so duplicate indices collide.

    ``others`` is the product of the remaining sides; the whole tensor stays
    within the scale's ``max_numel``.
    """
    cap = ex.limits.max_bins if ex.large else ex.limits.max_side
    return ex.side(lo, max(lo, min(cap, ex.limits.max_numel // max(1, others))))


def _num_indices(ex: _Example, lo: int = 0) -> int:
    return ex.integer(lo, ex.limits.max_indices)


# ---------------------------------------------------------------------------
# Indexing: __getitem__, index_put, index_copy, index_add, index_select,
# index_reduce, put_, gather, scatter*, take-like ops


@recipe("torch.Tensor.__getitem__", "torch.__getitem__")
def getitem_tensor_list(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x[idx0, idx1]``: advanced indexing with a sequence of index tensors.

    Its backward is ``index_put_(accumulate=True)``; the index *pairs* repeat at
    a drawn share so gradient contributions collide. The index is written as a
    tuple: ``x[[idx0, idx1]]`` (a list) is the same op but deprecated since
    torch 2.9 because it will be read as a single tensor index.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype()
    rest = _shape(ex, ex.integer(0, 1))
    a = _target_side(ex, others=math.prod(rest))
    b = _target_side(ex, others=a * math.prod(rest))
    budget_n = max(1, ex.limits.max_numel // max(1, math.prod(rest)))
    ex.tensor("x", (a, b) + rest, dtype, contiguous=None)
    n = ex.integer(0, min(ex.limits.max_indices, budget_n))
    flat = ex.indices(None, n, a * b)
    ex.add("idx0", flat // b, f"_indices // {b}")
    ex.add("idx1", flat % b, f"_indices % {b}")
    return ex.program("x[idx0, idx1]", grads=("x",))


def _index_put_parts(ex: _Example, dtype: torch.dtype) -> tuple[int, int]:
    """``x`` plus 1 or 2 index tensors and matching ``values``; returns (k, n)."""
    k = ex.integer(1, 2)
    rest = _shape(ex, ex.integer(0, 1))
    lead: tuple[int, ...] = ()
    for _ in range(k):
        lead += (_target_side(ex, others=math.prod(lead) * math.prod(rest)),)
    ex.tensor("x", lead + rest, dtype, contiguous=None)
    n = ex.integer(0, min(ex.limits.max_indices, max(1, ex.limits.max_numel // max(1, math.prod(rest)))))
    if k == 1:
        ex.indices("idx0", n, lead[0])
    else:
        flat = ex.indices(None, n, lead[0] * lead[1])
        ex.add("idx0", flat // lead[1], f"_indices // {lead[1]}")
        ex.add("idx1", flat % lead[1], f"_indices % {lead[1]}")
    ex.tensor("values", (n,) + rest, dtype)
    return k, n


@recipe("torch.Tensor.index_put", "torch.index_put")
def index_put(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.index_put((idx0[, idx1]), values, accumulate=...)``.

    Duplicate index tuples are included at a drawn share for both cases:
    with ``accumulate=True`` they make the sums order dependent; with
    ``accumulate=False`` the winner among colliding writes is what
    deterministic mode pins down (CUDA sorts the indices stably).
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    accumulate = ex.kwarg("accumulate", (False, True))
    k, _ = _index_put_parts(ex, dtype)
    idx = "(idx0,)" if k == 1 else "(idx0, idx1)"
    return ex.program(f"x.index_put({idx}, values, accumulate={accumulate!r})", grads=("x", "values"))


@recipe("torch.Tensor.put_")
def put_(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.put_(index, source, accumulate=...)`` on the flattened ``x``; returns ``x``.

    Duplicates are included at a drawn share (see the module notes): with
    ``accumulate=False`` torch has no deterministic ``put_`` and the docs
    promise an error; with ``accumulate=True`` the sums collide.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    accumulate = ex.kwarg("accumulate", (False, True))
    shape = _shape(ex, ex.integer(1, 3))
    ex.tensor("x", shape, dtype)
    n = _num_indices(ex)
    ex.indices("index", n, math.prod(shape))
    ex.tensor("source", (n,), dtype)
    # Differentiating an in-place op on a leaf is an error: backward goes through a clone.
    target = "x.clone()" if entry.backward else "x"
    return ex.program(f"{target}.put_(index, source, accumulate={accumulate!r})", grads=("x", "source"))


def _dim_and_source(ex: _Example, dtype: torch.dtype, *, src_name: str = "source",
                    unique: bool = False) -> tuple[int, int]:
    """``x`` of 1-3 dims, a ``dim``, 1-D ``index`` into ``x.size(dim)`` and a matching source."""
    lo, hi = _ndims_for(ex.entry)
    ndim = ex.integer(lo, hi)
    dim = ex.integer(0, ndim - 1)
    shape = list(_shape(ex, ndim))
    shape[dim] = _target_side(ex, others=math.prod(shape) // shape[dim])
    ex.tensor("x", shape, dtype, contiguous=None)
    others = max(1, math.prod(shape) // shape[dim])
    n_cap = min(ex.limits.max_indices, max(1, ex.limits.max_numel // others))
    if unique:
        n_cap = min(n_cap, shape[dim])
    n = ex.integer(0, n_cap)
    ex.indices("index", n, shape[dim], unique=unique)
    src_shape = list(shape)
    src_shape[dim] = n
    ex.tensor(src_name, src_shape, dtype)
    return dim, n


@recipe("torch.Tensor.index_copy", "torch.index_copy")
def index_copy(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.index_copy(dim, index, source)``; duplicates included (the copy that wins is what is pinned down)."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    dim, _ = _dim_and_source(ex, dtype)
    ex.kwargs["dim"] = dim
    return ex.program(f"x.index_copy({dim}, index, source)", grads=("x", "source"))


@recipe("torch.index_add", "torch.index_add_")
def index_add(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.index_add(x, dim, index, source, alpha=...)`` (in place for ``index_add_``); duplicates collide."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    dim, _ = _dim_and_source(ex, dtype)
    alpha = ex.kwarg("alpha", (1, 2))
    ex.kwargs["dim"] = dim
    if entry.op.endswith("_"):
        # The in-place spelling; differentiating an in-place op on a leaf is
        # an error, so backward goes through a clone.
        target = "x.clone()" if entry.backward else "x"
        return ex.program(f"{target}.index_add_({dim}, index, source, alpha={alpha!r})", grads=("x", "source"))
    return ex.program(f"torch.index_add(x, {dim}, index, source, alpha={alpha!r})", grads=("x", "source"))


@recipe("torch.Tensor.index_reduce")
def index_reduce(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.index_reduce(dim, index, source, reduce, include_self=...)``; values near 1 so ``prod`` stays finite."""
    ex = _Example(draw, entry, case, device)
    # torch 2.13's CPU index_reduce(reduce='prod') fails an internal assert
    # (Loops.h "iter.ninputs() == traits::arity") for float16/bfloat16 when
    # the slices have size-1 dims, e.g. x of shape (7, 1, 1): a torch bug,
    # not a determinism finding, so those dtypes are left to other devices.
    dtype = ex.dtype(("floating",), exclude_on_cpu=_NO_HALF)
    reduce = ex.kwarg("reduce", ("prod", "mean", "amax", "amin"))
    include_self = ex.kwarg("include_self", (True, False))
    lo, hi = (0.5, 1.5) if reduce == "prod" else (-10, 10)
    lo_q, hi_q = _ndims_for(entry)
    ndim = ex.integer(lo_q, hi_q)
    dim = ex.integer(0, ndim - 1)
    shape = list(_shape(ex, ndim))
    shape[dim] = _target_side(ex, others=math.prod(shape) // shape[dim])
    ex.tensor("x", shape, dtype, low=lo, high=hi, contiguous=None)
    others = max(1, math.prod(shape) // shape[dim])
    n = ex.integer(0, min(ex.limits.max_indices, max(1, ex.limits.max_numel // others)))
    ex.indices("index", n, shape[dim])
    src_shape = list(shape)
    src_shape[dim] = n
    ex.tensor("source", src_shape, dtype, low=lo, high=hi)
    ex.kwargs["dim"] = dim
    return ex.program(f"x.index_reduce({dim}, index, source, {reduce!r}, include_self={include_self!r})",
                      grads=("x", "source"))


@recipe("torch.index_select")
def index_select(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.index_select(x, dim, index)``; its backward is ``index_add`` over duplicate indices."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    lo, hi = _ndims_for(entry)
    ndim = ex.integer(lo, hi)
    dim = ex.integer(0, ndim - 1)
    shape = list(_shape(ex, ndim))
    shape[dim] = _target_side(ex, others=math.prod(shape) // shape[dim])
    ex.tensor("x", shape, dtype, contiguous=None)
    others = max(1, math.prod(shape) // shape[dim])
    n = ex.integer(0, min(ex.limits.max_indices, max(1, ex.limits.max_numel // others)))
    ex.indices("index", n, shape[dim])
    ex.kwargs["dim"] = dim
    return ex.program(f"torch.index_select(x, {dim}, index)", grads=("x",))


def _gather_scatter_parts(ex: _Example, dtype: torch.dtype, *, src: bool, low: float = -10,
                          high: float = 10) -> int:
    """``x``, a ``dim``, an ``index`` no larger than ``x`` off ``dim`` and (optionally) ``src`` shaped like it."""
    lo, hi = _ndims_for(ex.entry)
    ndim = ex.integer(lo, hi)
    dim = ex.integer(0, ndim - 1)
    shape = list(_shape(ex, ndim))
    shape[dim] = _target_side(ex, others=math.prod(shape) // shape[dim])
    ex.tensor("x", shape, dtype, low=low, high=high, contiguous=None)
    idx_shape = [ex.side(1, s) for s in shape]
    others = max(1, math.prod(idx_shape) // idx_shape[dim])
    idx_shape[dim] = ex.integer(0, min(ex.limits.max_indices, max(1, ex.limits.max_numel // others)))
    ex.indices("index", idx_shape, shape[dim])
    if src:
        ex.tensor("src", idx_shape, dtype, low=low, high=high)
    ex.kwargs["dim"] = dim
    return dim


@recipe("torch.gather")
def gather(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.gather(x, dim, index)``; its backward is ``scatter_add`` over duplicate indices."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    dim = _gather_scatter_parts(ex, dtype, src=False)
    return ex.program(f"torch.gather(x, {dim}, index)", grads=("x",))


@recipe("torch.Tensor.scatter")
def scatter(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.scatter(dim, index, src)`` with a tensor ``src`` (a scalar ``value`` if the case gives one).

    Duplicate targets are included: which write wins is exactly what the
    deterministic implementation fixes.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    use_value = "value" in case and "src-tensor" not in entry.qualifiers
    dim = _gather_scatter_parts(ex, dtype, src=not use_value)
    extra = ""
    if "reduce" in case:
        extra = f", reduce={ex.kwarg('reduce', ('add',))!r}"
    if use_value:
        value = ex.kwarg("value", (1.5,))
        return ex.program(f"x.scatter({dim}, index, {value!r}{extra})", grads=("x",))
    return ex.program(f"x.scatter({dim}, index, src{extra})", grads=("x", "src"))


@recipe("torch.Tensor.scatter_add_", "torch.scatter_add_")
def scatter_add_(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.scatter_add_(dim, index, src)``; duplicates collide. Backward goes through ``x.clone()``."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    dim = _gather_scatter_parts(ex, dtype, src=True)
    target = "x.clone()" if entry.backward else "x"
    return ex.program(f"{target}.scatter_add_({dim}, index, src)", grads=("x", "src"))


@recipe("torch.Tensor.scatter_reduce")
def scatter_reduce(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.scatter_reduce(dim, index, src, reduce, include_self=...)``; values near 1 for ``prod``."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    reduce = ex.kwarg("reduce", ("sum", "prod", "mean", "amax", "amin"))
    include_self = ex.kwarg("include_self", (True, False))
    lo, hi = (0.5, 1.5) if reduce == "prod" else (-10, 10)
    dim = _gather_scatter_parts(ex, dtype, src=True, low=lo, high=hi)
    return ex.program(f"x.scatter_reduce({dim}, index, src, {reduce!r}, include_self={include_self!r})",
                      grads=("x", "src"))


# ---------------------------------------------------------------------------
# Counting, sorting, scanning


@recipe("torch.bincount")
def bincount(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.bincount(input, weights, minlength)``: many values over few bins; float weights when given."""
    ex = _Example(draw, entry, case, device)
    bins = ex.side(1, ex.limits.max_bins)
    n = _num_indices(ex)
    ex.indices("input", n, bins)
    minlength = ex.kwarg("minlength", (0, bins + 1))
    if entry.weights_given:
        dtype = ex.dtype(("floating",))
        ex.tensor("weights", (n,), dtype)
        return ex.program(f"torch.bincount(input, weights, minlength={minlength!r})")
    return ex.program(f"torch.bincount(input, minlength={minlength!r})")


@recipe("torch.histc")
def histc(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.histc(x, bins, min, max)``: few bins; ``min == max == 0`` means the data's range."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    n = ex.integer(1, ex.limits.max_numel)
    ex.tensor("x", (n,), dtype, contiguous=None)
    bins = ex.kwarg("bins", (4, 1, 16, 100))
    lo, hi = ex.choice(((0, 0), (-5, 5), (-10, 10)))
    ex.kwargs.update(min=lo, max=hi)
    return ex.program(f"torch.histc(x, bins={bins}, min={lo}, max={hi})")


@recipe("torch.cumsum")
def cumsum(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.cumsum(x, dim)`` over floating (or the entry's) dtypes; long scans on the large scale."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "complex"))
    ndim = ex.integer(1, 3)
    shape = _shape(ex, ndim)
    dim = ex.integer(0, ndim - 1)
    ex.tensor("x", shape, dtype, contiguous=None)
    ex.kwargs["dim"] = dim
    return ex.program(f"torch.cumsum(x, dim={dim})", grads=("x",))


def _tied_values(ex: _Example, shape: Sequence[int], dtype: torch.dtype) -> None:
    """Input ``x`` for order statistics; often integer valued, so ties test the index output."""
    ties = ex.choice((True, False))
    if ties:
        ex.tensor("x", shape, dtype, low=0, high=3, contiguous=None, integral=True)
    else:
        ex.tensor("x", shape, dtype, contiguous=None)


@recipe("torch.median")
def median(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.median(x, dim)`` -> (values, indices) when the entry is about the indices output, else ``torch.median(x)``."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.integer(1, 3)
    shape = _shape(ex, ndim)
    _tied_values(ex, shape, dtype)
    with_indices = entry.indices_output or "dim" in case
    if with_indices:
        dim = ex.kwarg("dim", tuple(range(ndim)))
        keepdim = ex.kwarg("keepdim", (False, True))
        return ex.program(f"torch.median(x, dim={dim}, keepdim={keepdim!r})", grads=("x",))
    return ex.program("torch.median(x)", grads=("x",))


@recipe("torch.kthvalue")
def kthvalue(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.kthvalue(x, k, dim)`` -> (values, indices), with ties."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.integer(1, 3)
    shape = _shape(ex, ndim)
    dim = ex.integer(0, ndim - 1)
    k = ex.integer(1, shape[dim])
    _tied_values(ex, shape, dtype)
    ex.kwargs.update(k=k, dim=dim)
    return ex.program(f"torch.kthvalue(x, {k}, dim={dim})", grads=("x",))


@recipe("torch.repeat_interleave")
def repeat_interleave(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.repeat_interleave(x, repeats, dim)``; its backward sums the repeated slices (an index_add)."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.integer(1, 3)
    dim = ex.integer(0, ndim - 1)
    shape = _shape(ex, ndim)
    ex.tensor("x", shape, dtype, contiguous=None)
    max_rep = 4 if not ex.large else 8
    ex.tensor("repeats", (shape[dim],), torch.int64, low=0, high=max_rep)
    ex.kwargs["dim"] = dim
    return ex.program(f"torch.repeat_interleave(x, repeats, dim={dim})", grads=("x",))


# ---------------------------------------------------------------------------
# Matrix products


@recipe("torch.bmm")
def bmm(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.bmm(a, b)``; with ``sparse_dense`` the first operand is a sparse COO tensor."""
    ex = _Example(draw, entry, case, device)
    cap = 64 if ex.large else 6
    b, n, m, p = ex.side(1, 8 if ex.large else 3), ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    if entry.sparse_dense:
        dtype = ex.dtype(("floating",), exclude_on_cpu=_NO_HALF)
        density = ex.choice((0.5, 0.1, 1.0))
        dense = ex.tensor("_a_dense", (b, n, m), dtype, is_input=False)
        mask = ex.tensor("_a_mask", (b, n, m), torch.float32, low=0, high=1, is_input=False)
        a = (dense * (mask < density).to(dtype)).to_sparse().coalesce()
        ex.add("a", a, f"(_a_dense * (_a_mask < {density!r}).to({dtype})).to_sparse().coalesce()")
        ex.tensor("b", (b, m, p), dtype)
        ex.kwargs["density"] = density
        return ex.program("torch.bmm(a, b)", grads=("b",))
    dtype = ex.dtype(("floating",))
    ex.tensor("a", (b, n, m), dtype, contiguous=None)
    ex.tensor("b", (b, m, p), dtype)
    return ex.program("torch.bmm(a, b)", grads=("a", "b"))


@recipe("torch.mm")
def mm(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.mm(a, b)`` (a cuBLAS entry: nondeterministic without a fixed workspace config)."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    cap = 512 if ex.large else 8
    n, m, p = ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    ex.tensor("a", (n, m), dtype, contiguous=None)
    ex.tensor("b", (m, p), dtype)
    return ex.program("torch.mm(a, b)", grads=("a", "b"))


@recipe("torch.mv")
def mv(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.mv(a, v)`` (a cuBLAS entry)."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    cap = 1024 if ex.large else 8
    n, m = ex.side(1, cap), ex.side(1, cap)
    ex.tensor("a", (n, m), dtype, contiguous=None)
    ex.tensor("v", (m,), dtype)
    return ex.program("torch.mv(a, v)", grads=("a", "v"))


# ---------------------------------------------------------------------------
# Uninitialized memory: torch.empty, resize_


@recipe("torch.empty", "torch.empty_like", "torch.empty_strided", "torch.empty_permuted")
def empty(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.empty(shape, dtype=..., device=...)`` and its ``_like``/``_strided``/``_permuted`` kin.

    Deterministic only with deterministic mode on and
    ``fill_uninitialized_memory`` set (NaN for floats, the max for ints).
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    shape = _shape(ex, ex.integer(1, 3))
    dev = str(ex.device)
    ex.kwargs.update(shape=shape, dtype=dtype)
    meta = {"uninitialized": True}
    name = entry.short_op
    if name == "empty_like":
        ex.tensor("x", shape, dtype)
        return ex.program("torch.empty_like(x)", meta=meta)
    if name == "empty_strided":
        # Column-major strides: a layout other than the default one.
        stride, step = [], 1
        for side in shape:
            stride.append(step)
            step *= max(1, side)
        ex.kwargs["stride"] = tuple(stride)
        return ex.program(f"torch.empty_strided({shape!r}, {tuple(stride)!r}, dtype={dtype}, device={dev!r})",
                          meta=meta)
    if name == "empty_permuted":
        order = tuple(reversed(range(len(shape))))
        ex.kwargs["physical_layout"] = order
        return ex.program(f"torch.empty_permuted({shape!r}, {order!r}, dtype={dtype}, device={dev!r})", meta=meta)
    return ex.program(f"torch.empty({shape!r}, dtype={dtype}, device={dev!r})", meta=meta)


@recipe("torch.Tensor.resize_")
def resize_(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.resize_(new_shape)``, growing or shrinking.

    Quantized (``entry.quantized``): ``x`` is quantized inside ``fn`` (so the
    input stays a plain float tensor the runner can clone on any device) and
    the result is returned as ``(int_repr, q_scale, q_zero_point)``. New
    elements of a grown tensor are uninitialized memory: torch cannot fill it
    for quantized tensors, hence the documented error.
    """
    ex = _Example(draw, entry, case, device)
    old = _shape(ex, ex.integer(1, 2))
    grow = ex.kwarg("grow", (True, False))
    old_numel = math.prod(old)
    if grow:
        new_numel = ex.integer(old_numel + 1, old_numel + ex.limits.max_side * 4)
    else:
        new_numel = ex.integer(0, old_numel - 1) if old_numel > 1 else 0
    new_shape = (new_numel,)
    meta = {"uninitialized": grow}
    if entry.quantized:
        ex.tensor("x", old, torch.float32, low=-5, high=5)
        scale, zero_point = ex.choice((0.1, 0.05)), ex.integer(0, 10)
        ex.kwargs.update(new_shape=new_shape, scale=scale, zero_point=zero_point)
        body = [
            "with warnings.catch_warnings():",
            "    warnings.simplefilter('ignore')  # quantized creation is deprecated, still supported",
            f"    q = torch.quantize_per_tensor(x, {scale!r}, {zero_point}, torch.quint8)",
            f"q.resize_({new_shape!r})",
        ]
        result = ("(q.int_repr(), torch.tensor(q.q_scale(), dtype=torch.float64), "
                  "torch.tensor(q.q_zero_point(), dtype=torch.int64))")
        return ex.program(result, body=body, meta=meta)
    dtype = ex.dtype(("floating", "integer"))
    ex.tensor("x", old, dtype)
    ex.kwargs["new_shape"] = new_shape
    return ex.program(f"x.resize_({new_shape!r})", meta=meta)


# ---------------------------------------------------------------------------
# Convolutions


def _conv(draw, entry: Entry, case: dict, device: torch.device, n: int, transposed: bool) -> Program:
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    groups = ex.choice((1, 2))
    c_in = groups * ex.channels(2, 4)
    c_out = groups * ex.channels(2, 4)
    k = tuple(ex.integer(1, 3) for _ in range(n))
    stride = ex.integer(1, 2)
    dilation = ex.integer(1, 2)
    batch = ex.batch()
    if transposed:
        padding = min(ex.integer(0, 1), min(dilation * (kk - 1) for kk in k) // 2)
        output_padding = ex.integer(0, max(stride, dilation) - 1)
        mins = 1
    else:
        padding = ex.integer(0, 1)
        output_padding = 0
        mins = tuple(max(1, dilation * (kk - 1) + 1 - 2 * padding) for kk in k)
    sides = ex.spatial(n, mins=mins, budget=ex.limits.max_numel // (batch * c_in * (stride ** n)))
    ex.tensor("x", (batch, c_in) + sides, dtype, low=-2, high=2, contiguous=None)
    if transposed:
        ex.tensor("weight", (c_in, c_out // groups) + k, dtype, low=-1, high=1)
    else:
        ex.tensor("weight", (c_out, c_in // groups) + k, dtype, low=-1, high=1)
    ex.tensor("bias", (c_out,), dtype, low=-1, high=1)
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding, dilation=dilation, groups=groups)
    if transposed:
        ex.kwargs["output_padding"] = output_padding
        call = (f"F.conv_transpose{n}d(x, weight, bias, stride={stride}, padding={padding}, "
                f"output_padding={output_padding}, groups={groups}, dilation={dilation})")
    else:
        call = f"F.conv{n}d(x, weight, bias, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})"
    # Functional form with the weights as inputs: every run uses identical
    # parameters, and gradients w.r.t. weight and bias are compared too.
    return ex.program(call, grads=("x", "weight", "bias"))


@recipe("torch.nn.Conv1d")
def conv1d(draw, entry, case, device):
    """``nn.Conv1d`` as ``F.conv1d(x, weight, bias, ...)`` with seeded weights."""
    return _conv(draw, entry, case, device, 1, transposed=False)


@recipe("torch.nn.Conv2d")
def conv2d(draw, entry, case, device):
    """``nn.Conv2d`` as ``F.conv2d(x, weight, bias, ...)`` with seeded weights."""
    return _conv(draw, entry, case, device, 2, transposed=False)


@recipe("torch.nn.Conv3d")
def conv3d(draw, entry, case, device):
    """``nn.Conv3d`` as ``F.conv3d(x, weight, bias, ...)`` with seeded weights."""
    return _conv(draw, entry, case, device, 3, transposed=False)


@recipe("torch.nn.ConvTranspose1d")
def conv_transpose1d(draw, entry, case, device):
    """``nn.ConvTranspose1d`` as ``F.conv_transpose1d(x, weight, bias, ...)``."""
    return _conv(draw, entry, case, device, 1, transposed=True)


@recipe("torch.nn.ConvTranspose2d")
def conv_transpose2d(draw, entry, case, device):
    """``nn.ConvTranspose2d`` as ``F.conv_transpose2d(x, weight, bias, ...)``."""
    return _conv(draw, entry, case, device, 2, transposed=True)


@recipe("torch.nn.ConvTranspose3d")
def conv_transpose3d(draw, entry, case, device):
    """``nn.ConvTranspose3d`` as ``F.conv_transpose3d(x, weight, bias, ...)``."""
    return _conv(draw, entry, case, device, 3, transposed=True)


# ---------------------------------------------------------------------------
# Pooling


def _pool_input(ex: _Example, n: int, *, mins: int | Sequence[int] = 1, dtype: torch.dtype,
                batched: bool | None = None, integral: bool = False) -> tuple[int, ...]:
    """``x`` of shape ``(N, C, *spatial)`` (or unbatched ``(C, *spatial)``)."""
    if batched is None:
        batched = ex.choice((True, False))
    lead = (ex.batch(), ex.channels()) if batched else (ex.channels(),)
    sides = ex.spatial(n, mins=mins, budget=ex.limits.max_numel // math.prod(lead))
    shape = lead + sides
    if integral:
        ex.tensor("x", shape, dtype, low=0, high=4, contiguous=None, integral=True)
    else:
        ex.tensor("x", shape, dtype, contiguous=None)
    return shape


def _window(ex: _Example, sides: Sequence[int]) -> tuple[int, int, int]:
    """kernel, stride and padding for a window that fits ``sides``; stride < kernel overlaps windows."""
    k = ex.integer(1, min(3, min(sides)))
    stride = ex.integer(1, k)
    padding = ex.integer(0, k // 2)
    return k, stride, padding


@recipe("torch.nn.AvgPool3d")
def avg_pool3d(draw, entry, case, device):
    """``nn.AvgPool3d`` as ``F.avg_pool3d``; overlapping windows make backward contributions collide."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",), exclude_on_cpu=_NO_HALF)
    shape = _pool_input(ex, 3, dtype=dtype)
    k, stride, padding = _window(ex, shape[-3:])
    ceil_mode = ex.kwarg("ceil_mode", (False, True))
    count_include_pad = ex.kwarg("count_include_pad", (True, False))
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding)
    return ex.program(f"F.avg_pool3d(x, {k}, stride={stride}, padding={padding}, ceil_mode={ceil_mode!r}, "
                      f"count_include_pad={count_include_pad!r})", grads=("x",))


def _max_pool(draw, entry, case, device, n: int) -> Program:
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    shape = _pool_input(ex, n, dtype=dtype, integral=ex.choice((False, True)))
    k, stride, padding = _window(ex, shape[-n:])
    dilation = 1
    ceil_mode = ex.kwarg("ceil_mode", (False, True))
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding, dilation=dilation)
    return ex.program(f"F.max_pool{n}d(x, {k}, stride={stride}, padding={padding}, dilation={dilation}, "
                      f"ceil_mode={ceil_mode!r})", grads=("x",))


@recipe("torch.nn.MaxPool2d")
def max_pool2d(draw, entry, case, device):
    """``nn.MaxPool2d`` as ``F.max_pool2d``; overlapping windows and ties."""
    return _max_pool(draw, entry, case, device, 2)


@recipe("torch.nn.MaxPool3d")
def max_pool3d(draw, entry, case, device):
    """``nn.MaxPool3d`` as ``F.max_pool3d``; overlapping windows and ties."""
    return _max_pool(draw, entry, case, device, 3)


def _adaptive(draw, entry, case, device, kind: str, n: int) -> Program:
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    shape = _pool_input(ex, n, dtype=dtype)
    # Output sides larger than the input make windows overlap.
    out = tuple(ex.integer(1, s + 2) for s in shape[-n:])
    ex.kwargs["output_size"] = out
    return ex.program(f"F.adaptive_{kind}_pool{n}d(x, {out!r})", grads=("x",))


@recipe("torch.nn.AdaptiveAvgPool2d")
def adaptive_avg_pool2d(draw, entry, case, device):
    """``nn.AdaptiveAvgPool2d`` as ``F.adaptive_avg_pool2d``."""
    return _adaptive(draw, entry, case, device, "avg", 2)


@recipe("torch.nn.AdaptiveAvgPool3d")
def adaptive_avg_pool3d(draw, entry, case, device):
    """``nn.AdaptiveAvgPool3d`` as ``F.adaptive_avg_pool3d``."""
    return _adaptive(draw, entry, case, device, "avg", 3)


@recipe("torch.nn.AdaptiveMaxPool2d")
def adaptive_max_pool2d(draw, entry, case, device):
    """``nn.AdaptiveMaxPool2d`` as ``F.adaptive_max_pool2d``."""
    return _adaptive(draw, entry, case, device, "max", 2)


def _fractional(draw, entry, case, device, n: int) -> Program:
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    k = ex.integer(1, 3)
    out = tuple(ex.integer(1, 4 if not ex.large else 32) for _ in range(n))
    # Fractional pooling needs output + kernel - 1 < input on every side.
    shape = _pool_input(ex, n, mins=tuple(o + k for o in out), dtype=dtype, batched=True)
    # The pooling regions come from random samples; passing them as an input
    # makes the op a pure function of its inputs.
    ex.tensor("samples", (shape[0], shape[1], n), dtype, low=0, high=0.999)
    ex.kwargs.update(kernel_size=k, output_size=out)
    return ex.program(f"F.fractional_max_pool{n}d(x, {k}, output_size={out!r}, _random_samples=samples)",
                      grads=("x",))


@recipe("torch.nn.FractionalMaxPool2d")
def fractional_max_pool2d(draw, entry, case, device):
    """``nn.FractionalMaxPool2d`` as ``F.fractional_max_pool2d`` with explicit ``_random_samples``."""
    return _fractional(draw, entry, case, device, 2)


@recipe("torch.nn.FractionalMaxPool3d")
def fractional_max_pool3d(draw, entry, case, device):
    """``nn.FractionalMaxPool3d`` as ``F.fractional_max_pool3d`` with explicit ``_random_samples``."""
    return _fractional(draw, entry, case, device, 3)


def _max_unpool(draw, entry, case, device, n: int) -> Program:
    """Unpool what ``max_pool`` produced; ``stride < kernel`` gives duplicate indices.

    Duplicates from overlapping windows point at the same input element, so
    colliding writes carry equal values and the result is well defined.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    batch, ch = ex.batch(), ex.channels()
    k = ex.integer(1, 3)
    stride = ex.integer(1, k)
    sides = ex.spatial(n, mins=k, budget=ex.limits.max_numel // (batch * ch))
    pooled = ex.tensor("_pooled", (batch, ch) + sides, dtype, is_input=False)
    values, idx = getattr(F, f"max_pool{n}d")(pooled, k, stride=stride, return_indices=True)
    pool_src = f"F.max_pool{n}d(_pooled, {k}, stride={stride}, return_indices=True)"
    ex.add("values", values, f"{pool_src}[0]")
    ex.add("indices", idx, f"{pool_src}[1]")
    ex.kwargs.update(kernel_size=k, stride=stride, output_size=sides)
    return ex.program(f"F.max_unpool{n}d(values, indices, {k}, stride={stride}, output_size={sides!r})",
                      grads=("values",))


@recipe("torch.nn.MaxUnpool1d")
def max_unpool1d(draw, entry, case, device):
    """``nn.MaxUnpool1d`` as ``F.max_unpool1d`` on ``max_pool1d`` output."""
    return _max_unpool(draw, entry, case, device, 1)


@recipe("torch.nn.MaxUnpool2d")
def max_unpool2d(draw, entry, case, device):
    """``nn.MaxUnpool2d`` as ``F.max_unpool2d`` on ``max_pool2d`` output."""
    return _max_unpool(draw, entry, case, device, 2)


@recipe("torch.nn.MaxUnpool3d")
def max_unpool3d(draw, entry, case, device):
    """``nn.MaxUnpool3d`` as ``F.max_unpool3d`` on ``max_pool3d`` output."""
    return _max_unpool(draw, entry, case, device, 3)


# ---------------------------------------------------------------------------
# Padding


def _pad(draw, entry, case, device, n: int, mode: str) -> Program:
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    batched = ex.choice((True, False))
    lead = (ex.batch(), ex.channels()) if batched else (ex.channels(),)
    sides = ex.spatial(n, mins=2, budget=ex.limits.max_numel // math.prod(lead))
    ex.tensor("x", lead + sides, dtype, contiguous=None)
    # F.pad lists (left, right) for the last dimension first. Reflection needs
    # pad < side; padding wider than the input makes many outputs share a
    # source element, which is what collides in backward.
    pads: list[int] = []
    for s in reversed(sides):
        cap = s - 1 if mode == "reflect" else s
        cap = min(cap, 16)
        pads += [ex.integer(0, cap), ex.integer(0, cap)]
    ex.kwargs["pad"] = tuple(pads)
    return ex.program(f"F.pad(x, {tuple(pads)!r}, mode={mode!r})", grads=("x",))


@recipe("torch.nn.ReflectionPad1d")
def reflection_pad1d(draw, entry, case, device):
    """``nn.ReflectionPad1d`` as ``F.pad(x, pad, mode='reflect')``."""
    return _pad(draw, entry, case, device, 1, "reflect")


@recipe("torch.nn.ReflectionPad2d")
def reflection_pad2d(draw, entry, case, device):
    """``nn.ReflectionPad2d`` as ``F.pad(x, pad, mode='reflect')``."""
    return _pad(draw, entry, case, device, 2, "reflect")


@recipe("torch.nn.ReflectionPad3d")
def reflection_pad3d(draw, entry, case, device):
    """``nn.ReflectionPad3d`` as ``F.pad(x, pad, mode='reflect')``."""
    return _pad(draw, entry, case, device, 3, "reflect")


@recipe("torch.nn.ReplicationPad1d")
def replication_pad1d(draw, entry, case, device):
    """``nn.ReplicationPad1d`` as ``F.pad(x, pad, mode='replicate')``."""
    return _pad(draw, entry, case, device, 1, "replicate")


@recipe("torch.nn.ReplicationPad2d")
def replication_pad2d(draw, entry, case, device):
    """``nn.ReplicationPad2d`` as ``F.pad(x, pad, mode='replicate')``."""
    return _pad(draw, entry, case, device, 2, "replicate")


@recipe("torch.nn.ReplicationPad3d")
def replication_pad3d(draw, entry, case, device):
    """``nn.ReplicationPad3d`` as ``F.pad(x, pad, mode='replicate')``."""
    return _pad(draw, entry, case, device, 3, "replicate")


# ---------------------------------------------------------------------------
# Losses


@recipe("torch.nn.NLLLoss")
def nll_loss(draw, entry, case, device):
    """``nn.NLLLoss`` as ``F.nll_loss`` on a spatial input ``(N, C, H, W)``.

    The spatial (``nll_loss2d``) kernel with ``reduction='mean'|'sum'`` is the
    one that accumulates with atomics on CUDA, so that is the path drawn.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    n, c = ex.batch(), ex.channels(4, 16)
    h, w = ex.spatial(2, budget=ex.limits.max_numel // (n * c))
    # Contiguous on purpose: torch 2.13's CPU nll_loss2d backward rejects a
    # non-contiguous input ("grad_input must be contiguous").
    ex.tensor("x", (n, c, h, w), dtype, low=-4, high=0)
    ex.tensor("target", (n, h, w), torch.int64, low=0, high=c - 1)
    reduction = ex.kwarg("reduction", ("mean", "sum"))
    weighted = ex.choice((False, True))
    if weighted:
        ex.tensor("weight", (c,), dtype, low=0.5, high=2)
        return ex.program(f"F.nll_loss(x, target, weight=weight, reduction={reduction!r})", grads=("x",))
    return ex.program(f"F.nll_loss(x, target, reduction={reduction!r})", grads=("x",))


@recipe("torch.nn.CTCLoss")
def ctc_loss(draw, entry, case, device):
    """``nn.CTCLoss`` as ``F.ctc_loss`` on log-probabilities ``(T, N, C)``.

    Padded int64 targets keep it on torch's own kernel rather than cuDNN's.
    Targets are at most ``T // 2`` long so every alignment is feasible.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",), exclude=_NO_HALF)
    t = ex.side(2, 200 if ex.large else 12)
    n = ex.batch()
    c = ex.side(2, 32 if ex.large else 6)
    s = ex.integer(1, max(1, t // 2))
    logits = ex.tensor("_logits", (t, n, c), dtype, low=-3, high=3, is_input=False)
    ex.add("log_probs", logits.log_softmax(2), "_logits.log_softmax(2)")
    ex.tensor("targets", (n, s), torch.int64, low=1, high=c - 1)
    ex.tensor("input_lengths", (n,), torch.int64, low=max(1, 2 * s), high=t)
    ex.tensor("target_lengths", (n,), torch.int64, low=0, high=s)
    reduction = ex.kwarg("reduction", ("mean", "sum", "none"))
    return ex.program(f"F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction={reduction!r})",
                      grads=("log_probs",))


# ---------------------------------------------------------------------------
# Embeddings


@recipe("torch.nn.Embedding")
def embedding(draw, entry, case, device):
    """``nn.Embedding`` as ``F.embedding(idx, weight)``; duplicate ids collide in the weight gradient."""
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    num = _target_side(ex)
    dim = ex.side(1, 64 if ex.large else 4)
    ex.tensor("weight", (num, dim), dtype)
    shape = (ex.side(1, 4), ex.integer(0, max(1, ex.limits.max_indices // 4)))
    ex.indices("idx", shape, num)
    padding_idx = case.get("padding_idx")
    extra = f", padding_idx={padding_idx!r}" if padding_idx is not None else ""
    if padding_idx is not None:
        ex.kwargs["padding_idx"] = padding_idx
    return ex.program(f"F.embedding(idx, weight{extra})", grads=("weight",))


@recipe("torch.nn.EmbeddingBag")
def embedding_bag(draw, entry, case, device):
    """``nn.EmbeddingBag`` as ``F.embedding_bag(idx, weight, offsets, mode=...)``.

    Bags are given by sorted ``offsets`` starting at 0 (some bags empty);
    ``per_sample_weights`` are drawn for ``mode='sum'``.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    mode = ex.kwarg("mode", ("mean", "sum", "max"))
    num = _target_side(ex)
    dim = ex.side(1, 64 if ex.large else 4)
    ex.tensor("weight", (num, dim), dtype)
    n = _num_indices(ex)
    ex.indices("idx", n, num)
    bags = ex.integer(1, 8 if not ex.large else 1024)
    seed = ex.draw(seeds())
    cuts = torch.randint(0, n + 1, (bags - 1,), generator=torch.Generator().manual_seed(seed))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), cuts.sort().values]).to(ex.device)
    ex.add("offsets", offsets,
           f"torch.cat([torch.zeros(1, dtype=torch.int64), torch.randint(0, {n + 1}, ({bags - 1},), "
           f"generator=torch.Generator().manual_seed({seed})).sort().values]).to({str(ex.device)!r})")
    if mode == "sum" and ex.choice((False, True)):
        ex.tensor("per_sample_weights", (n,), dtype, low=0, high=2)
        return ex.program(f"F.embedding_bag(idx, weight, offsets, mode={mode!r}, "
                          "per_sample_weights=per_sample_weights)", grads=("weight", "per_sample_weights"))
    return ex.program(f"F.embedding_bag(idx, weight, offsets, mode={mode!r})", grads=("weight",))


# ---------------------------------------------------------------------------
# Sampling: grid_sample, interpolate


@recipe("torch.nn.functional.grid_sample")
def grid_sample(draw, entry, case, device):
    """``F.grid_sample(x, grid, mode, padding_mode, align_corners)``.

    A dense output grid over a small input makes many samples share input
    pixels, which is what collides in backward.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    mode = ex.kwarg("mode", ("bilinear", "nearest", "bicubic"))
    padding_mode = ex.kwarg("padding_mode", ("zeros", "border", "reflection"))
    align_corners = ex.kwarg("align_corners", (False, True))
    n_sp = 2 if mode == "bicubic" else ex.choice((2, 3))
    n, c = ex.batch(), ex.channels()
    sides = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * c))
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    out = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * n_sp))
    ex.tensor("grid", (n,) + out + (n_sp,), dtype, low=-1.1, high=1.1)
    return ex.program(f"F.grid_sample(x, grid, mode={mode!r}, padding_mode={padding_mode!r}, "
                      f"align_corners={align_corners!r})", grads=("x", "grid"))


_INTERP_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


@recipe("torch.nn.functional.interpolate")
def interpolate(draw, entry, case, device):
    """``F.interpolate(x, size=..., mode=..., align_corners=...)``; input rank follows the mode.

    Upsampling makes several outputs read the same inputs: their gradients
    collide in backward.
    """
    ex = _Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    mode = ex.kwarg("mode", ("bilinear", "linear", "bicubic", "trilinear", "nearest", "area"))
    n_sp = _INTERP_RANK.get(mode) or ex.choice((1, 2, 3))
    n, c = ex.batch(), ex.channels()
    sides = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * c * 4 ** n_sp))
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    size = tuple(ex.integer(1, 3 * s) for s in sides)
    ex.kwargs["size"] = size
    if mode in _INTERP_RANK:
        align_corners = ex.kwarg("align_corners", (False, True))
        call = f"F.interpolate(x, size={size!r}, mode={mode!r}, align_corners={align_corners!r})"
    else:
        call = f"F.interpolate(x, size={size!r}, mode={mode!r})"
    return ex.program(call, grads=("x",))
