"""The order of the matrix: entries (source, list, position), then columns (torch version,
device, mode, compile setting)."""

from __future__ import annotations

import re

from detconf.vocabulary import COMPILERS, MODES
from detconf.reports.records import EAGER, DEFAULT_PHASE

#: Devices in the order the matrix shows them (others after them, by name).
DEVICE_ORDER = ("cpu", "cuda", "mps", "npu", "xpu")


def natural_key(text: str) -> tuple:
    """Sort key that orders ``2.9.0`` before ``2.10.0``."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p)


def device_key(device: str) -> tuple:
    return (DEVICE_ORDER.index(device), "") if device in DEVICE_ORDER else (len(DEVICE_ORDER), device)


def mode_key(mode: str) -> int:
    return MODES.index(mode)


def compile_key(setting: str) -> int:
    return COMPILERS.index(setting)


def entry_sort_key(rec: dict) -> tuple:
    """Matrix row order: source, list, position in the list if known, else entry id."""
    pos = rec.get("position")
    return (
        rec["source"], rec["list_name"], pos is None, pos if pos is not None else 0,
        natural_key(rec["entry_id"]), rec["entry_id"], rec.get("doc_version") or "",
        (rec.get("phase") or DEFAULT_PHASE) != DEFAULT_PHASE,
    )


def column_sort_key(rec: dict) -> tuple:
    return (natural_key(rec["torch_version"]), rec["torch_version"], device_key(rec["device"]),
            mode_key(rec["mode"]), compile_key(rec.get("compile") or EAGER))

