"""Judge one case (entry × device × mode) with Hypothesis and return its row.

Every example is observed into a plain :class:`~engine.observation.Observation`
and judged by the one verdict function, :func:`engine.verdict.verdict_for`:
op runs, the sweep, the differential run, checks, skips and the harness's own
failures (a missing recipe, a recipe that cannot build its example, a
Hypothesis error) alike.

Every example is recorded *at first sight*. Hypothesis replays and shrinks a
failing example, and nondeterminism may not show up again on replay (its
``Flaky`` error): the verdict is computed from what was recorded, never from
the replay. When the failure does replay, the last failing record is the
shrunk, smallest example, and that one goes into the reproducer.
"""
from __future__ import annotations

import contextlib
import functools
import os
import time
import traceback
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import hypothesis
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from hypothesis.control import should_note as _should_note
except ImportError:  # pragma: no cover - an older or newer Hypothesis without it: always data.draw
    _should_note = None

import detconf.conformance.registry  # noqa: F401  (registers every recipe and check)
from detconf.conformance.kit import stable_draws
from detconf.conformance.plan import Case
from detconf.conformance.profiles import without_local_constants
from detconf.vocabulary import MODE_CALLS, SCHEMA_VERSION
from detconf.engine import checks, comparison, fleet, program, strategies, verdict
from detconf.engine.compiled import Compiler, compile_unavailable
from detconf.engine.determinism import GlobalState, capture_state, preserved_rng, restore_state
from detconf.engine.devices import Backend
from detconf.engine.fingerprint import sha256, tensor_bytes
from detconf.engine.observation import Observation
from detconf.engine.perturb import Perturber
from detconf.engine.runner import RunOutcome, backend_gap, eager_ops, missing_kernel, run_program, run_values
from detconf.engine.trace import DispatchTrace, reached, top_ops

# Whatever process judges a case draws its examples from the strategies and the seed alone, not from
# the numbers in the local modules it happens to have loaded (conformance.profiles).
without_local_constants()


class _NonConforming(Exception):
    """Raised inside the Hypothesis test so that it shrinks the example."""


class _SkipCase(Exception):
    """The case cannot be observed here: stop drawing examples."""


@dataclass
class Record:
    """One judged example: its verdict, the word for the matrix, and the evidence."""

    verdict: str
    observed: str
    detail: dict[str, Any] = field(default_factory=dict)


def _entry_fields(case: Case) -> dict[str, Any]:
    e = case.entry
    return {
        "entry_id": e.id,
        "op": e.op,
        "sentence": e.sentence,
        "source": e.source,
        "list_name": e.list_name,
        "position": e.position,
        "doc_version": e.doc_version,
        "promise": e.promise,
        "devices": list(e.devices),
    }


def expected_for(case: Case) -> str:
    """The case's expected outcome, decided when the case was made (:attr:`Case.expected`)."""
    return case.expected


def base_row(case: Case, backend: Backend | None, expected: str) -> dict[str, Any]:
    row = {"record": "result", "schema": SCHEMA_VERSION}
    row.update(_entry_fields(case))
    row.update(
        {
            "device": case.device,
            "device_name": backend.describe().get("device_name", "") if backend else "",
            "device_index": backend.index if backend else None,
            "d2d": None,
            "mode": case.mode,
            "phase": case.phase,
            "compile": case.compile,
            "expected": expected,
            "torch_version": str(torch.__version__),
            "targets": None,
            "reach": None,
            "dispatched": {},
        }
    )
    return row


def _judged(case: Case, expected: str, obs: Observation, extra: dict[str, Any] | None = None) -> Record:
    """The one place an example's verdict is decided (an op example that conforms is then
    compared with a reference: :func:`judge_program`)."""
    rec = _record(verdict.verdict_for(expected, obs, listed=verdict.is_listed(case.entry)), obs, extra)
    if case.entry.contradicts:  # the docstring says the opposite elsewhere: every cell names it
        rec.detail.setdefault("contradiction", case.entry.contradicts)
    return rec


def _record(v: str, obs: Observation, extra: dict[str, Any] | None = None) -> Record:
    """The record of an example whose verdict is ``v``: the word for the matrix and the evidence
    (``extra``, else the observation's)."""
    detail = dict(extra) if extra is not None else obs.to_json()
    if obs.skipped is not None:
        detail.setdefault("reason", obs.skipped)
    return Record(v, verdict.observed_word(obs), detail)


def _harness_failure(what: str, exc: BaseException, **evidence: Any) -> Observation:
    return Observation(error=f"{what}: {type(exc).__name__}: {exc}", **evidence)


def _targets(case: Case, kwargs: dict) -> tuple[str, ...] | None:
    """The case's target operators; None when reach is not judged (an op no sentence names).
    A documented entry without targets is :class:`~engine.program.NoTargets`."""
    try:
        return program.targets_for(case.entry, kwargs, case.device)
    except program.NoTargets:
        if verdict.is_listed(case.entry):
            raise
        return None


def _drawer(data: st.DataObject) -> Callable[..., Any]:
    """The draw function handed to recipes and checks.

    ``data.draw`` draws from the example's choice sequence (``data.conjecture_data.draw``) and
    adds, per draw, bookkeeping for reporting a failing example: a note of the value drawn and a
    check that the strategy left the global ``random`` alone. With dozens of draws per example
    that bookkeeping costs more than drawing; outside Hypothesis' final replay of a failing
    example (and its verbose mode) it prints nothing, so there the draws go to the choice
    sequence directly: the same values in the same order, so the same examples.

    The function also carries the choice sequence's own ``draw_integer`` (where this Hypothesis
    has one), which the recipe kit uses for what ``st.integers`` over a small range and
    ``st.sampled_from`` draw: the same choices, in both readings, without a strategy's
    bookkeeping around each.
    """
    conjecture = getattr(data, "conjecture_data", None)
    if conjecture is None:
        return data.draw
    if _should_note is None or _should_note():
        def draw(strategy: Any, label: Any = None) -> Any:
            return data.draw(strategy, label=label)
    else:
        def draw(strategy: Any, label: Any = None) -> Any:
            return conjecture.draw(strategy)

    if callable(getattr(conjecture, "draw_integer", None)):
        draw.draw_integer = conjecture.draw_integer  # type: ignore[attr-defined]
    return draw


def _skip_detail(skip: Exception) -> dict[str, Any]:
    """A skip because the promise is about another device type says which (``needs_device``):
    certification tells "does not apply to this device" from "the device was absent" by it."""
    needs = getattr(skip, "needs_device", None)
    return {"needs_device": needs} if needs else {}


def _op_record(case: Case, expected: str, backend: Backend, data: st.DataObject, kwargs: dict, runs: int,
               compiler: Compiler | None = None, peer: Backend | None = None,
               perturber: Perturber | None = None) -> Record:
    recipe = program.recipe_for(case.entry.op)
    targets = _targets(case, kwargs)
    # Off the CPU, a trace names the operator when the device cannot build the example (on the
    # CPU a failure to build is the recipe's own: nothing to name, and tracing would cost every
    # operator of the build a trip through Python).
    building = DispatchTrace() if not backend.is_host else None
    try:
        with building if building is not None else contextlib.nullcontext():
            prog = recipe(_drawer(data), case.entry, kwargs, backend.torch_device())
    except program.RecipeSkipped as skip:
        return _judged(case, expected, Observation(skipped=str(skip)), _skip_detail(skip))
    except (hypothesis.errors.UnsatisfiedAssumption, hypothesis.errors.StopTest):
        raise
    except Exception as exc:  # noqa: BLE001 - a recipe that cannot build its example is our bug...
        gap = backend_gap(exc, building.failure if building is not None else None)
        if gap is not None:  # ...unless the device lacks an operator the same call has on the CPU
            return _judged(case, expected, Observation(runs=runs, unsupported=f"building the example: {gap}",
                                                       case=kwargs, targets=list(targets) if targets else None))
        obs = _harness_failure("recipe failed", exc)
        return _judged(case, expected, obs, {"error": obs.error, "case": kwargs,
                                             "traceback": traceback.format_exc(limit=4)})
    return judge_program(case, expected, backend, prog, kwargs, targets, runs=runs, compiler=compiler, peer=peer,
                         kernels=program.kernels_for(case.entry, kwargs, case.device), perturber=perturber)


def kernel_name(group: tuple[str, ...]) -> str:
    """A required kernel as rows name it: its spellings joined by ``|``."""
    return "|".join(group)


def judge_program(case: Case, expected: str, backend: Backend, prog: program.Program, kwargs: dict,
                  targets: tuple[str, ...] | None, *, runs: int = 2, compiler: Compiler | None = None,
                  peer: Backend | None = None, kernels: tuple[tuple[str, ...], ...] = (),
                  perturber: Perturber | None = None) -> Record:
    """Judge one built example of ``case`` on ``backend`` (inside its :meth:`~Backend.active`
    context): the runs, the differential comparison under the program's rules, the verdict.
    ``perturber``: the perturbation tier's disturbances (:mod:`engine.perturb`) around the runs."""
    if case.phase == "backward-only" and not prog.grad_inputs:
        return _judged(case, expected, Observation(skipped="no differentiable input in this example: the "
                                                           "backward-only phase has nothing to run"), {})
    eager_reached, eager_dispatch = None, None
    if compiler is not None and targets is not None:
        # Reach under compile: the same example in eager must dispatch a target (see engine.compiled).
        eager_dispatch = eager_ops(prog, case.mode, phase=case.phase, synchronize=backend.synchronize)
        eager_reached = reached(targets, eager_dispatch) and not prog.meta.get("unreachable")
    outcome = run_program(prog, case.mode, runs=runs, synchronize=backend.synchronize, case=kwargs,
                          targets=targets, phase=case.phase, compiler=compiler, eager_reached=eager_reached,
                          perturber=perturber)
    obs = outcome.observation
    obs.numel = max((t.numel() for t in prog.inputs.values() if isinstance(t, torch.Tensor)), default=0)
    if kernels:
        # Compiled, a required kernel is reached when the program was (a graph holding a target, or
        # the whole program compiled: engine.compiled.compiled_reach) and the same example in eager
        # dispatched that kernel: the compiler replaced it by its own code (Inductor turns
        # upsample_nearest*_backward into an index_put), which is what the compiled cell judges.
        ops, program_reached = (outcome.ops, True) if compiler is None else (eager_dispatch or {}, bool(obs.reached))
        obs.kernels = {kernel_name(g): program_reached and reached(g, ops) and not prog.meta.get("unreachable")
                       for g in kernels}
    decided = verdict.verdict_for(expected, obs, listed=verdict.is_listed(case.entry))
    if decided == "conforms" and (perturber is None or perturber.setup.differential) and _comparable(case, outcome, prog):
        obs.wrong_result = _differential(prog, outcome, backend, compiled=compiler is not None)
        decided = verdict.with_differential(decided, obs.wrong_result)
    record = _record(decided, obs)
    if outcome.inputs_digest is not None:
        record.detail["inputs_digest"] = outcome.inputs_digest
    if outcome.threads is not None:
        record.detail["threads"] = outcome.threads
    if peer is not None and compiler is None and case.phase == "program" and outcome.values is not None \
            and obs.identical and _promised_deterministic(expected, obs):
        record.detail["d2d"] = device_to_device(prog, case.mode, backend, peer)
    return record


def _promised_deterministic(expected: str, obs: Observation) -> bool:
    """Does the documentation promise this example's bytes? Only then must two devices of one
    model agree: an op that warns (warn_only on a raises-list entry) or mode ``off`` promises
    nothing, and its uninitialized or racing bytes may differ from device to device."""
    return expected.startswith("deterministic") and not obs.warned_runs and not obs.raised_any


def device_to_device(prog: program.Program, mode: str, backend: Backend, peer: Backend) -> dict[str, Any]:
    """The same example on the worker's device and on ``peer`` (another device of the same
    model), once each under the case's mode: the SHA-256 of each one's output and gradient bytes."""
    fingerprints = []
    for where in (backend, peer):
        with where.active():
            values = run_values(prog, mode, device=where.torch_device())
            where.synchronize()
        fingerprints.append(None if values is None else values_fingerprint(values))
    return {"devices": [backend.index, peer.index], "fingerprints": fingerprints,
            "same": fingerprints[0] is not None and fingerprints[0] == fingerprints[1]}


def values_fingerprint(values: list[tuple[str, torch.Tensor]]) -> str:
    """The SHA-256 of a run's values: each label, dtype, shape and bytes."""
    return sha256(chunk for label, t in values
                  for chunk in (label, str(t.dtype), repr(tuple(t.shape)), tensor_bytes(t)))


def _d2d_field(records: list[Record], backend: Backend, peer: Backend | None) -> dict[str, Any] | None:
    """The row's ``d2d``: None when no other device of the same model exists (or nothing was
    compared); otherwise the devices, the examples compared and those whose bytes differed."""
    if peer is None:
        return None
    seen = [r.detail["d2d"] for r in records if isinstance(r.detail.get("d2d"), dict)]
    compared = [s for s in seen if None not in s["fingerprints"]]
    if not compared:
        return None
    differing = [s for s in compared if not s["same"]]
    out = {"devices": [backend.index, peer.index], "model": backend.model(backend.index or 0),
           "compared": len(compared), "differing": len(differing), "result": "differs" if differing else "same"}
    if differing:
        out["first"] = differing[0]["fingerprints"]
    return out


def _comparable(case: Case, outcome: RunOutcome, prog: program.Program) -> bool:
    """Only a conforming (the caller's test), comparable, initialised result is compared with a
    reference."""
    return outcome.values is not None and case.mode != "off" and not prog.meta.get("uninitialized")


def _precision(backend: Backend, outcome: RunOutcome, prog: program.Program, reference: Backend | None) -> comparison.Precision:
    """The float32 precision of the program's results on ``backend`` and on ``reference`` (None:
    the same device), for the math-mode families of the operators it ran, and the reduction
    length (at most the largest input)."""
    fams = comparison.families(outcome.ops)
    reduction = max((t.numel() for t in prog.inputs.values() if isinstance(t, torch.Tensor)), default=1)

    def coarsest(where: Backend) -> tuple[str, str]:
        worst, why = "ieee", ""
        for fam in fams:
            p = where.float32_precision(fam)
            if comparison.roundoff(p) > comparison.roundoff(worst):
                worst, why = p, f"float32 {fam} in {p} on {where.name}"
        return worst, why

    actual, why_a = coarsest(backend)
    ref, why_r = coarsest(reference) if reference is not None else (actual, why_a)
    return comparison.Precision(actual=actual, reference=ref, reduction=reduction,
                                why="; ".join(dict.fromkeys(w for w in (why_a, why_r) if w)),
                                tolerances=backend.tolerances)


def _wide_inputs(prog: program.Program) -> program.Program:
    """``prog`` with every floating input in float64 (complex in complex128)."""
    wide = {name: (t.to(torch.complex128) if t.is_complex() else t.to(torch.float64))
            if (t.is_floating_point() or t.is_complex()) else t for name, t in prog.inputs.items()}
    return program.Program(fn=prog.fn, inputs=wide, grad_inputs=prog.grad_inputs, describe=prog.describe)


def _nudged_inputs(prog: program.Program, step: int) -> program.Program:
    """``prog`` with every floating input ``step`` units of float32 roundoff away (relatively)."""
    nudged = {name: t * (1 + step * comparison.U32) if t.is_floating_point() or t.is_complex() else t
              for name, t in prog.inputs.items()}
    return program.Program(fn=prog.fn, inputs=nudged, grad_inputs=prog.grad_inputs, describe=prog.describe)


def _rounded_inputs(prog: program.Program, precision: str, nearest: bool) -> program.Program:
    """``prog`` with every float32 input rounded as an operand of ``precision`` (TF32, bf16)."""
    rounded = {name: comparison.round_operand(t, precision, nearest=nearest) if t.dtype == torch.float32 else t
               for name, t in prog.inputs.items()}
    return program.Program(fn=prog.fn, inputs=rounded, grad_inputs=prog.grad_inputs, describe=prog.describe)


def _differential(prog: program.Program, outcome: RunOutcome, backend: Backend, *, compiled: bool = False) -> str | None:
    """Deterministic but wrong is a failure: compare with the default (mode off)
    algorithm on the same device, run in eager (for a compiled program: compiled against
    eager), and, off the host, with a CPU reference — each under the program's comparison rules
    (:mod:`engine.comparison`: declared by its recipe or derived from its runs), which the
    observation records."""
    obs = outcome.observation
    rules = comparison.derive(prog.compare, random=outcome.random)
    obs.comparison = rules.describe()
    if rules.runs_only:
        return None
    precision = _precision(backend, outcome, prog, None)
    if precision.widened:
        obs.comparison.append({"rule": "math-mode", "reason": precision.why})
    default = run_values(prog, "off")
    if default is not None:
        problem = comparison.compare(outcome.values, default, rules, inputs=prog.inputs, precision=precision)
        if problem and compiled:
            return _adjudicate(prog, outcome, problem, rules, precision)
        if problem:
            # Is the result as close to float64 as the arithmetic gets? Where both algorithms compute
            # with TF32/bf16 operands off the host, the default's own distance counts as that noise
            # (a weight gradient's long reduction); otherwise only the host's float32 runs of
            # neighbouring inputs do (two orders of a 262,144-term float32 sum differ far beyond a
            # fixed rtol), since a default that races (another winner of a duplicate write) differs
            # by the very thing being judged.
            narrow = precision.actual != "ieee" and not backend.is_host
            problem = _host_adjudicate(prog, outcome, default, rules, precision, backend, reference_noise=narrow)
        if problem:
            return f"vs default algorithm: {problem}"
    if not backend.is_host:
        host = _host_backend()
        cpu = host.torch_device()
        try:
            with backend.on_host():
                reference = run_values(prog, "off", device=cpu)
        except Exception:  # noqa: BLE001 - a recipe tied to its device has no CPU reference
            reference = None
        if reference is not None:
            precision = _precision(backend, outcome, prog, host)
            problem = comparison.compare(outcome.values, reference, rules, inputs=prog.inputs, precision=precision)
            if problem:
                problem = _host_adjudicate(prog, outcome, reference, rules, precision, backend)
            if problem:
                return f"vs CPU reference: {problem}"
    return None


def _host_adjudicate(prog: program.Program, outcome: RunOutcome, reference: list, rules: comparison.Rules,
                     precision: comparison.Precision, backend: Backend, *, reference_noise: bool = True) -> str | None:
    """A result that missed ``reference``, looked at once more against a float64 CPU reference
    (:func:`engine.comparison.adjudicate`): float32's own noise from neighbouring inputs, and
    where the device computes with TF32/bf16 operands, the noise of such operands (its float32
    inputs rounded to that precision, run in float64)."""
    cpu = _host_backend().torch_device()
    with backend.on_host():
        wide = run_values(_wide_inputs(prog), "off", device=cpu)
        neighbours = [run_values(_nudged_inputs(prog, step), "off", device=cpu) for step in (1, -1, 2, -2)]
        if precision.actual != "ieee":
            neighbours += [run_values(_wide_inputs(_rounded_inputs(prog, precision.actual, nearest)), "off", device=cpu)
                           for nearest in (True, False)]
    return comparison.adjudicate(outcome.values, reference, wide, rules, inputs=prog.inputs, precision=precision,
                                 neighbours=neighbours, reference_noise=reference_noise)


@functools.lru_cache(maxsize=1)
def _host_backend() -> Backend:
    """The CPU, where host references run (the built-in backend: no entry points to scan)."""
    from detconf.engine.devices import cpu_backend

    return cpu_backend()


def _adjudicate(prog: program.Program, outcome: RunOutcome, problem: str, rules: comparison.Rules,
                precision: comparison.Precision) -> str | None:
    """Compiled and eager disagree: which is wrong? Eager's own low-precision arithmetic can be
    the one that strays (CPU ``fractional_max_pool3d`` places its windows with bfloat16
    samples). Run eager again with every floating input in float64: a compiled result that
    agrees with that reference (within its dtype's tolerance) is not wrong, and the row says
    so; one that agrees with neither is ``wrong-result``."""
    reference = run_values(_wide_inputs(prog), "off")
    if reference is None or [label for label, _ in reference] != [label for label, _ in outcome.values]:
        return f"vs eager default algorithm: {problem}"
    narrowed = [(label, ref.to(actual.dtype) if ref.dtype != actual.dtype and (ref.is_floating_point() or ref.is_complex())
                 else ref) for (label, ref), (_, actual) in zip(reference, outcome.values)]
    against_wide = comparison.compare(outcome.values, narrowed, rules, inputs=prog.inputs, precision=precision)
    if against_wide is None:
        outcome.observation.compiled["eager_differs"] = (f"eager differs ({problem}); the compiled result agrees "
                                                         "with a float64 eager reference")
        return None
    return f"vs eager default algorithm: {problem}; vs a float64 eager reference: {against_wide}"


def _check_record(case: Case, expected: str, backend: Backend, data: st.DataObject,
                  compiler: Compiler | None = None) -> Record:
    fn = checks.check_for(case.entry.source, case.entry.id)
    # Off the CPU (eager), the check's operators are traced so that a device's missing operator
    # is named (unsupported) instead of read as the check's failure.
    watch = DispatchTrace() if compiler is None and not backend.is_host else None
    try:
        if compiler is not None:
            seen = fn(_drawer(data), case.entry, backend.torch_device(), case.mode, compiler=compiler)
        else:
            with watch if watch is not None else contextlib.nullcontext():
                seen = fn(_drawer(data), case.entry, backend.torch_device(), case.mode)
    except checks.CheckSkipped as skip:
        return _judged(case, expected, Observation(skipped=str(skip), check=True), _skip_detail(skip))
    except checks.CheckUnsupported as lack:
        return _judged(case, expected, Observation(unsupported=str(lack), check=True), {"unsupported": str(lack)})
    except (hypothesis.errors.UnsatisfiedAssumption, hypothesis.errors.StopTest):
        raise
    except Exception as exc:  # noqa: BLE001
        gap = backend_gap(exc, watch.failure if watch is not None else None)
        if gap is None and not backend.is_host:  # e.g. in a fresh child process, where no trace runs
            gap = missing_kernel(str(exc), backend.name)
        if gap is not None:
            return _judged(case, expected, Observation(unsupported=gap, check=True), {"unsupported": gap})
        obs = _harness_failure("check failed", exc, check=True)
        return _judged(case, expected, obs, {"error": obs.error, "traceback": traceback.format_exc(limit=4)})
    obs = Observation(check=True, held=seen.held, observed=seen.observed)
    return _judged(case, expected, obs, dict(seen.detail))


def drawn_programs(case: Case, device: torch.device, hypothesis_settings: settings, examples: int) -> list[program.Program]:
    """The programs :func:`judge` builds for an op ``case`` under these settings: the same draws
    (the harness's draw function, and the case's own seed under a derandomized profile), every
    call form of each example, ``examples`` examples; those a recipe skips are left out. For
    benchmarks and for checks of the runner on exactly what a case runs."""
    progs: list[program.Program] = []
    recipe = program.recipe_for(case.entry.op)

    @settings(hypothesis_settings, max_examples=examples, suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False)
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        for kwargs in case.entry.case_kwargs():
            for form in program.forms_for(case.entry):
                try:
                    progs.append(recipe(_drawer(data), case.entry, kwargs if form is None else dict(kwargs, form=form),
                                        device))
                except program.RecipeSkipped:
                    pass

    if hypothesis_settings.derandomize:
        draw = hypothesis.seed(case_seed(case))(draw)
    if hypothesis_settings.database is None:
        draw._hypothesis_internal_database_key = None
    with preserved_rng():
        draw()
    return progs


#: Runs per example in the stress tier (profile ``stress``), at least.
STRESS_RUNS = 5


def stress_tier() -> bool:
    """Is this the stress tier (the ``stress`` profile's scale)?"""
    return strategies.current_scale() == "stress"


def _stress_limits(backend: Backend) -> strategies.Scale:
    """The stress scale sized to the free memory of the case's device, shared by the test
    workers that may run on it at once."""
    free = None
    if backend.free_memory is not None:
        try:
            free = backend.free_memory(backend.index or 0)
        except Exception:  # noqa: BLE001 - a driver that cannot say: the ceiling
            free = None
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    return strategies.stress_scale(None if free is None else free // workers)


def judge(case: Case, backend: Backend, *, runs: int = 2, hypothesis_settings: settings | None = None,
          perturber: Perturber | None = None) -> dict[str, Any]:
    """Run the case under Hypothesis; return the result row (JSON-safe).

    In the stress tier (profile ``stress``) every example runs at least :data:`STRESS_RUNS`
    times, its sizes follow the device's free memory (:func:`engine.strategies.stress_scale`),
    and a case draws the same examples in every mode (seeded like a compiled case's shape
    class), so that the positive control (mode off) and the deterministic modes judge
    identical inputs.

    A case must leave every guarded global setting as it found it (determinism flags, cuDNN and
    Inductor settings, the environment variables the suite sets): one that does not is a
    ``harness-error`` naming what changed, and the setting is put back before the next case.
    """
    if stress_tier():
        runs = max(runs, STRESS_RUNS)
        strategies.set_scale("stress", _stress_limits(backend))
    before = capture_state()
    # One guard for the generators of ``random`` and NumPy around the whole case: the runner's
    # guards inside it then keep to torch's generators (see preserved_global_state).
    with backend.active(), preserved_rng():
        row = _judge(case, backend, runs=runs, hypothesis_settings=hypothesis_settings, perturber=perturber)
    return _check_no_leak(case, row, before)


def _peer(backend: Backend) -> Backend | None:
    """The device a case's examples are compared with (:func:`engine.fleet.peer`), bound."""
    if backend.index is None:
        return None
    other = fleet.peer(backend, backend.index)
    return None if other is None else backend.on(other)


def _check_no_leak(case: Case, row: dict[str, Any], before: GlobalState) -> dict[str, Any]:
    was, now = before.summary(), capture_state().summary()
    changed = [f"{k}: {was[k]!r} -> {now[k]!r}" for k in was if was[k] != now.get(k)]
    if not changed:
        return row
    restore_state(before)
    message = "the case left global state changed: " + "; ".join(changed)
    rec = _judged(case, row["expected"], Observation(error=message), {"error": message})
    row.update(verdict=rec.verdict, observed=rec.observed)
    row["detail"] = dict(row.get("detail") or {}, **rec.detail)
    return row


def math_mode(backend: Backend) -> dict[str, dict[str, str]]:
    """The effective float32 precision of matmuls and convolutions on the case's device and, off
    the host, on the CPU its references run on: what a comparison between them had to allow."""
    devices = [backend] if backend.is_host else [backend, _host_backend()]
    return {b.name: {family: b.float32_precision(family) for family in ("matmul", "conv")} for b in devices}


def _judge(case: Case, backend: Backend, *, runs: int, hypothesis_settings: settings | None,
           perturber: Perturber | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    expected = case.expected
    row = base_row(case, backend, expected)
    detail: dict[str, Any] = {"math_mode": math_mode(backend)}
    if case.raise_documented_by:
        detail["raise_documented_by"] = case.raise_documented_by
    records: list[Record] = []

    is_check = case.entry.promise == "behaves"
    if not is_check and not program.has_recipe(case.entry.op):
        message = (f"no recipe for {case.entry.op!r}: add one with @recipe({case.entry.op!r}) "
                   "in conformance/recipes.py")
        rec = _judged(case, expected, Observation(error=message, observed="no-recipe"), {"error": message})
        row.update(verdict=rec.verdict, observed=rec.observed, examples=0, runs=0, detail=rec.detail)
        return _finish(row, started)
    if not is_check:
        try:
            for kwargs in case.entry.case_kwargs():
                _targets(case, kwargs)
        except program.NoTargets as exc:
            rec = _judged(case, expected, Observation(error=str(exc), observed="no-target"), {"error": str(exc)})
            row.update(verdict=rec.verdict, observed=rec.observed, examples=0, runs=0, detail=rec.detail)
            return _finish(row, started)

    compiler: Compiler | None = None
    if case.compile != "eager":
        lack = compile_unavailable(case.compile, backend.inductor_codegen)
        if lack is not None:
            rec = _judged(case, expected, Observation(unsupported=lack, check=is_check), {"unsupported": lack})
            row.update(verdict=rec.verdict, observed=rec.observed, examples=0, runs=0, detail=rec.detail)
            return _finish(row, started)
        compiler = Compiler(case.compile, backend.inductor_codegen)

    examples = 0
    peer = _peer(backend) if not is_check else None
    parent = hypothesis_settings or settings()
    cap = checks.example_cap(case.entry.source, case.entry.id) if is_check else None
    max_examples = min(parent.max_examples, cap) if cap else parent.max_examples
    # A check whose draws have no smaller form keeps its first failing example (checks.check).
    phases = parent.phases if not is_check or checks.shrinks(case.entry.source, case.entry.id) \
        else tuple(p for p in parent.phases if p is not hypothesis.Phase.shrink)

    def keep(rec: Record) -> None:
        records.append(rec)
        if rec.verdict == "skipped":
            raise _SkipCase(rec.detail.get("reason", ""))
        # An example that missed its kernel is no evidence: keep drawing (and, while shrinking
        # a failure, Hypothesis keeps to examples that still reach and still fail).
        if rec.verdict in verdict.FAILING and rec.verdict != "not-reached":
            raise _NonConforming(rec.verdict)

    @settings(parent, max_examples=max_examples, phases=phases, suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False)
    @given(st.data())
    def explore(data: st.DataObject) -> None:
        nonlocal examples
        examples += 1
        if is_check:
            keep(_check_record(case, expected, backend, data, compiler))
            return
        for kwargs in case.entry.case_kwargs():
            for form in program.forms_for(case.entry):
                keep(_op_record(case, expected, backend, data, kwargs if form is None else dict(kwargs, form=form),
                                runs, compiler, peer, perturber))

    if parent.derandomize:
        # Derandomized profiles: each case draws its own fixed stream, keyed by its id
        # (the same in every process and on every machine); in the stress tier, by its id
        # without the mode (the same examples in every mode).
        explore = hypothesis.seed(case_seed(case))(explore)
    if parent.database is None:
        # No example database: no key for one either (Hypothesis would hash this function's
        # source, read from disk and tokenized, for every case).
        explore._hypothesis_internal_database_key = None
    try:
        with compiler.case() if compiler is not None else contextlib.nullcontext(), \
                stable_draws(_class_seed(case) if compiler is not None else None):
            explore()
    except _SkipCase:
        pass
    except Exception as exc:  # noqa: BLE001 - Flaky, our marker, or a Hypothesis error
        if not records or not any(r.verdict in verdict.FAILING for r in records):
            obs = Observation(error=f"{type(exc).__name__}: {exc}"[:800])
            records.append(_judged(case, expected, obs, {"error": obs.error}))
        if type(exc).__name__ in ("Flaky", "FlakyFailure", "FlakyReplay"):
            detail["flaky_replay"] = "the failure did not repeat when Hypothesis replayed it; verdict from first sight"

    by_kernel = _kernel_reach(records)
    unreached = [name for name, share in (by_kernel or {}).items() if share == 0]
    final = verdict.with_kernels(verdict.worst(r.verdict for r in records), unreached)
    failing = [r for r in records if r.verdict == final]
    chosen = failing[-1] if failing else records[-1]
    detail.update(chosen.detail)
    row.update(_reach_fields(records))
    if by_kernel is not None:
        detail["reach_by_kernel"] = by_kernel
        if unreached:
            detail["unreached_kernels"] = unreached
    row.update(_compile_fields(records, compiler))
    row["d2d"] = _d2d_field(records, backend, peer)
    sizes = [r.detail["numel"] for r in records if isinstance(r.detail.get("numel"), int)]
    if sizes:
        detail["max_numel"] = max(sizes)
    if stress_tier():
        detail["tier"] = "stress"
    if case.entry.contradicts:  # another entry of the docstring says the opposite: the cell names it
        detail["contradiction"] = case.entry.contradicts
    detail["observed_per_example"] = sorted({r.observed for r in records})
    detail["verdicts_per_example"] = {v: sum(r.verdict == v for r in records) for v in sorted({r.verdict for r in records})}
    fingerprints = [r.detail.get("fingerprint") for r in records if r.detail.get("fingerprint")]
    if fingerprints:
        detail["fingerprints"] = {str(i): fp for i, fp in enumerate(fingerprints[:50])}
    if perturber is not None:
        # Every example in order, for the comparison across processes (conformance.perturbed):
        # its inputs' digest, its outputs' fingerprint (None: the runs did not complete) and,
        # where probed, whether one thread gave the same bytes.
        detail["per_example"] = [[r.detail.get("inputs_digest"), r.detail.get("fingerprint"),
                                  (r.detail.get("threads") or {}).get("same")] for r in records[:50]]
        detail["perturbations"] = perturber.applied()
    row.update(
        verdict=final,
        observed=chosen.observed,
        examples=examples,
        runs=runs if not is_check else 1,
        detail=detail,
    )
    return _finish(row, started)


def _judged_for_reach(records: list[Record]) -> list[Record]:
    # Examples that could not run here (unsupported dtype, skipped) are not counted either way.
    return [r for r in records if r.detail.get("reached") is not None and r.verdict not in ("unsupported", "skipped")]


def _kernel_reach(records: list[Record]) -> dict[str, float] | None:
    """Per required kernel, the share of the judged examples that reached it (None: the case
    has no required kernels)."""
    seen = [r for r in _judged_for_reach(records) if r.detail.get("kernels")]
    if not seen:
        return None
    names = list(dict.fromkeys(name for r in seen for name in r.detail["kernels"]))
    return {name: round(sum(bool(r.detail["kernels"].get(name)) for r in seen) / len(seen), 4) for name in names}


def _reach_fields(records: list[Record]) -> dict[str, Any]:
    """``targets``, ``reach`` (share of the examples that ran and were judged, that reached a target) and ``dispatched``
    (the operators most examples dispatched, name -> examples) over a case's examples."""
    judged = _judged_for_reach(records)
    targets: list[str] = []
    for r in judged:
        for t in r.detail.get("targets") or []:
            if t not in targets:
                targets.append(t)
    counts: dict[str, int] = {}
    for r in records:
        for op in r.detail.get("dispatched") or {}:
            counts[op] = counts.get(op, 0) + 1
    return {
        "targets": targets or None,
        "reach": round(sum(bool(r.detail["reached"]) for r in judged) / len(judged), 4) if judged else None,
        "dispatched": top_ops(counts),
    }


def case_seed(case: Case) -> int:
    """The seed of a case's examples under a derandomized profile: its id (the same in every
    process and on every machine); in the stress tier its id without the mode, so that every
    mode judges the same examples."""
    return _class_seed(case) if stress_tier() else zlib.crc32(case.id.encode())


def _class_seed(case: Case) -> int:
    """The seed of a compiled case's shape class: the same in every mode, so that the modes of an
    entry compile the same graphs and Inductor's kernel cache serves the second mode."""
    return zlib.crc32(f"{case.entry.source}:{case.entry.id}|{case.device}|{case.phase}|{case.compile}".encode())


def _compile_fields(records: list[Record], compiler: Compiler | None) -> dict[str, Any]:
    """``compile_s`` (seconds spent compiling, part of ``duration_s``; None in eager),
    ``graphs_compiled`` (graphs Dynamo handed to the backend in the case), ``graph_breaks``
    (most breaks one run took) and their reasons over a case's examples."""
    if compiler is None:
        return {"compile_s": None, "graphs_compiled": None, "graph_breaks": None, "graph_break_reasons": []}
    seen = [r.detail.get("compiled") or {} for r in records]
    reasons = sorted({reason for c in seen for reason in c.get("break_reasons", [])})
    return {
        "compile_s": round(compiler.compile_s, 4),
        "graphs_compiled": len(compiler.graphs),
        "graph_breaks": max((c.get("graph_breaks", 0) for c in seen), default=0),
        "graph_break_reasons": reasons,
    }


def _finish(row: dict[str, Any], started: float) -> dict[str, Any]:
    row["duration_s"] = round(time.perf_counter() - started, 4)
    return row


def skipped_row(case: Case, reason: str) -> dict[str, Any]:
    """The row of a case that was not run (its device is absent)."""
    expected = case.expected
    rec = _judged(case, expected, Observation(skipped=reason), {})
    row = base_row(case, None, expected)
    row.update(verdict=rec.verdict, observed=rec.observed, examples=0, runs=0, detail=rec.detail, duration_s=0.0)
    return row


def crashed_row(case: Case, message: str) -> dict[str, Any]:
    """A worker or child died while running the case: our failure until shown otherwise."""
    expected = case.expected
    obs = Observation(error=message[:800], observed="crashed")
    rec = _judged(case, expected, obs, {"error": obs.error})
    row = base_row(case, None, expected)
    row.update(verdict=rec.verdict, observed=rec.observed, examples=0, runs=0, detail=rec.detail, duration_s=0.0)
    return row


def d2d_message(row: dict[str, Any], *, rerun: str = "") -> str:
    """Why a case failed the device-to-device check (its verdict passed)."""
    d2d = row["d2d"]
    first, second = d2d["devices"]
    return (f"{row['entry_id']} ({row['mode']}): {row['verdict']} on {row['device']}:{first}, but "
            f"{d2d['differing']} of {d2d['compared']} examples gave different bytes on {row['device']}:{second} "
            f"(same model: {d2d['model']}); first differing fingerprints {d2d.get('first')}"
            + (f"\nrerun: {rerun}" if rerun else ""))


def failure_message(row: dict[str, Any], nodeid: str = "", *, rerun: str = "") -> str:
    """What a failing case's test prints. ``rerun``: a command that runs the case again (the
    plugin's, with every option of the run); without it, a hint from ``nodeid``."""
    d = row.get("detail", {})
    compiled = row.get("compile", "eager") != "eager"
    lines = [
        f"{row['entry_id']} on {row['device']} in mode {row['mode']}"
        + (f" under torch.compile(backend={row['compile']!r})" if compiled else "") + f": {row['verdict']}",
        f"  documented: {row['sentence']}",
        f"  expected {row['expected']}, observed {row['observed']} "
        f"({row['examples']} examples, {row['runs']} runs each, torch {row['torch_version']})",
    ]
    for key in ("mismatch", "max_abs_diff", "raised", "warnings", "stderr_alerts", "error", "unsupported",
                "wrong_result", "unreached_kernels", "flaky_replay", "raise_documented_by", "compiled"):
        if d.get(key) not in (None, [], ""):
            lines.append(f"  {key}: {d[key]}")
    if d.get("example"):
        lines.append(f"  example: {d['example']}  case={d.get('case', {})}")
    if d.get("repro"):
        repro = d["repro"]
        if compiled:
            repro += (f"\n# the suite ran the op function through torch.compile(<op function>, "
                      f"backend={row['compile']!r}), called twice on these inputs")
        lines.append("  reproducer:\n    import torch\n    " + MODE_CALLS[row["mode"]] + "\n    "
                     + repro.replace("\n", "\n    "))
    if rerun:
        lines.append(f"  rerun: {rerun}")
    elif nodeid:
        lines.append(f"  rerun: pytest '{nodeid}' --hypothesis-profile ci")
    return "\n".join(lines)
