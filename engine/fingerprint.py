"""Fingerprints: the SHA-256 of what a run produced, the one way the suite names bytes.

:func:`tensor_bytes` reads a tensor's values as bytes, in logical (row-major) order, from a fresh
one-dimensional copy on the host (whatever its strides, conj or neg bits); :func:`sha256` hashes
a sequence of such chunks (text is hashed as UTF-8). Each caller decides what goes in (labels,
dtypes, shapes) and how much of the digest it keeps. Imports nothing of the project: a fresh
child process (:mod:`conformance.children`) uses it too.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

import torch

__all__ = ["flat_host_copy", "sha256", "tensor_bytes"]


def flat_host_copy(t: torch.Tensor) -> torch.Tensor:
    """A 1-D copy of ``t`` on the CPU with unit stride (``contiguous()`` keeps odd strides on
    size-1 dimensions, which ``view(torch.uint8)`` refuses), conj and neg bits resolved."""
    t = t.detach().to("cpu").resolve_conj().resolve_neg()
    return t.reshape(-1).clone(memory_format=torch.contiguous_format)


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The bytes of ``t``'s values in logical order."""
    return flat_host_copy(t).view(torch.uint8).numpy().tobytes()


def sha256(chunks: Iterable[bytes | str], *, length: int | None = None) -> str:
    """The hex SHA-256 of ``chunks`` one after another; the first ``length`` digits if given."""
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk.encode() if isinstance(chunk, str) else chunk)
    digest = h.hexdigest()
    return digest if length is None else digest[:length]
