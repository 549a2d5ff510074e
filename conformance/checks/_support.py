"""Helpers shared by the checks: device requirements and byte views of tensors.

The global-state guard the checks run under is :func:`engine.determinism.preserved_global_state`
(the runner's too), and fresh processes come from :mod:`detconf.child`.
"""
from __future__ import annotations

import warnings

import torch

from detconf.engine.checks import CheckSkipped
from detconf.engine.devices import backend_for

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
    """Wait for ``device``'s queue (its backend's ``synchronize``)."""
    backend = backend_for(device.type)
    if backend is not None:
        backend.synchronize()


# ---------------------------------------------------------------------------
# Evidence


def preview(t: torch.Tensor, n: int = 4) -> list[str]:
    """The first few values, as strings (JSON-safe for NaN, complex, uint64)."""
    flat = t.detach().to("cpu").reshape(-1)[:n]
    if flat.dtype in (torch.complex32,):
        flat = flat.to(torch.complex64)
    elif flat.is_floating_point() and flat.dtype not in (torch.float32, torch.float64):
        flat = flat.float()
    return [str(v) for v in flat.tolist()]
