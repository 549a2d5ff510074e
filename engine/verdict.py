"""Expectation and verdict: what the docs promise for (entry, device, mode), and
whether an observation keeps that promise.

Both functions are pure and torch-free: plain data in, a word of
:mod:`detconf.vocabulary` out. The expectations and verdicts they speak are listed, with their
meanings, in ``docs/results-schema.md`` (sections "Expectations" and "Verdicts");
:func:`verdict_for` is the only place a case's verdict is decided, for op
runs, the sweep, the differential run, checks, skips and the harness's own errors.
"""
from __future__ import annotations

from typing import Iterable

from detconf.vocabulary import DOC_DEVICES, EXPECTATIONS, FAILING, PASSING, REACH_GATED, STRICT_SOURCES, UNLISTED_SOURCES, VERDICTS
from detconf.engine.entry import Entry
from detconf.engine.observation import Observation

__all__ = ["FAILING", "PASSING", "VERDICTS", "expected_outcome", "is_listed", "observed_word", "verdict_for",
           "with_differential", "with_kernels", "worst"]


def expected_outcome(entry: Entry, device_type: str, mode: str, *, raise_documented_elsewhere: bool = False) -> str:
    """``"raises"``, ``"warns"``, ``"deterministic"``, ``"deterministic-or-raises"``,
    ``"deterministic-or-warns"``, ``"holds"`` or ``"observe"``.

    The general contract — deterministic, or the determinism alert — applies to
    sweep entries of ops that the docs list elsewhere (qualifier ``documented``)
    and to vendor-profile entries on devices the vendor list does not name
    (the Ascend list run on CPU / CUDA). torch's own lists are strict on every
    device the docs speak of (:data:`~detconf.vocabulary.DOC_DEVICES`): a CUDA-only entry must be
    deterministic on CPU without raising. On a device the docs never name (a PrivateUse1 backend
    such as ``opencl``) a sentence that names other devices gets the general contract; a
    sentence that names no device covers it like any other.

    A raise is expected where the entry's own sentence promises one for this
    device, or — on a device the sentence does not name — where another entry
    of the same catalog documents a raise for the same op there
    (``raise_documented_elsewhere``; e.g. ``put_(accumulate=True)`` is
    deterministic on CPU and raises on CUDA).
    """
    if mode == "off":
        return "observe"
    if entry.promise == "behaves":
        return "holds"
    general_contract = "documented" in entry.qualifiers or (
        not entry.applies_to(device_type) and (entry.source not in STRICT_SOURCES or device_type not in DOC_DEVICES)
    )
    if general_contract:
        return "deterministic-or-raises" if mode == "error" else "deterministic-or-warns"
    documented_raise = (entry.promise == "raises" and entry.applies_to(device_type)) or (
        raise_documented_elsewhere and not entry.applies_to(device_type)
    )
    if documented_raise:
        return "raises" if mode == "error" else "warns"
    return "deterministic"


def is_listed(entry: Entry) -> bool:
    """Is the entry's op in a documented list? (The sweep's ops are not: their
    nondeterminism is ``undocumented-nondeterminism``.)"""
    return entry.source not in UNLISTED_SOURCES


def verdict_for(expected: str, obs: Observation, *, listed: bool = True) -> str:
    """The verdict for one observation (one example of one case).

    ``listed=False`` for ops that no documented list names (the sweep).
    """
    if expected not in EXPECTATIONS:
        raise ValueError(f"unknown expectation {expected!r}")
    if obs.skipped is not None:
        return "skipped"
    if obs.error:
        return "harness-error"
    if obs.check:
        if obs.unsupported:
            return "unsupported"
        if expected == "observe" or obs.held is None:
            return "recorded"
        return "conforms" if obs.held else "violated"
    verdict = _op_verdict(expected, obs)
    if verdict == "nondeterministic" and not listed:
        return "undocumented-nondeterminism"
    verdict = with_differential(verdict, obs.wrong_result)
    if obs.reached is False and verdict in REACH_GATED:
        return "not-reached"
    return verdict


def with_differential(verdict: str, wrong_result: str | None) -> str:
    """An example's verdict once its result has been compared with a reference: only a
    conforming example is compared, and one whose result the reference contradicts
    (``wrong_result``, what differed) is ``wrong-result``. :func:`verdict_for` applies it to
    ``obs.wrong_result``; the harness decides an example once, then compares a conforming one
    and applies this."""
    return "wrong-result" if verdict == "conforms" and wrong_result else verdict


def _op_verdict(expected: str, obs: Observation) -> str:
    if expected == "observe":
        if obs.raised_any:
            return "harness-error"  # nothing may raise with determinism off
        if obs.unsupported:
            return "unsupported"
        return "nondeterminism-seen" if obs.identical is False else "no-difference-seen"
    if expected == "raises":
        if obs.raised_runs == obs.runs:
            return "conforms"
        if obs.unsupported and not obs.raised_any:
            # A target that ran to its end without the alert did not raise, whatever failed later.
            return "missing-raise" if obs.target_ran_before_gap else "unsupported"
        return "stale-doc" if obs.identical else "missing-raise"
    if expected == "warns":
        if obs.raised_any:
            return "undocumented-raise"  # warn_only must never raise the alert
        if obs.unsupported:
            return "missing-warning" if obs.target_ran_before_gap and obs.warned_runs < obs.runs else "unsupported"
        if obs.warned_runs < obs.runs:
            return "missing-warning"
        return "conforms"
    if expected == "deterministic-or-raises" and obs.raised_runs == obs.runs:
        return "conforms"
    if expected == "deterministic-or-warns" and obs.warned_runs == obs.runs and not obs.raised_any:
        return "conforms"  # the op said, every run, that it has no deterministic implementation: it may differ
    if expected == "deterministic-or-warns" and obs.stderr_alert_runs and not obs.raised_any:
        return "missing-warning"  # the op alerted, but only on C++'s stderr: no Python warning to act on
    if expected.startswith("deterministic"):
        if obs.raised_any:
            return "undocumented-raise"
        if obs.unsupported:
            return "unsupported"
        if obs.identical is False:
            return "nondeterministic"
        if obs.warned_any or obs.stderr_alert_runs:
            return "spurious-warning"
        return "conforms"
    # "holds" reaches here only for an op observation of a check entry: the harness's bug.
    raise ValueError(f"expectation {expected!r} needs a check observation")


def worst(verdicts: Iterable[str]) -> str:
    """Combine per-example verdicts: the worst failing one, else ``conforms`` if
    any example conformed, else the informational / unsupported one.

    Examples that did not reach their kernel (``not-reached``) are not evidence:
    they are left out whenever another example conformed, failed or was
    informational, so the case is ``not-reached`` only when no example reached.
    """
    seen = list(verdicts)
    if not seen:
        return "harness-error"
    if "not-reached" in seen and any(v not in ("not-reached", "unsupported", "skipped") for v in seen):
        seen = [v for v in seen if v != "not-reached"]
    for v in VERDICTS:
        if v in seen:
            if v in PASSING and "conforms" in seen:
                return "conforms"
            return v
    raise ValueError(f"unknown verdicts {sorted(set(seen) - set(VERDICTS))}")


def with_kernels(verdict: str, unreached: Iterable[str]) -> str:
    """A case's verdict once its required kernels are counted: where a sentence covers several
    kernels on a device (:attr:`engine.trace.Targets.required`) and no example reached one of
    them (``unreached``), a passing verdict that speaks of the kernels' behaviour has not judged
    the whole sentence: ``not-reached``. A failure stands: it is a finding about the kernels
    that were reached."""
    return "not-reached" if list(unreached) and verdict in REACH_GATED and verdict in PASSING else verdict


def observed_word(obs: Observation) -> str:
    """One word for the matrix: what was seen, independent of what was expected."""
    if obs.observed:
        return obs.observed
    if obs.skipped is not None:
        return "skipped"
    if obs.error:
        return "error"
    if obs.raised_any:
        return "raised" if obs.raised_runs == obs.runs else "raised-sometimes"
    if obs.unsupported:
        return "unsupported"
    if obs.identical is False:
        return "nondeterministic" if not obs.warned_any else "warned+nondeterministic"
    if obs.warned_any:
        return "warned"
    if obs.stderr_alert_runs:
        return "warned-on-stderr-only"
    return "deterministic"
