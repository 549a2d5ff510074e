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
setting where the release has one. It owns its compiled state (a Dynamo reset
before and after each example, as a compiled case of the harness has), so no
earlier compile in the process can push it past Dynamo's recompile limit, and
it records that compiled graphs ran (none ran, or a graph break: ``unsupported``
with the reason -- an example run in eager is no evidence). It is skipped, with
the reason, where this machine cannot compile at all (no TorchDynamo support, no
C++ compiler for CPU, no Triton for CUDA); a device Inductor has no backend for
(a PrivateUse1 device such as ``opencl``) is ``unsupported``, naming the device.
"""
from __future__ import annotations

import contextlib
import importlib
import re
import shutil
import time
from typing import Any, Callable

import torch
from hypothesis import strategies as st

from detconf.vocabulary import MODE_CALLS
from detconf.engine.checks import CheckObservation, CheckSkipped, CheckUnsupported, check
from detconf.engine.compiled import CompileSnapshot, Compiler, compile_unavailable, is_compile_failure
from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import mode_is_on, preserved_global_state
from detconf.engine.devices import inductor_codegen

from detconf.engine.fingerprint import tensor_bytes

from ._support import NONDETERMINISTIC_ALERT, REPRO_NOTES, synchronize

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
    call = MODE_CALLS[mode].removeprefix("torch.")
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


def _compile_unavailable(device: torch.device) -> str | None:
    """Why this machine cannot compile for ``device`` at all (no Dynamo, no C++ compiler for the
    CPU, no Triton for CUDA): the check is skipped. A device Inductor has no backend for is
    another matter (``unsupported``, found when Inductor refuses it: :func:`_compile_failure`)."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        dynamo = importlib.import_module("torch._dynamo")
    except Exception as exc:
        return f"torch._dynamo cannot be imported: {type(exc).__name__}: {exc}"
    is_supported = getattr(dynamo, "is_dynamo_supported", lambda: True)
    if not is_supported():
        return "TorchDynamo does not support this Python version or platform"
    codegen = inductor_codegen(device.type)
    if codegen == "cpp":
        try:
            from torch._inductor.cpp_builder import get_cpp_compiler

            compiler = get_cpp_compiler()
        except Exception as exc:
            return f"Inductor finds no C++ compiler for CPU: {type(exc).__name__}: {exc}"
        if shutil.which(compiler) is None:
            return f"Inductor's C++ compiler {compiler!r} is not on PATH"
    if codegen is not None:
        return compile_unavailable("inductor", codegen)  # the engine's word (Triton for CUDA)
    return None


#: Inductor's own refusal of a device it has no wrapper code generator for: "Device opencl not
#: supported" (torch 2.11 on ``--device opencl``; ``torch/_inductor/graph.py`` of 2.13 words it the same).
_DEVICE_REFUSED = re.compile(r"Device (\S+) not supported")
#: Dynamo's recompile limit: the check's own compiled state leaked (our bug, never unsupported).
_RECOMPILE_LIMIT = re.compile(r"recompile.?limit|cache.?(?:size.?)?limit", re.IGNORECASE)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and all(e is not s for s in seen):
        seen.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    return seen


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:300]


def _line_with(exc: BaseException, text: str) -> str:
    """``exc``'s first line if it holds ``text``, else its type with the line that does."""
    first = _first_line(exc)
    if text in first:
        return first
    line = next((ln.strip() for ln in str(exc).splitlines() if text in ln), text)
    return f"{type(exc).__name__}: {line}"[:300]


def _compile_failure(exc: BaseException, device: torch.device) -> CheckUnsupported | None:
    """``exc`` as "Inductor cannot compile this for ``device``" (``unsupported``), or None when it
    is something else: the op's own error, or Dynamo's recompile limit (the check's own compiled
    state got out of hand: a harness error, so that it is seen and fixed)."""
    chain = _chain(exc)
    if any(_RECOMPILE_LIMIT.search(type(e).__name__ + ": " + str(e)) for e in chain):
        return None
    # Innermost first: the refusal itself, not a wrapper that quotes it on a later line
    # (2.5's BackendCompilerFailed reads "backend='backend' raised:" on its first line).
    for e in reversed(chain):
        refused = _DEVICE_REFUSED.search(str(e))
        if refused is not None:
            return CheckUnsupported(f"Inductor cannot compile for device {device.type!r} "
                                    f"(torch {torch.__version__}): {_line_with(e, refused.group(0))}")
    if is_compile_failure(exc):
        inner = chain[-1]
        return CheckUnsupported(f"torch.compile (Inductor) cannot compile the check's program for device "
                                f"{device.type!r}: {_first_line(inner)}")
    return None


def _no_ambient_dispatch_modes():
    """Run the compiled program outside any ``TorchDispatchMode`` the caller has active. Off the
    CPU the harness traces a check's operators with one; under it Dynamo traces the mode's own
    ``__torch_dispatch__`` as well, recompiling it for each operator (with ``fullgraph=True`` that
    hit the recompile limit in the first example on CUDA), and the program no longer runs as a
    user's does. The trace sees nothing of the compiled calls; a device's missing kernel is still
    named from the error's text (``engine.runner.missing_kernel``).

    The module's "a dispatch mode is active" flags are cleared too while the modes are off:
    ``_disable_current_modes`` pops the modes but leaves the flags their ``__enter__`` set, and
    Dynamo up to 2.5 skips every frame while ``is_in_torch_dispatch_mode(include_infra_modes=False)``
    ("non-infra torch dispatch mode present"): the program would run wholly in eager."""
    try:
        import torch.utils._python_dispatch as python_dispatch
        from torch.utils._python_dispatch import _disable_current_modes
    except ImportError:  # a torch without it has no mode stack to speak of
        return contextlib.nullcontext()
    return _modes_off(python_dispatch, _disable_current_modes)


_MODE_FLAGS = ("_is_in_torch_dispatch_mode", "_is_in_non_infra_torch_dispatch_mode",
               "_is_in_any_mode_without_ignore_compile_internals")


@contextlib.contextmanager
def _modes_off(python_dispatch, disable_current_modes):
    with disable_current_modes():
        saved = {name: getattr(python_dispatch, name) for name in _MODE_FLAGS
                 if isinstance(getattr(python_dispatch, name, None), bool)}
        try:
            for name in saved:
                setattr(python_dispatch, name, False)
            yield
        finally:
            for name, value in saved.items():
                setattr(python_dispatch, name, value)


def _run_compiled(compiler: Compiler, fn: Callable, args: tuple, device: torch.device) -> tuple[list[bytes], CompileSnapshot, float]:
    with compiler.run() as snap:
        started = time.perf_counter()
        out = fn(*args)
        synchronize(device)
        seconds = time.perf_counter() - started
    return [tensor_bytes(t) for t in out], snap, seconds


@check("torch.compile:deterministic", source=REPRO_NOTES, max_examples=3)
def compiled_function_repeats(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    """Compile :func:`_program` with Inductor and call it twice on the same inputs under ``mode``.

    The check owns its compiled state: each example starts from a Dynamo reset and ends with
    one (:meth:`engine.compiled.Compiler.case`), so whatever ran before in the process (other
    modes, other devices: each guards on global state) cannot push ``_program`` past Dynamo's
    recompile limit. A compiled graph must run in both calls with no graph break, or the
    example is no evidence about compiled code (``unsupported``, with the reason)."""
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
    compiler = Compiler("inductor", inductor_codegen(device.type))
    with preserved_global_state():
        enter_mode(mode)
        inductor_on = _inductor_setting()
        with compiler.case(), _no_ambient_dispatch_modes():
            fn = compiler.compile(_program)  # the module's _program, looked up now
            try:
                first, first_snap, first_s = _run_compiled(compiler, fn, (x.clone(), index, index2d, src), device)
                second, second_snap, _ = _run_compiled(compiler, fn, (x.clone(), index, index2d, src), device)
            except Exception as exc:  # noqa: BLE001 - sorted below: alert, compile failure, or ours
                alert = next((e for e in _chain(exc) if NONDETERMINISTIC_ALERT in str(e)), None)
                if alert is not None:  # documented-deterministic ops must not raise the alert
                    return CheckObservation(
                        held=False if mode_is_on(mode) else None, observed="raises",
                        detail={"seed": seed, "distinct_indices": bins, "inductor_deterministic": inductor_on,
                                "raised": _first_line(alert)})
                lack = _compile_failure(exc, device)
                if lack is not None:
                    raise lack from exc
                raise
    snaps = (first_snap, second_snap)
    breaks = sorted({r for s in snaps for r in s.break_reasons})
    if not all(s.graphs_run for s in snaps):
        raise CheckUnsupported(
            f"no compiled graph ran on {device.type}: torch.compile ran the program in eager"
            + (f" ({'; '.join(breaks or first_snap.case_break_reasons)})" if breaks or first_snap.case_break_reasons else ""))
    if breaks:
        raise CheckUnsupported(f"the program did not compile as one graph on {device.type} "
                               f"(graph breaks put part of it in eager): {'; '.join(breaks)}")
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
            "compile_s": round(first_snap.compile_s + second_snap.compile_s, 3),
            # Evidence that compiled code ran: Inductor graphs run per call (0 would be eager),
            # and the ATen operators the compiler received (empty when its caches answered).
            "graphs_run": [s.graphs_run for s in snaps],
            "graph_ops": sorted(set(first_snap.ops) | set(second_snap.ops)),
            "differing": differing,
        },
    )
