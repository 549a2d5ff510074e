"""Checks for the flag API (``--source flag-api``).

``torch.use_deterministic_algorithms(mode, warn_only=)`` and its alternative
interface ``torch.set_deterministic_debug_mode`` set one global setting; the
getters ``are_deterministic_algorithms_enabled``,
``is_deterministic_algorithms_warn_only_enabled`` and
``get_deterministic_debug_mode`` must report it. Each check starts from the
setting its ``mode`` names, walks through a few drawn settings and compares
every getter with what was set. All functions are looked up on ``torch`` at
call time so that a faulted getter is seen.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
from hypothesis import strategies as st

from detconf.vocabulary import MODE_FLAGS, debug_level
from detconf.engine.checks import CheckObservation, CheckUnsupported, check
from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import preserved_global_state
from detconf.engine.runner import UNSUPPORTED

from ._support import FLAG_API, NONDETERMINISTIC_ALERT

DEBUG_LEVELS = {"default": 0, "warn": 1, "error": 2}


def _settings(draw, mode: str) -> list[tuple[bool, bool]]:
    """A few drawn (enabled, warn_only) settings, ending with the mode's own."""
    steps = draw(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=3), label="settings before the mode's")
    return steps + [MODE_FLAGS[mode]]


def _getters() -> dict[str, Any]:
    return {
        "enabled": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "debug_mode": torch.get_deterministic_debug_mode(),
    }


def _verdict(steps: list[dict[str, Any]], observed_ok: str, observed_bad: str) -> CheckObservation:
    bad = [s for s in steps if not s["ok"]]
    return CheckObservation(
        held=not bad,
        observed=observed_ok if not bad else observed_bad,
        detail={"steps": steps, "mismatches": len(bad)},
    )


@check("use_deterministic_algorithms->are_deterministic_algorithms_enabled", source=FLAG_API)
def enabled_getter_follows_mode(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    steps = []
    with preserved_global_state():
        for enabled, warn_only in _settings(draw, mode):
            torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
            got = torch.are_deterministic_algorithms_enabled()
            steps.append({"set": [enabled, warn_only], "got": got, "ok": got is enabled})
    return _verdict(steps, "reflects-mode", "getter-disagrees")


@check("use_deterministic_algorithms(warn_only)->is_deterministic_algorithms_warn_only_enabled", source=FLAG_API)
def warn_only_getter_follows_mode(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "Returns True if the global deterministic flag is set to warn only": judged
    # while the flag is on; with the flag off the answer is recorded only.
    steps = []
    with preserved_global_state():
        for enabled, warn_only in _settings(draw, mode):
            torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
            got = torch.is_deterministic_algorithms_warn_only_enabled()
            steps.append({"set": [enabled, warn_only], "got": got, "ok": (got is warn_only) if enabled else True})
    return _verdict(steps, "reflects-warn_only", "getter-disagrees")


@check("use_deterministic_algorithms[warn_only-default]", source=FLAG_API)
def warn_only_defaults_to_false(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # warn_only "Default: False": a call without it clears an earlier warn_only=True.
    enabled = MODE_FLAGS[mode][0]
    with preserved_global_state():
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.use_deterministic_algorithms(enabled)
        got = _getters()
    ok = got["enabled"] is enabled and got["warn_only"] is False and got["debug_mode"] == debug_level(enabled, False)
    return CheckObservation(
        held=ok,
        observed="warn_only-cleared" if ok else "warn_only-kept",
        detail={"call": f"use_deterministic_algorithms({enabled})", "after_warn_only_true": got},
    )


@check("use_deterministic_algorithms->get_deterministic_debug_mode", source=FLAG_API)
def debug_mode_getter_follows_mode(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    steps = []
    with preserved_global_state():
        for enabled, warn_only in _settings(draw, mode):
            torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
            got = torch.get_deterministic_debug_mode()
            want = debug_level(enabled, warn_only)
            steps.append({"set": [enabled, warn_only], "got": got, "want": want, "ok": type(got) is int and got == want})
    return _verdict(steps, "reflects-mode", "debug-mode-disagrees")


def _spelling(draw, entry) -> Any:
    return draw(st.sampled_from([case["debug_mode"] for case in entry.case_kwargs()]), label="debug_mode")


def _level_of(spelling: Any) -> int:
    return DEBUG_LEVELS[spelling] if isinstance(spelling, str) else int(spelling)


def _debug_mode_round_trip(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    spelling = _spelling(draw, entry)
    level = _level_of(spelling)
    with preserved_global_state():
        enter_mode(mode)
        torch.set_deterministic_debug_mode(spelling)
        after_set = _getters()
        # Round trip: feeding the getter's answer back changes nothing.
        torch.set_deterministic_debug_mode(after_set["debug_mode"])
        after_round_trip = _getters()
    problems = []
    if not (type(after_set["debug_mode"]) is int and after_set["debug_mode"] == level):
        problems.append("get_deterministic_debug_mode")
    if after_set["enabled"] is not (level > 0):
        problems.append("are_deterministic_algorithms_enabled")
    # Level 0 says nothing about warn_only; record it only.
    if level > 0 and after_set["warn_only"] is not (level == 1):
        problems.append("is_deterministic_algorithms_warn_only_enabled")
    if after_round_trip != after_set:
        problems.append("round-trip")
    return CheckObservation(
        held=not problems,
        observed="round-trips" if not problems else "disagrees:" + ",".join(problems),
        detail={
            "start_mode": mode,
            "debug_mode": spelling,
            "level": level,
            "after_set": after_set,
            "after_round_trip": after_round_trip,
        },
    )


for _name in ("default", "warn", "error"):
    check(
        f"set_deterministic_debug_mode(debug_mode={_name!r}|{DEBUG_LEVELS[_name]})", source=FLAG_API
    )(_debug_mode_round_trip)


def _put_probe(device: torch.device) -> dict[str, Any]:
    """``Tensor.put_(accumulate=False)``: in the docs' raise list for every device."""
    x = torch.zeros(6, device=device)
    index = torch.tensor([0, 0, 3], device=device)
    values = torch.tensor([1.0, 2.0, 3.0], device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            x.put_(index, values, accumulate=False)
        except RuntimeError as exc:  # NotImplementedError too: a device without put_ says nothing of the mode
            if NONDETERMINISTIC_ALERT not in str(exc) and UNSUPPORTED.search(str(exc)):
                raise CheckUnsupported(f"the probe Tensor.put_ on {device}: {str(exc).splitlines()[0][:200]}") from None
            return {"raised": True, "error": str(exc)[:200], "alert_warnings": []}
    alerts = [str(w.message)[:200] for w in caught if NONDETERMINISTIC_ALERT in str(w.message)]
    return {"raised": False, "error": None, "alert_warnings": alerts}


def _debug_mode_alerts(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "default" or 0: don't error or warn; "warn" or 1: warn; "error" or 2: error.
    spelling = _spelling(draw, entry)
    level = _level_of(spelling)
    with preserved_global_state():
        enter_mode(mode)
        torch.set_deterministic_debug_mode(spelling)
        probe = _put_probe(device)
    raised_alert = probe["raised"] and NONDETERMINISTIC_ALERT in (probe["error"] or "")
    if probe["raised"] and not raised_alert:
        observed = "other-error"
    elif raised_alert:
        observed = "errors"
    elif probe["alert_warnings"]:
        observed = "warns"
    else:
        observed = "silent"
    want = {0: "silent", 1: "warns", 2: "errors"}[level]
    return CheckObservation(
        held=observed == want,
        observed=observed,
        detail={"start_mode": mode, "debug_mode": spelling, "expected": want, "probe": "Tensor.put_(accumulate=False)", **probe},
    )


for _name in ("default", "warn", "error"):
    check(
        f"set_deterministic_debug_mode(debug_mode={_name!r}|{DEBUG_LEVELS[_name]}):put_(accumulate=False)",
        source=FLAG_API,
    )(_debug_mode_alerts)


def _rejects(call, expected: tuple[type[BaseException], ...], argument: Any) -> CheckObservation:
    """Call with an invalid argument: the documented error type, and the setting left alone."""
    with preserved_global_state():
        before = _getters()
        inductor_before = _inductor_deterministic()
        try:
            call()
        except Exception as exc:  # the type is what we judge
            error: BaseException | None = exc
        else:
            error = None
        after = _getters()
        inductor_after = _inductor_deterministic()
    raised_expected = error is not None and isinstance(error, expected)
    unchanged = after == before
    observed = "accepted" if error is None else f"raises-{type(error).__name__}"
    if not unchanged:
        observed += ",setting-changed"
    if inductor_after != inductor_before:
        observed += ",inductor-config-changed"
    return CheckObservation(
        held=raised_expected and unchanged,
        observed=observed,
        detail={
            "argument": repr(argument),
            "expected": [t.__name__ for t in expected],
            "error": None if error is None else f"{type(error).__name__}: {str(error)[:200]}",
            "before": before,
            "after": after,
            "inductor_deterministic_before": inductor_before,
            "inductor_deterministic_after": inductor_after,
        },
    )


def _inductor_deterministic() -> str | None:
    """Inductor's deterministic setting (repr); None where torch has no Inductor or no such setting
    (``hasattr``: on releases without the key, reading it raises AttributeError)."""
    try:
        import torch._inductor.config as inductor_config
    except Exception:
        return None
    if not hasattr(inductor_config, "deterministic"):
        return None
    return repr(inductor_config.deterministic)


_NOT_STR_OR_INT = st.one_of(
    st.floats(allow_nan=False, width=32),
    st.none(),
    st.lists(st.integers(0, 2), max_size=2),
    st.binary(max_size=4),
    st.just(torch.tensor(1)),
)

_NOT_BOOL = st.one_of(
    st.none(),
    st.sampled_from(["True", "yes", "", "warn"]),
    st.floats(allow_nan=False, width=32),
    st.lists(st.booleans(), min_size=1, max_size=2),
)


@check("set_deterministic_debug_mode[invalid-value]", source=FLAG_API)
def debug_mode_rejects_invalid_value(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # The docstring admits "default"/"warn"/"error" and 0/1/2 only; it names no
    # error type, torch has raised RuntimeError since 1.11 (ValueError accepted too).
    bad = draw(
        st.one_of(
            st.integers().filter(lambda i: i not in (0, 1, 2)),
            st.sampled_from(["Default", "WARN", "Error", "1", " warn", "warn_only", ""]),
            st.text(max_size=6).filter(lambda s: s not in DEBUG_LEVELS),
        ),
        label="invalid debug_mode",
    )
    with preserved_global_state():
        enter_mode(mode)
        return _rejects(lambda: torch.set_deterministic_debug_mode(bad), (RuntimeError, ValueError), bad)


@check("set_deterministic_debug_mode[invalid-type]", source=FLAG_API)
def debug_mode_rejects_invalid_type(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "debug_mode (str or int)": anything else is a TypeError.
    bad = draw(_NOT_STR_OR_INT, label="debug_mode of another type")
    with preserved_global_state():
        enter_mode(mode)
        return _rejects(lambda: torch.set_deterministic_debug_mode(bad), (TypeError,), bad)


@check("use_deterministic_algorithms[mode-not-bool]", source=FLAG_API)
def use_rejects_non_bool_mode(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "mode (bool)".
    bad = draw(_NOT_BOOL, label="mode")
    with preserved_global_state():
        enter_mode(mode)
        return _rejects(lambda: torch.use_deterministic_algorithms(bad), (TypeError,), bad)


@check("use_deterministic_algorithms[warn_only-not-bool]", source=FLAG_API)
def use_rejects_non_bool_warn_only(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "warn_only (bool, optional)".
    bad = draw(_NOT_BOOL, label="warn_only")
    with preserved_global_state():
        enter_mode(mode)
        return _rejects(lambda: torch.use_deterministic_algorithms(True, warn_only=bad), (TypeError,), bad)
