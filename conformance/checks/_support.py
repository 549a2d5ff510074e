"""Helpers shared by the checks: device requirements and byte views of tensors.

The global-state guard the checks run under is :func:`engine.determinism.preserved_global_state`
(the runner's too), and fresh processes come from :mod:`engine.child`.
"""
from __future__ import annotations

import warnings

import torch

from engine.checks import CheckSkipped

FLAG_API = "flag-api"
REPRO_NOTES = "repro-notes"

NONDETERMINISTIC_ALERT = "does not have a deterministic implementation"


# ---------------------------------------------------------------------------
# Devices


def require_cuda(device: torch.device) -> None:
    if device.type != "cuda" or not torch.cuda.is_available():
        raise CheckSkipped("needs a CUDA device", needs_device="cuda")


def dtype_supported(dtype: torch.dtype, device: torch.device) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        try:
            torch.zeros(2, dtype=dtype, device=device).clone()
        except (RuntimeError, TypeError):
            return False
    return True


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------
# Fingerprints


def dense_cpu(t: torch.Tensor) -> torch.Tensor:
    """A 1-D copy on the CPU with unit stride (``contiguous()`` keeps odd strides
    on size-1 dimensions, which ``view(torch.uint8)`` refuses)."""
    return t.detach().to("cpu").reshape(-1).clone(memory_format=torch.contiguous_format)


def tensor_bytes(t: torch.Tensor) -> bytes:
    return dense_cpu(t).view(torch.uint8).numpy().tobytes()


def preview(t: torch.Tensor, n: int = 4) -> list[str]:
    """The first few values, as strings (JSON-safe for NaN, complex, uint64)."""
    flat = t.detach().to("cpu").reshape(-1)[:n]
    if flat.dtype in (torch.complex32,):
        flat = flat.to(torch.complex64)
    elif flat.is_floating_point() and flat.dtype not in (torch.float32, torch.float64):
        flat = flat.float()
    return [str(v) for v in flat.tolist()]
