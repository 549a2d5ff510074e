"""Splitting the plan over several runners: ``--shard I/N`` runs the I-th of N parts.

A case's part follows from the case alone -- a SHA-256 of its entry (source and id), device
and compile setting -- so the split is the same on every machine, whatever the order of
collection, and every case is in exactly one part. All modes and phases of an entry on a
device under a compile setting stay in one part: a compiled entry's modes share their
kernels (see ``plugin.plan._compile_group``), and a shard's rows of an entry read together.
"""
from __future__ import annotations

import hashlib
import re
from typing import Iterable

from detconf.conformance.plan import Case


class ShardError(ValueError):
    """A ``--shard`` value that is not ``I/N`` with 1 <= I <= N."""


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``; a :class:`ShardError` with one line for anything else."""
    shown = str(text) if len(str(text)) <= 40 else str(text)[:39] + "…"
    match = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", str(text))
    if not match:
        raise ShardError(f"--shard must be I/N (this runner's part I of N parts, e.g. 1/4), got {shown!r}")
    index, total = (int(g) for g in match.groups())
    if total < 1:
        raise ShardError(f"--shard {shown}: the number of parts must be at least 1")
    if not 1 <= index <= total:
        raise ShardError(f"--shard {shown}: the part must be from 1 to {total}")
    return index, total


def shard_group(case: Case) -> str:
    """What decides a case's part: its entry, device and compile setting."""
    return f"{case.entry.source}:{case.entry.doc_version or ''}:{case.entry.id}|{case.device}|{case.compile}"


def shard_of(case: Case, total: int) -> int:
    """The part (1 to ``total``) ``case`` belongs to."""
    digest = hashlib.sha256(shard_group(case).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % total + 1


def select(cases: Iterable[Case], index: int, total: int) -> list[Case]:
    """The cases of part ``index`` of ``total``, in their order."""
    return [c for c in cases if shard_of(c, total) == index]
