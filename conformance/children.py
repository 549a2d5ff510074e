"""Targets the checks run in fresh processes through :mod:`detconf.child`.

Each is ``fn(payload) -> JSON-safe result``. This module imports only ``torch`` and the
torch-free :mod:`detconf.vocabulary` (and, inside the targets, :mod:`conformance.rng_ops`): a child must start in
well under a second and must not touch what it is asked to observe (no
Inductor import, no CUDA initialisation before the environment is in place).
The deterministic flag is set through ``torch._C`` directly: the public switch
imports Inductor, seconds per child.
"""
from __future__ import annotations

import os
import random
import warnings
from typing import Any

import torch

from detconf.vocabulary import MODE_FLAGS
from detconf.engine.fingerprint import sha256, tensor_bytes


def _set_mode(mode: str) -> None:
    enabled, warn_only = MODE_FLAGS[mode]
    torch._C._set_deterministic_algorithms(enabled, warn_only=warn_only)


def default_fill(payload: dict[str, Any]) -> dict[str, Any]:
    """The default of ``fill_uninitialized_memory`` in a fresh process, and what ``empty`` holds with it."""
    default = torch.utils.deterministic.fill_uninitialized_memory
    _set_mode("error")
    probe = torch.empty(payload["numel"], dtype=torch.float32)
    return {"default": default, "empty_all_nan": bool(torch.isnan(probe).all())}


def seeded_ops(payload: dict[str, Any]) -> dict[str, str]:
    """Every random op after ``manual_seed`` / ``random.seed`` / ``np.random.seed`` with one seed."""
    from detconf.conformance import rng_ops

    _set_mode(payload["mode"])
    seed = payload["seed"]
    out = {name: rng_ops.run_seeded(name, params, payload["device"], seed) for name, params in payload["ops"].items()}
    random.seed(seed)
    out["random.seed"] = repr([random.random() for _ in range(4)])
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        np.random.seed(seed % 2**32)
        out["np.random.seed"] = repr(np.random.rand(4).tolist())
    return out


def cublas_runs(payload: dict[str, Any]) -> dict[str, Any]:
    """``mm`` / ``mv`` / ``bmm`` on CUDA, ``runs`` times, under this process's ``CUBLAS_WORKSPACE_CONFIG``."""
    if not torch.cuda.is_available():
        raise RuntimeError("the child sees no CUDA device")
    _set_mode(payload["mode"])
    g = torch.Generator(device="cpu").manual_seed(payload["seed"])
    m, k, n, b = payload["m"], payload["k"], payload["n"], payload["batch"]
    dev = torch.device("cuda")
    if payload["op"] == "mm":
        args = (torch.randn(m, k, generator=g).to(dev), torch.randn(k, n, generator=g).to(dev))
        fn = torch.mm
    elif payload["op"] == "mv":
        args = (torch.randn(m, k, generator=g).to(dev), torch.randn(k, generator=g).to(dev))
        fn = torch.mv
    else:
        args = (torch.randn(b, m, k, generator=g).to(dev), torch.randn(b, k, n, generator=g).to(dev))
        fn = torch.bmm
    runs, error = [], None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for _ in range(payload["runs"]):
                out = fn(*args)
                torch.cuda.synchronize()
                runs.append(sha256([tensor_bytes(out)], length=16))
        except RuntimeError as exc:
            error = str(exc)
    return {
        "env": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "error": error,
        "warnings": [{"category": w.category.__name__, "message": str(w.message)[:300]} for w in caught],
        "fingerprints": runs,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0),
    }
