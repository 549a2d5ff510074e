"""Fresh-process targets of the SDPA checks (``--source sdpa``), run through :mod:`detconf.child`.

The fused SDPA backwards on CUDA warn with ``TORCH_WARN_ONCE``: once per process, whatever ran
before. A check that calls them in the test process sees the warning only if no earlier case
(another mode, another example) did, so each observation runs here, in a process of its own.
This module imports only torch, the torch-free vocabulary and the fingerprint helper; the mode is set through
``torch._C`` (the public switch imports Inductor, seconds per child).
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from detconf.vocabulary import MODE_FLAGS
from detconf.engine.fingerprint import sha256, tensor_bytes


def _fingerprint(tensors) -> str:
    return sha256((tensor_bytes(t.detach()) for t in tensors), length=16)


def sdpa_backend_runs(payload: dict[str, Any]) -> dict[str, Any]:
    """``scaled_dot_product_attention`` forward and backward ``payload["runs"]`` times with only
    ``payload["backend"]`` enabled (an ``SDPBackend`` name; None: torch's own choice), under
    ``payload["mode"]``. The math and default cases call it in the test process too.

    Per run: the warnings raised (category, message), the error if one stopped it (type,
    message; later runs are not attempted) and a fingerprint of the output and the gradients."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    enabled, warn_only = MODE_FLAGS[payload["mode"]]
    torch._C._set_deterministic_algorithms(enabled, warn_only=warn_only)
    device = torch.device(payload["device"])
    g = torch.Generator(device="cpu").manual_seed(payload["seed"])
    dtype = getattr(torch, payload["dtype"])
    q, k, v = (torch.randn(*payload["shape"], generator=g).to(device=device, dtype=dtype).requires_grad_()
               for _ in range(3))
    backend = payload.get("backend")
    runs: list[dict[str, Any]] = []
    for _ in range(payload["runs"]):
        run: dict[str, Any] = {"warnings": [], "error": None, "fingerprint": None}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext():
                    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=payload["causal"])
                    grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)  # its own device: no context made on GPU 0
                run["fingerprint"] = _fingerprint((out, *grads))
            except Exception as exc:  # noqa: BLE001 - the observation: which error, with what text
                run["error"] = {"type": type(exc).__name__, "message": str(exc)[:600]}
        run["warnings"] = [{"category": w.category.__name__, "message": str(w.message)[:400]} for w in caught]
        runs.append(run)
        if run["error"] is not None:
            break
    info: dict[str, Any] = {"runs": runs}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["capability"] = list(torch.cuda.get_device_capability(device))
    return info
