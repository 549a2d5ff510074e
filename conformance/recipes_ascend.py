"""Recipes for the ops of the Ascend deterministic-computation list (table 1).

The Ascend list (``conformance/data/ascend.json``) names 49 APIs. Seven of
them already have a recipe in :mod:`conformance.recipes` (``torch.cumsum``,
``torch.mm``, ``torch.bmm``, ``torch.mv``, ``torch.Tensor.put_``,
``torch.Tensor.index_put``, ``torch.nn.functional.interpolate``); recipes are
shared by op name, so this module registers only the other 42. Find one by
grepping its qualified name, e.g. ``@recipe("torch.sum"``.

Conventions, beyond those of :mod:`conformance.recipes` (whose example
builder this module uses):

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
  Their calls follow the torch_npu API reference (argument order and layouts
  as documented there); they have not been run on Ascend hardware, so they
  stay deliberately plain: float32 / float16, small shapes, stride 1 where
  the reference is ambiguous.
- In-place methods (``addbmm_``, ``addmv_``, ``index_put_``) run on a clone
  of their input, so the input's gradient flows through the in-place op.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from conformance import recipes as _shared
from conformance.recipes import _NO_HALF, _Example, _index_put_parts, _pool_input, _shape, _window
from engine.entry import Entry
from engine.program import Program, RecipeSkipped, recipe


def _example(draw, entry: Entry, case: dict, device: torch.device) -> _Example:
    """The shared example builder, differentiating whatever ``grads`` a recipe names (see module notes)."""
    return _Example(draw, _for_training(entry), case, device)


def _for_training(entry: Entry) -> Entry:
    return entry if entry.backward else dataclasses.replace(entry, backward=True)


def _small(ex: _Example, small: int, large: int) -> int:
    """Upper bound for a side: ``small`` on the small scale, ``large`` on the large one."""
    return large if ex.large else small


def _reduction(ex: _Example, options=("mean", "sum", "none")) -> str:
    return ex.kwarg("reduction", options)


# ---------------------------------------------------------------------------
# Reductions: sum, mean, std, var, std_mean, var_mean, trace


def _reduce_input(ex: _Example) -> tuple[int, ...]:
    """``x`` of 0-3 dims (non-contiguous drawn), float dtypes."""
    dtype = ex.dtype(("floating",))
    shape = _shape(ex, ex.integer(0, 3))
    ex.tensor("x", shape, dtype, contiguous=None)
    return shape


def _reduce_dims(ex: _Example, ndim: int) -> int | tuple[int, int] | None:
    """The ``dim`` argument: ``None`` (everything), one dim or two dims."""
    options: list = [None] + list(range(ndim))
    if ndim >= 2:
        options.append((0, -1))
    dim = ex.choice(options)
    ex.kwargs["dim"] = dim
    return dim


@recipe("torch.sum")
def sum_(draw, entry, case, device):
    """``torch.sum(x, dim=..., keepdim=...)``, or ``torch.sum(x)`` over everything."""
    ex = _example(draw, entry, case, device)
    shape = _reduce_input(ex)
    dim = _reduce_dims(ex, len(shape))
    if dim is None:
        return ex.program("torch.sum(x)", grads=("x",))
    keepdim = ex.kwarg("keepdim", (False, True))
    return ex.program(f"torch.sum(x, dim={dim!r}, keepdim={keepdim!r})", grads=("x",))


@recipe("torch.mean")
def mean(draw, entry, case, device):
    """``torch.mean(x, dim=..., keepdim=...)``, or ``torch.mean(x)``."""
    ex = _example(draw, entry, case, device)
    shape = _reduce_input(ex)
    dim = _reduce_dims(ex, len(shape))
    if dim is None:
        return ex.program("torch.mean(x)", grads=("x",))
    keepdim = ex.kwarg("keepdim", (False, True))
    return ex.program(f"torch.mean(x, dim={dim!r}, keepdim={keepdim!r})", grads=("x",))


def _moments(draw, entry, case, device, fn: str) -> Program:
    """``torch.<fn>(x, dim=..., correction=..., keepdim=...)`` for std / var / std_mean / var_mean."""
    ex = _example(draw, entry, case, device)
    shape = _reduce_input(ex)
    dim = _reduce_dims(ex, len(shape))
    correction = ex.kwarg("correction", (1, 0))
    keepdim = ex.kwarg("keepdim", (False, True))
    # One element with correction=1 gives NaN (and a warning): still a
    # deterministic result, compared bit for bit like any other.
    return ex.program(f"torch.{fn}(x, dim={dim!r}, correction={correction}, keepdim={keepdim!r})", grads=("x",))


@recipe("torch.std")
def std(draw, entry, case, device):
    """``torch.std(x, dim, correction, keepdim)``."""
    return _moments(draw, entry, case, device, "std")


@recipe("torch.var")
def var(draw, entry, case, device):
    """``torch.var(x, dim, correction, keepdim)``."""
    return _moments(draw, entry, case, device, "var")


@recipe("torch.std_mean")
def std_mean(draw, entry, case, device):
    """``torch.std_mean(x, dim, correction, keepdim)`` -> (std, mean)."""
    return _moments(draw, entry, case, device, "std_mean")


@recipe("torch.var_mean")
def var_mean(draw, entry, case, device):
    """``torch.var_mean(x, dim, correction, keepdim)`` -> (var, mean)."""
    return _moments(draw, entry, case, device, "var_mean")


@recipe("torch.trace")
def trace(draw, entry, case, device):
    """``torch.trace(x)`` of a (possibly non-square) 2-D matrix."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 8, 1024)
    ex.tensor("x", (ex.side(1, cap), ex.side(1, cap)), dtype, contiguous=None)
    return ex.program("torch.trace(x)", grads=("x",))


# ---------------------------------------------------------------------------
# Products: dot, matmul, addmm, addmv, addbmm and their method / in-place forms


def _scalars(ex: _Example) -> tuple[float, float]:
    """``beta`` and ``alpha``; ``beta=0`` ignores the input (and gives it a zero gradient)."""
    return ex.kwarg("beta", (1, 0.5, 0)), ex.kwarg("alpha", (1, 0.5))


@recipe("torch.dot")
def dot(draw, entry, case, device):
    """``torch.dot(a, b)`` of two 1-D tensors; long vectors on the large scale."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    n = ex.side(1, ex.limits.max_numel // 2)
    ex.tensor("a", (n,), dtype, contiguous=None)
    ex.tensor("b", (n,), dtype)
    return ex.program("torch.dot(a, b)", grads=("a", "b"))


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


@recipe("torch.matmul")
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
    return ex.program("torch.matmul(a, b)", grads=("a", "b"))


def _addmm_parts(ex: _Example, *, broadcast_input: bool) -> tuple[float, float]:
    """``x`` (n, p) — or a broadcast row (p,) — and ``m1`` (n, m), ``m2`` (m, p)."""
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 8, 512)
    n, m, p = ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    x_shape = (p,) if broadcast_input and ex.choice((False, True)) else (n, p)
    ex.tensor("x", x_shape, dtype)
    ex.tensor("m1", (n, m), dtype, contiguous=None)
    ex.tensor("m2", (m, p), dtype)
    return _scalars(ex)


@recipe("torch.addmm")
def addmm(draw, entry, case, device):
    """``torch.addmm(x, m1, m2, beta=..., alpha=...)``; ``x`` may broadcast."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmm_parts(ex, broadcast_input=True)
    return ex.program(f"torch.addmm(x, m1, m2, beta={beta!r}, alpha={alpha!r})", grads=("x", "m1", "m2"))


@recipe("torch.Tensor.addmm")
def tensor_addmm(draw, entry, case, device):
    """``x.addmm(m1, m2, beta=..., alpha=...)`` (the method; out of place)."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmm_parts(ex, broadcast_input=True)
    return ex.program(f"x.addmm(m1, m2, beta={beta!r}, alpha={alpha!r})", grads=("x", "m1", "m2"))


def _addmv_parts(ex: _Example) -> tuple[float, float]:
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 8, 1024)
    n, m = ex.side(1, cap), ex.side(1, cap)
    ex.tensor("x", (n,), dtype)
    ex.tensor("mat", (n, m), dtype, contiguous=None)
    ex.tensor("vec", (m,), dtype)
    return _scalars(ex)


@recipe("torch.addmv")
def addmv(draw, entry, case, device):
    """``torch.addmv(x, mat, vec, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmv_parts(ex)
    return ex.program(f"torch.addmv(x, mat, vec, beta={beta!r}, alpha={alpha!r})", grads=("x", "mat", "vec"))


@recipe("torch.Tensor.addmv_")
def tensor_addmv_(draw, entry, case, device):
    """``x.clone().addmv_(mat, vec, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addmv_parts(ex)
    return ex.program(f"x.clone().addmv_(mat, vec, beta={beta!r}, alpha={alpha!r})", grads=("x", "mat", "vec"))


def _addbmm_parts(ex: _Example) -> tuple[float, float]:
    """``x`` (n, p), ``b1`` (b, n, m), ``b2`` (b, m, p): the batch is summed, an accumulation over b."""
    dtype = ex.dtype(("floating",))
    cap = _small(ex, 6, 64)
    b = ex.side(1, _small(ex, 4, 64))
    n, m, p = ex.side(1, cap), ex.side(1, cap), ex.side(1, cap)
    ex.tensor("x", (n, p), dtype)
    ex.tensor("b1", (b, n, m), dtype, contiguous=None)
    ex.tensor("b2", (b, m, p), dtype)
    return _scalars(ex)


@recipe("torch.addbmm")
def addbmm(draw, entry, case, device):
    """``torch.addbmm(x, b1, b2, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addbmm_parts(ex)
    return ex.program(f"torch.addbmm(x, b1, b2, beta={beta!r}, alpha={alpha!r})", grads=("x", "b1", "b2"))


@recipe("torch.Tensor.addbmm_")
def tensor_addbmm_(draw, entry, case, device):
    """``x.clone().addbmm_(b1, b2, beta=..., alpha=...)``."""
    ex = _example(draw, entry, case, device)
    beta, alpha = _addbmm_parts(ex)
    return ex.program(f"x.clone().addbmm_(b1, b2, beta={beta!r}, alpha={alpha!r})", grads=("x", "b1", "b2"))


# ---------------------------------------------------------------------------
# Indexing


@recipe("torch.Tensor.index_put_")
def tensor_index_put_(draw, entry, case, device):
    """``x.clone().index_put_((idx0[, idx1]), values, accumulate=...)``, duplicates included.

    The in-place twin of the ``torch.Tensor.index_put`` recipe (same inputs).
    """
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating", "integer"))
    accumulate = ex.kwarg("accumulate", (False, True))
    k, _ = _index_put_parts(ex, dtype)
    idx = "(idx0,)" if k == 1 else "(idx0, idx1)"
    return ex.program(f"x.clone().index_put_({idx}, values, accumulate={accumulate!r})", grads=("x", "values"))


# ---------------------------------------------------------------------------
# Normalization and activation: batch_norm, layer_norm, prelu


@recipe("torch.nn.functional.batch_norm")
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
    call = (f"F.batch_norm(x, running_mean, running_var, weight, bias, training={training!r}, "
            f"momentum={momentum!r}, eps=1e-05)")
    return ex.program(f"({call}, running_mean, running_var)", grads=("x", "weight", "bias"))


@recipe("torch.nn.functional.layer_norm")
def layer_norm(draw, entry, case, device):
    """``F.layer_norm(x, normalized_shape, weight, bias, eps)`` over the last 1-2 dims."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    ndim = ex.integer(1, 3)
    shape = _shape(ex, ndim)
    k = ex.integer(1, min(2, ndim))
    normalized = tuple(shape[-k:])
    ex.tensor("x", shape, dtype, contiguous=None)
    ex.kwargs["normalized_shape"] = normalized
    if ex.choice((True, False)):
        ex.tensor("weight", normalized, dtype, low=0.5, high=2)
        ex.tensor("bias", normalized, dtype, low=-1, high=1)
        return ex.program(f"F.layer_norm(x, {normalized!r}, weight, bias, eps=1e-05)", grads=("x", "weight", "bias"))
    return ex.program(f"F.layer_norm(x, {normalized!r}, eps=1e-05)", grads=("x",))


@recipe("torch.nn.functional.prelu")
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
    return ex.program("F.prelu(x, weight)", grads=("x", "weight"))


# ---------------------------------------------------------------------------
# Pooling, fold / unfold


@recipe("torch.nn.functional.adaptive_avg_pool2d")
def functional_adaptive_avg_pool2d(draw, entry, case, device):
    """``F.adaptive_avg_pool2d``: the ``nn.AdaptiveAvgPool2d`` recipe, with backward."""
    return _shared.adaptive_avg_pool2d(draw, _for_training(entry), case, device)


@recipe("torch.nn.functional.avg_pool2d")
def avg_pool2d(draw, entry, case, device):
    """``F.avg_pool2d(x, k, stride, padding, ceil_mode, count_include_pad, divisor_override)``.

    Overlapping windows (stride < kernel) make backward contributions collide.
    """
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    shape = _pool_input(ex, 2, dtype=dtype)
    k, stride, padding = _window(ex, shape[-2:])
    ceil_mode = ex.kwarg("ceil_mode", (False, True))
    count_include_pad = ex.kwarg("count_include_pad", (True, False))
    divisor_override = ex.kwarg("divisor_override", (None, 3))
    ex.kwargs.update(kernel_size=k, stride=stride, padding=padding)
    return ex.program(f"F.avg_pool2d(x, {k}, stride={stride}, padding={padding}, ceil_mode={ceil_mode!r}, "
                      f"count_include_pad={count_include_pad!r}, divisor_override={divisor_override!r})",
                      grads=("x",))


def _blocks(ex: _Example) -> tuple[tuple[int, int], int, int, int]:
    """kernel (kh, kw), dilation, padding, stride of a sliding block; stride < kernel overlaps blocks."""
    kernel = (ex.integer(1, 3), ex.integer(1, 3))
    dilation = ex.integer(1, 2)
    padding = ex.integer(0, 1)
    stride = ex.integer(1, 2)
    ex.kwargs.update(kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)
    return kernel, dilation, padding, stride


def _block_sides(ex: _Example, kernel, dilation: int, padding: int, budget: int) -> tuple[int, int]:
    """Spatial sides that fit at least one block."""
    mins = tuple(max(1, dilation * (k - 1) + 1 - 2 * padding) for k in kernel)
    return ex.spatial(2, mins=mins, budget=budget)


def _num_blocks(sides, kernel, dilation: int, padding: int, stride: int) -> int:
    return math.prod((s + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for s, k in zip(sides, kernel))


def _block_args(kernel, dilation: int, padding: int, stride: int) -> str:
    return f"kernel_size={kernel!r}, dilation={dilation}, padding={padding}, stride={stride}"


@recipe("torch.nn.functional.unfold")
def unfold(draw, entry, case, device):
    """``F.unfold(x, kernel_size, dilation, padding, stride)`` (im2col); its backward is a fold (col2im)."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    kernel, dilation, padding, stride = _blocks(ex)
    n, c = ex.batch(), ex.channels()
    sides = _block_sides(ex, kernel, dilation, padding, ex.limits.max_numel // (n * c))
    ex.tensor("x", (n, c) + sides, dtype, contiguous=None)
    return ex.program(f"F.unfold(x, {_block_args(kernel, dilation, padding, stride)})", grads=("x",))


@recipe("torch.nn.functional.fold")
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
    return ex.program(f"F.fold(x, {out!r}, {_block_args(kernel, dilation, padding, stride)})", grads=("x",))


# ---------------------------------------------------------------------------
# Losses


def _loss_pair(ex: _Example, *, low: float = -3, high: float = 3) -> tuple[int, ...]:
    """``x`` and ``target`` of the same 0-3 dim shape."""
    dtype = ex.dtype(("floating",))
    shape = _shape(ex, ex.integer(0, 3))
    ex.tensor("x", shape, dtype, low=low, high=high, contiguous=None)
    ex.tensor("target", shape, dtype, low=low, high=high)
    return shape


@recipe("torch.nn.functional.mse_loss")
def mse_loss(draw, entry, case, device):
    """``F.mse_loss(x, target, reduction=...)``."""
    ex = _example(draw, entry, case, device)
    _loss_pair(ex)
    reduction = _reduction(ex)
    return ex.program(f"F.mse_loss(x, target, reduction={reduction!r})", grads=("x", "target"))


@recipe("torch.nn.functional.l1_loss")
def l1_loss(draw, entry, case, device):
    """``F.l1_loss(x, target, reduction=...)``."""
    ex = _example(draw, entry, case, device)
    _loss_pair(ex)
    reduction = _reduction(ex)
    return ex.program(f"F.l1_loss(x, target, reduction={reduction!r})", grads=("x", "target"))


@recipe("torch.nn.functional.smooth_l1_loss")
def smooth_l1_loss(draw, entry, case, device):
    """``F.smooth_l1_loss(x, target, reduction=..., beta=...)``; ``beta=0`` is the L1 path."""
    ex = _example(draw, entry, case, device)
    _loss_pair(ex)
    reduction = _reduction(ex)
    beta = ex.kwarg("beta", (1.0, 0.5, 0.0))
    return ex.program(f"F.smooth_l1_loss(x, target, reduction={reduction!r}, beta={beta!r})", grads=("x", "target"))


@recipe("torch.nn.functional.soft_margin_loss")
def soft_margin_loss(draw, entry, case, device):
    """``F.soft_margin_loss(x, target, reduction=...)`` with targets in {-1, 1}."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    shape = _shape(ex, ex.integer(0, 3))
    ex.tensor("x", shape, dtype, low=-3, high=3, contiguous=None)
    bits = ex.tensor("_bits", shape, dtype, low=0, high=1, integral=True, is_input=False)
    ex.add("target", bits * 2 - 1, "_bits * 2 - 1")
    reduction = _reduction(ex)
    return ex.program(f"F.soft_margin_loss(x, target, reduction={reduction!r})", grads=("x",))


@recipe("torch.nn.functional.binary_cross_entropy")
def binary_cross_entropy(draw, entry, case, device):
    """``F.binary_cross_entropy(p, target, weight=..., reduction=...)``; ``p`` is a sigmoid of seeded logits."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    shape = _shape(ex, ex.integer(0, 3))
    logits = ex.tensor("_logits", shape, dtype, low=-4, high=4, is_input=False)
    ex.add("p", logits.sigmoid(), "_logits.sigmoid()")
    ex.tensor("target", shape, dtype, low=0, high=1)
    reduction = _reduction(ex)
    if ex.choice((False, True)):
        ex.tensor("weight", shape, dtype, low=0.5, high=2)
        return ex.program(f"F.binary_cross_entropy(p, target, weight=weight, reduction={reduction!r})",
                          grads=("p",))
    return ex.program(f"F.binary_cross_entropy(p, target, reduction={reduction!r})", grads=("p",))


@recipe("torch.nn.functional.binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(draw, entry, case, device):
    """``F.binary_cross_entropy_with_logits(x, target, pos_weight=..., reduction=...)``."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    shape = _shape(ex, ex.integer(1, 3))
    ex.tensor("x", shape, dtype, low=-4, high=4, contiguous=None)
    ex.tensor("target", shape, dtype, low=0, high=1)
    reduction = _reduction(ex)
    if ex.choice((False, True)):
        # One positive weight per class (the last dimension), broadcast over the rest.
        # torch raises when pos_weight requires grad ("not differentiable with respect to argument").
        ex.tensor("pos_weight", shape[-1:], dtype, low=0.5, high=3)
        return ex.program(f"F.binary_cross_entropy_with_logits(x, target, pos_weight=pos_weight, "
                          f"reduction={reduction!r})", grads=("x",))
    return ex.program(f"F.binary_cross_entropy_with_logits(x, target, reduction={reduction!r})", grads=("x",))


@recipe("torch.nn.functional.kl_div")
def kl_div(draw, entry, case, device):
    """``F.kl_div(log_p, target, reduction=..., log_target=...)`` on softmax distributions."""
    ex = _example(draw, entry, case, device)
    dtype = ex.dtype(("floating",))
    shape = _shape(ex, ex.integer(1, 3))
    logits = ex.tensor("_logits", shape, dtype, low=-3, high=3, is_input=False)
    ex.add("log_p", logits.log_softmax(-1), "_logits.log_softmax(-1)")
    log_target = ex.kwarg("log_target", (False, True))
    t_logits = ex.tensor("_t_logits", shape, dtype, low=-3, high=3, is_input=False)
    if log_target:
        ex.add("target", t_logits.log_softmax(-1), "_t_logits.log_softmax(-1)")
    else:
        ex.add("target", t_logits.softmax(-1), "_t_logits.softmax(-1)")
    reduction = _reduction(ex, ("batchmean", "sum", "mean", "none"))
    return ex.program(f"F.kl_div(log_p, target, reduction={reduction!r}, log_target={log_target!r})",
                      grads=("log_p", "target"))


@recipe("torch.nn.functional.multilabel_margin_loss")
def multilabel_margin_loss(draw, entry, case, device):
    """``F.multilabel_margin_loss(x, target, reduction=...)``.

    Each target row holds class indices up to its first ``-1``; the rest is
    ignored. Repeated labels are allowed.
    """
    ex = _example(draw, entry, case, device)
    # torch's CPU kernel has neither float16 nor bfloat16 ("not implemented for 'Half'").
    dtype = ex.dtype(("floating",), exclude_on_cpu=_NO_HALF)
    batched = ex.choice((True, False))
    c = ex.side(1, _small(ex, 6, 64))
    n = ex.batch() if batched else 1
    shape = (n, c) if batched else (c,)
    ex.tensor("x", shape, dtype, low=-2, high=2, contiguous=None)
    labels = ex.tensor("_labels", shape, torch.int64, low=0, high=c - 1, is_input=False)
    cut = ex.tensor("_cut", shape[:-1] + (1,), torch.int64, low=0, high=c, is_input=False)
    positions = torch.arange(c, device=ex.device)
    ex.add("target", torch.where(positions < cut, labels, -1),
           f"torch.where(torch.arange({c}, device={str(ex.device)!r}) < _cut, _labels, -1)")
    reduction = _reduction(ex)
    return ex.program(f"F.multilabel_margin_loss(x, target, reduction={reduction!r})", grads=("x",))


def _nll_parts(ex: _Example, rank: int) -> str:
    """Log-probabilities ``x`` of ``rank`` dims (class dim 1, or 0 when unbatched) and ``target``.

    Returns the keyword-argument text (weight, ignore_index, reduction).
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
    kwargs = []
    if ex.choice((False, True)):
        ex.tensor("weight", (c,), dtype, low=0.5, high=2)
        kwargs.append("weight=weight")
    # Ignoring class 0 drops some targets from the reduction (and from 'mean's divisor).
    ignore_index = ex.kwarg("ignore_index", (-100, 0))
    reduction = _reduction(ex)
    kwargs += [f"ignore_index={ignore_index}", f"reduction={reduction!r}"]
    return ", ".join(kwargs)


@recipe("torch.nn.functional.nll_loss")
def functional_nll_loss(draw, entry, case, device):
    """``F.nll_loss(x, target, ...)`` on ``(C)``, ``(N, C)``, ``(N, C, d)`` or ``(N, C, H, W)`` input."""
    ex = _example(draw, entry, case, device)
    rank = ex.choice((2, 1, 3, 4))
    ex.kwargs["input_rank"] = rank
    kwargs = _nll_parts(ex, rank)
    return ex.program(f"F.nll_loss(x, target, {kwargs})", grads=("x",))


@recipe("torch.nn.NLLLoss2d")
def nll_loss2d(draw, entry, case, device):
    """``torch.nn.NLLLoss2d(...)(x, target)`` on ``(N, C, H, W)``, the module the list names.

    ``NLLLoss2d`` is a deprecated subclass of ``NLLLoss`` (the same
    computation on 4-D input); where a torch no longer has it the case is
    skipped rather than silently tested through another API.
    """
    if not hasattr(torch.nn, "NLLLoss2d"):
        raise RecipeSkipped(f"torch.nn.NLLLoss2d is not in torch {torch.__version__}")
    ex = _example(draw, entry, case, device)
    kwargs = _nll_parts(ex, 4)
    body = ["with warnings.catch_warnings():",
            "    warnings.simplefilter('ignore')  # NLLLoss2d is deprecated, still the listed API",
            f"    loss = torch.nn.NLLLoss2d({kwargs})"]
    return ex.program("loss(x, target)", body=body, grads=("x",))


@recipe("torch.nn.functional.ctc_loss")
def functional_ctc_loss(draw, entry, case, device):
    """``F.ctc_loss``: the ``nn.CTCLoss`` recipe, with backward."""
    return _shared.ctc_loss(draw, _for_training(entry), case, device)


@recipe("torch.nn.functional.embedding")
def functional_embedding(draw, entry, case, device):
    """``F.embedding``: the ``nn.Embedding`` recipe (duplicate ids collide in the weight gradient), with backward."""
    return _shared.embedding(draw, _for_training(entry), case, device)


# ---------------------------------------------------------------------------
# Convolution backward (aten)


def _conv_out_side(side: int, k: int, stride: int, padding: int, dilation: int, transposed: bool,
                   output_padding: int) -> int:
    if transposed:
        return (side - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
    return (side + 2 * padding - dilation * (k - 1) - 1) // stride + 1


@recipe("torch.ops.aten.convolution_backward")
def convolution_backward(draw, entry, case, device):
    """``torch.ops.aten.convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)`` -> (grad_input, grad_weight, grad_bias).

    Called directly with the aten schema. It is a gradient already, so it
    runs forward only. ``grad_weight`` and ``grad_bias`` sum over the batch
    and every output position.
    """
    ex = _Example(draw, entry, case, device)  # a gradient itself: no second-order backward
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
    call = (f"torch.ops.aten.convolution_backward(grad_output, input, weight, {bias_sizes!r}, "
            f"{[stride] * n_sp!r}, {[padding] * n_sp!r}, {[dilation] * n_sp!r}, {transposed!r}, "
            f"{[output_padding] * n_sp!r}, {groups}, [True, True, {with_bias!r}])")
    return ex.program(call)


# ---------------------------------------------------------------------------
# torch_npu-only APIs (Ascend hardware; not run outside it)


def _require_torch_npu(entry: Entry, device: torch.device) -> None:
    """Raise ``RecipeSkipped`` unless ``torch_npu`` imports and ``device`` is an NPU."""
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        raise RecipeSkipped("needs torch_npu (not installed)") from None
    except Exception as exc:  # noqa: BLE001 - a broken CANN install raises all sorts
        raise RecipeSkipped(f"needs torch_npu (import failed: {type(exc).__name__}: {exc})") from None
    if torch.device(device).type != "npu":
        raise RecipeSkipped(f"{entry.op} runs on npu devices only, not {torch.device(device).type}")


_IMPORT_NPU = "import torch_npu"


def _npu_dtype(ex: _Example) -> torch.dtype:
    return ex.choice((torch.float32, torch.float16))


@recipe("torch_npu.npu_linear")
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
    return ex.program("torch_npu.npu_linear(x, weight, bias)", body=[_IMPORT_NPU], grads=("x", "weight", "bias"))


def _npu_conv_parts(ex: _Example, transposed: bool) -> tuple[int, int, int, int]:
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


@recipe("torch_npu.npu_convolution")
def npu_convolution(draw, entry, case, device):
    """``torch_npu.npu_convolution(x, weight, bias, stride, padding, dilation, groups)`` (2-D)."""
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    stride, padding, dilation, groups = _npu_conv_parts(ex, transposed=False)
    return ex.program(f"torch_npu.npu_convolution(x, weight, bias, {[stride] * 2!r}, {[padding] * 2!r}, "
                      f"{[dilation] * 2!r}, {groups})", body=[_IMPORT_NPU], grads=("x", "weight", "bias"))


@recipe("torch_npu.npu_convolution_transpose")
def npu_convolution_transpose(draw, entry, case, device):
    """``torch_npu.npu_convolution_transpose(x, weight, bias, padding, output_padding, stride, dilation, groups)`` (2-D)."""
    _require_torch_npu(entry, device)
    ex = _example(draw, entry, case, device)
    stride, padding, dilation, groups = _npu_conv_parts(ex, transposed=True)
    return ex.program(f"torch_npu.npu_convolution_transpose(x, weight, bias, {[padding] * 2!r}, [0, 0], "
                      f"{[stride] * 2!r}, {[dilation] * 2!r}, {groups})", body=[_IMPORT_NPU],
                      grads=("x", "weight", "bias"))


@recipe("torch_npu.npu_deformable_conv2d")
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
    return ex.program(f"torch_npu.npu_deformable_conv2d(x, weight, offset, bias, kernel_size=[{k}, {k}], "
                      f"stride=[1, 1, 1, 1], padding=[{pad}, {pad}, {pad}, {pad}], dilation=[1, 1, 1, 1], "
                      "groups=1, deformable_groups=1, modulated=True)",
                      body=[_IMPORT_NPU], grads=("x", "weight", "offset", "bias"))


@recipe("torch_npu.npu_ps_roi_pooling")
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
    return ex.program(f"torch_npu.npu_ps_roi_pooling(x, rois, 1.0, {group_size}, {output_dim})",
                      body=[_IMPORT_NPU], grads=("x",))


@recipe("torch_npu.npu_group_norm_swish")
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
    return ex.program(f"torch_npu.npu_group_norm_swish(x, {num_groups}, weight, bias, eps=1e-05, "
                      f"swish_scale={swish_scale!r})", body=[_IMPORT_NPU], grads=("x", "weight", "bias"))
