"""What a case saw, as plain data: no tensors, no torch.

The runner fills an :class:`Observation` for each example (tensors stay in the
runner); the harness adds what it learned around the run (a differential
mismatch, a check's outcome, a skip, an error of its own); and
:func:`engine.verdict.verdict_for` turns it into the verdict.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

# Fields that say how the harness got the observation, not what the op did: not evidence.
_NOT_EVIDENCE = ("check", "held", "skipped", "observed")


@dataclass
class Observation:
    """What one example (one case) showed under one mode.

    Op runs (filled by :func:`engine.runner.observe`):

    - ``runs``: how many times the program ran.
    - ``raised``: the determinism ``RuntimeError`` message, if any run raised it.
    - ``raised_runs``: in how many runs it was raised.
    - ``raise_phase``: ``"forward"`` or ``"backward"``.
    - ``warnings``: determinism warnings seen (warn_only), deduplicated.
    - ``warned_runs``: in how many runs at least one such warning came.
    - ``unsupported``: message when the op / dtype is not implemented here (a device's gap
      names the operator that failed).
    - ``target_ran_before_gap``: a target operator ran to its end before another operator
      failed as unsupported: the kernel was reached, and whether it alerted counts.
    - ``error``: any other exception, ``"Type: message"`` (a recipe or torch bug),
      or a failure of the harness itself (recipe that cannot build, missing recipe).
    - ``identical``: True / False when every run returned; None when not comparable.
    - ``mismatch``: which tensor differed first, and how (shape, dtype, bytes).
    - ``max_abs_diff``: largest absolute difference among differing float tensors.
    - ``fingerprint``: SHA-256 over run 0's bytes (outputs and gradients).
    - ``example`` / ``repro`` / ``case``: what ran, and the source that rebuilds it.
    - ``numel``: elements of the example's largest input (the load it put on the kernel).
    - ``dispatched``: the most frequent ATen operators the runs dispatched (name → calls).
    - ``targets``: the operators the entry's sentence is about (None: reach not judged).
    - ``reached``: whether a run dispatched a target (None: not judged).
    - ``kernels``: each kernel the case must reach (``Targets.required``; its spellings joined
      by ``|``) → whether this example's runs dispatched it (empty: the case has none).
    - ``unreachable``: why the example cannot reach its kernel whatever it dispatches
      (an empty index: the kernel returns before it runs).
    - ``stderr_alerts`` / ``stderr_alert_runs``: alerts that C++ printed on stderr in runs where
      no Python warning carried them (compiled graphs): for ``warn_only`` a missing warning.
    - ``alert_wrapped``: the type of the compiler's exception around the alert, if any.
    - ``compiled``: under torch.compile, per run the compiled graphs that ran, the graph breaks
      and their reasons, compile seconds, and how reach was shown (``reach_via``).

    Added by the harness:

    - ``wrong_result``: deterministic, but different from the default algorithm or a CPU reference.
    - ``comparison``: the rules the references were compared under (:mod:`engine.comparison`),
      each with its reason, and the float32 math mode that widened a tolerance.
    - ``check`` / ``held``: a check observed the entry; whether the documented behaviour held
      (None: nothing promised, recorded only).
    - ``skipped``: why the example could not be observed here.
    - ``observed``: the word for the matrix when the runner's own word does not apply
      (a check's word, ``no-recipe``, ``crashed``).
    """

    runs: int = 0
    raised: str | None = None
    raised_runs: int = 0
    raise_phase: str | None = None
    warnings: list[str] = field(default_factory=list)
    warned_runs: int = 0
    unsupported: str | None = None
    target_ran_before_gap: bool | None = None
    error: str | None = None
    identical: bool | None = None
    mismatch: str | None = None
    max_abs_diff: float | None = None
    fingerprint: str | None = None
    example: str = ""
    repro: str = ""
    case: dict[str, Any] = field(default_factory=dict)
    numel: int | None = None
    dispatched: dict[str, int] = field(default_factory=dict)
    targets: list[str] | None = None
    reached: bool | None = None
    kernels: dict[str, bool] = field(default_factory=dict)
    unreachable: str | None = None
    stderr_alerts: list[str] = field(default_factory=list)
    stderr_alert_runs: int = 0
    alert_wrapped: str | None = None
    compiled: dict[str, Any] = field(default_factory=dict)
    wrong_result: str | None = None
    comparison: list[dict[str, Any]] = field(default_factory=list)
    check: bool = False
    held: bool | None = None
    skipped: str | None = None
    observed: str | None = None

    @property
    def raised_any(self) -> bool:
        return self.raised_runs > 0

    @property
    def warned_any(self) -> bool:
        return self.warned_runs > 0

    def to_json(self) -> dict[str, Any]:
        """The evidence, JSON-safe: fields that carry something."""
        out = {}
        for name in _EVIDENCE:
            value = getattr(self, name)
            if value is not None and value != [] and value != {}:
                out[name] = value
        return out


#: The fields :meth:`Observation.to_json` reports, in declaration order.
_EVIDENCE = tuple(f.name for f in fields(Observation) if f.name not in _NOT_EVIDENCE)
