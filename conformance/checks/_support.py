"""Helpers shared by the checks: a global-state guard, mode setup, byte views of tensors,
device requirements and child Python processes.

Every check runs its body inside :func:`preserved_global_state`, which puts back
everything a check may touch, even when the body raises. The guard reads and
writes the settings through ``torch._C`` where it can, so that a check whose
public API is broken (or deliberately faulted in a test) cannot corrupt the
restore.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import torch

from engine.checks import CheckSkipped
from engine.determinism import MODES, apply_mode

FLAG_API = "flag-api"
REPRO_NOTES = "repro-notes"



# Environment variables a check (or torch itself, see
# torch/_inductor/fx_passes/numeric_utils.py) may set in this process.
GUARDED_ENV_VARS = ("CUBLAS_WORKSPACE_CONFIG", "TORCHINDUCTOR_DETERMINISTIC")

NONDETERMINISTIC_ALERT = "does not have a deterministic implementation"


# ---------------------------------------------------------------------------
# Global state


def _inductor_config():
    """``torch._inductor.config`` if this torch has it (importing it is what
    ``use_deterministic_algorithms`` does anyway), else None."""
    try:
        import torch._inductor.config as inductor_config
    except Exception:  # torch builds without Inductor
        return None
    return inductor_config


_MISSING = object()


@dataclass
class GlobalState:
    deterministic: bool
    warn_only: bool
    fill_uninitialized_memory: bool | None
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    inductor_deterministic: Any
    env: dict[str, str | None]
    rng: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-safe view of the flags (RNG states left out)."""
        inductor = self.inductor_deterministic
        return {
            "deterministic": self.deterministic,
            "warn_only": self.warn_only,
            "fill_uninitialized_memory": self.fill_uninitialized_memory,
            "cudnn_deterministic": self.cudnn_deterministic,
            "cudnn_benchmark": self.cudnn_benchmark,
            "inductor_deterministic": None if inductor is _MISSING else repr(inductor),
            "env": dict(self.env),
        }


def _get_fill() -> bool | None:
    getter = getattr(torch._C, "_get_deterministic_fill_uninitialized_memory", None)
    return None if getter is None else bool(getter())


def _set_fill(value: bool) -> None:
    torch._C._set_deterministic_fill_uninitialized_memory(value)


def capture_state(*, rng: bool = False) -> GlobalState:
    inductor = _inductor_config()
    state = GlobalState(
        deterministic=bool(torch._C._get_deterministic_algorithms()),
        warn_only=bool(torch._C._get_deterministic_algorithms_warn_only()),
        fill_uninitialized_memory=_get_fill(),
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        inductor_deterministic=_MISSING if inductor is None else getattr(inductor, "deterministic", _MISSING),
        env={name: os.environ.get(name) for name in GUARDED_ENV_VARS},
    )
    if rng:
        state.rng["torch"] = torch.default_generator.get_state()
        state.rng["random"] = random.getstate()
        try:
            import numpy as np
        except ImportError:
            pass
        else:
            state.rng["numpy"] = np.random.get_state()
        if torch.cuda.is_available():
            # Initialise CUDA now: a seed queued lazily for an uninitialised CUDA
            # would otherwise land in its generators after we restored ours.
            torch.cuda.init()
            state.rng["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_state(state: GlobalState) -> None:
    torch._C._set_deterministic_algorithms(state.deterministic, warn_only=state.warn_only)
    if state.fill_uninitialized_memory is not None:
        _set_fill(state.fill_uninitialized_memory)
    torch.backends.cudnn.deterministic = state.cudnn_deterministic
    torch.backends.cudnn.benchmark = state.cudnn_benchmark
    inductor = _inductor_config()
    if inductor is not None:
        if state.inductor_deterministic is _MISSING:
            if hasattr(inductor, "deterministic"):
                inductor.deterministic = os.getenv("TORCHINDUCTOR_DETERMINISTIC") == "1"
        else:
            inductor.deterministic = state.inductor_deterministic
    for name, value in state.env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if "torch" in state.rng:
        torch.default_generator.set_state(state.rng["torch"])
    if "random" in state.rng:
        random.setstate(state.rng["random"])
    if "numpy" in state.rng:
        import numpy as np

        np.random.set_state(state.rng["numpy"])
    if "cuda" in state.rng:
        torch.cuda.set_rng_state_all(state.rng["cuda"])


@contextlib.contextmanager
def preserved_global_state(*, rng: bool = False) -> Iterator[GlobalState]:
    """Snapshot the determinism flags, warn_only, fill_uninitialized_memory,
    the cuDNN flags, Inductor's ``deterministic`` setting and a few environment
    variables (and, with ``rng=True``, the torch/CUDA/random/NumPy generator
    states); restore them on exit, exception or not. The debug mode is the same
    setting as (deterministic, warn_only) and comes back with them."""
    saved = capture_state(rng=rng)
    try:
        yield saved
    finally:
        restore_state(saved)


# Put the deterministic flag where ``mode`` says, through the public API.
enter_mode = apply_mode


def mode_is_on(mode: str) -> bool:
    return mode in ("error", "warn_only")


# ---------------------------------------------------------------------------
# Devices


def require_cuda(device: torch.device) -> None:
    if device.type != "cuda" or not torch.cuda.is_available():
        raise CheckSkipped("needs a CUDA device")


def dtype_supported(dtype: torch.dtype, device: torch.device) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        try:
            torch.zeros(2, dtype=dtype, device=device).clone()
        except (RuntimeError, TypeError):
            return False
    return True


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------
# Fingerprints


def dense_cpu(t: torch.Tensor) -> torch.Tensor:
    """A 1-D copy on the CPU with unit stride (``contiguous()`` keeps odd strides
    on size-1 dimensions, which ``view(torch.uint8)`` refuses)."""
    return t.detach().to("cpu").reshape(-1).clone(memory_format=torch.contiguous_format)


def tensor_bytes(t: torch.Tensor) -> bytes:
    return dense_cpu(t).view(torch.uint8).numpy().tobytes()


def preview(t: torch.Tensor, n: int = 4) -> list[str]:
    """The first few values, as strings (JSON-safe for NaN, complex, uint64)."""
    flat = t.detach().to("cpu").reshape(-1)[:n]
    if flat.dtype in (torch.complex32,):
        flat = flat.to(torch.complex64)
    elif flat.is_floating_point() and flat.dtype not in (torch.float32, torch.float64):
        flat = flat.float()
    return [str(v) for v in flat.tolist()]


# ---------------------------------------------------------------------------
# Child processes


class ChildFailed(RuntimeError):
    """A child Python process failed to report: a harness problem, not a verdict."""


def child_env(set_vars: Mapping[str, str] | None = None, unset: tuple[str, ...] = ()) -> dict[str, str]:
    env = dict(os.environ)
    for name in unset:
        env.pop(name, None)
    env.update(set_vars or {})
    return env


# Children print exactly one line starting with this marker, then a JSON object.
RESULT_MARKER = "@@detconf-child@@ "

CHILD_PRELUDE = f'''
import json, sys, traceback
def _report(obj):
    sys.stdout.write({RESULT_MARKER!r} + json.dumps(obj) + "\\n")
    sys.stdout.flush()
def _main(payload):
    raise NotImplementedError
'''

CHILD_EPILOGUE = '''
if __name__ == "__main__":
    try:
        _report({"ok": True, "result": _main(json.loads(sys.argv[1]))})
    except BaseException as exc:
        _report({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        sys.exit(1)
'''


def child_script(body: str) -> str:
    """A ``python -c`` script: ``body`` defines ``_main(payload) -> JSON-safe``."""
    return CHILD_PRELUDE + body + CHILD_EPILOGUE


def start_child(script: str, payload: Mapping[str, Any], env: Mapping[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(dict(payload))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env),
    )


def finish_child(proc: subprocess.Popen, timeout: float, what: str) -> Any:
    """Wait for ``proc`` and return its ``_main`` result; raise with the child's
    own error message when it failed, timed out or printed no result."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise ChildFailed(f"{what}: child process timed out after {timeout:g}s; stderr: {err[-400:]!r}") from None
    report = None
    for line in out.splitlines():
        if line.startswith(RESULT_MARKER):
            report = json.loads(line[len(RESULT_MARKER):])
    if report is None:
        raise ChildFailed(
            f"{what}: child process exited with {proc.returncode} and printed no result; stderr: {err[-600:]!r}"
        )
    if not report.get("ok"):
        raise ChildFailed(f"{what}: child process failed: {report.get('error')}\n{report.get('traceback', '')}")
    return report["result"]


def run_child(script: str, payload: Mapping[str, Any], env: Mapping[str, str], timeout: float, what: str) -> Any:
    return finish_child(start_child(script, payload, env), timeout, what)
