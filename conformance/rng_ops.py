"""The random ops of the seed checks, shared with their child processes.

This module imports only ``torch`` (and :mod:`engine.fingerprint`, which imports only torch), so the fresh-process
check's children (:mod:`conformance.children`) start quickly.

``build(name, params, device)`` returns a zero-argument function whose tensors
depend only on the global torch RNG; the inputs that are not meant to be
random-by-seed (probabilities, the matrix for ``svd_lowrank``) come from a
private generator seeded with ``params["data_seed"]``.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from detconf.engine.fingerprint import sha256, tensor_bytes

RNG_OPS = ("randn", "rand", "dropout", "randperm", "multinomial", "svd_lowrank")


def _private(params: dict[str, Any]) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(int(params["data_seed"]))


def build(name: str, params: dict[str, Any], device: torch.device | str) -> Callable[[], tuple[torch.Tensor, ...]]:
    device = torch.device(device)
    dtype = getattr(torch, params.get("dtype", "float32"))
    shape = tuple(params.get("shape", (4, 4)))
    if name == "randn":
        return lambda: (torch.randn(shape, dtype=dtype, device=device),)
    if name == "rand":
        return lambda: (torch.rand(shape, dtype=dtype, device=device),)
    if name == "dropout":
        ones = torch.ones(shape, dtype=dtype, device=device)
        p = float(params.get("p", 0.5))
        return lambda: (torch.nn.functional.dropout(ones, p=p, training=True),)
    if name == "randperm":
        n = int(params.get("n", 16))
        return lambda: (torch.randperm(n, device=device),)
    if name == "multinomial":
        probs = torch.rand(int(params.get("categories", 8)), generator=_private(params)).to(device) + 0.05
        samples = int(params.get("samples", 4))
        replacement = bool(params.get("replacement", True))
        return lambda: (torch.multinomial(probs, samples, replacement=replacement),)
    if name == "svd_lowrank":
        m, n = int(params.get("m", 8)), int(params.get("n", 6))
        a = torch.randn(m, n, dtype=dtype, generator=_private(params)).to(device)
        q = int(params.get("q", min(m, n)))
        return lambda: tuple(torch.svd_lowrank(a, q=q))
    raise ValueError(f"unknown random op {name!r}")


def fingerprint(tensors: tuple[torch.Tensor, ...]) -> str:
    """16 hex digits of the SHA-256 of each output's dtype, shape and bytes."""
    return sha256((chunk for t in tensors for chunk in (f"{t.dtype}|{tuple(t.shape)}|", tensor_bytes(t))), length=16)


def run_seeded(name: str, params: dict[str, Any], device: torch.device | str, seed: int) -> str:
    """``torch.manual_seed(seed)``, then the op: the fingerprint of its outputs."""
    fn = build(name, params, device)
    torch.manual_seed(seed)
    return fingerprint(fn())
