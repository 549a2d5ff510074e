"""Checks for ``torch.utils.deterministic.fill_uninitialized_memory`` (``--source repro-notes``).

The docstrings of ``torch.empty``, ``empty_like``, ``empty_strided`` and
``Tensor.resize_`` say: with ``use_deterministic_algorithms(True)`` and
``fill_uninitialized_memory`` both on, "Floating point and complex tensors are
filled with NaN, and integer tensors are filled with the maximum value" (for
``resize_``: the new elements). ``Tensor.new_empty`` returns the same kind of
uninitialized tensor. With deterministic mode or the fill flag off nothing is
promised: those checks record what the memory held (``held=None``).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from hypothesis import strategies as st

from detconf.engine.checks import CheckObservation, CheckUnsupported, check
from detconf.child import run_in_child
from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import mode_is_on, preserved_global_state
from detconf.engine.runner import UNSUPPORTED

from detconf.engine.fingerprint import flat_host_copy

from ._support import REPRO_NOTES, dtype_supported, preview


def _dtypes(*names: str) -> list[torch.dtype]:
    return [getattr(torch, n) for n in names if isinstance(getattr(torch, n, None), torch.dtype)]


DTYPE_CLASSES: dict[str, list[torch.dtype]] = {
    "floating": _dtypes("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"),
    "complex": _dtypes("complex32", "complex64", "complex128"),
    "integer": _dtypes("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"),
}

FILL_OPS = ("empty", "empty_like", "empty_strided", "new_empty", "resize_")


def _draw_dtype(draw, classes: list[str], device: torch.device) -> tuple[str, torch.dtype]:
    cls = draw(st.sampled_from(classes), label="dtype class")
    dtypes = [d for d in DTYPE_CLASSES[cls] if dtype_supported(d, device)]
    return cls, draw(st.sampled_from(dtypes), label="dtype")


_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def _make(op: str, draw, dtype: torch.dtype, device: torch.device) -> tuple[Callable[[], torch.Tensor], dict[str, Any]]:
    """A zero-argument builder for ``op`` and the example's description.

    The builder returns the elements that are uninitialized: the whole result,
    or for a growing ``resize_`` the elements beyond the old size."""
    shape = draw(_shapes, label="shape")
    if op == "empty":
        return (lambda: torch.empty(shape, dtype=dtype, device=device)), {"shape": list(shape)}
    if op == "empty_like":
        transposed = len(shape) > 1 and draw(st.booleans(), label="non-contiguous input")
        src = torch.zeros(shape, dtype=dtype, device=device)
        if transposed:
            src = src.transpose(0, -1)
        return (lambda: torch.empty_like(src)), {"input_shape": list(src.shape), "input_strides": list(src.stride())}
    if op == "empty_strided":
        # Contiguous strides, permuted and/or spread out (gaps in the storage).
        order = draw(st.permutations(range(len(shape))), label="stride order")
        gap = draw(st.integers(1, 3), label="stride gap")
        strides = [0] * len(shape)
        step = gap
        for dim in reversed(order):
            strides[dim] = step
            step *= shape[dim]
        return (lambda: torch.empty_strided(shape, strides, dtype=dtype, device=device)), {
            "shape": list(shape),
            "strides": strides,
        }
    if op == "new_empty":
        base_dtype = draw(st.sampled_from([dtype, torch.float32, torch.int64]), label="base dtype")
        base = torch.ones(3, dtype=base_dtype, device=device)
        return (lambda: base.new_empty(shape, dtype=dtype)), {"shape": list(shape), "base_dtype": str(base_dtype)}
    if op == "resize_":
        old = draw(st.integers(1, 8), label="old numel")
        new_numel = 1
        for s in shape:
            new_numel *= s
        new_numel_total = old + new_numel  # always grows

        def grow() -> torch.Tensor:
            t = torch.ones(old, dtype=dtype, device=device)
            t.resize_(new_numel_total)
            return t.reshape(-1)[old:]

        return grow, {"old_numel": old, "new_numel": new_numel_total}
    raise ValueError(f"unknown fill op {op!r}")


def _uninitialized(build: Callable[[], torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """``build()``; a torch that cannot make (or fill) this dtype's uninitialized memory is unsupported."""
    try:
        return build()
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        if UNSUPPORTED.search(str(exc)):
            raise CheckUnsupported(f"{dtype}: {str(exc).splitlines()[0][:300]}") from None
        raise


def _observe(build: Callable[[], torch.Tensor], dtype: torch.dtype, compiler: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the uninitialized elements hold, and (under a compile setting) how the builder ran.

    Compiled: the builder itself goes through ``torch.compile``, so the allocation happens in
    compiled code (Inductor allocates its own buffers). A builder that did not run as one
    compiled graph (a graph break, or Dynamo ran it in eager) says nothing about compiled
    code: :class:`CheckUnsupported` with the reason."""
    if compiler is None:
        return classify(_uninitialized(build, dtype)), {}
    compiled_build = compiler.compile(build)
    with compiler.run() as snap:
        t = _uninitialized(compiled_build, dtype)
    if not snap.graphs_run or snap.graph_breaks:
        why = "; ".join(snap.break_reasons) or "Dynamo ran the builder in eager"
        raise CheckUnsupported(f"not compiled: {why}"[:400])
    ops = sorted(snap.ops)
    return classify(t), {"compile": compiler.setting, "compiled_ops": ops[:12], "graphs_run": snap.graphs_run}


def classify(t: torch.Tensor) -> dict[str, Any]:
    """What the uninitialized elements hold: counts of NaN, of the integer
    maximum and of zeros, and a short preview."""
    flat = flat_host_copy(t)
    n = flat.numel()
    summary: dict[str, Any] = {"dtype": str(t.dtype), "numel": n, "preview": preview(flat)}
    zero_bytes = (flat.view(torch.uint8) == 0).reshape(n, -1).all(dim=1)
    summary["zeros"] = int(zero_bytes.sum())
    if t.dtype.is_complex:
        parts = torch.view_as_real(flat.to(torch.complex128))
        summary["nan"] = int(torch.isnan(parts).any(dim=-1).sum())
        summary["nan_real"] = int(torch.isnan(parts[:, 0]).sum())
        summary["nan_imag"] = int(torch.isnan(parts[:, 1]).sum())
    elif t.dtype.is_floating_point:
        summary["nan"] = int(torch.isnan(flat.to(torch.float64)).sum())
    elif t.dtype != torch.bool:
        top = torch.iinfo(t.dtype).max
        summary["max"] = sum(1 for v in flat.tolist() if v == top)
    return summary


def _observed(summary: dict[str, Any]) -> str:
    n = summary["numel"]
    if summary.get("nan") == n:
        return "filled-nan"
    if summary.get("max") == n:
        return "filled-max"
    if summary["zeros"] == n:
        return "zeros"
    return "unfilled"


def _fill_on_check(op: str, cls: str):
    def fill_on(draw, entry, device: torch.device, mode: str, compiler: Any = None) -> CheckObservation:
        _, dtype = _draw_dtype(draw, [cls], device)
        build, example = _make(op, draw, dtype, device)
        with preserved_global_state():
            enter_mode(mode)
            torch.utils.deterministic.fill_uninitialized_memory = True
            summary, compiled = _observe(build, dtype, compiler)
        observed = _observed(summary)
        want = "filled-nan" if cls in ("floating", "complex") else "filled-max"
        return CheckObservation(
            held=(observed == want) if mode_is_on(mode) else None,
            observed=observed,
            detail={"op": op, "dtype": str(dtype), "fill_uninitialized_memory": True, "expected": want, **example,
                    **summary, **compiled},
        )

    fill_on.__name__ = f"fill_on_{op}_{cls}"
    return fill_on


def _fill_off_check(op: str):
    def fill_off(draw, entry, device: torch.device, mode: str, compiler: Any = None) -> CheckObservation:
        cls, dtype = _draw_dtype(draw, list(DTYPE_CLASSES), device)
        build, example = _make(op, draw, dtype, device)
        with preserved_global_state():
            enter_mode(mode)
            torch.utils.deterministic.fill_uninitialized_memory = False
            summary, compiled = _observe(build, dtype, compiler)
        return CheckObservation(
            held=None,
            observed=_observed(summary),
            detail={"op": op, "dtype": str(dtype), "dtype_class": cls, "fill_uninitialized_memory": False, **example,
                    **summary, **compiled},
        )

    fill_off.__name__ = f"fill_off_{op}"
    return fill_off


for _op in FILL_OPS:
    for _cls in DTYPE_CLASSES:
        check(f"fill_uninitialized_memory:{_op}[{_cls}]", source=REPRO_NOTES, compiles=True)(_fill_on_check(_op, _cls))
    check(f"fill_uninitialized_memory=False:{_op}", source=REPRO_NOTES, compiles=True)(_fill_off_check(_op))


@check("fill_uninitialized_memory:default", source=REPRO_NOTES, max_examples=1)
def fill_flag_defaults_to_true(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "torch.utils.deterministic.fill_uninitialized_memory is set to True by
    # default": only a fresh process shows the default, whatever this one did.
    numel = draw(st.integers(1, 64), label="probe numel")
    result = run_in_child("detconf.conformance.children:default_fill", {"numel": numel}, timeout=120,
                          what="fill_uninitialized_memory default")
    default = result["default"]
    return CheckObservation(
        held=default is True,
        observed=f"default-{default}",
        detail={"fresh_process": result, "mode_in_parent": mode},
    )
