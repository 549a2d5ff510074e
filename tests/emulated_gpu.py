"""A GPU emulated on the host: the ways a GPU may differ from the CPU that the docs allow, and
faults that the docs do not, for testing the judge without a GPU.

:func:`emulated_cuda` is a :class:`~engine.devices.Backend` named ``cuda`` whose tensors live on the
CPU and whose every case runs inside :class:`GPUSemantics`, a dispatch mode that changes what
the operators compute, as a GPU may:

- ``tf32``: float32 convolutions and matmuls round their operands to TF32 (10 mantissa bits),
  as cuDNN does by default (``torch.backends.cudnn.allow_tf32``): to nearest with determinism
  on, towards zero with it off (another algorithm);
- ``winner``: with determinism off, duplicate writes of ``index_copy``, ``index_put`` with
  ``accumulate=False`` and ``scatter`` race: any write may win, a fresh order on every call
  (never the host's own); with determinism on the last write wins, as on the CPU. So the H100
  did (torch 2.11, ``scripts/gpu_probes.py``: 4,096 writes to one element; under the mode the
  last won for all three, with it off write 416, 3,968 or 4,032). Those of ``put_`` with
  ``accumulate=False``, which has no deterministic implementation, race in every mode;
- ``stream``: operators that draw random numbers draw from another stream (the generator is
  moved on first);
- ``signs``: the symmetric eigensolver returns each eigenvector with the other sign;
- ``shuffle``: with determinism off, accumulating writes (``index_add``, ``index_put`` /
  ``put_`` with ``accumulate=True``, ``scatter_add``) add in a fresh order on every call, as
  atomics under load do: the sums round differently from run to run.
- ``alerts``: operators (``aten`` overload packets) whose CUDA kernels have no deterministic
  implementation: under the mode they raise torch's alert (a warning with ``warn_only``), as
  ``upsample_bilinear2d_backward_out_cuda`` does (:data:`UPSAMPLE_BACKWARD`);
- ``routes``: the Python-level routes torch takes off the CPU under the mode: ``F.interpolate``
  with ``bilinear`` or ``trilinear`` runs the decomposition ``_upsample_linear_vec`` (backward
  ``_unsafe_index_put``) instead of the upsampling kernel, as ``torch/nn/functional.py`` does
  for ``not input.is_cpu`` (2.11 and later).

Planted faults (none by default), which a judge must catch:

- ``conv_error``: a convolution whose result is off by this many times the TF32 rounding bound
  (relative to its largest value);
- ``stray_write``: ``index_copy`` writes, at one position written twice, a value none of the
  writes carried;
- ``silent_race``: the accumulation order is shuffled with determinism on as well;
- ``race_above``: the same, but only for a call with more than this many writes (a kernel
  whose race shows only under load).

The harness computes its CPU reference inside :meth:`Backend.on_host`, which leaves the
emulation (the reference is the host's own arithmetic).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import (TorchDispatchMode, _disable_current_modes,
                                          _get_current_dispatch_mode_stack)

from detconf.engine.comparison import U32, round_operand, roundoff
from detconf.engine.devices import Backend

aten = torch.ops.aten
_calls = itertools.count()

TF32_BOUND = 4 * roundoff("tf32") + U32  # the judge's relative bound for TF32 vs IEEE, K small


def round_to_tf32(t: torch.Tensor, *, nearest: bool = True) -> torch.Tensor:
    """``t`` (float32) with its mantissa rounded to TF32's 10 bits: to nearest (ties away), or
    towards zero (another algorithm's conversion); the judge's own operand rounding."""
    return round_operand(t, "tf32", nearest=nearest) if t.dtype == torch.float32 else t


_CONV = {aten.convolution.default}
_CONV_BACKWARD = {aten.convolution_backward.default}
_MATMUL = {aten.mm.default, aten.bmm.default, aten.addmm.default}
_INDEX_COPY = {aten.index_copy.default, aten.index_copy_.default}
_INDEX_PUT = {aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
_SCATTER = {aten.scatter.src, aten.scatter_.src}
_PUT = {aten.put.default, aten.put_.default}
_INDEX_ADD = {aten.index_add.default, aten.index_add_.default}
_SCATTER_ADD = {aten.scatter_add.default, aten.scatter_add_.default}


#: Operators that draw from a random generator, by name (every overload).
_RANDOM_NAMES = frozenset({"bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "rand", "randn", "rand_like",
                           "randn_like", "randint", "randint_like", "random_", "exponential_", "cauchy_",
                           "log_normal_", "geometric_", "multinomial", "randperm", "native_dropout",
                           "rrelu_with_noise", "poisson"})


def _draws(func) -> bool:
    return func._schema.name.split("::")[-1] in _RANDOM_NAMES


_EIGH = getattr(getattr(aten, "_linalg_eigh", None), "default", None)


class GPUSemantics(TorchDispatchMode):
    """See the module docstring."""

    def __init__(self, *, tf32: bool = True, winner: bool = True, stream: bool = True, shuffle: bool = True,
                 signs: bool = True, conv_error: float = 0.0, stray_write: bool = False,
                 silent_race: bool = False, race_above: int | None = None, alerts: frozenset = frozenset(),
                 routes: bool = False) -> None:
        super().__init__()
        self.tf32, self.winner, self.stream, self.shuffle, self.signs = tf32, winner, stream, shuffle, signs
        self.conv_error, self.stray_write, self.silent_race = conv_error, stray_write, silent_race
        self.race_above, self.alerts, self.routes = race_above, frozenset(alerts), routes
        self._routed: list = []

    def __enter__(self):
        if self.routes:
            real = F.interpolate
            self._routed.append(real)
            F.interpolate = functools.partial(_routed_interpolate, real)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self._routed:
                F.interpolate = self._routed.pop()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        args = list(args)
        deterministic = torch.are_deterministic_algorithms_enabled()
        if deterministic and func.overloadpacket in self.alerts:
            _alert(f"{func.overloadpacket.__name__}_out_cuda")
        tf32 = functools.partial(round_to_tf32, nearest=deterministic)
        if self.tf32 and func in _CONV:
            args[0], args[1] = tf32(args[0]), tf32(args[1])
            out = func(*args, **kwargs)
            if self.conv_error and out.dtype == torch.float32 and out.numel():
                scale = float(out.abs().max())
                flat = out.reshape(-1).clone()
                flat[0] += self.conv_error * TF32_BOUND * max(scale, 1e-30)
                out = flat.reshape(out.shape)
            return out
        if self.tf32 and func in _CONV_BACKWARD:
            args[0], args[1], args[2] = (tf32(a) for a in args[:3])
        if self.tf32 and func in _MATMUL:
            args = [tf32(a) if isinstance(a, torch.Tensor) else a for a in args]
        if func in _INDEX_COPY:
            return self._index_copy(func, args, kwargs, deterministic)
        if self.winner and not deterministic and func in _INDEX_PUT and not _accumulates(args, 3, kwargs):
            first = next((i for i in args[1] if i is not None), None)
            if first is not None and first.dim() == 1 and all(i is None or i.shape == first.shape for i in args[1]):
                order = _race_order(first.shape[0])
                values = args[2]
                if values.dim() and values.shape[0] == first.shape[0]:
                    values = values[order]
                args[1], args[2] = [i[order] if i is not None else None for i in args[1]], values
        if self.winner and not deterministic and func in _SCATTER:
            dim, index, src = args[1], args[2], args[3]
            src = src[tuple(slice(0, s) for s in index.shape)]
            order = _race_order(index.shape[dim])
            args[2], args[3] = index.index_select(dim, order), src.index_select(dim, order)
        if self.winner and func in _PUT and not _accumulates(args, 3, kwargs):
            # torch has no deterministic put_(accumulate=False) (it alerts): its writes race, and
            # any one of them may win on every call.
            order = _race_order(args[1].numel())
            args[1], args[2] = args[1].reshape(-1)[order], args[2].reshape(-1)[order]
        if func in _INDEX_ADD | _SCATTER_ADD and (self._shuffles() or (
                self.race_above is not None and args[2].numel() > self.race_above)):
            return self._shuffled(func, args, kwargs)
        if self.signs and func is _EIGH:
            values, vectors = func(*args, **kwargs)
            return values, -vectors
        if self.stream and _draws(func):
            torch.rand(7)  # another stream: the generator moves on before the draw
        return func(*args, **kwargs)

    def _shuffles(self) -> bool:
        return self.silent_race or (self.shuffle and not torch.are_deterministic_algorithms_enabled())

    def _index_copy(self, func, args, kwargs, deterministic):
        x, dim, index, source = args[0], args[1], args[2], args[3]
        if self.winner and not deterministic and index.dim() == 1:
            order = _race_order(index.shape[0])
            index, source = index[order], source.index_select(dim, order)
        out = func(x, dim, index, source, **kwargs)
        if self.stray_write:
            seen: dict[int, int] = {}
            for j, i in enumerate(index.tolist()):
                if i in seen:  # written twice: put a value there that neither write carried
                    out.select(dim, i).add_(1000.0)
                    break
                seen[i] = j
        return out

    def _shuffled(self, func, args, kwargs):
        """The same sums, added in a fresh order on every call."""
        x, dim, index, src = args[0], args[1], args[2], args[3]
        gen = torch.Generator().manual_seed(next(_calls))
        if func in _INDEX_ADD:
            order = torch.randperm(index.numel(), generator=gen)
            return func(x, dim, index[order], src.index_select(dim, order), **kwargs)
        src = src[tuple(slice(0, s) for s in index.shape)]
        order = torch.randperm(index.shape[dim], generator=gen)
        return func(x, dim, index.index_select(dim, order), src.index_select(dim, order), **kwargs)


#: The upsampling backward kernels whose CUDA implementations alert under the mode.
UPSAMPLE_BACKWARD = frozenset({aten.upsample_linear1d_backward, aten.upsample_bilinear2d_backward,
                               aten.upsample_bicubic2d_backward, aten.upsample_trilinear3d_backward})


def _race_order(n: int) -> torch.Tensor:
    """The order racing writes land in: a fresh permutation on every call, never the host's own
    (another write wins wherever there is a duplicate)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(next(_calls)))
    if n > 1 and bool((order == torch.arange(n)).all()):
        order = order.flip(0)
    return order


def _alert(kernel: str) -> None:
    """torch's determinism alert for ``kernel``, as its C++ code words it: a RuntimeError under
    the mode, a UserWarning under ``warn_only``."""
    message = (f"{kernel} does not have a deterministic implementation, but you set "
               "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this "
               "operation, or you can use the 'warn_only=True' option, if that's acceptable for your application.")
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message, UserWarning, stacklevel=2)
    else:
        raise RuntimeError(message)


def _emulating_routes() -> bool:
    return any(isinstance(mode, GPUSemantics) and mode.routes for mode in _get_current_dispatch_mode_stack())


def _routed_interpolate(real, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                        recompute_scale_factor=None, antialias=False):
    """``F.interpolate`` as torch runs it off the CPU: ``bilinear`` (4-D) and ``trilinear`` (5-D)
    under the mode go to the decomposition. The host's own calls (the CPU reference, run with the
    emulation set aside) take the native kernels."""
    rank = {"bilinear": 4, "trilinear": 5}.get(mode)
    if (rank == input.dim() and not antialias and scale_factor is None and size is not None
            and torch.are_deterministic_algorithms_enabled() and _emulating_routes()):
        from torch._decomp.decompositions import _upsample_linear_vec

        output_size = [size] * (rank - 2) if isinstance(size, int) else list(size)
        return _upsample_linear_vec(input, output_size, align_corners, None)
    return real(input, size=size, scale_factor=scale_factor, mode=mode, align_corners=align_corners,
                recompute_scale_factor=recompute_scale_factor, antialias=antialias)


def _accumulates(args: list, position: int, kwargs: dict) -> bool:
    if "accumulate" in kwargs:
        return bool(kwargs["accumulate"])
    return bool(args[position]) if len(args) > position else False


@contextlib.contextmanager
def _on_host():
    with _disable_current_modes():
        yield


def emulated_cuda(*, free_bytes: int | None = None, **semantics: Any) -> Backend:
    """A ``cuda`` backend emulated on the host with :class:`GPUSemantics` (keyword arguments as
    there), bound to its device 0, its float32 convolutions and matmuls in TF32 when ``tf32``;
    ``free_bytes``: the free memory it reports (None: unknown)."""
    tf32 = semantics.get("tf32", True)
    return Backend(
        name="cuda",
        available=lambda: True,
        device_name=lambda: "Emulated GPU (host)",
        torch_device_for=lambda index: torch.device("cpu"),
        activate=lambda index: GPUSemantics(**semantics),
        host=False,
        math_precision=lambda family: "tf32" if tf32 else "ieee",
        host_context=_on_host,
        free_memory=None if free_bytes is None else (lambda index: free_bytes),
        inductor_codegen="triton",
    ).on(0)
