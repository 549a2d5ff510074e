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
import functools
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from collections import Counter

from detconf.vocabulary import PHASES
from detconf.engine import comparison
from detconf.engine.backends import HOST
from detconf.engine.compiled import CompileSnapshot, Compiler, compiled_reach, is_compile_failure
from detconf.engine.determinism import apply_mode, deterministic_mode
from detconf.engine.fingerprint import sha256
from detconf.engine.observation import Observation
from detconf.engine.perturb import Perturber, inputs_digest
from detconf.engine.program import Program
from detconf.engine.trace import DispatchTrace, OpFailure, not_a_gap, reached, top_ops

__all__ = ["DETERMINISM_ALERT", "Observation", "PHASES", "RunOutcome", "UNSUPPORTED", "as_bytes", "backend_gap", "compare_runs", "missing_kernel",
           "compare_values", "dense_cpu", "flatten_tensors", "observe", "run_program", "run_values"]

# The phrases torch's alerts use, both for the error and for the warn_only
# warning: the generic alert, and cuBLAS's when CUBLAS_WORKSPACE_CONFIG is unset.
DETERMINISM_ALERT = re.compile(r"does not have a deterministic implementation|not deterministic because it uses CuBLAS")
# The alert sentence from the op's name on, for messages that quote it inside their own text.
_ALERT_SENTENCE = re.compile(r"[\w.:]+ (?:does not have a deterministic implementation|is not deterministic because "
                             r"it uses CuBLAS)[^\"\n]*")
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
    alert_wrapped: str | None = None  # the compiler's exception type around the alert
    stderr_alerts: list[str] = field(default_factory=list)  # alerts C++ printed that no Python warning carried
    compiled: CompileSnapshot | None = None  # under torch.compile: graphs run, their operators, breaks
    failed_op: str | None = None  # the operator a device could not run (a backend gap)
    drew_random: bool = False  # a random generator's state moved during the run
    # The outputs' memory as their device held it: (device, bytes of each strided output's storage),
    # recorded before the run's tensors are freed (the perturbation tier scribbles blocks of these
    # sizes on that device before the next run; ``values`` are host copies).
    blocks: list[tuple[torch.device, int]] = field(default_factory=list)


@dataclass
class RunOutcome:
    """An observation and, when every run returned, run 0's outputs and gradients (CPU copies)."""

    observation: Observation
    values: list[tuple[str, torch.Tensor]] | None = None
    #: Every operator the runs dispatched (eager) or their compiled graphs ran.
    ops: frozenset[str] = frozenset()
    #: Evidence that the program draws from a random generator (None: it does not).
    random: str | None = None
    #: Perturbation tier only: the SHA-256 of the inputs (equal inputs across processes) ...
    inputs_digest: str | None = None
    #: ... and, when asked, one more run on one thread compared with run 0 (sensitivity).
    threads: dict[str, Any] | None = None


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
    if t.is_contiguous() and t.numel() > 1 and t.dtype != torch.bool:
        return t.view(-1).view(torch.uint8)  # a view of the same bytes, in the same order
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
    """The gradient fed to output ``index``: standard normal values from a fixed seed, made in
    float64 on the CPU and converted (a fresh tensor each call: a backward may not keep it)."""
    g = _seeded_values(tuple(t.shape), index, t.is_complex())
    return g.to(dtype=t.dtype, device=t.device, copy=True)


@functools.lru_cache(maxsize=256)
def _seeded_values(shape: tuple[int, ...], index: int, complex_: bool) -> torch.Tensor:
    """Cached per shape: every run of an example feeds the same values (never handed out: the
    caller copies)."""
    gen = torch.Generator(device="cpu").manual_seed(GRAD_SEED + index)
    g = torch.randn(shape, generator=gen, dtype=torch.float64)
    if complex_:
        g = torch.complex(g, torch.randn(shape, generator=gen, dtype=torch.float64))
    return g


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it wraps (``__cause__`` / ``__context__``), outermost first."""
    out: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and all(e is not seen for seen in out):
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def backend_gap(exc: BaseException, failure: OpFailure | None) -> str | None:
    """``exc`` as a device's missing or partial kernel, or None.

    It is one when the traced operator that raised it (``failure``, from
    :class:`~engine.trace.DispatchTrace`) ran on a device other than the CPU and the same
    call on CPU copies of its arguments runs: the call was sound, the device could not do it
    (an out-of-tree backend without ``sum``, an ``as_strided`` that rejects storage offsets).
    The reason names the operator. A call that fails on the CPU too stays the caller's error.
    """
    if failure is None or not failure.off_cpu or not any(e is failure.exc for e in _chain(exc)):
        return None
    if any(not_a_gap(e) for e in _chain(exc)):
        return None  # the device has the kernel: the example did not fit, or the call mixed devices
    if failure.cpu_replay != "ok" and not failure.cpu_replay.startswith("copy to cpu failed"):
        return None
    devices = ", ".join(d for d in failure.devices if d != HOST)
    text = f"{type(failure.exc).__name__}: {failure.exc}".strip().splitlines()[0][:3 * 10**2]
    where = "the same call runs on cpu" if failure.cpu_replay == "ok" else failure.cpu_replay
    return f"{failure.op} fails on {devices} ({where}): {text}"


_NO_KERNEL = re.compile(r"Could not run '([\w:.]+)' with arguments from the '(\w+)' backend")


def missing_kernel(message: str, device: str) -> str | None:
    """torch's own word that ``device`` has no kernel for an operator (the dispatcher's
    "Could not run 'aten::X' with arguments from the '<device>' backend"), as
    ``"aten::X has no <device> kernel: ..."``; None for any other message or device. For
    failures no trace saw (a fresh child process)."""
    found = _NO_KERNEL.search(message)
    if found is None or found.group(2) != device:
        return None
    return f"{found.group(1)} has no {device} kernel: {message.strip().splitlines()[0][:3 * 10**2]}"


def _classify(exc: BaseException, record: RunRecord, phase: str, failure: OpFailure | None = None) -> None:
    """The determinism alert wherever it sits in the chain (Dynamo and Inductor wrap the op's
    ``RuntimeError`` in their own types), else a device's missing kernel (:func:`backend_gap`),
    else "not implemented here", else a compiler's own failure (unsupported: the program
    cannot be compiled), else an error."""
    chain = _chain(exc)
    # The innermost match is the op's own error; outer ones are wrappers that quote it.
    alert = next((e for e in reversed(chain) if isinstance(e, RuntimeError) and DETERMINISM_ALERT.search(str(e))), None)
    if alert is None:
        # A compiler's wrapper that is no RuntimeError but quotes the op's message.
        alert = next((e for e in chain if DETERMINISM_ALERT.search(str(e))), None)
    text = f"{type(exc).__name__}: {exc}".strip()
    first_line = text.splitlines()[0][:500]
    if alert is not None:
        message = str(alert)
        quoted = _ALERT_SENTENCE.search(message)  # the op's own sentence, wherever a wrapper quotes it
        record.alert_error = (quoted.group(0) if quoted else message.strip().splitlines()[0])[:500]
        record.alert_phase = phase
        if alert is not exc or is_compile_failure(exc):
            record.alert_wrapped = type(exc).__name__
    elif any(not_a_gap(e) for e in chain):
        # The example did not fit, or the call mixed devices: neither a gap nor unsupported, and
        # not a compiler's failure where a compiler wraps it.
        record.other_error = first_line
    elif backend_gap(exc, failure) is not None:
        record.unsupported = backend_gap(exc, failure)
        record.failed_op = failure.op
    elif any(isinstance(e, (NotImplementedError, RuntimeError, TypeError)) and UNSUPPORTED.search(str(e)) for e in chain):
        record.unsupported = first_line
        if failure is not None and any(e is failure.exc for e in chain):
            record.failed_op = failure.op
    elif is_compile_failure(exc):
        record.unsupported = f"compile failed: {first_line}"
    else:
        record.other_error = first_line


# Reusable do-nothing context managers for the per-run paths that need none (nullcontext
# keeps no state between uses).
_NULL = contextlib.nullcontext()
_NO_NATIVE = contextlib.nullcontext(())


def _traced(trace: DispatchTrace | None):
    return trace if trace is not None else _NULL


@contextlib.contextmanager
def _stderr_lines():
    """Capture what native code writes to file descriptor 2 while the body runs (C++'s warning
    handler prints the alert there when no Python frame takes it, e.g. inside a compiled graph)."""
    lines: list[str] = []
    import sys
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
            lines.extend(text.splitlines())
            if text:  # hand on what was not ours to keep
                sys.stderr.write(text)


def _generators(program: Program) -> list[Callable[[], torch.Tensor]]:
    """Readers of the random generators the program can draw from: the CPU's, and the default
    generator of each other device its inputs live on (where the device module can read it)."""
    readers: list[Callable[[], torch.Tensor]] = [torch.default_generator.get_state]
    seen = set()
    for t in program.inputs.values():
        if isinstance(t, torch.Tensor) and t.device.type != HOST and t.device not in seen:
            seen.add(t.device)
            module = getattr(torch, t.device.type, None)
            get = getattr(module, "get_rng_state", None)
            if get is not None:
                readers.append(functools.partial(get, t.device.index or 0))
    return readers


def _states(readers: list[Callable[[], torch.Tensor]]) -> list[torch.Tensor | None]:
    out: list[torch.Tensor | None] = []
    for read in readers:
        try:
            out.append(read().clone())
        except Exception:  # noqa: BLE001 - a device that cannot say: no evidence either way
            out.append(None)
    return out


def _off_cpu(program: Program) -> bool:
    """Does any input of ``program`` live on a device other than the CPU?"""
    return any(isinstance(t, torch.Tensor) and t.device.type != HOST for t in program.inputs.values())


def _run_once(program: Program, synchronize: Callable[[], None], *, mode: str | None = None,
              phase: str = "program", trace: bool = True, fn: Callable[..., Any] | None = None,
              compiler: Compiler | None = None, keep_bytes: bool = True) -> RunRecord:
    """One run. ``mode`` is switched inside the run only for ``phase="backward-only"``
    (forward with determinism off, backward under ``mode``); otherwise the caller set it.

    ``fn``/``compiler``: run the compiled form ``fn`` of ``program.fn``; the compiler records
    the graphs that ran (no dispatch trace: Dynamo does not compile under one)."""
    record = RunRecord()
    tracer = DispatchTrace() if trace and compiler is None else None
    # The harness's own copies (fresh inputs, outputs to the CPU) are traced apart from the
    # program: they are not reach, but a device that cannot copy is named like any other gap.
    # On the CPU there is no other device to name, and the trace would cost every copy a trip
    # through Python.
    helper = DispatchTrace() if tracer is not None and _off_cpu(program) else None
    where = "forward"
    call = fn or program.fn
    watch = compiler.run() if compiler is not None else _NULL
    native_lines = _stderr_lines() if compiler is not None else _NO_NATIVE
    generators = _generators(program)
    with warnings.catch_warnings(record=True) as caught, native_lines as native, watch as snap:
        warnings.simplefilter("always")
        try:
            with _traced(helper):
                inputs = _fresh_inputs(program)
            before = _states(generators)
            if phase == "backward-only":
                apply_mode("off")
            with _traced(tracer):
                result = call(**inputs)
            outputs = flatten_tensors(result)
            if program.grad_inputs:
                where = "backward"
                roots, grads = [], []
                with _traced(helper):  # the seeded gradients are the harness's, made on the device
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
            with _traced(helper):
                synchronize()
                denses = [dense_cpu(t) for _, t in outputs]  # one copy off the device per tensor
            record.blocks = [block for _, t in outputs for block in [_storage_block(t)] if block is not None]
            record.drew_random = any(a is not None and b is not None and not torch.equal(a, b)
                                     for a, b in zip(before, _states(generators)))
            for (label, _), dense in zip(outputs, denses):
                record.labels.append(label)
                record.values.append(dense)
                if keep_bytes:  # the runs compared as bytes; a reference run needs its values only
                    record.outputs.append(as_bytes(dense))
        except Exception as exc:  # noqa: BLE001 - every failure is evidence
            failures = [t.failure for t in (tracer, helper) if t is not None and t.failure is not None]
            _classify(exc, record, where, next((f for f in failures if any(e is f.exc for e in _chain(exc))), None))
    if tracer is not None:
        record.ops = tracer.ops
    if compiler is not None:
        record.compiled = snap
        record.ops = Counter(snap.ops)
    record.alert_warnings = [str(w.message).splitlines()[0][:500] for w in caught if DETERMINISM_ALERT.search(str(w.message))]
    if not record.alert_warnings:
        record.stderr_alerts = [line.strip()[:500] for line in native if DETERMINISM_ALERT.search(line)]
    return record


def _storage_block(t: torch.Tensor) -> tuple[torch.device, int] | None:
    """``t``'s storage as its device allocated it, (device, bytes); None for a tensor without one
    torch lends (sparse, a wrapper subclass)."""
    if t.layout != torch.strided:
        return None
    try:
        return t.device, int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


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
    """The SHA-256 of a run's outputs: each label, then its bytes (``outputs`` are byte views)."""
    return sha256(chunk for label, t in zip(record.labels, record.outputs) for chunk in (label, t.numpy().tobytes()))


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
    compiler: Compiler | None = None,
    eager_reached: bool | None = None,
    perturber: Perturber | None = None,
) -> RunOutcome:
    """:func:`observe`, keeping run 0's values for a differential comparison.

    Every eager run is traced (:class:`~engine.trace.DispatchTrace`): the observation
    carries the most frequent operators dispatched and, given ``targets``,
    whether any run reached one. A program that says it cannot reach its
    kernel (``meta["unreachable"]``, e.g. an empty index on which the kernel
    returns before it runs) does not reach, whatever it dispatched.

    With a ``compiler`` the same compiled function is called in every run on identical
    inputs (backward through the compiled graph). Reach is read from the graphs that ran
    (:func:`engine.compiled.compiled_reach`; ``eager_reached`` says whether the same example
    in eager dispatched a target). An example whose documented operation did not run in
    compiled code (no compiled graph ran, or a graph break left it to eager) is
    ``unsupported`` with the reason, unless it raised the alert: it says nothing about
    compiled code.

    With a ``perturber`` (the perturbation tier, :mod:`engine.perturb`) memory is scribbled
    before every run and a competing load runs during them; the outcome carries the inputs'
    digest and, where the perturber asks, a one-thread run compared with run 0.
    """
    if runs < 2:
        raise ValueError(f"runs must be at least 2 to compare, got {runs}")
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    if phase == "backward-only" and not program.grad_inputs:
        raise ValueError("phase 'backward-only' needs a program with gradients")
    if phase == "backward-only" and compiler is not None:
        raise ValueError("phase 'backward-only' runs in eager only: torch refuses a compiled backward under "
                         "another determinism setting than its forward")
    records = []
    with deterministic_mode(mode, rng=True):
        compiled_fn = compiler.compile(program.fn) if compiler is not None else None
        if perturber is None:
            for _ in range(runs):
                records.append(_run_once(program, synchronize, mode=mode, phase=phase, fn=compiled_fn, compiler=compiler))
        else:
            with perturber.during(_device_of(program)):
                for _ in range(runs):
                    perturber.before_run(program.inputs, records[-1].blocks if records else [])
                    records.append(_run_once(program, synchronize, mode=mode, phase=phase, fn=compiled_fn,
                                             compiler=compiler))
    obs = Observation(runs=runs, example=program.describe, repro=program.repro, case=dict(case or {}))
    dispatched: Counter = Counter()
    for r in records:
        dispatched |= r.ops  # per operator, the most calls seen in one run
    obs.dispatched = top_ops(dispatched)
    ops = frozenset(dispatched)
    random = None
    if any(r.drew_random for r in records):
        drawn = sorted(op for op in ops if _RANDOM_OPS.search(op))
        random = "a generator's state moved in the run" + (f"; {', '.join(drawn[:4])}" if drawn else "")
    if compiler is not None:
        _compiled_evidence(obs, records, targets, eager_reached, program)
    elif targets is not None:
        obs.targets = list(targets)
        obs.reached = reached(targets, dispatched) and not program.meta.get("unreachable")
        if program.meta.get("unreachable"):
            obs.unreachable = str(program.meta["unreachable"])
    for r in records:
        if r.alert_error:
            obs.raised_runs += 1
            obs.raised = obs.raised or r.alert_error
            obs.raise_phase = obs.raise_phase or r.alert_phase
            obs.alert_wrapped = obs.alert_wrapped or r.alert_wrapped
        if r.alert_warnings:
            obs.warned_runs += 1
            for w in r.alert_warnings:
                if w not in obs.warnings:
                    obs.warnings.append(w)
        if r.stderr_alerts:
            obs.stderr_alert_runs += 1
            for w in r.stderr_alerts:
                if w not in obs.stderr_alerts:
                    obs.stderr_alerts.append(w)
        obs.unsupported = obs.unsupported or r.unsupported
        if r.failed_op and targets is not None and compiler is None and reached(targets, r.ops) \
                and not reached(targets, [r.failed_op]):
            # The documented operator ran, then another one failed: the kernel was reached, and
            # what it did (no alert) is evidence; the row must not read as "never got there".
            obs.target_ran_before_gap = True
            if "after the documented operator ran" not in (obs.unsupported or ""):
                obs.unsupported = f"{obs.unsupported} (after the documented operator ran)"
        obs.error = obs.error or r.other_error
    complete = [r for r in records if not (r.alert_error or r.unsupported or r.other_error)]
    if len(complete) != len(records):
        return RunOutcome(obs, ops=ops, random=random)
    obs.identical = True
    for other in records[1:]:
        same, mismatch, diff = compare_runs(records[0], other)
        if not same:
            obs.identical, obs.mismatch, obs.max_abs_diff = False, mismatch, diff
            break
    obs.fingerprint = fingerprint(records[0])
    outcome = RunOutcome(obs, list(zip(records[0].labels, records[0].values)), ops=ops, random=random)
    if perturber is not None:
        outcome.inputs_digest = inputs_digest(program.inputs)
        if perturber.setup.probe_threads:
            outcome.threads = _one_thread_run(program, records[0], synchronize, mode=mode, phase=phase,
                                              fn=compiled_fn, compiler=compiler)
    return outcome


def _device_of(program: Program) -> torch.device:
    return next((t.device for t in program.inputs.values() if isinstance(t, torch.Tensor)), torch.device(HOST))


def _one_thread_run(program: Program, first: RunRecord, synchronize: Callable[[], None], *, mode: str, phase: str,
                    fn: Callable[..., Any] | None, compiler: Compiler | None) -> dict[str, Any]:
    """Thread-count sensitivity: the same inputs once more on one CPU thread, compared with run 0
    (which ran on the process's thread pool). The docs promise no thread-count invariance: the
    result is reported, never judged."""
    threads = torch.get_num_threads()
    if threads == 1:
        return {"threads": [1, 1], "same": None, "why": "the pool has one thread: nothing to compare"}
    torch.set_num_threads(1)
    try:
        with deterministic_mode(mode, rng=True):
            record = _run_once(program, synchronize, mode=mode, phase=phase, fn=fn, compiler=compiler)
    finally:
        torch.set_num_threads(threads)
    if record.alert_error or record.unsupported or record.other_error:
        return {"threads": [threads, 1], "same": None, "why": "the one-thread run did not complete"}
    same, mismatch, _ = compare_runs(first, record)
    return {"threads": [threads, 1], "same": same, **({"mismatch": mismatch} if mismatch else {})}


def _compiled_evidence(obs: Observation, records: list[RunRecord], targets: tuple[str, ...] | None,
                       eager_reached: bool | None, program: Program) -> None:
    """Fill the compile fields of ``obs``; mark an example whose operation ran in eager."""
    snaps = [r.compiled for r in records if r.compiled is not None]
    breaks = sorted({reason for s in snaps for reason in s.break_reasons})
    obs.compiled = {
        "graphs_run": [s.graphs_run for s in snaps],
        "graph_breaks": max((s.graph_breaks for s in snaps), default=0),
        "break_reasons": breaks,
        "compile_s": round(sum(s.compile_s for s in snaps), 4),
    }
    alerted = any(r.alert_error for r in records)
    failed = any(r.unsupported or r.other_error for r in records)
    if targets is not None:
        ok, via = compiled_reach(targets, snaps, eager_reached)
        if not ok and alerted and eager_reached:
            # The op's alert came through compile (Dynamo's fake-tensor run of the op raises it
            # while tracing, before any graph exists): the documented operation was reached.
            ok, via = True, "alert"
        if program.meta.get("unreachable"):
            ok, via = False, None
            obs.unreachable = str(program.meta["unreachable"])
        obs.targets = list(targets)
        obs.reached = ok
        if via:
            obs.compiled["reach_via"] = via
        if not ok and eager_reached and not alerted and not failed and not program.meta.get("unreachable"):
            obs.unsupported = _not_compiled_reason(snaps)
    elif not alerted and not failed and any(s.graphs_run == 0 for s in snaps):
        obs.unsupported = _not_compiled_reason(snaps)


def _not_compiled_reason(snaps: list[CompileSnapshot]) -> str:
    reasons = sorted({reason for s in snaps for reason in s.break_reasons})
    if reasons:
        return "not compiled: a graph break left the operation to eager: " + "; ".join(reasons)[:400]
    earlier = sorted({reason for s in snaps for reason in s.case_break_reasons})
    if earlier:
        return "not compiled: no compiled graph ran; Dynamo left the function to eager: " + "; ".join(earlier)[:400]
    return "not compiled: no compiled graph ran (Dynamo ran the function in eager)"


def eager_ops(program: Program, mode: str, *, phase: str = "program",
              synchronize: Callable[[], None] = lambda: None) -> Counter:
    """The operators one traced eager run of ``program`` under ``mode`` dispatches (a run that
    raises the alert included: the kernel was called)."""
    with deterministic_mode(mode, rng=True):
        record = _run_once(program, synchronize, mode=mode, phase=phase)
    return Counter(record.ops)


# Differential correctness ---------------------------------------------------
# Deterministic but wrong is a failure too; how a result is compared with a reference is
# engine.comparison's (tolerances by dtype and device; rules per program).
# Operators that draw from a random generator, named in the evidence of a random program.
_RANDOM_OPS = re.compile(r"aten\.(?:rand|randn|randint|randperm|bernoulli|normal|uniform|exponential|cauchy|"
                         r"log_normal|geometric|random_|multinomial|native_dropout|rrelu_with_noise|poisson|"
                         r"_standard_gamma|_sample_dirichlet|binomial|fractional_max_pool)")


def run_values(program: Program, mode: str, *, device: torch.device | None = None) -> list[tuple[str, torch.Tensor]] | None:
    """One run's outputs and gradients as CPU tensors (None when it raised).

    ``device`` moves the inputs first: a CPU reference for a GPU example.
    """
    if device is not None:
        program = Program(fn=program.fn, inputs={k: v.to(device) for k, v in program.inputs.items()},
                          grad_inputs=program.grad_inputs, describe=program.describe)
    with deterministic_mode(mode, rng=True):
        record = _run_once(program, lambda: None, trace=False, keep_bytes=False)
    if record.alert_error or record.unsupported or record.other_error:
        return None
    return list(zip(record.labels, record.values))


def compare_values(actual: list[tuple[str, torch.Tensor]], reference: list[tuple[str, torch.Tensor]]) -> str | None:
    """None when every tensor agrees within its dtype's tolerance, else what differed
    (:func:`engine.comparison.compare` with no rule declared)."""
    return comparison.compare(actual, reference)
