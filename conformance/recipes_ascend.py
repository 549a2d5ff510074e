"""Recipes for the ops of the Ascend deterministic-computation list (table 1).

The Ascend list (``conformance/data/ascend.json``) names 49 APIs. Seven of
them already have a recipe in :mod:`conformance.recipes` (``torch.cumsum``,
``torch.mm``, ``torch.bmm``, ``torch.mv``, ``torch.Tensor.put_``,
``torch.Tensor.index_put``, ``torch.nn.functional.interpolate``); recipes are
shared by op name, so this module registers only the other 42. Find one by
grepping its qualified name, e.g. ``@recipe("torch.sum"``.

Each recipe builds a :class:`conformance.kit.Example` and hands it an *op
function*: a module-level ``def`` right above the recipe, named after what it
calls (``addmm_op`` calls ``torch.addmm``), whose positional parameters are
the example's inputs and whose keyword-only parameters are the constants the
recipe drew (see :mod:`conformance.kit`). Where a recipe picks between call
forms (with or without ``weight``, one or two index tensors), each form has
its own op function.

Conventions, beyond those of :mod:`conformance.kit` and :mod:`conformance.recipes`:

- **Forward and backward.** The Ascend list is about training ("在使用PyTorch
  框架进行训练时"): every differentiable op here runs backward too, whether or
  not the entry says ``backward``. Gradient accumulation (reductions, pooling,
  losses, ``fold``) is where nondeterministic kernels usually hide.
  ``torch.ops.aten.convolution_backward`` is itself a gradient and runs
  forward only.
- **Functional aliases reuse the module recipe.** ``F.ctc_loss``,
  ``F.embedding`` and ``F.adaptive_avg_pool2d`` run exactly what the
  ``nn.CTCLoss`` / ``nn.Embedding`` / ``nn.AdaptiveAvgPool2d`` recipes build.
- **torch_npu-only APIs** raise :class:`~engine.program.RecipeSkipped` where
  ``torch_npu`` cannot be imported, and on any device other than ``npu``.
  Their op functions ``import torch_npu`` in their body, so the reproducer
  does too. Their calls follow the torch_npu API reference (argument order
  and layouts as documented there); they have not been run on Ascend
  hardware, so they stay deliberately plain: float32 / float16, small
  shapes, stride 1 where the reference is ambiguous.
- In-place methods (``addbmm_``, ``addmv_``, ``index_put_``) run on a clone
  of their input, so the input's gradient flows through the in-place op.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import warnings
from typing import Any, Callable

import torch
import torch.nn.functional as F

from detconf.conformance import recipes as torch_docs_recipes
from detconf.conformance.kit import NO_HALF, Example, index_put_parts, index_put_writes, pool_input, shape, window
from detconf.engine.entry import Entry
from detconf.engine.program import Program, RecipeSkipped, recipe
from detconf.engine.trace import Targets

# Targets: the Ascend list is about training, so reaching either the forward or the backward
# kernel of the API is reaching it. Composite APIs are judged by what they decompose into
# on devices without their own kernel (``l1_loss`` is ``sub``, ``abs`` and a reduction there).
_L1_LOSS = ("aten.l1_loss", "aten.abs")
_KL_DIV = ("aten.kl_div", "aten.xlogy", "aten.exp")
# batch_norm's kernel has had several names across torch releases, and backends of their own.
_BATCH_NORM = ("aten.native_batch_norm", "aten._native_batch_norm_legit", "aten._batch_norm_with_update",
               "aten._batch_norm_no_update", "aten.cudnn_batch_norm", "aten.miopen_batch_norm",
               "aten.native_batch_norm_backward", "aten.batch_norm_backward")


def _example(draw, entry: Entry, case: dict, device: torch.device) -> Example:
    """The kit's example builder, differentiating whatever ``grads`` a recipe names (see module notes)."""
    return Example(draw, _for_training(entry), case, device)


def _for_training(entry: Entry) -> Entry:
    return entry if entry.backward else dataclasses.replace(entry, backward=True)


def _small(ex: Example, small: int, large: int) -> int:
    """Upper bound for a side: ``small`` on the small scale, ``large`` on the large one."""
    return large if ex.large else small


def _reduction(ex: Example, options=("mean", "sum", "none")) -> str:
    return ex.kwarg("reduction", options)


# ---------------------------------------------------------------------------
# Reductions: sum, mean, std, var, std_mean, var_mean, trace


def _reduce_input(ex: Example) -> tuple[int, ...]:
    """``x`` of 0-3 dims (non-contiguous drawn), float dtypes."""
    dtype = ex.dtype(("floating",))
    x_shape = shape(ex, ex.integer(0, 3))
    ex.tensor("x", x_shape, dtype, contiguous=None)
    return x_shape


def _reduce_dims(ex: Example, ndim: int) -> int | tuple[int, int] | None:
    """The ``dim`` argument: ``None`` (everything), one dim or two dims."""
    options: list = [None] + list(range(ndim))
    if ndim >= 2:
        options.append((0, -1))
    dim = ex.choice(options)
    ex.kwargs["dim"] = dim
    return dim


def sum_all_op(x):
    return torch.sum(x)


def sum_op(x, *, dim, keepdim):
    return torch.sum(x, dim=dim, keepdim=keepdim)


@recipe("torch.sum", targets="aten.sum")
def sum_(draw, entry, case, device):
    """``torch.sum(x, dim=..., keepdim=...)``, or ``torch.sum(x)`` over everything."""
    ex = _example(draw, entry, case, device)
    x_shape = _reduce_input(ex)
    dim = _reduce_dims(ex, len(x_shape))
    if dim is None:
        return ex.program(sum_all_op, grads=("x",))
    keepdim = ex.kwarg("keepdim", (False, True))
    return ex.program(sum_op, grads=("x",), dim=dim, keepdim=keepdim)


def mean_all_op(x):
    return torch.mean(x)


def mean_op(x, *, dim, keepdim):
    return torch.mean(x, dim=dim, keepdim=keepdim)


@recipe("torch.mean", targets="aten.mean")
def mean(draw, entry, case, device):
    """``torch.mean(x, dim=..., keepdim=...)``, or ``torch.mean(x)``."""
    ex = _example(draw, entry, case, device)
    x_shape = _reduce_input(ex)
    dim = _reduce_dims(ex, len(x_shape))
    if dim is None:
        return ex.program(mean_all_op, grads=("x",))
    keepdim = ex.kwarg("keepdim", (False, True))
    return ex.program(mean_op, grads=("x",), dim=dim, keepdim=keepdim)


def _moments(draw, entry, case, device, op: Callable[..., Any]) -> Program:
    """``op(x, dim=..., correction=..., keepdim=...)`` for std / var / std_mean / var_mean."""
    ex = _example(draw, entry, case, device)
    x_shape = _reduce_input(ex)
    dim = _reduce_dims(ex, len(x_shape))
    correction = ex.kwarg("correction", (1, 0))
    keepdim = ex.kwarg("keepdim", (False, True))
    # One element with correction=1 gives NaN (and a warning): still a
    # deterministic result, compared bit for bit like any other.
    return ex.program(op, grads=("x",), dim=dim, correction=correction, keepdim=keepdim)


def std_op(x, *, dim, correction, keepdim):
    return torch.std(x, dim=dim, correction=correction, keepdim=keepdim)


@recipe("torch.std", targets="aten.std")
def std(draw, entry, case, device):
    """``torch.std(x, dim, correction, keepdim)``."""
    return _moments(draw, entry, case, device, std_op)


def var_op(x, *, dim, correction, keepdim):
    return torch.var(x, dim=dim, correction=correction, keepdim=keepdim)


@recipe("torch.var", targets="aten.var")
def var(draw, entry, case, device):
    """``torch.var(x, dim, correction, keepdim)``."""
    return _moments(draw, entry, case, device, var_op)


def std_mean_op(x, *, dim, correction, keepdim):
    return torch.std_mean(x, dim=dim, correction=correction, keepdim=keepdim)


@recipe("torch.std_mean", targets="aten.std_mean")
def std_mean(draw, entry, case, device):
    """``torch.std_mean(x, dim, correction, keepdim)`` -> (std, mean)."""
    return _moments(draw, entry, case, device, std_mean_op)


def var_mean_op(x, *, dim, correction, keepdim):
    return torch.var_mean(x, dim=dim, correction=correction, keepdim=keepdim)


@recipe("torch.var_mean", targets="aten.var_mean")
def var_mean(draw, entry, case, device):
    """``torch.var_mean(x, dim, correction, keepdim)`` -> (var, mean)."""
    return _moments(draw, entry, case, device, var_mean_op)


def trace_op(x):
    return torch.trace(x)


@recipe("torch.trace", targets="aten.trace")
def trace(draw, entry, case, device):
    """``torch.trace(x)`` of a (possibly non-square) 2-D matrix."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 8, 1024)
    ex.tensor("x", (ex.side(1, cap), ex.side(1, cap)), dtype, contiguous=None)
    return ex.program(trace_op, grads=("x",))


# ---------------------------------------------------------------------------
# Products: dot, matmul, addmm, addmv, addbmm and their method / in-place forms


def _scalars(ex: Example) -> tuple[float, float]:
    """``beta`` and ``alpha``; ``beta=0`` ignores the input (and gives it a zero gradient)."""
    return ex.kwarg("beta", (1, 0.5, 0)), ex.kwarg("alpha", (1, 0.5))


def dot_op(a, b):
    return torch.dot(a, b)


@recipe("torch.dot", targets="aten.dot")
def dot(draw, entry, case, device):
    """``torch.dot(a, b)`` of two 1-D tensors; long vectors on the large scale."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    n = ex.side(1, ex.limits.max_numel // 2)
    ex.tensor("a", (n,), dtype, contiguous=None)
    ex.tensor("b", (n,), dtype)
    return ex.program(dot_op, grads=("a", "b"))


# (a's shape, b's shape) in terms of n, m, p and a batch size; broadcasting included.
_MATMUL_FORMS = {
    "matrix @ matrix": lambda b, n, m, p: ((n, m), (m, p)),
    "vector @ vector": lambda b, n, m, p: ((m,), (m,)),
    "matrix @ vector": lambda b, n, m, p: ((n, m), (m,)),
    "vector @ matrix": lambda b, n, m, p: ((m,), (m, p)),
    "batch @ batch": lambda b, n, m, p: ((b, n, m), (b, m, p)),
    "batch @ matrix": lambda b, n, m, p: ((b, n, m), (m, p)),
    "matrix @ batch": lambda b, n, m, p: ((n, m), (b, m, p)),
    "broadcast batch": lambda b, n, m, p: ((b, 1, n, m), (2, m, p)),
}


def matmul_op(a, b):
    return torch.matmul(a, b)


@recipe("torch.matmul", targets=("aten.matmul", "aten.mm", "aten.bmm", "aten.mv", "aten.dot"))
def matmul(draw, entry, case, device):
    """``torch.matmul(a, b)`` in each of its dispatch forms (dot, mv, mm, bmm, broadcast)."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    form = ex.choice(list(_MATMUL_FORMS))
    cap = _small(ex, 8, 256)
    b, n, m, p = ex.side(1, _small(ex, 3, 8)), ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    a_shape, b_shape = _MATMUL_FORMS[form](b, n, m, p)
    ex.tensor("a", a_shape, dtype, contiguous=None)
    ex.tensor("b", b_shape, dtype)
    ex.kwargs["form"] = form
    return ex.program(matmul_op, grads=("a", "b"))


def _addmm_parts(ex: Example, *, broadcast_input: bool) -> tuple[float, float]:
    """``x`` (n, p) — or a broadcast row (p,) — and ``m1`` (n, m), ``m2`` (m, p)."""
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 8, 512)
    n, m, p = ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    x_shape = (p,) if broadcast_input and ex.choice((False, True)) else (n, p)
    ex.tensor("x", x_shape, dtype)
    ex.tensor("m1", (n, m), dtype, contiguous=None)
    ex.tensor("m2", (m, p), dtype)
    return _scalars(ex)


def addmm_op(x, m1, m2, *, beta, alpha):
    return torch.addmm(x, m1, m2, beta=beta, alpha=alpha)


@recipe("torch.addmm", targets="aten.addmm")
def addmm(draw, entry, case, device):
    """``torch.addmm(x, m1, m2, beta=..., alpha=...)``; ``x`` may broadcast."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmm_parts(ex, broadcast_input=True)
    return ex.program(addmm_op, grads=("x", "m1", "m2"), beta=beta, alpha=alpha)


def tensor_addmm_op(x, m1, m2, *, beta, alpha):
    return x.addmm(m1, m2, beta=beta, alpha=alpha)


@recipe("torch.Tensor.addmm", targets="aten.addmm")
def tensor_addmm(draw, entry, case, device):
    """``x.addmm(m1, m2, beta=..., alpha=...)`` (the method; out of place)."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmm_parts(ex, broadcast_input=True)
    return ex.program(tensor_addmm_op, grads=("x", "m1", "m2"), beta=beta, alpha=alpha)


def _addmv_parts(ex: Example) -> tuple[float, float]:
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 8, 1024)
    n, m = ex.side(1, cap), ex.side(1, cap)
    ex.tensor("x", (n,), dtype)
    ex.tensor("mat", (n, m), dtype, contiguous=None)
    ex.tensor("vec", (m,), dtype)
    return _scalars(ex)


def addmv_op(x, mat, vec, *, beta, alpha):
    return torch.addmv(x, mat, vec, beta=beta, alpha=alpha)


@recipe("torch.addmv", targets="aten.addmv")
def addmv(draw, entry, case, device):
    """``torch.addmv(x, mat, vec, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmv_parts(ex)
    return ex.program(addmv_op, grads=("x", "mat", "vec"), beta=beta, alpha=alpha)


def addmv_inplace_op(x, mat, vec, *, beta, alpha):
    return x.clone().addmv_(mat, vec, beta=beta, alpha=alpha)


@recipe("torch.Tensor.addmv_", targets=("aten.addmv_", "aten.addmv"))
def tensor_addmv_(draw, entry, case, device):
    """``x.clone().addmv_(mat, vec, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmv_parts(ex)
    return ex.program(addmv_inplace_op, grads=("x", "mat", "vec"), beta=beta, alpha=alpha)


def _addbmm_parts(ex: Example) -> tuple[float, float]:
    """``x`` (n, p), ``b1`` (b, n, m), ``b2`` (b, m, p): the batch is summed, an accumulation over b."""
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 6, 64)
    b = ex.side(1, _small(ex, 4, 64))
    n, m, p = ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    ex.tensor("x", (n, p), dtype)
    ex.tensor("b1", (b, n, m), dtype, contiguous=None)
    ex.tensor("b2", (b, m, p), dtype)
    return _scalars(ex)


def addbmm_op(x, b1, b2, *, beta, alpha):
    return torch.addbmm(x, b1, b2, beta=beta, alpha=alpha)


@recipe("torch.addbmm", targets="aten.addbmm")
def addbmm(draw, entry, case, device):
    """``torch.addbmm(x, b1, b2, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addbmm_parts(ex)
    return ex.program(addbmm_op, grads=("x", "b1", "b2"), beta=beta, alpha=alpha)


def addbmm_inplace_op(x, b1, b2, *, beta, alpha):
    return x.clone().addbmm_(b1, b2, beta=beta, alpha=alpha)


@recipe("torch.Tensor.addbmm_", targets=("aten.addbmm_", "aten.addbmm"))
def tensor_addbmm_(draw, entry, case, device):
    """``x.clone().addbmm_(b1, b2, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addbmm_parts(ex)
    return ex.program(addbmm_inplace_op, grads=("x", "b1", "b2"), beta=beta, alpha=alpha)


# ---------------------------------------------------------------------------
# Indexing


def index_put_idx0_op(x, idx0, values, *, accumulate):
    return x.clone().index_put_((idx0,), values, accumulate=accumulate)


def index_put_idx0_idx1_op(x, idx0, idx1, values, *, accumulate):
    return x.clone().index_put_((idx0, idx1), values, accumulate=accumulate)


@recipe("torch.Tensor.index_put_", targets=("aten.index_put_", "aten.index_put", "aten._index_put_impl_"))
def tensor_index_put_(draw, entry, case, device):
    """``x.clone().index_put_((idx0[, idx1]), values, accumulate=...)``, duplicates included.

    The in-place twin of the ``torch.Tensor.index_put`` recipe (same inputs).
    """
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    accumulate = ex.kwarg("accumulate", (False, True))
    k, _ = index_put_parts(ex, dtype)
    op = index_put_idx0_op if k == 1 else index_put_idx0_idx1_op
    compare = () if accumulate else (index_put_writes(indices=("idx0", "idx1")[:k]),)
    return ex.program(op, grads=("x", "values"), compare=compare, accumulate=accumulate)


# ---------------------------------------------------------------------------
# Normalization and activation: batch_norm, layer_norm, prelu


def batch_norm_op(x, running_mean, running_var, weight, bias, *, training, momentum):
    out = F.batch_norm(x, running_mean, running_var, weight, bias, training=training, momentum=momentum, eps=1e-05)
    return (out, running_mean, running_var)


@recipe("torch.nn.functional.batch_norm",
        targets=_BATCH_NORM)
def batch_norm(draw, entry, case, device):
    """``F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)``.

    Returns the output and the running statistics (updated in place in
    training mode): the batch statistics are reductions over N and space.
    """
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    training = ex.kwarg("training", (True, False))
    n_sp = ex.integer(0, 2)
    # Training needs more than one value per channel.
    n, c = ex.side(2 if training else 1, _small(ex, 3, 16)), ex.channels()
    sides = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * c)) if n_sp else ()
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    ex.tensor("running_mean", (c,), dtype, low=-1, high=1)
    ex.tensor("running_var", (c,), dtype, low=0.5, high=2)
    ex.tensor("weight", (c,), dtype, low=0.5, high=2)
    ex.tensor("bias", (c,), dtype, low=-1, high=1)
    momentum = ex.kwarg("momentum", (0.1, 0.5))
    return ex.program(batch_norm_op, grads=("x", "weight", "bias"), training=training, momentum=momentum)


def layer_norm_affine_op(x, weight, bias, *, normalized_shape):
    return F.layer_norm(x, normalized_shape, weight, bias, eps=1e-05)


def layer_norm_op(x, *, normalized_shape):
    return F.layer_norm(x, normalized_shape, eps=1e-05)


@recipe("torch.nn.functional.layer_norm", targets=("aten.native_layer_norm", "aten.native_layer_norm_backward"))
def layer_norm(draw, entry, case, device):
    """``F.layer_norm(x, normalized_shape, weight, bias, eps)`` over the last 1-2 dims."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.integer(1, 3)
    x_shape = shape(ex, ndim)
    k = ex.integer(1, min(2, ndim))
    normalized = tuple(x_shape[-k:])
    ex.tensor("x", x_shape, dtype, contiguous=None)
    ex.kwargs["normalized_shape"] = normalized
    if ex.choice((True, False)):
        ex.tensor("weight", normalized, dtype, low=0.5, high=2)
        ex.tensor("bias", normalized, dtype, low=-1, high=1)
        return ex.program(layer_norm_affine_op, grads=("x", "weight", "bias"), normalized_shape=normalized)
    return ex.program(layer_norm_op, grads=("x",), normalized_shape=normalized)


def prelu_op(x, weight):
    return F.prelu(x, weight)


@recipe("torch.nn.functional.prelu", targets=("aten.prelu", "aten._prelu_kernel", "aten._prelu_kernel_backward"))
def prelu(draw, entry, case, device):
    """``F.prelu(x, weight)`` with one shared slope or one per channel.

    The slope's gradient sums over the batch and space: an accumulation.
    """
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    n_sp = ex.integer(0, 2)
    n, c = ex.batch(), ex.channels()
    sides = ex.spatial(n_sp, budget=ex.limits.max_numel // (n * c)) if n_sp else ()
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    per_channel = ex.choice((False, True))
    ex.tensor("weight", (c if per_channel else 1,), dtype, low=0, high=0.5)
    ex.kwargs["per_channel"] = per_channel
    return ex.program(prelu_op, grads=("x", "weight"))


# ---------------------------------------------------------------------------
# Pooling, fold / unfold


@recipe("torch.nn.functional.adaptive_avg_pool2d",
        targets=("aten._adaptive_avg_pool2d", "aten._adaptive_avg_pool2d_backward"))
def functional_adaptive_avg_pool2d(draw, entry, case, device):
    """``F.adaptive_avg_pool2d``: the ``nn.AdaptiveAvgPool2d`` recipe, with backward."""
    return torch_docs_recipes.adaptive_avg_pool2d(draw, _for_training(entry), case, device)


def avg_pool2d_op(x, *, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return F.avg_pool2d(x, kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                        count_include_pad=count_include_pad, divisor_override=divisor_override)


@recipe("torch.nn.functional.avg_pool2d", targets=("aten.avg_pool2d", "aten.avg_pool2d_backward"))
def avg_pool2d(draw, entry, case, device):
    """``F.avg_pool2d(x, k, stride, padding, ceil_mode, count_include_pad, divisor_override)``.

    Overlapping windows (stride < kernel) make backward contributions collide.
    """
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    x_shape = pool_input(ex, 2, dtype=dtype)
    k, stride, padding = window(ex, x_shape[-2:])
    ceil_mode = ex.kwarg("ceil_mode", (False, True))
    count_include_pad = ex.kwarg("count_include_pad", (True, False))
    divisor_override = ex.kwarg("divisor_override", (None, 3))
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding)
    return ex.program(avg_pool2d_op, grads=("x",), kernel_size=k, stride=stride, padding=padding,
                      ceil_mode=ceil_mode, count_include_pad=count_include_pad, divisor_override=divisor_override)


def _blocks(ex: Example) -> tuple[tuple[int, int], int, int, int]:
    """kernel (kh, kw), dilation, padding, stride of a sliding block; stride < kernel overlaps blocks."""
    kernel = (ex.integer(1, 3), ex.integer(1, 3))
    dilation = ex.integer(1, 2)
    padding = ex.integer(0, 1)
    stride = ex.integer(1, 2)
    ex.kwargs.update(kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)
    return kernel, dilation, padding, stride


def _block_sides(ex: Example, kernel, dilation: int, padding: int, budget: int) -> tuple[int, int]:
    """Spatial sides that fit at least one block."""
    mins = tuple(max(1, dilation * (k - 1) + 1 - 2 * padding) for k in kernel)
    return ex.spatial(2, mins=mins, budget=budget)


def _num_blocks(sides, kernel, dilation: int, padding: int, stride: int) -> int:
    return math.prod((s + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for s, k in zip(sides, kernel))


def _block_args(kernel, dilation: int, padding: int, stride: int) -> dict[str, Any]:
    """The block arguments of ``F.unfold`` / ``F.fold``, as the op functions' constants."""
    return {"kernel_size": kernel, "dilation": dilation, "padding": padding, "stride": stride}


def unfold_op(x, *, kernel_size, dilation, padding, stride):
    return F.unfold(x, kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride)


@recipe("torch.nn.functional.unfold", targets=("aten.im2col", "aten.col2im"))
def unfold(draw, entry, case, device):
    """``F.unfold(x, kernel_size, dilation, padding, stride)`` (im2col); its backward is a fold (col2im)."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    kernel, dilation, padding, stride = _blocks(ex)
    n, c = ex.batch(), ex.channels()
    sides = _block_sides(ex, kernel, dilation, padding, ex.limits.max_numel // (n * c))
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    return ex.program(unfold_op, grads=("x",), **_block_args(kernel, dilation, padding, stride))


def fold_op(x, *, output_size, kernel_size, dilation, padding, stride):
    return F.fold(x, output_size, kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride)


@recipe("torch.nn.functional.fold", targets=("aten.col2im", "aten.im2col"))
def fold(draw, entry, case, device):
    """``F.fold(x, output_size, kernel_size, dilation, padding, stride)`` (col2im).

    Overlapping blocks are summed into the output: an accumulation in forward.
    """
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    kernel, dilation, padding, stride = _blocks(ex)
    n, c = ex.batch(), ex.channels()
    out = _block_sides(ex, kernel, dilation, padding, ex.limits.max_numel // (n * c))
    blocks = _num_blocks(out, kernel, dilation, padding, stride)
    ex.tensor("x", (n, c * kernel[0] * kernel[1], blocks), dtype, contiguous=None)
    ex.kwargs["output_size"] = out
    return ex.program(fold_op, grads=("x",), output_size=out, **_block_args(kernel, dilation, padding, stride))


# ---------------------------------------------------------------------------
# Losses


def _loss_pair(ex: Example, *, low: float = -3, high: float = 3) -> tuple[int, ...]:
    """``x`` and ``target`` of the same 0-3 dim shape."""
    dtype = ex.dtype(("floating",))
    x_shape = shape(ex, ex.integer(0, 3))
    ex.tensor("x", x_shape, dtype, low=low, high=high, contiguous=None)
    ex.tensor("target", x_shape, dtype, low=low, high=high)
    return x_shape


def mse_loss_op(x, target, *, reduction):
    return F.mse_loss(x, target, reduction=reduction)


@recipe("torch.nn.functional.mse_loss", targets=("aten.mse_loss", "aten.mse_loss_backward"))
def mse_loss(draw, entry, case, device):
    """``F.mse_loss(x, target, reduction=...)``."""
    ex = _example(draw, entry, case, device)
    _loss_pair(ex)
    reduction = _reduction(ex)
    return ex.program(mse_loss_op, grads=("x", "target"), reduction=reduction)


def l1_loss_op(x, target, *, reduction):
    return F.l1_loss(x, target, reduction=reduction)


@recipe("torch.nn.functional.l1_loss", targets=_L1_LOSS)
def l1_loss(draw, entry, case, device):
    """``F.l1_loss(x, target, reduction=...)``."""
    ex = _example(draw, entry, case, device)
    _loss_pair(ex)
    reduction = _reduction(ex)
    return ex.program(l1_loss_op, grads=("x", "target"), reduction=reduction)


def smooth_l1_loss_op(x, target, *, reduction, beta):
    return F.smooth_l1_loss(x, target, reduction=reduction, beta=beta)


@recipe("torch.nn.functional.smooth_l1_loss",
        targets=("aten.smooth_l1_loss", "aten.smooth_l1_loss_backward") + _L1_LOSS)
def smooth_l1_loss(draw, entry, case, device):
    """``F.smooth_l1_loss(x, target, reduction=..., beta=...)``; ``beta=0`` is the L1 path."""
    ex = _example(draw, entry, case, device)
    _loss_pair(ex)
    reduction = _reduction(ex)
    beta = ex.kwarg("beta", (1.0, 0.5, 0.0))
    return ex.program(smooth_l1_loss_op, grads=("x", "target"), reduction=reduction, beta=beta)


def soft_margin_loss_op(x, target, *, reduction):
    return F.soft_margin_loss(x, target, reduction=reduction)


@recipe("torch.nn.functional.soft_margin_loss", targets=("aten.soft_margin_loss", "aten.soft_margin_loss_backward"))
def soft_margin_loss(draw, entry, case, device):
    """``F.soft_margin_loss(x, target, reduction=...)`` with targets in {-1, 1}."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    x_shape = shape(ex, ex.integer(0, 3))
    ex.tensor("x", x_shape, dtype, low=-3, high=3, contiguous=None)
    bits = ex.tensor("_bits", x_shape, dtype, low=0, high=1, integral=True, is_input=False)
    ex.add("target", bits * 2 - 1, "_bits * 2 - 1")
    reduction = _reduction(ex)
    return ex.program(soft_margin_loss_op, grads=("x",), reduction=reduction)


def binary_cross_entropy_weighted_op(p, target, weight, *, reduction):
    return F.binary_cross_entropy(p, target, weight=weight, reduction=reduction)


def binary_cross_entropy_op(p, target, *, reduction):
    return F.binary_cross_entropy(p, target, reduction=reduction)


@recipe("torch.nn.functional.binary_cross_entropy",
        targets=("aten.binary_cross_entropy", "aten.binary_cross_entropy_backward"))
def binary_cross_entropy(draw, entry, case, device):
    """``F.binary_cross_entropy(p, target, weight=..., reduction=...)``; ``p`` is a sigmoid of seeded logits."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    p_shape = shape(ex, ex.integer(0, 3))
    logits = ex.tensor("_logits", p_shape, dtype, low=-4, high=4, is_input=False)
    ex.add("p", logits.sigmoid(), "_logits.sigmoid()")
    ex.tensor("target", p_shape, dtype, low=0, high=1)
    reduction = _reduction(ex)
    if ex.choice((False, True)):
        ex.tensor("weight", p_shape, dtype, low=0.5, high=2)
        return ex.program(binary_cross_entropy_weighted_op, grads=("p",), reduction=reduction)
    return ex.program(binary_cross_entropy_op, grads=("p",), reduction=reduction)


def binary_cross_entropy_with_logits_pos_weight_op(x, target, pos_weight, *, reduction):
    return F.binary_cross_entropy_with_logits(x, target, pos_weight=pos_weight, reduction=reduction)


def binary_cross_entropy_with_logits_op(x, target, *, reduction):
    return F.binary_cross_entropy_with_logits(x, target, reduction=reduction)


@recipe("torch.nn.functional.binary_cross_entropy_with_logits", targets="aten.binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(draw, entry, case, device):
    """``F.binary_cross_entropy_with_logits(x, target, pos_weight=..., reduction=...)``."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    x_shape = shape(ex, ex.integer(1, 3))
    ex.tensor("x", x_shape, dtype, low=-4, high=4, contiguous=None)
    ex.tensor("target", x_shape, dtype, low=0, high=1)
    reduction = _reduction(ex)
    if ex.choice((False, True)):
        # One positive weight per class (the last dimension), broadcast over the rest.
        # torch raises when pos_weight requires grad ("not differentiable with respect to argument").
        ex.tensor("pos_weight", x_shape[-1:], dtype, low=0.5, high=3)
        return ex.program(binary_cross_entropy_with_logits_pos_weight_op, grads=("x",), reduction=reduction)
    return ex.program(binary_cross_entropy_with_logits_op, grads=("x",), reduction=reduction)


def kl_div_op(log_p, target, *, reduction, log_target):
    return F.kl_div(log_p, target, reduction=reduction, log_target=log_target)


@recipe("torch.nn.functional.kl_div", targets=_KL_DIV)
def kl_div(draw, entry, case, device):
    """``F.kl_div(log_p, target, reduction=..., log_target=...)`` on softmax distributions."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    x_shape = shape(ex, ex.integer(1, 3))
    logits = ex.tensor("_logits", x_shape, dtype, low=-3, high=3, is_input=False)
    ex.add("log_p", logits.log_softmax(-1), "_logits.log_softmax(-1)")
    log_target = ex.kwarg("log_target", (False, True))
    t_logits = ex.tensor("_t_logits", x_shape, dtype, low=-3, high=3, is_input=False)
    if log_target:
        ex.add("target", t_logits.log_softmax(-1), "_t_logits.log_softmax(-1)")
    else:
        ex.add("target", t_logits.softmax(-1), "_t_logits.softmax(-1)")
    reduction = _reduction(ex, ("batchmean", "sum", "mean", "none"))
    return ex.program(kl_div_op, grads=("log_p", "target"), reduction=reduction, log_target=log_target)


def multilabel_margin_loss_op(x, target, *, reduction):
    return F.multilabel_margin_loss(x, target, reduction=reduction)


@recipe("torch.nn.functional.multilabel_margin_loss",
        targets=("aten.multilabel_margin_loss_forward", "aten.multilabel_margin_loss_backward"))
def multilabel_margin_loss(draw, entry, case, device):
    """``F.multilabel_margin_loss(x, target, reduction=...)``.

    Each target row holds class indices up to its first ``-1``; the rest is
    ignored. Repeated labels are allowed.
    """
    ex = _example(draw, entry, case, device)
    # torch's CPU kernel has neither float16 nor bfloat16 ("not implemented for 'Half'").
    dtype = ex.dtype(("floating",), exclude_on_cpu=NO_HALF)
    batched = ex.choice((True, False))
    c = ex.side(1, _small(ex, 6, 64))
    n = ex.batch() if batched else 1
    x_shape = (n, c) if batched else (c,)
    ex.tensor("x", x_shape, dtype, low=-2, high=2, contiguous=None)
    labels = ex.tensor("_labels", x_shape, torch.int64, low=0, high=c - 1, is_input=False)
    cut = ex.tensor("_cut", x_shape[:-1] + (1,), torch.int64, low=0, high=c, is_input=False)
    positions = torch.arange(c, device=ex.device)
    ex.add("target", torch.where(positions < cut, labels, -1),
           f"torch.where(torch.arange({c}, device={str(ex.device)!r}) < _cut, _labels, -1)")
    reduction = _reduction(ex)
    return ex.program(multilabel_margin_loss_op, grads=("x",), reduction=reduction)


def _nll_parts(ex: Example, rank: int) -> dict[str, Any]:
    """Log-probabilities ``x`` of ``rank`` dims (class dim 1, or 0 when unbatched), ``target``, maybe ``weight``.

    Returns the constants ``ignore_index`` and ``reduction``; whether the
    example has a ``weight`` input picks the op function.
    """
    dtype = ex.dtype(("floating",))
    c = ex.channels(4, 16)
    if rank == 1:
        lead, rest = (), ()
    else:
        lead = (ex.batch(),)
        rest = ex.spatial(rank - 2, budget=ex.limits.max_numel // (lead[0] * c)) if rank > 2 else ()
    # Contiguous: torch's CPU nll_loss2d backward rejects a non-contiguous input.
    ex.tensor("x", lead + (c,) + rest, dtype, low=-4, high=0)
    ex.tensor("target", lead + rest, torch.int64, low=0, high=c - 1)
    if ex.choice((False, True)):
        ex.tensor("weight", (c,), dtype, low=0.5, high=2)
    # Ignoring class 0 drops some targets from the reduction (and from 'mean's divisor).
    ignore_index = ex.kwarg("ignore_index", (-100, 0))
    reduction = _reduction(ex)
    return {"ignore_index": ignore_index, "reduction": reduction}


def nll_loss_weighted_op(x, target, weight, *, ignore_index, reduction):
    return F.nll_loss(x, target, weight=weight, ignore_index=ignore_index, reduction=reduction)


def nll_loss_op(x, target, *, ignore_index, reduction):
    return F.nll_loss(x, target, ignore_index=ignore_index, reduction=reduction)


@recipe("torch.nn.functional.nll_loss",
        targets=("aten.nll_loss_forward", "aten.nll_loss2d_forward", "aten.nll_loss_backward", "aten.nll_loss2d_backward"))
def functional_nll_loss(draw, entry, case, device):
    """``F.nll_loss(x, target, ...)`` on ``(C)``, ``(N, C)``, ``(N, C, d)`` or ``(N, C, H, W)`` input."""
    ex = _example(draw, entry, case, device)
    rank = ex.choice((2, 1, 3, 4))
    ex.kwargs["input_rank"] = rank
    constants = _nll_parts(ex, rank)
    op = nll_loss_weighted_op if "weight" in ex.inputs else nll_loss_op
    return ex.program(op, grads=("x",), **constants)


def nll_loss2d_weighted_op(x, target, weight, *, ignore_index, reduction):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLLLoss2d is deprecated, still the listed API
        loss = torch.nn.NLLLoss2d(weight=weight, ignore_index=ignore_index, reduction=reduction)
    return loss(x, target)


def nll_loss2d_op(x, target, *, ignore_index, reduction):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLLLoss2d is deprecated, still the listed API
        loss = torch.nn.NLLLoss2d(ignore_index=ignore_index, reduction=reduction)
    return loss(x, target)


@recipe("torch.nn.NLLLoss2d", targets=("aten.nll_loss2d_forward", "aten.nll_loss2d_backward"))
def nll_loss2d(draw, entry, case, device):
    """``torch.nn.NLLLoss2d(...)(x, target)`` on ``(N, C, H, W)``, the module the list names.

    ``NLLLoss2d`` is a deprecated subclass of ``NLLLoss`` (the same
    computation on 4-D input); where a torch no longer has it the case is
    skipped rather than silently tested through another API.
    """
    if not hasattr(torch.nn, "NLLLoss2d"):
        raise RecipeSkipped(f"torch.nn.NLLLoss2d is not in torch {torch.__version__}")
    ex = _example(draw, entry, case, device)
    constants = _nll_parts(ex, 4)
    op = nll_loss2d_weighted_op if "weight" in ex.inputs else nll_loss2d_op
    return ex.program(op, grads=("x",), **constants)


@recipe("torch.nn.functional.ctc_loss",
        targets=Targets(("aten._ctc_loss", "aten._ctc_loss_backward"), {"cuda": ("aten._ctc_loss", "aten._ctc_loss_backward", "aten._cudnn_ctc_loss")}))
def functional_ctc_loss(draw, entry, case, device):
    """``F.ctc_loss``: the ``nn.CTCLoss`` recipe, with backward."""
    return torch_docs_recipes.ctc_loss(draw, _for_training(entry), case, device)


@recipe("torch.nn.functional.embedding", targets=("aten.embedding", "aten.embedding_dense_backward"))
def functional_embedding(draw, entry, case, device):
    """``F.embedding``: the ``nn.Embedding`` recipe (duplicate ids collide in the weight gradient), with backward."""
    return torch_docs_recipes.embedding(draw, _for_training(entry), case, device)


# ---------------------------------------------------------------------------
# Convolution backward (aten)


def _conv_out_side(side: int, k: int, stride: int, padding: int, dilation: int, transposed: bool,
                   output_padding: int) -> int:
    if transposed:
        return (side - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
    return (side + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def convolution_backward_op(grad_output, input, weight, *, bias_sizes, stride, padding, dilation, transposed,
                            output_padding, groups, output_mask):
    return torch.ops.aten.convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                                               transposed, output_padding, groups, output_mask)


@recipe("torch.ops.aten.convolution_backward", targets="aten.convolution_backward")
def convolution_backward(draw, entry, case, device):
    """``torch.ops.aten.convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)`` -> (grad_input, grad_weight, grad_bias).

    Called directly with the aten schema. It is a gradient already, so it
    runs forward only. ``grad_weight`` and ``grad_bias`` sum over the batch
    and every output position.
    """
    ex = Example(draw, entry, case, device)  # a gradient itself: no second-order backward
    dtype = ex.dtype(("floating",))
    n_sp = ex.choice((2, 1, 3))
    transposed = ex.kwarg("transposed", (False, True))
    groups = ex.choice((1, 2))
    c_in, c_out = groups * ex.channels(2, 4), groups * ex.channels(2, 4)
    k = tuple(ex.integer(1, 3) for _ in range(n_sp))
    stride, dilation = ex.integer(1, 2), ex.integer(1, 2)
    if transposed:
        padding = min(ex.integer(0, 1), min(dilation * (kk - 1) for kk in k) // 2)
        output_padding = ex.integer(0, max(stride, dilation) - 1)
        mins: tuple[int, ...] | int = 1
    else:
        padding, output_padding = ex.integer(0, 1), 0
        mins = tuple(max(1, dilation * (kk - 1) + 1 - 2 * padding) for kk in k)
    batch = ex.batch()
    sides = ex.spatial(n_sp, mins=mins, budget=ex.limits.max_numel // (batch * c_in * stride ** n_sp))
    out = tuple(_conv_out_side(s, kk, stride, padding, dilation, transposed, output_padding)
                for s, kk in zip(sides, k))
    ex.tensor("input", (batch, c_in) + sides, dtype, low=-2, high=2, contiguous=None)
    w_shape = (c_in, c_out // groups) + k if transposed else (c_out, c_in // groups) + k
    ex.tensor("weight", w_shape, dtype, low=-1, high=1)
    ex.tensor("grad_output", (batch, c_out) + out, dtype, low=-1, high=1)
    with_bias = ex.kwarg("bias", (True, False))
    bias_sizes = [c_out] if with_bias else None
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding, dilation=dilation, groups=groups,
                     output_padding=output_padding)
    return ex.program(convolution_backward_op, bias_sizes=bias_sizes, stride=[stride] * n_sp,
                      padding=[padding] * n_sp, dilation=[dilation] * n_sp, transposed=transposed,
                      output_padding=[output_padding] * n_sp, groups=groups, output_mask=[True, True, with_bias])


# ---------------------------------------------------------------------------
# torch_npu-only APIs (Ascend hardware; not run outside it)


def _require_torch_npu(entry: Entry, device: torch.device) -> None:
    """Raise ``RecipeSkipped`` unless ``torch_npu`` imports and ``device`` is an NPU."""
    try:
        importlib.import_module("torch_npu")
    except ImportError:
        raise RecipeSkipped("needs torch_npu (not installed)", needs_device="npu") from None
    except Exception as exc:  # noqa: BLE001 - a broken CANN install raises all sorts
        raise RecipeSkipped(f"needs torch_npu (import failed: {type(exc).__name__}: {exc})", needs_device="npu") from None
    if torch.device(device).type != "npu":
        raise RecipeSkipped(f"{entry.op} runs on npu devices only, not {torch.device(device).type}",
                            needs_device="npu")


def _npu_dtype(ex: Example) -> torch.dtype:
    return ex.choice((torch.float32, torch.float16))


def npu_linear_op(x, weight, bias):
    import torch_npu
    return torch_npu.npu_linear(x, weight, bias)


@recipe("torch_npu.npu_linear", targets="npu.npu_linear", device="npu")
def npu_linear(draw, entry, case, device):
    """``torch_npu.npu_linear(x, weight, bias)``: x (N, in), weight (out, in), bias (out)."""
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    dtype = _npu_dtype(ex)
    cap = _small(ex, 16, 1024)
    n, k, m = ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    ex.tensor("x", (n, k), dtype, low=-1, high=1)
    ex.tensor("weight", (m, k), dtype, low=-1, high=1)
    ex.tensor("bias", (m,), dtype, low=-1, high=1)
    return ex.program(npu_linear_op, grads=("x", "weight", "bias"))


def _npu_conv_parts(ex: Example, transposed: bool) -> tuple[int, int, int, int]:
    """2-D NCHW input, weight and bias; returns (stride, padding, dilation, groups)."""
    dtype = _npu_dtype(ex)
    groups = ex.choice((1, 2))
    c_in, c_out = groups * ex.channels(2, 8), groups * ex.channels(2, 8)
    k = ex.integer(1, 3)
    stride, dilation = ex.integer(1, 2), 1
    padding = ex.integer(0, (k - 1) // 2)
    n = ex.batch()
    h, w = ex.spatial(2, mins=k, budget=ex.limits.max_numel // (n * c_in))
    ex.tensor("x", (n, c_in, h, w), dtype, low=-2, high=2)
    w_shape = (c_in, c_out // groups, k, k) if transposed else (c_out, c_in // groups, k, k)
    ex.tensor("weight", w_shape, dtype, low=-1, high=1)
    ex.tensor("bias", (c_out,), dtype, low=-1, high=1)
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return stride, padding, dilation, groups


def npu_convolution_op(x, weight, bias, *, stride, padding, dilation, groups):
    import torch_npu
    return torch_npu.npu_convolution(x, weight, bias, stride, padding, dilation, groups)


@recipe("torch_npu.npu_convolution", targets="npu.npu_convolution", device="npu")
def npu_convolution(draw, entry, case, device):
    """``torch_npu.npu_convolution(x, weight, bias, stride, padding, dilation, groups)`` (2-D)."""
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    stride, padding, dilation, groups = _npu_conv_parts(ex, transposed=False)
    return ex.program(npu_convolution_op, grads=("x", "weight", "bias"), stride=[stride] * 2,
                      padding=[padding] * 2, dilation=[dilation] * 2, groups=groups)


def npu_convolution_transpose_op(x, weight, bias, *, padding, stride, dilation, groups):
    import torch_npu
    return torch_npu.npu_convolution_transpose(x, weight, bias, padding, [0, 0], stride, dilation, groups)


@recipe("torch_npu.npu_convolution_transpose", targets="npu.npu_convolution_transpose", device="npu")
def npu_convolution_transpose(draw, entry, case, device):
    """``torch_npu.npu_convolution_transpose(x, weight, bias, padding, output_padding, stride, dilation, groups)`` (2-D)."""
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    stride, padding, dilation, groups = _npu_conv_parts(ex, transposed=True)
    return ex.program(npu_convolution_transpose_op, grads=("x", "weight", "bias"), padding=[padding] * 2,
                      stride=[stride] * 2, dilation=[dilation] * 2, groups=groups)


def npu_deformable_conv2d_op(x, weight, offset, bias, *, kernel_size, padding):
    import torch_npu
    return torch_npu.npu_deformable_conv2d(x, weight, offset, bias, kernel_size=kernel_size, stride=[1, 1, 1, 1],
                                           padding=padding, dilation=[1, 1, 1, 1], groups=1, deformable_groups=1,
                                           modulated=True)


@recipe("torch_npu.npu_deformable_conv2d", targets="npu.npu_deformable_conv2d", device="npu")
def npu_deformable_conv2d(draw, entry, case, device):
    """``torch_npu.npu_deformable_conv2d(x, weight, offset, bias, kernel_size, stride, padding, ...)``.

    NCHW input as in torch_npu's own ``ModulatedDeformConv`` wrapper: offset
    ``(N, 3 * kh * kw, H_out, W_out)`` (x-y offsets and a mask, modulated v2),
    4-element stride / padding / dilation, stride 1 and "same" padding so the
    output keeps the input's size. Returns (output, deformed offsets).
    """
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    dtype = _npu_dtype(ex)
    k = ex.choice((3, 1))
    pad = (k - 1) // 2
    n, c_in, c_out = ex.batch(), ex.channels(2, 8), ex.channels(2, 8)
    h, w = ex.spatial(2, mins=k, budget=ex.limits.max_numel // (n * 3 * k * k))
    ex.tensor("x", (n, c_in, h, w), dtype, low=-1, high=1)
    ex.tensor("weight", (c_out, c_in, k, k), dtype, low=-1, high=1)
    ex.tensor("offset", (n, 3 * k * k, h, w), dtype, low=-1, high=1)
    ex.tensor("bias", (c_out,), dtype, low=-1, high=1)
    ex.kwargs.update(kernel_size=(k, k), padding=pad)
    return ex.program(npu_deformable_conv2d_op, grads=("x", "weight", "offset", "bias"), kernel_size=[k, k],
                      padding=[pad] * 4)


def npu_ps_roi_pooling_op(x, rois, *, group_size, output_dim):
    import torch_npu
    return torch_npu.npu_ps_roi_pooling(x, rois, 1.0, group_size, output_dim)


@recipe("torch_npu.npu_ps_roi_pooling", targets="npu.npu_ps_roi_pooling", device="npu")
def npu_ps_roi_pooling(draw, entry, case, device):
    """``torch_npu.npu_ps_roi_pooling(x, rois, spatial_scale, group_size, output_dim)``.

    ``x`` has ``output_dim * group_size ** 2`` channels; ``rois`` is
    ``(N, 5, num_rois)``: batch index then x1, y1, x2, y2 (non-negative).
    Several ROIs overlap, so their gradients collide in backward.
    """
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    dtype = torch.float16  # the reference documents float16 examples
    group_size, output_dim = ex.choice((2, 1, 3)), ex.choice((2, 1, 4))
    n = ex.batch()
    h, w = ex.spatial(2, mins=2, budget=_small(ex, 64, 4096))
    ex.tensor("x", (n, output_dim * group_size * group_size, h, w), dtype, low=-2, high=2)
    rois = ex.integer(1, _small(ex, 4, 64))
    batch_idx = ex.tensor("_batch_idx", (n, 1, rois), torch.int64, low=0, high=n - 1, is_input=False)
    corner = ex.tensor("_corner", (n, 2, rois), torch.float32, low=0, high=min(h, w) / 2, is_input=False)
    size = ex.tensor("_size", (n, 2, rois), torch.float32, low=1, high=min(h, w) / 2, is_input=False)
    roi_tensor = torch.cat([batch_idx.float(), corner, corner + size], dim=1).to(dtype)
    ex.add("rois", roi_tensor, f"torch.cat([_batch_idx.float(), _corner, _corner + _size], dim=1).to({dtype})")
    ex.kwargs.update(group_size=group_size, output_dim=output_dim, num_rois=rois)
    return ex.program(npu_ps_roi_pooling_op, grads=("x",), group_size=group_size, output_dim=output_dim)


def npu_group_norm_swish_op(x, weight, bias, *, num_groups, swish_scale):
    import torch_npu
    return torch_npu.npu_group_norm_swish(x, num_groups, weight, bias, eps=1e-05, swish_scale=swish_scale)


@recipe("torch_npu.npu_group_norm_swish", targets="npu.npu_group_norm_swish", device="npu")
def npu_group_norm_swish(draw, entry, case, device):
    """``torch_npu.npu_group_norm_swish(x, num_groups, weight, bias, eps, swish_scale)`` -> (out, mean, rstd)."""
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    dtype = _npu_dtype(ex)
    num_groups = ex.choice((1, 2, 4))
    # At least two channels per group: a group's statistics need more than one value.
    n, c = ex.batch(), num_groups * ex.side(2, _small(ex, 4, 16))
    sides = ex.spatial(2, budget=ex.limits.max_numel // (n * c))
    ex.tensor("x", (n, c) + sides, dtype, low=-2, high=2)
    ex.tensor("weight", (c,), dtype, low=0.5, high=2)
    ex.tensor("bias", (c,), dtype, low=-1, high=1)
    swish_scale = ex.kwarg("swish_scale", (1.0, 0.5))
    ex.kwargs["num_groups"] = num_groups
    return ex.program(npu_group_norm_swish_op, grads=("x", "weight", "bias"), num_groups=num_groups,
                      swish_scale=swish_scale)
