"""Recipes: one runnable example per documented op.

Find the recipe for an op by grepping its qualified name, e.g.
``@recipe("torch.Tensor.put_"``. Each recipe is
``def name(draw, entry, case, device) -> Program``: it draws the small
parameters of one example (shapes, dtype, a seed per tensor, the share of
duplicate indices), builds the input tensors on ``device`` and returns a
:class:`~engine.program.Program` whose ``fn`` runs the op exactly as the doc
sentence describes, with the case's keyword arguments.

Conventions shared by all recipes (the builder and the shared helpers are in
:mod:`conformance.kit`):

- The op is a plain module-level *op function* right above its recipe, e.g.
  ``def put_op(x, index, source, *, accumulate, clone)``: its positional
  parameters are the example's inputs, its keyword-only parameters the
  constants the recipe drew. ``Example.program(op, **constants)`` binds the
  constants, and the reproducer is the op function's own source plus that
  call, so it cannot drift from what ran. Op functions use only ``torch``,
  ``F``, ``math`` and ``warnings`` from this module.
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
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from detconf.conformance.kit import (
    NO_HALF,
    Example,
    forward_backward,
    index_copy_writes,
    index_put_parts,
    index_put_writes,
    ndims_for,
    num_indices,
    pool_input,
    put_writes,
    scatter_writes,
    shape,
    target_side,
    window,
)
from detconf.engine.comparison import runs_only
from detconf.engine.entry import Entry
from detconf.engine.program import Program, recipe
from detconf.engine.trace import Targets

# Targets (engine.trace): the ATen operators each sentence is about, declared on each recipe.
# Reach is judged on the operators dispatched below autograd: composite ops show up as what
# they decompose into (adaptive average pooling to 1x1 as ``mean``), and torch.nn.functional's
# own routing is visible (the decompositions it picks for CUDA in deterministic mode); a
# backend library chosen inside a kernel is not (cuDNN inside ``convolution``).
_CONV = forward_backward("aten.convolution", "aten.convolution_backward")
# A sentence naming a torch.nn module covers the module and its functional form.
_MODULE_FORMS = ("nn.Module", "nn.functional")


# ---------------------------------------------------------------------------
# Indexing: __getitem__, index_put, index_copy, index_add, index_select,
# index_reduce, put_, gather, scatter*, take-like ops


def getitem_op(x, idx0, idx1):
    return x[idx0, idx1]


@recipe("torch.Tensor.__getitem__", "torch.__getitem__",
        targets=forward_backward("aten.index", ("aten.index_put", "aten.index_put_", "aten._index_put_impl_")))
def getitem_tensor_list(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x[idx0, idx1]``: advanced indexing with a sequence of index tensors.

    Its backward is ``index_put_(accumulate=True)``; the index *pairs* repeat at
    a drawn share so gradient contributions collide. The index is written as a
    tuple: ``x[[idx0, idx1]]`` (a list) is the same op but deprecated since
    torch 2.9 because it will be read as a single tensor index.
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype()
    rest = shape(ex, ex.integer(0, 1))
    a = target_side(ex, others=math.prod(rest))
    b = target_side(ex, others=a * math.prod(rest))
    budget_n = max(1, ex.limits.max_numel // max(1, math.prod(rest)))
    ex.tensor("x", (a, b) + rest, dtype, contiguous=None)
    n = ex.integer(1, min(ex.limits.max_indices, budget_n))
    flat = ex.indices(None, n, a * b)
    ex.add("idx0", flat // b, f"_indices // {b}")
    ex.add("idx1", flat % b, f"_indices % {b}")
    return ex.program(getitem_op, grads=("x",))


def index_put_op(x, idx0, values, *, accumulate):
    return x.index_put((idx0,), values, accumulate=accumulate)


def index_put_pair_op(x, idx0, idx1, values, *, accumulate):
    return x.index_put((idx0, idx1), values, accumulate=accumulate)


def index_put_inplace_op(x, idx0, values, *, accumulate):
    return x.clone().index_put_((idx0,), values, accumulate=accumulate)


def torch_index_put_op(x, idx0, values, *, accumulate):
    return torch.index_put(x, (idx0,), values, accumulate=accumulate)


@recipe("torch.Tensor.index_put", "torch.index_put",
        targets=("aten.index_put", "aten.index_put_", "aten._index_put_impl_"),
        forms=("Tensor.index_put", "Tensor.index_put_", "torch.index_put"))
def index_put(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.index_put((idx0[, idx1]), values, accumulate=...)``.

    Duplicate index tuples are included at a drawn share for both cases:
    with ``accumulate=True`` they make the sums order dependent; with
    ``accumulate=False`` the winner among colliding writes is what
    deterministic mode pins down (CUDA sorts the indices stably).
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    accumulate = ex.kwarg("accumulate", (False, True))
    k, _ = index_put_parts(ex, dtype)
    compare = () if accumulate else (index_put_writes(indices=("idx0", "idx1")[:k]),)
    if k == 1 and ex.form == "Tensor.index_put_":
        return ex.program(index_put_inplace_op, grads=("x", "values"), compare=compare, accumulate=accumulate)
    if k == 1 and ex.form == "torch.index_put":
        return ex.program(torch_index_put_op, grads=("x", "values"), compare=compare, accumulate=accumulate)
    op = index_put_op if k == 1 else index_put_pair_op
    return ex.program(op, grads=("x", "values"), compare=compare, accumulate=accumulate)


def put_op(x, index, source, *, accumulate, clone):
    """``clone``: differentiating an in-place op on a leaf is an error, so backward goes through a copy."""
    return (x.clone() if clone else x).put_(index, source, accumulate=accumulate)


def put_method_op(x, index, source, *, accumulate):
    return x.put(index, source, accumulate=accumulate)


def torch_put_op(x, index, source, *, accumulate):
    return torch.put(x, index, source, accumulate=accumulate)


@recipe("torch.Tensor.put_", targets=("aten.put_", "aten.put"), forms=("Tensor.put_", "Tensor.put", "torch.put"))
def put_(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.put_(index, source, accumulate=...)`` on the flattened ``x``; returns ``x``.

    Duplicates are included at a drawn share (see the module notes): with
    ``accumulate=False`` torch has no deterministic ``put_`` and the docs
    promise an error; with ``accumulate=True`` the sums collide.
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    accumulate = ex.kwarg("accumulate", (False, True))
    size = (ex.limits.max_bins,) if ex.stress else shape(ex, ex.integer(1, 3))  # stress: few targets
    ex.tensor("x", size, dtype)
    n = num_indices(ex)
    ex.indices("index", n, math.prod(size))
    ex.tensor("source", (n,), dtype)
    compare = () if accumulate else (put_writes(),)
    if ex.form == "Tensor.put":
        return ex.program(put_method_op, grads=("x", "source"), compare=compare, accumulate=accumulate)
    if ex.form == "torch.put":
        return ex.program(torch_put_op, grads=("x", "source"), compare=compare, accumulate=accumulate)
    return ex.program(put_op, grads=("x", "source"), compare=compare, accumulate=accumulate, clone=entry.backward)


def _dim_and_source(ex: Example, dtype: torch.dtype, *, src_name: str = "source",
                    unique: bool = False) -> tuple[int, int]:
    """``x`` of 1-3 dims, a ``dim``, 1-D ``index`` into ``x.size(dim)`` and a matching source."""
    lo, hi = ndims_for(ex.entry)
    ndim = ex.ndim(lo, hi)
    dim = ex.integer(0, ndim - 1)
    size = list(shape(ex, ndim))
    size[dim] = target_side(ex, others=math.prod(size) // size[dim])
    ex.tensor("x", size, dtype, contiguous=None)
    others = max(1, math.prod(size) // size[dim])
    n_cap = min(ex.limits.max_indices, max(1, ex.limits.max_numel // others))
    if unique:
        n_cap = min(n_cap, size[dim])
    n = ex.integer(1, n_cap)
    ex.indices("index", n, size[dim], unique=unique)
    src_size = list(size)
    src_size[dim] = n
    ex.tensor(src_name, src_size, dtype)
    return dim, n


def index_copy_op(x, index, source, *, dim):
    return x.index_copy(dim, index, source)


def index_copy_inplace_op(x, index, source, *, dim):
    return x.clone().index_copy_(dim, index, source)


def torch_index_copy_op(x, index, source, *, dim):
    return torch.index_copy(x, dim, index, source)


@recipe("torch.Tensor.index_copy", "torch.index_copy",
        forms=("Tensor.index_copy", "Tensor.index_copy_", "torch.index_copy"),
        targets=("aten.index_copy", "aten.index_copy_"))
def index_copy(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.index_copy(dim, index, source)``; duplicates included (the copy that wins is what is pinned down)."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    dim, _ = _dim_and_source(ex, dtype)
    ex.kwargs["dim"] = dim
    op = {"Tensor.index_copy_": index_copy_inplace_op, "torch.index_copy": torch_index_copy_op}.get(ex.form, index_copy_op)
    return ex.program(op, grads=("x", "source"), compare=(index_copy_writes(dim=dim),), dim=dim)


def index_add_op(x, index, source, *, dim, alpha):
    return torch.index_add(x, dim, index, source, alpha=alpha)


def index_add_inplace_op(x, index, source, *, dim, alpha, clone):
    """``clone``: differentiating an in-place op on a leaf is an error, so backward goes through a copy."""
    return (x.clone() if clone else x).index_add_(dim, index, source, alpha=alpha)


def index_add_method_op(x, index, source, *, dim, alpha):
    return x.index_add(dim, index, source, alpha=alpha)


@recipe("torch.index_add", "torch.index_add_",
        targets=("aten.index_add", "aten.index_add_"),
        forms=("torch.index_add", "Tensor.index_add", "Tensor.index_add_"))
def index_add(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.index_add(x, dim, index, source, alpha=...)`` (in place for ``index_add_``); duplicates collide."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    dim, _ = _dim_and_source(ex, dtype)
    alpha = ex.kwarg("alpha", (1, 2))
    ex.kwargs["dim"] = dim
    form = ex.form or ("Tensor.index_add_" if entry.op.endswith("_") else "torch.index_add")
    if form == "Tensor.index_add_":
        return ex.program(index_add_inplace_op, grads=("x", "source"), dim=dim, alpha=alpha, clone=entry.backward)
    if form == "Tensor.index_add":
        return ex.program(index_add_method_op, grads=("x", "source"), dim=dim, alpha=alpha)
    return ex.program(index_add_op, grads=("x", "source"), dim=dim, alpha=alpha)


def index_reduce_op(x, index, source, *, dim, reduce, include_self):
    return x.index_reduce(dim, index, source, reduce, include_self=include_self)


def index_reduce_inplace_op(x, index, source, *, dim, reduce, include_self):
    return x.clone().index_reduce_(dim, index, source, reduce, include_self=include_self)


@recipe("torch.Tensor.index_reduce",
        forms=("Tensor.index_reduce", "Tensor.index_reduce_"),
        targets=("aten.index_reduce", "aten.index_reduce_"))
def index_reduce(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.index_reduce(dim, index, source, reduce, include_self=...)``; values near 1 so ``prod`` stays finite."""
    ex = Example(draw, entry, case, device)
    # torch 2.13's CPU index_reduce(reduce='prod') fails an internal assert
    # (Loops.h "iter.ninputs() == traits::arity") for float16/bfloat16 when
    # the slices have size-1 dims, e.g. x of shape (7, 1, 1): a torch bug,
    # not a determinism finding, so those dtypes are left to other devices.
    dtype = ex.dtype(("floating",), exclude_on_cpu=NO_HALF)
    reduce = ex.kwarg("reduce", ("prod", "mean", "amax", "amin"))
    include_self = ex.kwarg("include_self", (True, False))
    lo, hi = (0.5, 1.5) if reduce == "prod" else (-10, 10)
    lo_q, hi_q = ndims_for(entry)
    ndim = ex.ndim(lo_q, hi_q)
    dim = ex.integer(0, ndim - 1)
    size = list(shape(ex, ndim))
    size[dim] = target_side(ex, others=math.prod(size) // size[dim])
    ex.tensor("x", size, dtype, low=lo, high=hi, contiguous=None)
    others = max(1, math.prod(size) // size[dim])
    n = ex.integer(1, min(ex.limits.max_indices, max(1, ex.limits.max_numel // others)))
    ex.indices("index", n, size[dim])
    src_size = list(size)
    src_size[dim] = n
    ex.tensor("source", src_size, dtype, low=lo, high=hi)
    ex.kwargs["dim"] = dim
    op = index_reduce_inplace_op if ex.form == "Tensor.index_reduce_" else index_reduce_op
    return ex.program(op, grads=("x", "source"), dim=dim, reduce=reduce, include_self=include_self)


def index_select_op(x, index, *, dim):
    return torch.index_select(x, dim, index)


def index_select_method_op(x, index, *, dim):
    return x.index_select(dim, index)


@recipe("torch.index_select",
        forms=("torch.index_select", "Tensor.index_select"),
        targets=forward_backward("aten.index_select", ("aten.index_add", "aten.index_add_", "aten.index_select_backward")))
def index_select(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.index_select(x, dim, index)``; its backward is ``index_add`` over duplicate indices."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    lo, hi = ndims_for(entry)
    ndim = ex.ndim(lo, hi)
    dim = ex.integer(0, ndim - 1)
    size = list(shape(ex, ndim))
    size[dim] = target_side(ex, others=math.prod(size) // size[dim])
    ex.tensor("x", size, dtype, contiguous=None)
    others = max(1, math.prod(size) // size[dim])
    n = ex.integer(1, min(ex.limits.max_indices, max(1, ex.limits.max_numel // others)))
    ex.indices("index", n, size[dim])
    ex.kwargs["dim"] = dim
    op = index_select_method_op if ex.form == "Tensor.index_select" else index_select_op
    return ex.program(op, grads=("x",), dim=dim)


def _gather_scatter_parts(ex: Example, dtype: torch.dtype, *, src: bool, low: float = -10,
                          high: float = 10) -> int:
    """``x``, a ``dim``, an ``index`` no larger than ``x`` off ``dim`` and (optionally) ``src`` shaped like it."""
    lo, hi = ndims_for(ex.entry)
    ndim = ex.ndim(lo, hi)
    dim = ex.integer(0, ndim - 1)
    size = list(shape(ex, ndim))
    size[dim] = target_side(ex, others=math.prod(size) // size[dim])
    ex.tensor("x", size, dtype, low=low, high=high, contiguous=None)
    idx_size = [ex.side(1, s) for s in size]
    others = max(1, math.prod(idx_size) // idx_size[dim])
    idx_size[dim] = ex.integer(1, min(ex.limits.max_indices, max(1, ex.limits.max_numel // others)))
    ex.indices("index", idx_size, size[dim])
    if src:
        ex.tensor("src", idx_size, dtype, low=low, high=high)
    ex.kwargs["dim"] = dim
    return dim


def gather_op(x, index, *, dim):
    return torch.gather(x, dim, index)


def gather_method_op(x, index, *, dim):
    return x.gather(dim, index)


@recipe("torch.gather",
        forms=("torch.gather", "Tensor.gather"),
        targets=forward_backward("aten.gather", ("aten.scatter_add", "aten.scatter_add_", "aten.gather_backward")))
def gather(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.gather(x, dim, index)``; its backward is ``scatter_add`` over duplicate indices."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    dim = _gather_scatter_parts(ex, dtype, src=False)
    op = gather_method_op if ex.form == "Tensor.gather" else gather_op
    return ex.program(op, grads=("x",), dim=dim)


# Tensor.scatter's four documented overloads: a tensor ``src`` or a scalar
# ``value``, each with or without ``reduce`` (which takes no ``None``).


def scatter_op(x, index, src, *, dim):
    return x.scatter(dim, index, src)


def scatter_inplace_op(x, index, src, *, dim):
    return x.clone().scatter_(dim, index, src)


def torch_scatter_op(x, index, src, *, dim):
    return torch.scatter(x, dim, index, src)


def scatter_reducing_op(x, index, src, *, dim, reduce):
    return x.scatter(dim, index, src, reduce=reduce)


def scatter_value_op(x, index, *, dim, value):
    return x.scatter(dim, index, value)


def scatter_value_reducing_op(x, index, *, dim, value, reduce):
    return x.scatter(dim, index, value, reduce=reduce)


@recipe("torch.Tensor.scatter",
        forms=("Tensor.scatter", "Tensor.scatter_", "torch.scatter"),
        targets=("aten.scatter", "aten.scatter_"))
def scatter(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.scatter(dim, index, src)`` with a tensor ``src`` (a scalar ``value`` if the case gives one).

    Duplicate targets are included: which write wins is exactly what the
    deterministic implementation fixes.
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    use_value = "value" in case and "src-tensor" not in entry.qualifiers
    dim = _gather_scatter_parts(ex, dtype, src=not use_value)
    reducing = "reduce" in case
    reduce = ex.kwarg("reduce", ("add",)) if reducing else None
    if use_value:
        value = ex.kwarg("value", (1.5,))
        if reducing:
            return ex.program(scatter_value_reducing_op, grads=("x",), dim=dim, value=value, reduce=reduce)
        return ex.program(scatter_value_op, grads=("x",), dim=dim, value=value)
    if reducing:
        return ex.program(scatter_reducing_op, grads=("x", "src"), dim=dim, reduce=reduce)
    op = {"Tensor.scatter_": scatter_inplace_op, "torch.scatter": torch_scatter_op}.get(ex.form, scatter_op)
    return ex.program(op, grads=("x", "src"), compare=(scatter_writes(dim=dim),), dim=dim)


def scatter_add_op(x, index, src, *, dim, clone):
    """``clone``: differentiating an in-place op on a leaf is an error, so backward goes through a copy."""
    return (x.clone() if clone else x).scatter_add_(dim, index, src)


def scatter_add_method_op(x, index, src, *, dim):
    return x.scatter_add(dim, index, src)


def torch_scatter_add_op(x, index, src, *, dim):
    return torch.scatter_add(x, dim, index, src)


def scatter_add_expanded_op(x, index, src, *, channels, form):
    """Along dim 0 with a 1-D ``index`` expanded over ``channels`` columns (strides ``(1, 0)``),
    the pattern the CPU's sorting kernel is for (``THRESHOLDS``); the expand is part of the call,
    since the runner's clone of an expanded input would be contiguous."""
    expanded = index.unsqueeze(1).expand(index.shape[0], channels)
    if form == "Tensor.scatter_add":
        return x.scatter_add(0, expanded, src)
    if form == "torch.scatter_add":
        return torch.scatter_add(x, 0, expanded, src)
    return x.clone().scatter_add_(0, expanded, src)


@recipe("torch.Tensor.scatter_add_", "torch.scatter_add_",
        targets=("aten.scatter_add_", "aten.scatter_add"),
        forms=("Tensor.scatter_add_", "Tensor.scatter_add", "torch.scatter_add"))
def scatter_add_(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.scatter_add_(dim, index, src)``; duplicates collide. Backward goes through ``x.clone()``.

    In the stress and perturbation tiers on the CPU, expanded indices along dim 0 with a column
    count on both sides of the sorting kernel's switch in ``THRESHOLDS``."""
    ex = Example(draw, entry, case, device)
    channels = ex.threshold_side("channels", THRESHOLDS["torch.Tensor.scatter_add_"])
    if channels is not None:
        dtype = ex.dtype(("floating",), exclude=(torch.float16,))  # the sorting kernel skips Half
        rows = target_side(ex, others=channels)
        n = ex.integer(1, max(1, min(ex.limits.max_indices, ex.limits.max_numel // channels)))
        ex.tensor("x", (rows, channels), dtype)
        ex.indices("index", (n,), rows)
        ex.tensor("src", (n, channels), dtype)
        return ex.program(scatter_add_expanded_op, grads=("x", "src"), channels=channels, form=ex.form)
    dtype = ex.dtype(("floating", "integer"))
    dim = _gather_scatter_parts(ex, dtype, src=True)
    if ex.form == "Tensor.scatter_add":
        return ex.program(scatter_add_method_op, grads=("x", "src"), dim=dim)
    if ex.form == "torch.scatter_add":
        return ex.program(torch_scatter_add_op, grads=("x", "src"), dim=dim)
    return ex.program(scatter_add_op, grads=("x", "src"), dim=dim, clone=entry.backward)


def scatter_reduce_op(x, index, src, *, dim, reduce, include_self):
    return x.scatter_reduce(dim, index, src, reduce, include_self=include_self)


def scatter_reduce_inplace_op(x, index, src, *, dim, reduce, include_self):
    return x.clone().scatter_reduce_(dim, index, src, reduce, include_self=include_self)


def torch_scatter_reduce_op(x, index, src, *, dim, reduce, include_self):
    return torch.scatter_reduce(x, dim, index, src, reduce, include_self=include_self)


@recipe("torch.Tensor.scatter_reduce",
        forms=("Tensor.scatter_reduce", "Tensor.scatter_reduce_", "torch.scatter_reduce"),
        targets=("aten.scatter_reduce", "aten.scatter_reduce_"))
def scatter_reduce(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.scatter_reduce(dim, index, src, reduce, include_self=...)``; values near 1 for ``prod``."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    reduce = ex.kwarg("reduce", ("sum", "prod", "mean", "amax", "amin"))
    include_self = ex.kwarg("include_self", (True, False))
    lo, hi = (0.5, 1.5) if reduce == "prod" else (-10, 10)
    dim = _gather_scatter_parts(ex, dtype, src=True, low=lo, high=hi)
    op = {"Tensor.scatter_reduce_": scatter_reduce_inplace_op,
          "torch.scatter_reduce": torch_scatter_reduce_op}.get(ex.form, scatter_reduce_op)
    return ex.program(op, grads=("x", "src"), dim=dim, reduce=reduce, include_self=include_self)


# ---------------------------------------------------------------------------
# Counting, sorting, scanning


def bincount_op(input, *, minlength):
    return torch.bincount(input, minlength=minlength)


def bincount_weighted_op(input, weights, *, minlength):
    return torch.bincount(input, weights, minlength=minlength)


@recipe("torch.bincount", targets="aten.bincount")
def bincount(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.bincount(input, weights, minlength)``: many values over few bins; float weights when given."""
    ex = Example(draw, entry, case, device)
    bins = ex.side(1, ex.limits.max_bins)
    n = num_indices(ex)
    ex.indices("input", n, bins)
    minlength = ex.kwarg("minlength", (0, bins + 1))
    if entry.weights_given:
        dtype = ex.dtype(("floating",))
        ex.tensor("weights", (n,), dtype)
        return ex.program(bincount_weighted_op, minlength=minlength)
    return ex.program(bincount_op, minlength=minlength)


def histc_op(x, *, bins, min, max):
    return torch.histc(x, bins=bins, min=min, max=max)


@recipe("torch.histc", targets="aten.histc")
def histc(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.histc(x, bins, min, max)``: few bins; ``min == max == 0`` means the data's range."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    n = ex.integer(1, ex.limits.max_numel)
    ex.tensor("x", (n,), dtype, contiguous=None)
    bins = ex.kwarg("bins", (4, 1, 16, 100))
    # (0, 0): the data's range, which torch widens by one on each side where every value is equal;
    # uint8 data of zeros (or 255s) cannot hold that ("value cannot be converted to type uint8_t
    # without overflow", an input torch refuses, not the op's behaviour), so uint8 gets fixed ranges.
    lo, hi = ex.choice(((0, 5), (0, 10)) if dtype == torch.uint8 else ((0, 0), (-5, 5), (-10, 10)))
    ex.kwargs.update(min=lo, max=hi)
    return ex.program(histc_op, bins=bins, min=lo, max=hi)


def cumsum_op(x, *, dim):
    return torch.cumsum(x, dim=dim)


def cumsum_method_op(x, *, dim):
    return x.cumsum(dim)


def cumsum_inplace_op(x, *, dim):
    return x.clone().cumsum_(dim)


@recipe("torch.cumsum",
        targets=("aten.cumsum", "aten.cumsum_"),
        forms=("torch.cumsum", "Tensor.cumsum", "Tensor.cumsum_"))
def cumsum(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.cumsum(x, dim)`` over floating (or the entry's) dtypes; long scans on the large scale,
    and in the stress and perturbation tiers scans on both sides of each switch in ``THRESHOLDS``."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "complex"))
    at = ex.threshold_side("elements", THRESHOLDS["torch.cumsum"])
    if at is None:
        ndim = ex.ndim(1, 3)
        size = shape(ex, ndim)
        dim = ex.integer(0, ndim - 1)
    else:  # the stress and perturbation tiers: one line of elements on either side of a switch
        size, dim = (at,), 0
    ex.tensor("x", size, dtype, contiguous=None)
    ex.kwargs["dim"] = dim
    op = {"Tensor.cumsum": cumsum_method_op, "Tensor.cumsum_": cumsum_inplace_op}.get(ex.form, cumsum_op)
    return ex.program(op, grads=("x",), dim=dim)


def _tied_values(ex: Example, size: Sequence[int], dtype: torch.dtype) -> None:
    """Input ``x`` for order statistics; often integer valued, so ties test the index output."""
    ties = ex.choice((True, False))
    if ties:
        ex.tensor("x", size, dtype, low=0, high=3, contiguous=None, integral=True)
    else:
        ex.tensor("x", size, dtype, contiguous=None)


def median_op(x):
    return torch.median(x)


def median_dim_op(x, *, dim, keepdim):
    return torch.median(x, dim=dim, keepdim=keepdim)


def _median_targets(entry: Entry, case: dict) -> tuple[str, ...]:
    """``median(dim=...)`` returns indices (the sentence's case); ``median()`` does not."""
    return ("aten.median.dim", "aten.median.dim_values") if entry.indices_output else ("aten.median.default",)


@recipe("torch.median", targets=_median_targets)
def median(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.median(x, dim)`` -> (values, indices) when the entry is about the indices output, else ``torch.median(x)``."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.ndim(1, 3)
    size = shape(ex, ndim)
    _tied_values(ex, size, dtype)
    with_indices = entry.indices_output or "dim" in case
    if with_indices:
        dim = ex.kwarg("dim", tuple(range(ndim)))
        keepdim = ex.kwarg("keepdim", (False, True))
        return ex.program(median_dim_op, grads=("x",), dim=dim, keepdim=keepdim)
    return ex.program(median_op, grads=("x",))


def kthvalue_op(x, *, k, dim):
    return torch.kthvalue(x, k, dim=dim)


@recipe("torch.kthvalue", targets="aten.kthvalue")
def kthvalue(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.kthvalue(x, k, dim)`` -> (values, indices), with ties."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.ndim(1, 3)
    size = shape(ex, ndim)
    dim = ex.integer(0, ndim - 1)
    k = ex.integer(1, size[dim])
    _tied_values(ex, size, dtype)
    ex.kwargs.update(k=k, dim=dim)
    return ex.program(kthvalue_op, grads=("x",), k=k, dim=dim)


def repeat_interleave_op(x, repeats, *, dim):
    return torch.repeat_interleave(x, repeats, dim=dim)


@recipe("torch.repeat_interleave",
        targets=forward_backward("aten.repeat_interleave", ("aten.index_add", "aten.index_add_")))
def repeat_interleave(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.repeat_interleave(x, repeats, dim)``; its backward sums the repeated slices (an index_add)."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.ndim(1, 3)
    dim = ex.integer(0, ndim - 1)
    size = shape(ex, ndim)
    ex.tensor("x", size, dtype, contiguous=None)
    max_rep = 4 if not ex.large else 8
    ex.tensor("repeats", (size[dim],), torch.int64, low=0, high=max_rep)
    ex.kwargs["dim"] = dim
    return ex.program(repeat_interleave_op, grads=("x",), dim=dim)


# ---------------------------------------------------------------------------
# Matrix products


def bmm_op(a, b):
    return torch.bmm(a, b)


@recipe("torch.bmm", targets="aten.bmm")
def bmm(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.bmm(a, b)``; with ``sparse_dense`` the first operand is a sparse COO tensor."""
    ex = Example(draw, entry, case, device)
    cap = 64 if ex.large else 6
    b, n, m, p = ex.side(1, 8 if ex.large else 3), ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    if entry.sparse_dense:
        dtype = ex.dtype(("floating",), exclude_on_cpu=NO_HALF)
        density = ex.choice((0.5, 0.1, 1.0))
        dense = ex.tensor("_a_dense", (b, n, m), dtype, is_input=False)
        mask = ex.tensor("_a_mask", (b, n, m), torch.float32, low=0, high=1, is_input=False)
        a = (dense * (mask < density).to(dtype)).to_sparse().coalesce()
        ex.add("a", a, f"(_a_dense * (_a_mask < {density!r}).to({dtype})).to_sparse().coalesce()")
        ex.tensor("b", (b, m, p), dtype)
        ex.kwargs["density"] = density
        return ex.program(bmm_op, grads=("b",))
    dtype = ex.dtype(("floating",))
    ex.tensor("a", (b, n, m), dtype, contiguous=None)
    ex.tensor("b", (b, m, p), dtype)
    return ex.program(bmm_op, grads=("a", "b"))


def mm_op(a, b):
    return torch.mm(a, b)


@recipe("torch.mm", targets="aten.mm")
def mm(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.mm(a, b)`` (a cuBLAS entry: nondeterministic without a fixed workspace config)."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    cap = 512 if ex.large else 8
    n, m, p = ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    ex.tensor("a", (n, m), dtype, contiguous=None)
    ex.tensor("b", (m, p), dtype)
    return ex.program(mm_op, grads=("a", "b"))


def mv_op(a, v):
    return torch.mv(a, v)


@recipe("torch.mv", targets="aten.mv")
def mv(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.mv(a, v)`` (a cuBLAS entry)."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    cap = 1024 if ex.large else 8
    n, m = ex.side(1, cap), ex.side(1, cap)
    ex.tensor("a", (n, m), dtype, contiguous=None)
    ex.tensor("v", (m,), dtype)
    return ex.program(mv_op, grads=("a", "v"))


# ---------------------------------------------------------------------------
# Uninitialized memory: torch.empty, resize_


def empty_op(*, size, dtype, device):
    return torch.empty(size, dtype=dtype, device=device)


def empty_out_op(*, size, dtype, device):
    out = torch.tensor([], dtype=dtype, device=device)
    return torch.empty(size, out=out)


def empty_like_op(x):
    return torch.empty_like(x)


def empty_strided_op(*, size, stride, dtype, device):
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


def empty_permuted_op(*, size, physical_layout, dtype, device):
    return torch.empty_permuted(size, physical_layout, dtype=dtype, device=device)


# ``torch.empty(size, out=t)`` resizes ``t``: its new memory is what the fill promise is about.
_EMPTY_TARGETS = {"torch.empty": ("aten.empty", "aten.resize_"), "torch.empty_like": "aten.empty_like",
                  "torch.empty_strided": "aten.empty_strided", "torch.empty_permuted": "aten.empty_permuted"}
_EMPTY_FORMS = {"torch.empty": ("torch.empty", "out="), "torch.empty_like": (), "torch.empty_strided": (),
                "torch.empty_permuted": ()}


@recipe("torch.empty", "torch.empty_like", "torch.empty_strided", "torch.empty_permuted",
        targets=_EMPTY_TARGETS, forms=_EMPTY_FORMS)
def empty(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``torch.empty(shape, dtype=..., device=...)`` and its ``_like``/``_strided``/``_permuted`` kin.

    Deterministic only with deterministic mode on and
    ``fill_uninitialized_memory`` set (NaN for floats, the max for ints).
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    size = shape(ex, ex.integer(1, 3))
    dev = str(ex.device)
    ex.kwargs.update(shape=size, dtype=dtype)
    meta = {"uninitialized": True}
    name = entry.short_op
    if name == "empty_like":
        ex.tensor("x", size, dtype)
        return ex.program(empty_like_op, meta=meta)
    if name == "empty_strided":
        # Column-major strides: a layout other than the default one.
        stride, step = [], 1
        for side in size:
            stride.append(step)
            step *= max(1, side)
        ex.kwargs["stride"] = tuple(stride)
        return ex.program(empty_strided_op, meta=meta, size=size, stride=tuple(stride), dtype=dtype, device=dev)
    if name == "empty_permuted":
        order = tuple(reversed(range(len(size))))
        ex.kwargs["physical_layout"] = order
        return ex.program(empty_permuted_op, meta=meta, size=size, physical_layout=order, dtype=dtype, device=dev)
    if ex.form == "out=":
        return ex.program(empty_out_op, meta=meta, size=size, dtype=dtype, device=dev)
    return ex.program(empty_op, meta=meta, size=size, dtype=dtype, device=dev)


def resize_op(x, *, new_shape):
    return x.resize_(new_shape)


def resize_quantized_op(x, *, new_shape, scale, zero_point, dtype=torch.quint8):
    """Quantizes ``x`` to ``dtype``, resizes it, and returns ``(int_repr, q_scale, q_zero_point)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized creation is deprecated, still supported
        q = torch.quantize_per_tensor(x, scale, zero_point, dtype)
    q.resize_(new_shape)
    return (q.int_repr(), torch.tensor(q.q_scale(), dtype=torch.float64),
            torch.tensor(q.q_zero_point(), dtype=torch.int64))


def _quantized_dtypes(entry: Entry) -> tuple[str, ...]:
    """The quantized entry covers every quantized dtype; each is a form of its own."""
    return ("quint8", "qint8", "qint32") if entry.quantized else ()


@recipe("torch.Tensor.resize_", targets="aten.resize_", forms=_quantized_dtypes)
def resize_(draw, entry: Entry, case: dict, device: torch.device) -> Program:
    """``x.resize_(new_shape)``, growing or shrinking.

    Quantized (``entry.quantized``): ``x`` is quantized inside the op function
    (so the input stays a plain float tensor the runner can clone on any
    device) and the result is returned as ``(int_repr, q_scale, q_zero_point)``.
    New elements of a grown tensor are uninitialized memory: torch cannot fill
    it for quantized tensors, hence the documented error.
    """
    ex = Example(draw, entry, case, device)
    old = shape(ex, ex.integer(1, 2))
    grow = ex.kwarg("grow", (True, False))
    old_numel = math.prod(old)
    if grow:
        new_numel = ex.integer(old_numel + 1, old_numel + min(ex.limits.max_side * 4, ex.limits.max_numel))
    else:
        new_numel = ex.integer(0, old_numel - 1) if old_numel > 1 else 0
    new_shape = (new_numel,)
    meta = {"uninitialized": grow}
    if entry.quantized:
        # Every quantized dtype the condition covers is a form of its own (see @recipe).
        qdtype = getattr(torch, ex.form or "quint8")
        ex.tensor("x", old, torch.float32, low=-5, high=5)
        scale, zero_point = ex.choice((0.1, 0.05)), ex.integer(0, 10)
        ex.kwargs.update(new_shape=new_shape, scale=scale, zero_point=zero_point)
        return ex.program(resize_quantized_op, meta=meta, new_shape=new_shape, scale=scale, zero_point=zero_point,
                          dtype=qdtype)
    dtype = ex.dtype(("floating", "integer"))
    ex.tensor("x", old, dtype)
    ex.kwargs["new_shape"] = new_shape
    return ex.program(resize_op, meta=meta, new_shape=new_shape)


# ---------------------------------------------------------------------------
# Convolutions


def _conv(draw, entry: Entry, case: dict, device: torch.device, op: Callable[..., Any], n: int,
          transposed: bool) -> Program:
    ex = Example(draw, entry, case, device)
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
    constants = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if transposed:
        ex.kwargs["output_padding"] = output_padding
        constants["output_padding"] = output_padding
    # The weights are inputs in both forms: every run uses identical parameters, and gradients
    # w.r.t. weight and bias are compared too.
    if ex.form == "nn.Module":
        return ex.module_program(entry.short_op, grads=("x", "weight", "bias"), params=("weight", "bias"),
                                 in_channels=c_in, out_channels=c_out, kernel_size=k, **constants)
    return ex.program(op, grads=("x", "weight", "bias"), **constants)


def conv1d_op(x, weight, bias, *, stride, padding, dilation, groups):
    return F.conv1d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


@recipe("torch.nn.Conv1d", targets=_CONV, forms=_MODULE_FORMS)
def conv1d(draw, entry, case, device):
    """``nn.Conv1d`` as ``F.conv1d(x, weight, bias, ...)`` with seeded weights."""
    return _conv(draw, entry, case, device, conv1d_op, 1, transposed=False)


def conv2d_op(x, weight, bias, *, stride, padding, dilation, groups):
    return F.conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


@recipe("torch.nn.Conv2d", targets=_CONV, forms=_MODULE_FORMS)
def conv2d(draw, entry, case, device):
    """``nn.Conv2d`` as ``F.conv2d(x, weight, bias, ...)`` with seeded weights."""
    return _conv(draw, entry, case, device, conv2d_op, 2, transposed=False)


def conv3d_op(x, weight, bias, *, stride, padding, dilation, groups):
    return F.conv3d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


@recipe("torch.nn.Conv3d", targets=_CONV, forms=_MODULE_FORMS)
def conv3d(draw, entry, case, device):
    """``nn.Conv3d`` as ``F.conv3d(x, weight, bias, ...)`` with seeded weights."""
    return _conv(draw, entry, case, device, conv3d_op, 3, transposed=False)


def conv_transpose1d_op(x, weight, bias, *, stride, padding, dilation, groups, output_padding):
    return F.conv_transpose1d(x, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                              groups=groups, dilation=dilation)


@recipe("torch.nn.ConvTranspose1d", targets=_CONV, forms=_MODULE_FORMS)
def conv_transpose1d(draw, entry, case, device):
    """``nn.ConvTranspose1d`` as ``F.conv_transpose1d(x, weight, bias, ...)``."""
    return _conv(draw, entry, case, device, conv_transpose1d_op, 1, transposed=True)


def conv_transpose2d_op(x, weight, bias, *, stride, padding, dilation, groups, output_padding):
    return F.conv_transpose2d(x, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                              groups=groups, dilation=dilation)


@recipe("torch.nn.ConvTranspose2d", targets=_CONV, forms=_MODULE_FORMS)
def conv_transpose2d(draw, entry, case, device):
    """``nn.ConvTranspose2d`` as ``F.conv_transpose2d(x, weight, bias, ...)``."""
    return _conv(draw, entry, case, device, conv_transpose2d_op, 2, transposed=True)


def conv_transpose3d_op(x, weight, bias, *, stride, padding, dilation, groups, output_padding):
    return F.conv_transpose3d(x, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                              groups=groups, dilation=dilation)


@recipe("torch.nn.ConvTranspose3d", targets=_CONV, forms=_MODULE_FORMS)
def conv_transpose3d(draw, entry, case, device):
    """``nn.ConvTranspose3d`` as ``F.conv_transpose3d(x, weight, bias, ...)``."""
    return _conv(draw, entry, case, device, conv_transpose3d_op, 3, transposed=True)


# ---------------------------------------------------------------------------
# Pooling


def avg_pool3d_op(x, *, kernel_size, stride, padding, ceil_mode, count_include_pad):
    return F.avg_pool3d(x, kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                        count_include_pad=count_include_pad)


@recipe("torch.nn.AvgPool3d",
        targets=forward_backward("aten.avg_pool3d", "aten.avg_pool3d_backward"),
        forms=_MODULE_FORMS)
def avg_pool3d(draw, entry, case, device):
    """``nn.AvgPool3d`` as ``F.avg_pool3d``; overlapping windows make backward contributions collide."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",), exclude_on_cpu=NO_HALF)
    size = pool_input(ex, 3, dtype=dtype)
    k, stride, padding = window(ex, size[-3:])
    ceil_mode = ex.kwarg("ceil_mode", (False, True))
    count_include_pad = ex.kwarg("count_include_pad", (True, False))
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding)
    if ex.form == "nn.Module":
        return ex.module_program("AvgPool3d", grads=("x",), kernel_size=k, stride=stride, padding=padding,
                                 ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    return ex.program(avg_pool3d_op, grads=("x",), kernel_size=k, stride=stride, padding=padding,
                      ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def _max_pool(draw, entry, case, device, op: Callable[..., Any], n: int) -> Program:
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    size = pool_input(ex, n, dtype=dtype, integral=ex.choice((False, True)))
    k, stride, padding = window(ex, size[-n:])
    dilation = 1
    ceil_mode = ex.kwarg("ceil_mode", (False, True))
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding, dilation=dilation)
    if ex.form == "nn.Module":
        return ex.module_program(entry.short_op, grads=("x",), kernel_size=k, stride=stride, padding=padding,
                                 dilation=dilation, ceil_mode=ceil_mode)
    return ex.program(op, grads=("x",), kernel_size=k, stride=stride, padding=padding, dilation=dilation,
                      ceil_mode=ceil_mode)


def max_pool2d_op(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    return F.max_pool2d(x, kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


@recipe("torch.nn.MaxPool2d",
        targets=forward_backward("aten.max_pool2d_with_indices", "aten.max_pool2d_with_indices_backward"),
        forms=_MODULE_FORMS)
def max_pool2d(draw, entry, case, device):
    """``nn.MaxPool2d`` as ``F.max_pool2d``; overlapping windows and ties."""
    return _max_pool(draw, entry, case, device, max_pool2d_op, 2)


def max_pool3d_op(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    return F.max_pool3d(x, kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


@recipe("torch.nn.MaxPool3d",
        targets=forward_backward("aten.max_pool3d_with_indices", "aten.max_pool3d_with_indices_backward"),
        forms=_MODULE_FORMS)
def max_pool3d(draw, entry, case, device):
    """``nn.MaxPool3d`` as ``F.max_pool3d``; overlapping windows and ties."""
    return _max_pool(draw, entry, case, device, max_pool3d_op, 3)


def _adaptive(draw, entry, case, device, op: Callable[..., Any], n: int) -> Program:
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    size = pool_input(ex, n, dtype=dtype)
    # Output sides larger than the input make windows overlap.
    out = tuple(ex.integer(1, s + 2) for s in size[-n:])
    if all(o == 1 for o in out) and op is not adaptive_max_pool2d_op:
        # Average pooling to all ones is computed as a mean: the pooling kernel (and its
        # backward) never runs. Keep one side at 2, also while Hypothesis shrinks.
        out = (2,) + out[1:]
    ex.kwargs["output_size"] = out
    if ex.form == "nn.Module":
        return ex.module_program(entry.short_op, grads=("x",), output_size=out)
    return ex.program(op, grads=("x",), output_size=out)


def adaptive_avg_pool2d_op(x, *, output_size):
    return F.adaptive_avg_pool2d(x, output_size)


@recipe("torch.nn.AdaptiveAvgPool2d",
        targets=forward_backward("aten._adaptive_avg_pool2d", "aten._adaptive_avg_pool2d_backward"),
        forms=_MODULE_FORMS)
def adaptive_avg_pool2d(draw, entry, case, device):
    """``nn.AdaptiveAvgPool2d`` as ``F.adaptive_avg_pool2d``."""
    return _adaptive(draw, entry, case, device, adaptive_avg_pool2d_op, 2)


def adaptive_avg_pool3d_op(x, *, output_size):
    return F.adaptive_avg_pool3d(x, output_size)


@recipe("torch.nn.AdaptiveAvgPool3d",
        targets=forward_backward("aten._adaptive_avg_pool3d", "aten._adaptive_avg_pool3d_backward"),
        forms=_MODULE_FORMS)
def adaptive_avg_pool3d(draw, entry, case, device):
    """``nn.AdaptiveAvgPool3d`` as ``F.adaptive_avg_pool3d``."""
    return _adaptive(draw, entry, case, device, adaptive_avg_pool3d_op, 3)


def adaptive_max_pool2d_op(x, *, output_size):
    return F.adaptive_max_pool2d(x, output_size)


@recipe("torch.nn.AdaptiveMaxPool2d",
        targets=forward_backward("aten.adaptive_max_pool2d", "aten.adaptive_max_pool2d_backward"),
        forms=_MODULE_FORMS)
def adaptive_max_pool2d(draw, entry, case, device):
    """``nn.AdaptiveMaxPool2d`` as ``F.adaptive_max_pool2d``."""
    return _adaptive(draw, entry, case, device, adaptive_max_pool2d_op, 2)


def _fractional(draw, entry, case, device, op: Callable[..., Any], n: int) -> Program:
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    k = ex.integer(1, 3)
    out = tuple(ex.integer(1, 4 if not ex.large else 32) for _ in range(n))
    # Fractional pooling needs output + kernel - 1 < input on every side.
    size = pool_input(ex, n, mins=tuple(o + k for o in out), dtype=dtype, batched=True)
    # The pooling regions come from random samples; passing them as an input
    # makes the op a pure function of its inputs.
    ex.tensor("samples", (size[0], size[1], n), dtype, low=0, high=0.999)
    ex.kwargs.update(kernel_size=k, output_size=out)
    # The windows start where int((i + sample) * alpha) falls; from float16/bfloat16 samples that
    # product lands on whole numbers, and a kernel computing it in another precision (Inductor's
    # code on CUDA: 5.11 off eager on the H100, torch 2.11) places other windows. Which is not
    # documented: such outputs are compared run against run only.
    compare = (runs_only(_NARROW_SAMPLES),) if dtype in (torch.float16, torch.bfloat16) else ()
    return ex.program(op, grads=("x",), compare=compare, kernel_size=k, output_size=out)


_NARROW_SAMPLES = ("fractional pooling windows from float16/bfloat16 samples: where they start depends on the "
                   "precision a kernel places them in, which is implementation-defined")


def fractional_max_pool2d_op(x, samples, *, kernel_size, output_size):
    return F.fractional_max_pool2d(x, kernel_size, output_size=output_size, _random_samples=samples)


@recipe("torch.nn.FractionalMaxPool2d",
        targets=forward_backward("aten.fractional_max_pool2d", "aten.fractional_max_pool2d_backward"))
def fractional_max_pool2d(draw, entry, case, device):
    """``nn.FractionalMaxPool2d`` as ``F.fractional_max_pool2d`` with explicit ``_random_samples``."""
    return _fractional(draw, entry, case, device, fractional_max_pool2d_op, 2)


def fractional_max_pool3d_op(x, samples, *, kernel_size, output_size):
    return F.fractional_max_pool3d(x, kernel_size, output_size=output_size, _random_samples=samples)


@recipe("torch.nn.FractionalMaxPool3d",
        targets=forward_backward("aten.fractional_max_pool3d", "aten.fractional_max_pool3d_backward"))
def fractional_max_pool3d(draw, entry, case, device):
    """``nn.FractionalMaxPool3d`` as ``F.fractional_max_pool3d`` with explicit ``_random_samples``."""
    return _fractional(draw, entry, case, device, fractional_max_pool3d_op, 3)


def _max_unpool(draw, entry, case, device, op: Callable[..., Any], n: int) -> Program:
    """Unpool what ``max_pool`` produced; ``stride < kernel`` gives duplicate indices.

    Duplicates from overlapping windows point at the same input element, so
    colliding writes carry equal values and the result is well defined.
    """
    ex = Example(draw, entry, case, device)
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
    return ex.program(op, grads=("values",), kernel_size=k, stride=stride, output_size=sides)


def max_unpool1d_op(values, indices, *, kernel_size, stride, output_size):
    return F.max_unpool1d(values, indices, kernel_size, stride=stride, output_size=output_size)


@recipe("torch.nn.MaxUnpool1d", targets="aten.max_unpool2d")
def max_unpool1d(draw, entry, case, device):
    """``nn.MaxUnpool1d`` as ``F.max_unpool1d`` on ``max_pool1d`` output."""
    return _max_unpool(draw, entry, case, device, max_unpool1d_op, 1)


def max_unpool2d_op(values, indices, *, kernel_size, stride, output_size):
    return F.max_unpool2d(values, indices, kernel_size, stride=stride, output_size=output_size)


@recipe("torch.nn.MaxUnpool2d", targets="aten.max_unpool2d")
def max_unpool2d(draw, entry, case, device):
    """``nn.MaxUnpool2d`` as ``F.max_unpool2d`` on ``max_pool2d`` output."""
    return _max_unpool(draw, entry, case, device, max_unpool2d_op, 2)


def max_unpool3d_op(values, indices, *, kernel_size, stride, output_size):
    return F.max_unpool3d(values, indices, kernel_size, stride=stride, output_size=output_size)


@recipe("torch.nn.MaxUnpool3d", targets="aten.max_unpool3d")
def max_unpool3d(draw, entry, case, device):
    """``nn.MaxUnpool3d`` as ``F.max_unpool3d`` on ``max_pool3d`` output."""
    return _max_unpool(draw, entry, case, device, max_unpool3d_op, 3)


# ---------------------------------------------------------------------------
# Padding


def pad_op(x, *, pad, mode):
    return F.pad(x, pad, mode=mode)


def _pad(draw, entry, case, device, n: int, mode: str) -> Program:
    ex = Example(draw, entry, case, device)
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
    if ex.form == "nn.Module":
        return ex.module_program(entry.short_op, grads=("x",), padding=tuple(pads))
    return ex.program(pad_op, grads=("x",), pad=tuple(pads), mode=mode)


@recipe("torch.nn.ReflectionPad1d",
        targets=forward_backward("aten.reflection_pad1d", "aten.reflection_pad1d_backward"),
        forms=_MODULE_FORMS)
def reflection_pad1d(draw, entry, case, device):
    """``nn.ReflectionPad1d`` as ``F.pad(x, pad, mode='reflect')``."""
    return _pad(draw, entry, case, device, 1, "reflect")


@recipe("torch.nn.ReflectionPad2d",
        targets=forward_backward("aten.reflection_pad2d", "aten.reflection_pad2d_backward"),
        forms=_MODULE_FORMS)
def reflection_pad2d(draw, entry, case, device):
    """``nn.ReflectionPad2d`` as ``F.pad(x, pad, mode='reflect')``."""
    return _pad(draw, entry, case, device, 2, "reflect")


@recipe("torch.nn.ReflectionPad3d",
        targets=forward_backward("aten.reflection_pad3d", "aten.reflection_pad3d_backward"),
        forms=_MODULE_FORMS)
def reflection_pad3d(draw, entry, case, device):
    """``nn.ReflectionPad3d`` as ``F.pad(x, pad, mode='reflect')``."""
    return _pad(draw, entry, case, device, 3, "reflect")


def _replicate_backward(n: int) -> Targets:
    """A deterministic promise is about the user's call: the routes torch takes for it are its
    targets. On CUDA, ``F.pad(mode='replicate')`` under the mode (at the forward) runs a
    decomposition whose backward is ``_unsafe_index_put`` (accumulating): that is how the promise
    holds in the ``program`` phase; the native backward kernel runs in ``backward-only``."""
    native = f"aten.replication_pad{n}d_backward"
    return Targets.of(native, cuda=(native, "aten._unsafe_index_put"))


@recipe("torch.nn.ReplicationPad1d",
        targets=forward_backward("aten.replication_pad1d", _replicate_backward(1)),
        forms=_MODULE_FORMS)
def replication_pad1d(draw, entry, case, device):
    """``nn.ReplicationPad1d`` as ``F.pad(x, pad, mode='replicate')``."""
    return _pad(draw, entry, case, device, 1, "replicate")


@recipe("torch.nn.ReplicationPad2d",
        targets=forward_backward("aten.replication_pad2d", _replicate_backward(2)),
        forms=_MODULE_FORMS)
def replication_pad2d(draw, entry, case, device):
    """``nn.ReplicationPad2d`` as ``F.pad(x, pad, mode='replicate')``."""
    return _pad(draw, entry, case, device, 2, "replicate")


@recipe("torch.nn.ReplicationPad3d",
        targets=forward_backward("aten.replication_pad3d", _replicate_backward(3)),
        forms=_MODULE_FORMS)
def replication_pad3d(draw, entry, case, device):
    """``nn.ReplicationPad3d`` as ``F.pad(x, pad, mode='replicate')``."""
    return _pad(draw, entry, case, device, 3, "replicate")


# ---------------------------------------------------------------------------
# Losses


def nll_loss_op(x, target, *, reduction):
    return F.nll_loss(x, target, reduction=reduction)


def nll_loss_weighted_op(x, target, weight, *, reduction):
    return F.nll_loss(x, target, weight=weight, reduction=reduction)


def nll_loss_module_weighted_op(x, target, weight, *, reduction):
    """``nn.NLLLoss(weight=...)``: the class weights are a buffer, given the input ``weight``."""
    loss = torch.nn.NLLLoss(weight=torch.ones_like(weight), reduction=reduction)
    return torch.func.functional_call(loss, {"weight": weight}, (x, target))


@recipe("torch.nn.NLLLoss",
        forms=_MODULE_FORMS,
        targets=forward_backward(("aten.nll_loss_forward", "aten.nll_loss2d_forward"),
                                 ("aten.nll_loss_backward", "aten.nll_loss2d_backward")))
def nll_loss(draw, entry, case, device):
    """``nn.NLLLoss`` as ``F.nll_loss`` on a spatial input ``(N, C, H, W)``.

    The spatial (``nll_loss2d``) kernel with ``reduction='mean'|'sum'`` is the
    one that accumulates with atomics on CUDA, so that is the path drawn.
    """
    ex = Example(draw, entry, case, device)
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
        if ex.form == "nn.Module":
            return ex.program(nll_loss_module_weighted_op, grads=("x",), reduction=reduction)
        return ex.program(nll_loss_weighted_op, grads=("x",), reduction=reduction)
    if ex.form == "nn.Module":
        return ex.module_program("NLLLoss", grads=("x",), args=("x", "target"), reduction=reduction)
    return ex.program(nll_loss_op, grads=("x",), reduction=reduction)


def ctc_loss_op(log_probs, targets, input_lengths, target_lengths, *, reduction):
    return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction=reduction)


@recipe("torch.nn.CTCLoss",
        forms=_MODULE_FORMS,
        targets=forward_backward("aten._ctc_loss", "aten._ctc_loss_backward"))
def ctc_loss(draw, entry, case, device):
    """``nn.CTCLoss`` as ``F.ctc_loss`` on log-probabilities ``(T, N, C)``.

    Padded int64 targets keep it on torch's own kernel rather than cuDNN's.
    Targets are at most ``T // 2`` long so every alignment is feasible.
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",), exclude=NO_HALF)
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
    if ex.form == "nn.Module":
        return ex.module_program("CTCLoss", grads=("log_probs",),
                                 args=("log_probs", "targets", "input_lengths", "target_lengths"), reduction=reduction)
    return ex.program(ctc_loss_op, grads=("log_probs",), reduction=reduction)


# ---------------------------------------------------------------------------
# Embeddings


def embedding_op(idx, weight, *, padding_idx=None):
    return F.embedding(idx, weight, padding_idx=padding_idx)


@recipe("torch.nn.Embedding",
        forms=_MODULE_FORMS,
        targets=forward_backward("aten.embedding", ("aten.embedding_dense_backward", "aten.embedding_backward")))
def embedding(draw, entry, case, device):
    """``nn.Embedding`` as ``F.embedding(idx, weight)``; duplicate ids collide in the weight gradient;
    in the stress and perturbation tiers, index counts on both sides of each switch in ``THRESHOLDS``."""
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    num = target_side(ex)
    dim = ex.side(1, 64 if ex.large else 4)
    ex.tensor("weight", (num, dim), dtype)
    at = ex.threshold_side("indices", THRESHOLDS["torch.nn.Embedding"])
    if at is None:
        idx_size = (ex.side(1, 4), ex.integer(1, max(1, ex.limits.max_indices // 4)))
    else:  # the stress and perturbation tiers: index counts on either side of a switch
        idx_size = (1, at)
    ex.indices("idx", idx_size, num)
    padding_idx = case.get("padding_idx")
    if ex.form == "nn.Module":
        extra = {} if padding_idx is None else {"padding_idx": padding_idx}
        return ex.module_program("Embedding", grads=("weight",), args=("idx",), params=("weight",),
                                 num_embeddings=num, embedding_dim=dim, **extra)
    if padding_idx is not None:
        ex.kwargs["padding_idx"] = padding_idx
        return ex.program(embedding_op, grads=("weight",), padding_idx=padding_idx)
    return ex.program(embedding_op, grads=("weight",))


def embedding_bag_op(idx, weight, offsets, *, mode):
    return F.embedding_bag(idx, weight, offsets, mode=mode)


def embedding_bag_weighted_op(idx, weight, offsets, per_sample_weights, *, mode):
    return F.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=per_sample_weights)


@recipe("torch.nn.EmbeddingBag",
        forms=_MODULE_FORMS,
        targets=forward_backward("aten._embedding_bag", ("aten._embedding_bag_backward", "aten._embedding_bag_dense_backward")))
def embedding_bag(draw, entry, case, device):
    """``nn.EmbeddingBag`` as ``F.embedding_bag(idx, weight, offsets, mode=...)``.

    Bags are given by sorted ``offsets`` starting at 0 (some bags empty);
    ``per_sample_weights`` are drawn for ``mode='sum'``.
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    mode = ex.kwarg("mode", ("mean", "sum", "max"))
    num = target_side(ex)
    dim = ex.side(1, 64 if ex.large else 4)
    ex.tensor("weight", (num, dim), dtype)
    n = num_indices(ex)
    ex.indices("idx", n, num)
    bags = ex.integer(1, 8 if not ex.large else 1024)
    seed = ex.seed()
    cuts = torch.randint(0, n + 1, (bags - 1,), generator=torch.Generator().manual_seed(seed))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), cuts.sort().values]).to(ex.device)
    ex.add("offsets", offsets,
           f"torch.cat([torch.zeros(1, dtype=torch.int64), torch.randint(0, {n + 1}, ({bags - 1},), "
           f"generator=torch.Generator().manual_seed({seed})).sort().values]).to({str(ex.device)!r})")
    module = {"num_embeddings": num, "embedding_dim": dim, "mode": mode}
    if mode == "sum" and ex.choice((False, True)):
        ex.tensor("per_sample_weights", (n,), dtype, low=0, high=2)
        if ex.form == "nn.Module":
            return ex.module_program("EmbeddingBag", grads=("weight", "per_sample_weights"), params=("weight",),
                                     args=("idx", "offsets", "per_sample_weights"), **module)
        return ex.program(embedding_bag_weighted_op, grads=("weight", "per_sample_weights"), mode=mode)
    if ex.form == "nn.Module":
        return ex.module_program("EmbeddingBag", grads=("weight",), params=("weight",), args=("idx", "offsets"),
                                 **module)
    return ex.program(embedding_bag_op, grads=("weight",), mode=mode)


# ---------------------------------------------------------------------------
# Sampling: grid_sample, interpolate


def grid_sample_op(x, grid, *, mode, padding_mode, align_corners):
    return F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)


_GRID_SAMPLER_BACKWARD = ("aten.grid_sampler_2d_backward", "aten.grid_sampler_3d_backward")
#: On CUDA the sentence covers three backward kernels, each of which a case must reach: the native
#: 2-D and 3-D ones and cuDNN's, which ``torch.grid_sampler`` picks for a 4-D float, half or double
#: input with bilinear sampling, zero padding, ``align_corners=True``, at most 1,024 channels and
#: 32-bit indexing while cuDNN is enabled.
_GRID_SAMPLE_BACKWARD = Targets(_GRID_SAMPLER_BACKWARD, required={"cuda": (
    ("aten.grid_sampler_2d_backward",), ("aten.grid_sampler_3d_backward",), ("aten.cudnn_grid_sampler_backward",))})
_CUDNN_DTYPES = (torch.float32, torch.float16, torch.float64)


#: The routes a differentiated grid_sample takes, each with its own backward kernel: every example
#: runs each (a form), so that a case reaches all three.
_GRID_ROUTES = ("native 2-D", "native 3-D", "cuDNN")


@recipe("torch.nn.functional.grid_sample",
        targets=forward_backward(("aten.grid_sampler_2d", "aten.grid_sampler_3d"), _GRID_SAMPLE_BACKWARD),
        forms=lambda entry: _GRID_ROUTES if entry.backward else ())
def grid_sample(draw, entry, case, device):
    """``F.grid_sample(x, grid, mode, padding_mode, align_corners)``.

    A dense output grid over a small input makes many samples share input
    pixels, which is what collides in backward. An entry about differentiation runs each
    route (``form``): a 2-D or a 3-D input with drawn options (the native kernels), and the
    conditions of cuDNN's sampler (4-D float, half or double input, bilinear, zeros,
    ``align_corners=True``; on the CPU the native 2-D kernel runs them). In the stress and
    perturbation tiers on CUDA the cuDNN route's channels sit on both sides of cuDNN's limit
    (``THRESHOLDS``): at most 1,024 take cuDNN's sampler, more the native one.
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    if ex.form == "cuDNN":
        dtype = dtype if dtype in _CUDNN_DTYPES else torch.float32
        mode, padding_mode, align_corners = (ex.kwarg("mode", ("bilinear",)), ex.kwarg("padding_mode", ("zeros",)),
                                             ex.kwarg("align_corners", (True,)))
        n_sp = 2
    else:
        mode = ex.kwarg("mode", ("bilinear", "nearest") if ex.form == "native 3-D" else ("bilinear", "nearest", "bicubic"))
        padding_mode = ex.kwarg("padding_mode", ("zeros", "border", "reflection"))
        align_corners = ex.kwarg("align_corners", (False, True))
        n_sp = {"native 2-D": 2, "native 3-D": 3}.get(ex.form) or (2 if mode == "bicubic" else ex.choice((2, 3)))
    at = ex.threshold_side("channels", THRESHOLDS["torch.nn.functional.grid_sample"]) if ex.form == "cuDNN" else None
    n, c = ex.batch(), (ex.channels() if at is None else at)  # stress and perturbation tiers: both sides of cuDNN's limit
    sides = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * c))
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    out = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * n_sp))
    ex.tensor("grid", (n,) + out + (n_sp,), dtype, low=-1.1, high=1.1)
    return ex.program(grid_sample_op, grads=("x", "grid"), mode=mode, padding_mode=padding_mode,
                      align_corners=align_corners)


_INTERP_RANK = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_INTERP_KERNELS = {"linear": "upsample_linear1d", "bilinear": "upsample_bilinear2d",
                   "bicubic": "upsample_bicubic2d", "trilinear": "upsample_trilinear3d",
                   "nearest": ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d"),
                   "area": ("_adaptive_avg_pool1d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d")}


#: The modes whose call ``F.interpolate`` routes, off the CPU and under the mode, to a
#: decomposition (``torch._decomp.decompositions._upsample_linear_vec``): forward
#: ``_unsafe_index``, backward ``_unsafe_index_put`` (accumulating), no alert. torch 2.5 does it
#: for ``bilinear`` on CUDA and XPU; 2.11 and later for ``bilinear`` and ``trilinear`` on every
#: device but the CPU (``if not input.is_cpu and torch.are_deterministic_algorithms_enabled()``
#: in ``torch/nn/functional.py``; the H100 rows of torch 2.11 show it). Native kernels run in
#: ``backward-only`` (the forward with the mode off) and for the other modes.
_INTERP_DECOMPOSED = ("bilinear", "trilinear")
_INTERP_DECOMPOSING_DEVICES = ("cuda", "xpu", "mps", "npu")


def _interpolate_targets(entry: Entry, case: dict) -> Targets:
    """The upsampling kernel of the case's mode (every mode's when the recipe draws it); its
    backward for an entry about differentiation. Off the CPU the decomposition that the mode
    routes ``bilinear`` and ``trilinear`` to is the same call's other route, and on CUDA each
    mode's kernel (either route) is one a case must reach: the sentence covers them all."""
    modes = [case["mode"]] if "mode" in case else list(_INTERP_KERNELS)
    suffix = "_backward" if entry.backward else ""
    decomposition = "aten._unsafe_index_put" if entry.backward else "aten._unsafe_index"
    groups = []
    for mode in modes:
        kernels = _INTERP_KERNELS[mode]
        names = tuple(f"aten.{name}{suffix}" for name in ((kernels,) if isinstance(kernels, str) else kernels))
        groups.append(names + ((decomposition,) if mode in _INTERP_DECOMPOSED else ()))
    native = tuple(name for group in groups for name in group if name != decomposition)
    off_host = tuple(dict.fromkeys(name for group in groups for name in group))
    required = {"cuda": tuple(groups)} if entry.backward and "mode" in case else {}
    return Targets(native, per_device={device: off_host for device in _INTERP_DECOMPOSING_DEVICES},
                   required=required)


def interpolate_op(x, *, size, mode, align_corners=None):
    return F.interpolate(x, size=size, mode=mode, align_corners=align_corners)


@recipe("torch.nn.functional.interpolate", targets=_interpolate_targets)
def interpolate(draw, entry, case, device):
    """``F.interpolate(x, size=..., mode=..., align_corners=...)``; input rank follows the mode.

    Upsampling makes several outputs read the same inputs: their gradients
    collide in backward. ``align_corners`` is passed for the modes that take it.
    """
    ex = Example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    mode = ex.kwarg("mode", ("bilinear", "linear", "bicubic", "trilinear", "nearest", "area"))
    n_sp = _INTERP_RANK.get(mode) or ex.choice((1, 2, 3))
    n, c = ex.batch(), ex.channels()
    sides = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * c * 4 ** n_sp))
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    size = tuple(ex.integer(1, 3 * s) for s in sides)
    if mode == "area" and all(s == 1 for s in size):
        size = (2,) + size[1:]  # area to all ones is a mean: the pooling kernel never runs
    ex.kwargs["size"] = size
    if mode in _INTERP_RANK:
        align_corners = ex.kwarg("align_corners", (False, True))
        return ex.program(interpolate_op, grads=("x",), size=size, mode=mode, align_corners=align_corners)
    return ex.program(interpolate_op, grads=("x",), size=size, mode=mode)


# Kernel thresholds -----------------------------------------------------------------------------
# Where a kernel switches algorithm by size or collision count, from the torch source (the op's
# qualified name as its recipe is registered -> each switch: the quantity it reads, the value, the
# device and compile setting it applies to, what changes there and where it is said). The recipes
# above read it through Example.threshold_side: in the stress and perturbation tiers their examples
# sit just below and just above each switch that applies to the case's device and compile setting
# (eager, or compiled: any other setting than "eager"). The CPU's scatter_add switch is chosen by the
# dtype and the index's layout *and* by a count (the columns of an expanded index): recorded with it.
# Values are spelled as expressions: Hypothesis draws the integer literals of 100 or more it finds in
# the project's modules, and a new one would change the examples every case draws.
THRESHOLDS: dict[str, tuple[dict[str, Any], ...]] = {
    "torch.nn.Embedding": (
        {"quantity": "indices", "at": 3 * 2**10, "device": "cuda", "compile": "eager",
         "switch": "num_indices <= 3072 and not scale_grad_by_freq: embedding_backward_feature_kernel; "
                   "above: indices sorted, then the segmented embedding_backward_cuda_kernel",
         "source": "aten/src/ATen/native/cuda/Embedding.cu, embedding_dense_backward_cuda"},
    ),
    "torch.Tensor.scatter_add_": (
        {"quantity": "channels", "at": 16, "device": "cpu", "compile": "eager",
         "switch": "along dim 0 with an expanded index (strides 1 and 0), contiguous self and src, a floating "
                   "dtype (not Half before it moved to the .cpp) and FBGEMM's OpenMP radix sort available: from 16 "
                   "columns (index.numel() / index.size(0)) the indices are sorted and whole rows summed "
                   "(scatter_add_expanded_index_stub); below, scatter_add_stub (cpu_scatter_gather_base_kernel)",
         "source": "aten/src/ATen/native/TensorAdvancedIndexing.cpp (TensorAdvancedIndexing.h in older releases), "
                   "can_use_expanded_index_path: is_scatter_like, constexpr int64_t threshold = 16"},
    ),
    "torch.nn.functional.grid_sample": (
        {"quantity": "channels", "at": 2**10, "device": "cuda", "compile": "eager",
         "switch": "torch.grid_sampler takes cuDNN's sampler (cudnn_grid_sampler, backward "
                   "cudnn_grid_sampler_backward) for a 4-D input of at most 1,024 channels (input.size(1) <= 1024) "
                   "with bilinear sampling, zero padding, align_corners=True, 32-bit indexing and cuDNN acceptable "
                   "(enabled, a CUDA tensor; float, double or half in recent releases); above, grid_sampler_2d",
         "source": "aten/src/ATen/native/GridSampler.cpp, grid_sampler; cond_cudnn_grid_sampler "
                   "(aten/src/ATen/native/GridSamplerUtils.h: \"cudnn does not support inputs larger than 1024\")"},
    ),
    "torch.cumsum": (
        {"quantity": "elements", "at": 10**6 + 3, "device": "cuda", "compile": "inductor",
         "switch": "compiled cumsum differed between runs from this length on",
         "source": "pytorch/pytorch#190946"},
        {"quantity": "elements", "at": 2**15, "device": "cpu", "compile": "eager",
         "switch": "cpu_cum_base_kernel splits the lines along dim between threads (iter.for_each with grain "
                   "GRAIN_SIZE / size(dim)) only when the tensor holds more than GRAIN_SIZE elements",
         "source": "aten/src/ATen/native/cpu/ReduceOpsKernel.cpp, cpu_cum_base_kernel; at::internal::GRAIN_SIZE"},
    ),
}
