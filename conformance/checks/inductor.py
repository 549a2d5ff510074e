"""Checks for Inductor under deterministic mode (``--source repro-notes``).

``torch.use_deterministic_algorithms`` docstring (2.10+): "When this setting is
turned on, the Inductor deterministic mode is also turned on automatically. In
deterministic mode, Inductor would avoid doing on device benchmarking that
affect numerics." The installed torch exposes that mode as
``torch._inductor.config.deterministic``. ``set_deterministic_debug_mode`` is
documented as "an alternative interface for torch.use_deterministic_algorithms".

On a torch without ``torch._inductor.config.deterministic`` the two config
checks raise :class:`~engine.checks.CheckUnsupported` (verdict ``unsupported``):
the release lacks the feature, the machine is not at fault.

The compile check runs a ``torch.compile``d function over ops from the
docstring's deterministic list twice on the same inputs; it records Inductor's
setting where the release has one. It is skipped, with the reason, where
compile cannot run (no TorchDynamo support, no C++ compiler for CPU, no Triton
for CUDA).
"""
from __future__ import annotations

import importlib
import shutil
import time
from typing import Any, Callable

import torch
from hypothesis import strategies as st

from engine.checks import CheckObservation, CheckSkipped, CheckUnsupported, check

from engine.determinism import apply_mode as enter_mode
from engine.determinism import mode_is_on, preserved_global_state

from ._support import REPRO_NOTES, tensor_bytes

DEBUG_SPELLINGS = {"error": ("error", 2), "warn_only": ("warn", 1), "off": ("default", 0)}


def _import_inductor_config():
    try:
        import torch._inductor.config as inductor_config
    except Exception as exc:
        raise CheckSkipped(f"torch._inductor.config cannot be imported: {type(exc).__name__}: {exc}") from None
    return inductor_config


def _inductor_config():
    """``torch._inductor.config``, which must have the ``deterministic`` setting.

    ``hasattr``, not ``getattr``: where the key is missing, reading it raises AttributeError."""
    inductor_config = _import_inductor_config()
    if not hasattr(inductor_config, "deterministic"):
        raise CheckUnsupported(f"torch {torch.__version__} has no torch._inductor.config.deterministic")
    return inductor_config


def _inductor_setting() -> str:
    """Inductor's deterministic setting as recorded evidence; ``"absent"`` where the release has none."""
    inductor_config = _import_inductor_config()
    return repr(inductor_config.deterministic) if hasattr(inductor_config, "deterministic") else "absent"


def _config_follows(set_mode: Callable[[], Any], mode: str, call: str) -> CheckObservation:
    config = _inductor_config()
    with preserved_global_state():
        # Start from the opposite value so that a stale setting cannot pass for a switch.
        config.deterministic = not mode_is_on(mode)
        before = config.deterministic
        set_mode()
        after = config.deterministic
        flag = torch._C._get_deterministic_algorithms()
    return CheckObservation(
        held=(after is True) if mode_is_on(mode) else None,
        observed=f"inductor-deterministic={after!r}",
        detail={"call": call, "inductor_deterministic_before": repr(before), "inductor_deterministic_after": repr(after), "deterministic_flag": flag},
    )


@check("use_deterministic_algorithms->inductor.config.deterministic", source=REPRO_NOTES)
def inductor_follows_use_deterministic_algorithms(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    call = {"error": "use_deterministic_algorithms(True)", "warn_only": "use_deterministic_algorithms(True, warn_only=True)", "off": "use_deterministic_algorithms(False)"}[mode]
    return _config_follows(lambda: enter_mode(mode), mode, call)


@check("set_deterministic_debug_mode->inductor.config.deterministic", source=REPRO_NOTES)
def inductor_follows_debug_mode(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    spelling = draw(st.sampled_from(DEBUG_SPELLINGS[mode]), label="debug_mode")
    return _config_follows(lambda: torch.set_deterministic_debug_mode(spelling), mode, f"set_deterministic_debug_mode({spelling!r})")


# ---------------------------------------------------------------------------
# torch.compile


ROWS, COLS, UPDATES = 32, 64, 256


def _program(x: torch.Tensor, index: torch.Tensor, index2d: torch.Tensor, src: torch.Tensor):
    # index_add, index_put(accumulate=True), scatter_add_ and a reduction: ops the
    # docstring lists as acting deterministically, with many duplicate indices.
    added = x.index_add(0, index, src)
    put = torch.zeros_like(x).index_put_((index,), src, accumulate=True)
    scattered = torch.zeros_like(x).scatter_add_(0, index2d, src)
    reduced = (x * x).sum(dim=0)
    return added, put, scattered, reduced


_COMPILED: dict[str, Callable] = {}


def _compile_unavailable(device: torch.device) -> str | None:
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        dynamo = importlib.import_module("torch._dynamo")
    except Exception as exc:
        return f"torch._dynamo cannot be imported: {type(exc).__name__}: {exc}"
    is_supported = getattr(dynamo, "is_dynamo_supported", lambda: True)
    if not is_supported():
        return "TorchDynamo does not support this Python version or platform"
    if device.type == "cpu":
        try:
            from torch._inductor.cpp_builder import get_cpp_compiler

            compiler = get_cpp_compiler()
        except Exception as exc:
            return f"Inductor finds no C++ compiler for CPU: {type(exc).__name__}: {exc}"
        if shutil.which(compiler) is None:
            return f"Inductor's C++ compiler {compiler!r} is not on PATH"
    elif device.type == "cuda":
        if not torch.cuda.is_available():
            return "CUDA is not available"
        try:
            from torch.utils._triton import has_triton
        except ImportError:
            return "torch.utils._triton is missing: cannot tell whether Triton is installed"
        if not has_triton():
            return "Triton is not installed: Inductor cannot compile for CUDA"
    return None


def _compiled(device: torch.device) -> Callable:
    key = device.type
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(_program, backend="inductor", fullgraph=True, dynamic=False)
    return _COMPILED[key]


@check("torch.compile:deterministic", source=REPRO_NOTES, max_examples=3)
def compiled_function_repeats(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    reason = _compile_unavailable(device)
    if reason is not None:
        raise CheckSkipped(reason)
    seed = draw(st.integers(0, 2**31 - 1), label="data seed")
    bins = draw(st.sampled_from([1, 4, ROWS]), label="distinct indices")
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(ROWS, COLS, generator=g).to(device)
    index = torch.randint(0, bins, (UPDATES,), generator=g).to(device)
    index2d = torch.randint(0, bins, (UPDATES, COLS), generator=g).to(device)
    src = torch.randn(UPDATES, COLS, generator=g).to(device)
    with preserved_global_state():
        enter_mode(mode)
        inductor_on = _inductor_setting()
        fn = _compiled(device)
        started = time.perf_counter()
        first = [tensor_bytes(t) for t in fn(x.clone(), index, index2d, src)]
        first_s = time.perf_counter() - started
        second = [tensor_bytes(t) for t in fn(x.clone(), index, index2d, src)]
    names = ("index_add", "index_put", "scatter_add_", "sum")
    differing = [n for n, a, b in zip(names, first, second) if a != b]
    return CheckObservation(
        held=(not differing) if mode_is_on(mode) else None,
        observed="repeats" if not differing else "differs:" + ",".join(differing),
        detail={
            "seed": seed,
            "distinct_indices": bins,
            "shape": [ROWS, COLS],
            "updates": UPDATES,
            "inductor_deterministic": inductor_on,
            "first_call_s": round(first_s, 3),
            "differing": differing,
        },
    )
