"""Run-time probes of what the installed torch can do, for the harness's own tests.

Tests follow capabilities, never version numbers: where a release lacks a
feature, the test that needs it skips naming the missing capability (see
:data:`INDUCTOR_DETERMINISTIC` and friends), and where a conformance check
reports ``unsupported`` the test accepts it only if a probe here agrees that
this torch lacks the capability.

The probes that call torch run the real call once per process (cached) inside
:func:`engine.determinism.preserved_global_state`, so they leave every setting
as they found it; call one *before* a test plants a fault in the API it
probes, or the probe sees the fault. :func:`has_inductor_deterministic` is a
plain ``hasattr``, read afresh each time.
"""
from __future__ import annotations

import functools
import re
import warnings

import torch

from detconf.engine.determinism import preserved_global_state

# The capability names the skips quote.
INDUCTOR_DETERMINISTIC = "torch._inductor.config.deterministic (Inductor's deterministic setting)"
UDA_SETS_INDUCTOR = "use_deterministic_algorithms(True) switching on torch._inductor.config.deterministic"


def _inductor_config():
    try:
        import torch._inductor.config as inductor_config
    except Exception:  # noqa: BLE001 - a torch built without Inductor
        return None
    return inductor_config


def has_inductor_deterministic() -> bool:
    """Whether this torch has Inductor's deterministic setting.

    ``hasattr``, not ``getattr``: on releases without the key, reading it
    raises AttributeError (and so does setting it)."""
    config = _inductor_config()
    return config is not None and hasattr(config, "deterministic")


def require_inductor_deterministic() -> None:
    import pytest

    if not has_inductor_deterministic():
        pytest.skip(f"torch {torch.__version__} lacks {INDUCTOR_DETERMINISTIC}")


@functools.lru_cache(maxsize=None)
def use_deterministic_algorithms_sets_inductor() -> bool:
    """Whether ``use_deterministic_algorithms(True)`` turns Inductor's deterministic setting on."""
    if not has_inductor_deterministic():
        return False
    config = _inductor_config()
    with preserved_global_state():
        config.deterministic = False
        torch._C._set_deterministic_algorithms(False)
        torch.use_deterministic_algorithms(True)
        return config.deterministic is True


# For each fill op: what it starts from (made before the mode is set) and the call that
# makes uninitialized memory from it.
_UNINITIALIZED = {
    "empty": (lambda dtype: None, lambda dtype, _: torch.empty(2, dtype=dtype)),
    "empty_like": (lambda dtype: torch.zeros(2, dtype=dtype), lambda dtype, src: torch.empty_like(src)),
    "empty_strided": (lambda dtype: None, lambda dtype, _: torch.empty_strided((2,), (1,), dtype=dtype)),
    "new_empty": (lambda dtype: torch.ones(2), lambda dtype, base: base.new_empty((2,), dtype=dtype)),
    # A tensor of ones grown: fill_ makes the ones and (deterministic mode) fills the new elements.
    "resize_": (lambda dtype: None, lambda dtype, _: torch.ones(1, dtype=dtype).resize_(3)),
}


@functools.lru_cache(maxsize=None)
def can_make_uninitialized(dtype: torch.dtype, op: str = "empty", *, deterministic: bool = True,
                           fill: bool = True) -> bool:
    """Whether this torch makes ``op``'s uninitialized memory of ``dtype`` on the CPU with
    deterministic mode and ``fill_uninitialized_memory`` as given (by default on: the fill).

    2.5.1 has no ``fill_empty_deterministic_`` kernel for complex32, and no ``fill_``
    kernel for float8 (``torch.ones(1, dtype=torch.float8_e5m2)`` raises), which
    ``resize_`` uses to fill the elements it adds."""
    setup, make = _UNINITIALIZED[op]
    with preserved_global_state(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        try:
            start = setup(dtype)
            torch._C._set_deterministic_algorithms(deterministic)
            torch.utils.deterministic.fill_uninitialized_memory = fill
            make(dtype, start)
        except (RuntimeError, NotImplementedError, TypeError):
            return False
    return True


# The names torch's kernels use for dtypes in "... not implemented for 'Half'".
SCALAR_TYPE_NAMES = {
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
}


def scalar_type_name(dtype: torch.dtype) -> str:
    """``'Half'`` for float16; other dtypes as torch spells them, up to case (``Float8_e5m2``, ``UInt16``)."""
    return SCALAR_TYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


# Every CPU kernel the suite uses exists for these: a message saying otherwise is a failure.
ALWAYS_IMPLEMENTED = frozenset({torch.float32})


def kernel_missing_for(message: str | None, dtypes) -> torch.dtype | None:
    """The dtype among ``dtypes`` that ``message`` says a kernel is not implemented for, or None.

    Matches torch's wordings: ``"replication_pad1d" not implemented for 'Half'`` and
    ``grid_sampler_2d_cpu not implemented for Half``. Never float32
    (:data:`ALWAYS_IMPLEMENTED`): a torch without a float32 CPU kernel is broken."""
    if not message:
        return None
    for dtype in dtypes:
        if dtype in ALWAYS_IMPLEMENTED:
            continue
        name = re.escape(scalar_type_name(dtype))
        flags = 0 if dtype in SCALAR_TYPE_NAMES else re.IGNORECASE
        if re.search(rf"not implemented for '?{name}'?(?![\w])", message, flags):
            return dtype
    return None
