"""The one guard for global state: set a mode, and put every setting the suite touches back.

``deterministic_mode("error")`` is ``use_deterministic_algorithms(True)``,
``"warn_only"`` adds ``warn_only=True``, ``"off"`` turns it off. Underneath,
:func:`preserved_global_state` snapshots and restores, even when the body raises:

- the mode and warn_only (the debug mode is the same setting and comes back with them);
- ``torch.utils.deterministic.fill_uninitialized_memory``;
- the cuDNN flags ``deterministic`` and ``benchmark``;
- Inductor's ``deterministic`` setting;
- the float32 / reduced-precision math settings (:func:`engine.mathmode.capture`: TF32 for
  cuBLAS and cuDNN, ``float32_matmul_precision``, the ``fp32_precision`` settings, the
  reduced-precision reduction flags), shown one by one in :meth:`GlobalState.summary` as
  ``math_mode.<setting>``;
- the environment variables the suite or torch may set (:data:`GUARDED_ENV_VARS`);
- with ``rng=True``, the torch (CPU and CUDA), ``random`` and NumPy generator states (inside
  :func:`preserved_rng`, which the harness opens once per case, torch's alone: the enclosing
  block puts ``random`` and NumPy back).

The runner and the checks use this same guard. It reads and writes the flags
through ``torch._C`` where it can, so that a check whose public API is broken
(or deliberately faulted in a test) cannot corrupt the restore.
"""
from __future__ import annotations

import contextlib
import os
import random
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from detconf.gc_pause import gc_paused
from detconf.vocabulary import DETERMINISTIC_MODES, MODE_FLAGS, MODES, debug_level
from detconf.engine import mathmode

__all__ = ["GUARDED_ENV_VARS", "MATH_MODE_PREFIX", "GlobalState", "apply_mode", "capture_state", "current_state",
           "deterministic_mode", "environment", "import_effects_undone", "mode_is_on", "preserved_global_state",
           "preserved_python_rng", "preserved_rng", "restore_state"]

# Environment variables the suite (CUBLAS_WORKSPACE_CONFIG, per the reproducibility
# notes) or torch itself (see torch/_inductor/fx_passes/numeric_utils.py) may set.
GUARDED_ENV_VARS = ("CUBLAS_WORKSPACE_CONFIG", "TORCHINDUCTOR_DETERMINISTIC")
#: How :meth:`GlobalState.summary` names a math setting: ``math_mode.cudnn.allow_tf32``.
MATH_MODE_PREFIX = "math_mode."

#: Inductor's config has no ``deterministic`` setting (or this torch has no Inductor).
_NO_SETTING = object()


_INDUCTOR_CONFIG = "torch._inductor.config"


def _inductor_config():
    """``torch._inductor.config`` if this torch has it (``use_deterministic_algorithms``
    imports it anyway), else None."""
    loaded = sys.modules.get(_INDUCTOR_CONFIG)
    if loaded is not None:
        return loaded
    try:
        # About a second of imports (Dynamo's), whose objects live as long as the process:
        # nothing for the collector to find, then or later.
        with gc_paused(freeze=True):
            import torch._inductor.config as inductor_config
    except Exception:  # noqa: BLE001 - torch builds without Inductor
        return None
    return inductor_config


def _get_fill() -> bool | None:
    getter = getattr(torch._C, "_get_deterministic_fill_uninitialized_memory", None)
    return None if getter is None else bool(getter())


def _set_fill(value: bool) -> None:
    torch._C._set_deterministic_fill_uninitialized_memory(value)


def _cudnn_flags() -> tuple[bool, bool]:
    """(deterministic, benchmark), read through ``torch._C`` where this torch has the getters."""
    get_det = getattr(torch._C, "_get_cudnn_deterministic", None)
    get_bench = getattr(torch._C, "_get_cudnn_benchmark", None)
    if get_det is None or get_bench is None:
        return bool(torch.backends.cudnn.deterministic), bool(torch.backends.cudnn.benchmark)
    return bool(get_det()), bool(get_bench())


@dataclass
class GlobalState:
    """A snapshot of every global setting the suite touches."""

    deterministic: bool
    warn_only: bool
    debug_mode: int
    fill_uninitialized_memory: bool | None
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    inductor_deterministic: Any
    env: dict[str, str | None]
    #: :func:`engine.mathmode.capture`: the float32 math settings (empty: not guarded).
    math_mode: dict[str, Any] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict, compare=False)

    def summary(self) -> dict[str, Any]:
        """JSON-safe view of the flags (RNG states left out); each math setting is a key of its
        own (``math_mode.cudnn.allow_tf32``), so that a leak names it."""
        inductor = self.inductor_deterministic
        out = {
            "deterministic": self.deterministic,
            "warn_only": self.warn_only,
            "debug_mode": self.debug_mode,
            "fill_uninitialized_memory": self.fill_uninitialized_memory,
            "cudnn_deterministic": self.cudnn_deterministic,
            "cudnn_benchmark": self.cudnn_benchmark,
            "inductor_deterministic": None if inductor is _NO_SETTING else repr(inductor),
            "env": dict(self.env),
        }
        for key, value in self.math_mode.items():
            out[MATH_MODE_PREFIX + key] = value
        return out

    as_dict = summary


class _RngGuards(threading.local):
    """How many :func:`preserved_rng` blocks are open in this thread."""

    depth = 0


_RNG_GUARDS = _RngGuards()


def capture_state(*, rng: bool = False, python_rng: bool = True) -> GlobalState:
    """Snapshot the guarded settings; with ``rng``, the torch (and CUDA) generator states, and
    with ``python_rng`` as well, those of ``random`` and NumPy."""
    inductor = _inductor_config()
    deterministic = bool(torch._C._get_deterministic_algorithms())
    warn_only = bool(torch._C._get_deterministic_algorithms_warn_only())
    cudnn_deterministic, cudnn_benchmark = _cudnn_flags()
    state = GlobalState(
        deterministic=deterministic,
        warn_only=warn_only,
        # The debug mode is the same setting as the two flags (torch derives it from them).
        debug_mode=debug_level(deterministic, warn_only),
        fill_uninitialized_memory=_get_fill(),
        cudnn_deterministic=cudnn_deterministic,
        cudnn_benchmark=cudnn_benchmark,
        inductor_deterministic=_NO_SETTING if inductor is None else getattr(inductor, "deterministic", _NO_SETTING),
        env={name: os.environ.get(name) for name in GUARDED_ENV_VARS},
        math_mode=mathmode.capture(),
    )
    if rng:
        state.rng["torch"] = torch.default_generator.get_state()
    if rng and python_rng:
        state.rng.update(_python_rng())
    if rng:
        if torch.cuda.is_available():
            # Initialise CUDA now: a seed queued lazily for an uninitialised CUDA
            # would otherwise land in its generators after we restored ours.
            torch.cuda.init()
            state.rng["torch.cuda"] = torch.cuda.get_rng_state_all()
    return state


current_state = capture_state


#: The module global of ``torch.backends`` that ``flags_frozen()`` reads.
_FLAG_GLOBAL = "__allow_nonbracketed_mutation_flag"


@contextlib.contextmanager
def _flags_unfrozen() -> Iterator[None]:
    """Let the cuDNN flags be assigned even after ``torch.backends.disable_global_flags()``.

    torch's own test utilities (``torch.testing._internal.common_utils``) call it when imported, so
    any process that has imported them (a vendor's test helpers, the OpInfo database) refuses
    plain assignments. ``flags_frozen()`` reads a module global; reach it through the function,
    because ``torch.backends`` may be a module wrapper. The frozen state is put back afterwards.
    """
    frozen = getattr(torch.backends, "flags_frozen", None)
    if frozen is None or not frozen():
        yield
        return
    namespace = frozen.__globals__
    before = namespace.get(_FLAG_GLOBAL, True)
    namespace[_FLAG_GLOBAL] = True
    try:
        yield
    finally:
        namespace[_FLAG_GLOBAL] = before


def set_cudnn(*, deterministic: bool | None = None, benchmark: bool | None = None) -> None:
    """Assign ``torch.backends.cudnn.deterministic`` / ``.benchmark`` (None: leave it), whether or
    not torch's test utilities froze the flags."""
    with _flags_unfrozen():
        if deterministic is not None:
            torch.backends.cudnn.deterministic = deterministic
        if benchmark is not None:
            torch.backends.cudnn.benchmark = benchmark


def restore_state(state: GlobalState) -> None:
    """Put every guarded setting back as ``state`` has it; a setting already so is not written."""
    if (bool(torch._C._get_deterministic_algorithms()), bool(torch._C._get_deterministic_algorithms_warn_only())) != \
            (state.deterministic, state.warn_only):
        torch._C._set_deterministic_algorithms(state.deterministic, warn_only=state.warn_only)
    if state.fill_uninitialized_memory is not None and _get_fill() != state.fill_uninitialized_memory:
        _set_fill(state.fill_uninitialized_memory)
    if _cudnn_flags() != (state.cudnn_deterministic, state.cudnn_benchmark):
        set_cudnn(deterministic=state.cudnn_deterministic, benchmark=state.cudnn_benchmark)
    inductor = _inductor_config()
    if inductor is not None:
        if state.inductor_deterministic is _NO_SETTING:
            if hasattr(inductor, "deterministic"):
                inductor.deterministic = os.getenv("TORCHINDUCTOR_DETERMINISTIC") == "1"
        elif getattr(inductor, "deterministic", _NO_SETTING) is not state.inductor_deterministic:
            inductor.deterministic = state.inductor_deterministic
    _put_env(state.env)
    if state.math_mode:
        mathmode.restore(state.math_mode)
    _restore_rng(state)


def _restore_rng(state: GlobalState) -> None:
    if "torch" in state.rng:
        torch.default_generator.set_state(state.rng["torch"])
    _put_python_rng(state.rng)
    if "torch.cuda" in state.rng:
        torch.cuda.set_rng_state_all(state.rng["torch.cuda"])


def _python_rng() -> dict[str, Any]:
    """The states of ``random`` and (if imported) NumPy's legacy generator."""
    out: dict[str, Any] = {"random": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        out["numpy"] = numpy.random.get_state()
    return out


def _put_python_rng(saved: dict[str, Any]) -> None:
    if "random" in saved:
        random.setstate(saved["random"])
    if "numpy" in saved:
        sys.modules["numpy"].random.set_state(saved["numpy"])


def _put_env(values: dict[str, str | None]) -> None:
    """Set each variable as ``values`` has it (None: unset); one already so is not written."""
    for name, value in values.items():
        if os.environ.get(name) == value:
            continue
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def environment(values: dict[str, str | None]) -> Iterator[None]:
    """Set environment variables (None: unset) for the body; put them back as they were after."""
    saved = {name: os.environ.get(name) for name in values}
    _put_env(values)
    try:
        yield
    finally:
        _put_env(saved)


@contextlib.contextmanager
def preserved_python_rng() -> Iterator[None]:
    """Put the generators of ``random`` and NumPy back after the body (torch's are
    ``torch.random.fork_rng``'s or :func:`preserved_rng`'s business)."""
    saved = _python_rng()
    try:
        yield
    finally:
        _put_python_rng(saved)


@contextlib.contextmanager
def import_effects_undone() -> Iterator[None]:
    """Undo what importing torch's testing package does to the process: it parses ``sys.argv``
    (the body sees the program name alone), reseeds every generator, freezes the
    ``torch.backends`` flags (the guard assigns cuDNN flags) and adds warning filters."""
    import warnings

    saved_argv = sys.argv
    saved_filters = list(warnings.filters)
    frozen = getattr(torch.backends, "flags_frozen", None)
    # flags_frozen() reads a module global; torch.backends may be a module wrapper, so reach the
    # global through the function.
    namespace = frozen.__globals__ if frozen is not None else {}
    allowed_before = namespace.get(_FLAG_GLOBAL, True)
    try:
        import numpy  # noqa: F401 - the package imports it and reseeds it: its state is kept too
    except ImportError:
        pass
    saved_torch, saved_python = torch.get_rng_state(), _python_rng()
    sys.argv = saved_argv[:1] if saved_argv else ["detconf"]
    try:
        yield
    finally:
        sys.argv = saved_argv
        warnings.filters[:] = saved_filters
        torch.set_rng_state(saved_torch)
        _put_python_rng(saved_python)
        if frozen is not None:
            namespace[_FLAG_GLOBAL] = allowed_before


class _Guard:
    """:func:`preserved_global_state` and :func:`deterministic_mode` as one small context manager
    (the runner opens two or more per example: a generator-based one costs more than the flags)."""

    __slots__ = ("rng", "mode", "cudnn_benchmark", "saved")

    def __init__(self, rng: bool, mode: str | None = None, cudnn_benchmark: bool | None = None) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.rng = rng
        self.mode = mode
        self.cudnn_benchmark = cudnn_benchmark
        self.saved: GlobalState | None = None

    def __enter__(self) -> GlobalState:
        saved = self.saved = capture_state(rng=self.rng, python_rng=not _RNG_GUARDS.depth)
        if self.mode is not None:
            try:
                apply_mode(self.mode)
                if self.cudnn_benchmark is not None and saved.cudnn_benchmark != self.cudnn_benchmark:
                    set_cudnn(benchmark=self.cudnn_benchmark)
            except BaseException:
                restore_state(saved)
                raise
        return saved

    def __exit__(self, *exc_info: Any) -> bool:
        restore_state(self.saved)
        return False


def preserved_global_state(*, rng: bool = False) -> _Guard:
    """Snapshot every guarded setting (and, with ``rng=True``, the generator states);
    restore them on exit, exception or not. Used as ``with preserved_global_state() as saved:``.

    Inside :func:`preserved_rng` (the harness opens one around each case) ``random`` and
    NumPy are left to it: it puts them back when it closes (copying NumPy's legacy state costs
    about 40 µs each way, and no torch operator reads either). torch's own generators, which
    operators do read, are snapshotted and restored by every guard."""
    return _Guard(rng)


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Snapshot the generator states alone (torch's, CUDA's, ``random``'s and NumPy's) and put
    them back on exit. The :func:`preserved_global_state` guards opened inside it leave
    ``random`` and NumPy to it; global settings are not its business."""
    saved = capture_state(rng=True)
    _RNG_GUARDS.depth += 1
    try:
        yield
    finally:
        _RNG_GUARDS.depth -= 1
        _restore_rng(saved)


def apply_mode(mode: str) -> None:
    """Put the deterministic flag where ``mode`` says, through the public API."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    enabled, warn_only = MODE_FLAGS[mode]
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def mode_is_on(mode: str) -> bool:
    return mode in DETERMINISTIC_MODES


def deterministic_mode(mode: str, *, cudnn_benchmark: bool | None = False, rng: bool = False) -> _Guard:
    """Run the body under ``mode`` inside :func:`preserved_global_state`
    (``with deterministic_mode("error") as saved:``).

    ``cudnn_benchmark=False`` (the default) follows the reproducibility notes:
    benchmark mode picks algorithms by timing, which defeats determinism.
    Pass ``None`` to leave it untouched.
    """
    return _Guard(rng, mode, cudnn_benchmark)
