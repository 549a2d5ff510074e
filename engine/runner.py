"""Run a program several times on identical inputs and compare the bytes.

The runner knows nothing about pytest or the catalog: it takes a
:class:`~engine.program.Program`, a mode and a run count, and returns an
:class:`~engine.observation.Observation` — what happened, with the evidence, as
plain data. The tensors stay here: :func:`run_program` also hands back run 0's
values (CPU copies) for the differential comparison.

Comparison is on raw bytes (``uint8`` views), so two NaNs are equal only when
their bit patterns are, and ``-0.0`` differs from ``0.0``: bitwise identity is
the promise, not numerical closeness.
"""
from __future__ import annotations

import contextlib
import hashlib
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from collections import Counter

from detconf.vocabulary import PHASES
from engine.determinism import apply_mode, deterministic_mode
from engine.observation import Observation
from engine.program import Program
from engine.trace import DispatchTrace, reached, top_ops

__all__ = ["DETERMINISM_ALERT", "Observation", "PHASES", "RunOutcome", "UNSUPPORTED", "as_bytes", "compare_runs",
           "compare_values", "dense_cpu", "flatten_tensors", "observe", "run_program", "run_values"]

# The phrases torch's alerts use, both for the error and for the warn_only
# warning: the generic alert, and cuBLAS's when CUBLAS_WORKSPACE_CONFIG is unset.
DETERMINISM_ALERT = re.compile(r"does not have a deterministic implementation|not deterministic because it uses CuBLAS")
# Messages that mean "this op / dtype is not implemented on this device".
UNSUPPORTED = re.compile(
    r"not implemented for|not supported|Could not run '|doesn't support|is not implemented|"
    r"not currently supported|Unsupported|no kernel image|does not support",
    re.IGNORECASE,
)
GRAD_SEED = 20_240_917
# Phases (detconf.vocabulary.PHASES): ``backward-only`` exists because torch.nn.functional routes
# some CUDA forwards to decompositions when the mode is on, so the native backward kernel a
# sentence names runs only when the forward ran outside the mode.


@dataclass
class RunRecord:
    """One run: tensors as bytes plus what was raised / warned."""

    outputs: list[torch.Tensor] = field(default_factory=list)  # uint8 byte views, on CPU
    labels: list[str] = field(default_factory=list)  # "out[0]", "grad[x]"
    values: list[torch.Tensor] = field(default_factory=list)  # dense CPU copies, for diffs and references
    alert_error: str | None = None
    alert_phase: str | None = None
    other_error: str | None = None
    unsupported: str | None = None
    alert_warnings: list[str] = field(default_factory=list)
    ops: Counter = field(default_factory=Counter)  # ATen overloads dispatched, forward and backward


@dataclass
class RunOutcome:
    """An observation and, when every run returned, run 0's outputs and gradients (CPU copies)."""

    observation: Observation
    values: list[tuple[str, torch.Tensor]] | None = None


def dense_cpu(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached, sparse made dense, quantized as its integer representation, on CPU."""
    t = t.detach()
    if t.is_sparse:
        t = t.to_dense()
    if t.is_quantized:
        t = t.int_repr()
    return t.cpu()


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat ``uint8`` CPU view of ``t``'s values, in logical (row-major) order."""
    t = dense_cpu(t)
    if t.is_complex():
        t = torch.view_as_real(t.resolve_conj())
    t = t.resolve_neg()
    # Copy into a fresh dense buffer: .contiguous() may keep odd strides on
    # one-element tensors, which a dtype view rejects.
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.reshape(-1))
    if flat.dtype == torch.bool:
        return flat.to(torch.uint8)
    return flat.view(torch.uint8)


def flatten_tensors(value: Any, prefix: str = "out") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in a (nested) tuple / list / dict, with a label saying where."""
    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = sorted(value.items(), key=lambda kv: str(kv[0]))
    elif isinstance(value, (tuple, list)):
        items = enumerate(value)
    else:
        return []
    out = []
    for key, item in items:
        out.extend(flatten_tensors(item, f"{prefix}[{key}]"))
    return out


def _fresh_inputs(program: Program) -> dict[str, torch.Tensor]:
    fresh = {}
    for name, tensor in program.inputs.items():
        clone = tensor.detach().clone()
        if name in program.grad_inputs:
            clone.requires_grad_(True)
        fresh[name] = clone
    return fresh


def _seeded_like(t: torch.Tensor, index: int) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(GRAD_SEED + index)
    g = torch.randn(t.shape, generator=gen, dtype=torch.float64)
    if t.is_complex():
        g = torch.complex(g, torch.randn(t.shape, generator=gen, dtype=torch.float64))
    return g.to(dtype=t.dtype, device=t.device)


def _classify(exc: BaseException, record: RunRecord, phase: str) -> None:
    text = f"{type(exc).__name__}: {exc}".strip()
    first_line = text.splitlines()[0][:500]
    if isinstance(exc, RuntimeError) and DETERMINISM_ALERT.search(str(exc)):
        record.alert_error = first_line
        record.alert_phase = phase
    elif isinstance(exc, (NotImplementedError, RuntimeError, TypeError)) and UNSUPPORTED.search(str(exc)):
        record.unsupported = first_line
    else:
        record.other_error = first_line


def _traced(trace: DispatchTrace | None):
    return trace if trace is not None else contextlib.nullcontext()


def _run_once(program: Program, synchronize: Callable[[], None], *, mode: str | None = None,
              phase: str = "program", trace: bool = True) -> RunRecord:
    """One run. ``mode`` is switched inside the run only for ``phase="backward-only"``
    (forward with determinism off, backward under ``mode``); otherwise the caller set it."""
    record = RunRecord()
    tracer = DispatchTrace() if trace else None
    where = "forward"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            inputs = _fresh_inputs(program)
            if phase == "backward-only":
                apply_mode("off")
            with _traced(tracer):
                result = program.fn(**inputs)
            outputs = flatten_tensors(result)
            if program.grad_inputs:
                where = "backward"
                roots, grads = [], []
                for i, (_, t) in enumerate(outputs):
                    if t.requires_grad and (t.is_floating_point() or t.is_complex()):
                        roots.append(t)
                        grads.append(_seeded_like(t, i))
                if not roots:
                    raise AssertionError("backward entry but no differentiable output")
                if phase == "backward-only":
                    apply_mode(mode)
                with _traced(tracer):
                    torch.autograd.backward(roots, grads)
                for name in program.grad_inputs:
                    grad = inputs[name].grad
                    if grad is not None:
                        outputs.append((f"grad[{name}]", grad))
            synchronize()
            for label, t in outputs:
                dense = dense_cpu(t)  # one copy off the device per tensor
                record.labels.append(label)
                record.values.append(dense)
                record.outputs.append(as_bytes(dense))
        except Exception as exc:  # noqa: BLE001 - every failure is evidence
            _classify(exc, record, where)
    if tracer is not None:
        record.ops = tracer.ops
    record.alert_warnings = [str(w.message).splitlines()[0][:500] for w in caught if DETERMINISM_ALERT.search(str(w.message))]
    return record


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Both tensors come from ``dense_cpu``."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return None
    if not (a.is_floating_point() or a.is_complex() or a.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)):
        return None
    wide = torch.complex128 if a.is_complex() else torch.float64
    diff = (a.to(wide) - b.to(wide)).abs()
    diff = torch.nan_to_num(diff, nan=float("inf"))
    return float(diff.max()) if diff.numel() else 0.0


def compare_runs(first: RunRecord, other: RunRecord) -> tuple[bool, str | None, float | None]:
    """(identical, mismatch description, max abs diff) between two complete runs."""
    if first.labels != other.labels:
        return False, f"different outputs: {first.labels} vs {other.labels}", None
    for label, a, b, va, vb in zip(first.labels, first.outputs, other.outputs, first.values, other.values):
        if va.shape != vb.shape or va.dtype != vb.dtype:
            return False, f"{label}: shape/dtype {tuple(va.shape)} {va.dtype} vs {tuple(vb.shape)} {vb.dtype}", None
        if not torch.equal(a, b):
            nbytes = int((a != b).sum())
            return False, f"{label}: {nbytes} of {a.numel()} bytes differ", _max_abs_diff(va, vb)
    return True, None, None


def fingerprint(record: RunRecord) -> str:
    h = hashlib.sha256()
    for label, t in zip(record.labels, record.outputs):
        h.update(label.encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def observe(
    program: Program,
    mode: str,
    *,
    runs: int = 2,
    synchronize: Callable[[], None] = lambda: None,
    case: dict[str, Any] | None = None,
    targets: tuple[str, ...] | None = None,
    phase: str = "program",
) -> Observation:
    """Run ``program`` ``runs`` times under ``mode`` and say what happened."""
    return run_program(program, mode, runs=runs, synchronize=synchronize, case=case, targets=targets,
                       phase=phase).observation


def run_program(
    program: Program,
    mode: str,
    *,
    runs: int = 2,
    synchronize: Callable[[], None] = lambda: None,
    case: dict[str, Any] | None = None,
    targets: tuple[str, ...] | None = None,
    phase: str = "program",
) -> RunOutcome:
    """:func:`observe`, keeping run 0's values for a differential comparison.

    Every run is traced (:class:`~engine.trace.DispatchTrace`): the observation
    carries the most frequent operators dispatched and, given ``targets``,
    whether any run reached one. A program that says it cannot reach its
    kernel (``meta["unreachable"]``, e.g. an empty index on which the kernel
    returns before it runs) does not reach, whatever it dispatched.
    """
    if runs < 2:
        raise ValueError(f"runs must be at least 2 to compare, got {runs}")
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    if phase == "backward-only" and not program.grad_inputs:
        raise ValueError("phase 'backward-only' needs a program with gradients")
    records = []
    with deterministic_mode(mode, rng=True):
        for _ in range(runs):
            records.append(_run_once(program, synchronize, mode=mode, phase=phase))
    obs = Observation(runs=runs, example=program.describe, repro=program.repro, case=dict(case or {}))
    dispatched: Counter = Counter()
    for r in records:
        dispatched |= r.ops  # per operator, the most calls seen in one run
    obs.dispatched = top_ops(dispatched)
    if targets is not None:
        obs.targets = list(targets)
        obs.reached = reached(targets, dispatched) and not program.meta.get("unreachable")
        if program.meta.get("unreachable"):
            obs.unreachable = str(program.meta["unreachable"])
    for r in records:
        if r.alert_error:
            obs.raised_runs += 1
            obs.raised = obs.raised or r.alert_error
            obs.raise_phase = obs.raise_phase or r.alert_phase
        if r.alert_warnings:
            obs.warned_runs += 1
            for w in r.alert_warnings:
                if w not in obs.warnings:
                    obs.warnings.append(w)
        obs.unsupported = obs.unsupported or r.unsupported
        obs.error = obs.error or r.other_error
    complete = [r for r in records if not (r.alert_error or r.unsupported or r.other_error)]
    if len(complete) != len(records):
        return RunOutcome(obs)
    obs.identical = True
    for other in records[1:]:
        same, mismatch, diff = compare_runs(records[0], other)
        if not same:
            obs.identical, obs.mismatch, obs.max_abs_diff = False, mismatch, diff
            break
    obs.fingerprint = fingerprint(records[0])
    return RunOutcome(obs, list(zip(records[0].labels, records[0].values)))


# Differential correctness ---------------------------------------------------
# Deterministic but wrong is a failure too. Tolerances by dtype: the default
# algorithm and a CPU reference may round differently, never by more.
TOLERANCES = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
    torch.float32: (1e-4, 1e-5),
    torch.complex64: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
    torch.complex128: (1e-7, 1e-9),
}


def run_values(program: Program, mode: str, *, device: torch.device | None = None) -> list[tuple[str, torch.Tensor]] | None:
    """One run's outputs and gradients as CPU tensors (None when it raised).

    ``device`` moves the inputs first: a CPU reference for a GPU example.
    """
    if device is not None:
        program = Program(fn=program.fn, inputs={k: v.to(device) for k, v in program.inputs.items()},
                          grad_inputs=program.grad_inputs, describe=program.describe)
    with deterministic_mode(mode, rng=True):
        record = _run_once(program, lambda: None, trace=False)
    if record.alert_error or record.unsupported or record.other_error:
        return None
    return list(zip(record.labels, record.values))


def compare_values(actual: list[tuple[str, torch.Tensor]], reference: list[tuple[str, torch.Tensor]]) -> str | None:
    """None when every tensor agrees within its dtype's tolerance, else what differed."""
    if [label for label, _ in actual] != [label for label, _ in reference]:
        return f"different outputs: {[l for l, _ in actual]} vs {[l for l, _ in reference]}"
    for (label, a), (_, b) in zip(actual, reference):
        if a.shape != b.shape:
            return f"{label}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
        if a.dtype != b.dtype:
            return f"{label}: dtype {a.dtype} vs {b.dtype}"
        if a.is_floating_point() and a.element_size() == 1:  # float8: few kernels, compare as float32
            a, b = a.float(), b.float()
        if a.is_floating_point() or a.is_complex():
            rtol, atol = TOLERANCES.get(a.dtype, (1e-4, 1e-5))
            scale = float(b.abs().max()) if b.numel() and torch.isfinite(b).all() else 1.0
            if not torch.allclose(a, b, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True):
                diff = torch.nan_to_num((a.to(torch.complex128 if a.is_complex() else torch.float64)
                                         - b.to(torch.complex128 if b.is_complex() else torch.float64)).abs(), nan=float("inf"))
                return f"{label}: max abs diff {float(diff.max()):.3g} beyond rtol={rtol}, atol={atol}"
        elif not torch.equal(a, b):
            return f"{label}: {int((a != b).sum())} of {a.numel()} values differ"
    return None
