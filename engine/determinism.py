"""Set and restore every global determinism setting, even when the body raises.

``deterministic_mode("error")`` is ``use_deterministic_algorithms(True)``,
``"warn_only"`` adds ``warn_only=True``, ``"off"`` turns it off. The guard
snapshots the mode, warn_only, the debug mode, ``fill_uninitialized_memory``
and the cuDNN flags on entry and puts all of them back on exit.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch

MODES = ("error", "warn_only", "off")


@dataclass(frozen=True)
class DeterminismState:
    enabled: bool
    warn_only: bool
    debug_mode: int
    fill_uninitialized_memory: bool | None
    cudnn_deterministic: bool
    cudnn_benchmark: bool

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _fill_flag_module():
    deterministic = getattr(getattr(torch, "utils", None), "deterministic", None)
    if deterministic is not None and hasattr(deterministic, "fill_uninitialized_memory"):
        return deterministic
    return None


def current_state() -> DeterminismState:
    fill = _fill_flag_module()
    warn_only = getattr(torch, "is_deterministic_algorithms_warn_only_enabled", lambda: False)()
    return DeterminismState(
        enabled=torch.are_deterministic_algorithms_enabled(),
        warn_only=bool(warn_only),
        debug_mode=int(torch.get_deterministic_debug_mode()),
        fill_uninitialized_memory=None if fill is None else bool(fill.fill_uninitialized_memory),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
    )


def restore_state(state: DeterminismState) -> None:
    torch.use_deterministic_algorithms(state.enabled, warn_only=state.warn_only)
    # The debug mode and (enabled, warn_only) are two views of one setting; the
    # call above already restores it, this keeps the two in step if they ever diverge.
    if int(torch.get_deterministic_debug_mode()) != state.debug_mode:
        torch.set_deterministic_debug_mode(state.debug_mode)
    fill = _fill_flag_module()
    if fill is not None and state.fill_uninitialized_memory is not None:
        fill.fill_uninitialized_memory = state.fill_uninitialized_memory
    torch.backends.cudnn.deterministic = state.cudnn_deterministic
    torch.backends.cudnn.benchmark = state.cudnn_benchmark


def apply_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "off":
        torch.use_deterministic_algorithms(False)
    else:
        torch.use_deterministic_algorithms(True, warn_only=(mode == "warn_only"))


@contextlib.contextmanager
def deterministic_mode(mode: str, *, cudnn_benchmark: bool | None = False) -> Iterator[DeterminismState]:
    """Run the body under ``mode``; restore every setting afterwards.

    ``cudnn_benchmark=False`` (the default) follows the reproducibility notes:
    benchmark mode picks algorithms by timing, which defeats determinism.
    Pass ``None`` to leave it untouched.
    """
    saved = current_state()
    try:
        apply_mode(mode)
        if cudnn_benchmark is not None:
            torch.backends.cudnn.benchmark = cudnn_benchmark
        yield saved
    finally:
        restore_state(saved)
