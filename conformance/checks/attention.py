"""Checks for attention under deterministic mode: ``--source sdpa`` and ``--source flex-attention``.

The promises are not in ``use_deterministic_algorithms``' docstring; their documented text is
data (``conformance/data/sdpa.json``, ``flex_attention.json``), each with its torch range.

``scaled_dot_product_attention`` (per ``SDPBackend``):

- MATH, and torch's own choice on a device without fused kernels ("For all other backends, the
  PyTorch implementation will be used"): forward and backward bitwise repeatable in both
  deterministic modes, no alert. Run in the test process.
- FLASH_ATTENTION and EFFICIENT_ATTENTION (CUDA): with ``warn_only=False`` the backward takes its
  deterministic path, silently; with ``warn_only=True`` it keeps the nondeterministic one and
  warns with ``TORCH_WARN_ONCE``: once per process. CUDNN_ATTENTION: excluded from selection
  with ``warn_only=False`` (cuDNN alone enabled: a RuntimeError, "cuDNN SDPA is not
  deterministic."); with ``warn_only=True`` it runs and its backward warns once. A warning that
  comes once per process is only seen by a process that has not issued it yet, so these run in
  a fresh process each (:mod:`conformance.attention_children`).

``flex_attention`` backward: the errors are ``NotImplementedError`` or ``ValueError``, not the
alert's ``RuntimeError`` (``NotImplementedError`` is a subclass of it, so the type is compared
exactly), and under ``warn_only`` a Python ``UserWarning``.

The judging functions (``judge_*``) are pure: they take what ran as plain data, so a test can
hand them a planted observation.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

import torch
from hypothesis import strategies as st

from detconf.child import child_env, run_in_child
from detconf.conformance.attention_children import sdpa_backend_runs
from detconf.engine.checks import CheckObservation, CheckSkipped, CheckUnsupported, check
from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import mode_is_on, preserved_global_state
from detconf.engine.devices import backend_for

from ._support import NONDETERMINISTIC_ALERT

SDPA = "sdpa"
FLEX = "flex-attention"
#: The child target that runs one SDPA backend in a fresh process.
SDPA_CHILD = "detconf.conformance.attention_children:sdpa_backend_runs"
#: Runs per fresh process: the first must warn, the later ones must not (once per process).
FRESH_RUNS = 3
#: Runs in the test process (math and torch's own choice).
IN_PROCESS_RUNS = 2


# ---------------------------------------------------------------------------
# Judging (pure)


def _alerted(text: str) -> bool:
    return NONDETERMINISTIC_ALERT in text


def _messages(run: dict[str, Any], fragment: str) -> list[str]:
    return [w["message"] for w in run["warnings"] if fragment in w["message"]]


def _summary(runs: list[dict[str, Any]]) -> str:
    words = []
    for run in runs:
        if run["error"] is not None:
            words.append(f"raised-{run['error']['type']}")
        else:
            words.append("warned" if run["warnings"] else "ran")
    return ",".join(words)


def judge_repeatable(runs: list[dict[str, Any]], mode: str, *, alert_allowed: bool) -> CheckObservation:
    """Math, or torch's own choice: in a deterministic mode every run returns, none alerts, and all
    fingerprints agree. ``alert_allowed``: the general contract (an op may instead raise the alert
    in mode error, or warn with it and return in warn_only)."""
    detail = {"runs": runs}
    if not mode_is_on(mode):
        return CheckObservation(held=None, observed=_summary(runs), detail=detail)
    errors = [r["error"] for r in runs if r["error"] is not None]
    alerts = [w["message"] for r in runs for w in r["warnings"] if _alerted(w["message"])]
    if errors:
        error = errors[0]
        held = alert_allowed and mode == "error" and error["type"] == "RuntimeError" and _alerted(error["message"])
        return CheckObservation(held=held, observed=f"raised-{error['type']}", detail=detail)
    if len(runs) < 2:
        return CheckObservation(held=False, observed="too-few-runs", detail=detail)
    if alerts and not (alert_allowed and mode == "warn_only"):
        return CheckObservation(held=False, observed="alert-warning", detail=detail)
    same = len({r["fingerprint"] for r in runs}) == 1
    held = same or (alert_allowed and mode == "warn_only" and bool(alerts))
    return CheckObservation(held=held, observed="repeats" if same else "differs", detail=detail)


@dataclass(frozen=True)
class BackendPromise:
    """What the docs and torch's source say one fused SDPA backend does under the mode.

    ``warns``: the once-per-process warning of its backward under ``warn_only``.
    ``excluded_text``: with ``warn_only=False`` the backend is excluded from selection (its
    only-enabled call raises RuntimeError) and this text is warned or raised; None: it runs,
    deterministically and silently."""

    backend: str
    warns: str
    excluded_text: str | None = None


BACKENDS = {
    "flash": BackendPromise("FLASH_ATTENTION", "Flash Attention defaults to a non-deterministic algorithm."),
    "efficient": BackendPromise("EFFICIENT_ATTENTION",
                                "Memory Efficient attention defaults to a non-deterministic algorithm."),
    "cudnn": BackendPromise("CUDNN_ATTENTION", "cuDNN Attention defaults to a non-deterministic algorithm.",
                            excluded_text="cuDNN SDPA is not deterministic."),
}
#: The words of SDPA's "no backend can run this" error (CUDA: "No available kernel"; CPU: "No viable backend").
NO_BACKEND = ("No available kernel", "No viable backend")


def judge_backend(promise: BackendPromise, mode: str, runs: list[dict[str, Any]]) -> CheckObservation:
    """One fused backend's runs in one fresh process (the first run is the process's first call)."""
    detail: dict[str, Any] = {"backend": promise.backend, "runs": runs, "warning": promise.warns}
    if not mode_is_on(mode):
        return CheckObservation(held=None, observed=_summary(runs), detail=detail)
    first_error = runs[0]["error"] if runs else None
    if mode == "error" and promise.excluded_text is not None:
        said = [w["message"] for w in runs[0]["warnings"]] + [first_error["message"] if first_error else ""] if runs else []
        held = (first_error is not None and first_error["type"] == "RuntimeError"
                and any(t in first_error["message"] for t in NO_BACKEND) and not _alerted(first_error["message"])
                and any(promise.excluded_text in m for m in said))
        return CheckObservation(held=held, observed="excluded" if held else _summary(runs), detail=detail)
    if any(r["error"] is not None for r in runs):
        return CheckObservation(held=False, observed=_summary(runs), detail=detail)
    if len(runs) < 2:
        return CheckObservation(held=False, observed="too-few-runs", detail=detail)
    counts = [len(_messages(r, promise.warns)) for r in runs]
    detail["warnings_per_run"] = counts
    if mode == "error":
        same = len({r["fingerprint"] for r in runs}) == 1
        held = same and not any(counts)
        observed = "warned" if any(counts) else ("repeats" if same else "differs")
        return CheckObservation(held=held, observed=observed, detail=detail)
    held = counts[0] == 1 and not any(counts[1:])
    observed = "warned-once" if held else ("never-warned" if not any(counts) else "warned:" + "/".join(map(str, counts)))
    return CheckObservation(held=held, observed=observed, detail=detail)


def judge_error(expected_type: str, fragment: str, outcome: dict[str, Any]) -> CheckObservation:
    """A documented error that is not the alert: exactly ``expected_type`` (a subclass of
    RuntimeError such as NotImplementedError is told apart from RuntimeError by name), its
    text holding ``fragment``, and not the alert's wording."""
    error = outcome.get("error")
    if error is None:
        return CheckObservation(held=False, observed="returns", detail=dict(outcome))
    held = error["type"] == expected_type and fragment in error["message"] and not _alerted(error["message"])
    return CheckObservation(held=held, observed=f"raises-{error['type']}", detail=dict(outcome))


def judge_user_warning(fragment: str, outcome: dict[str, Any]) -> CheckObservation:
    """``warn_only``: the op returns, and a Python ``UserWarning`` holding ``fragment`` was raised."""
    error = outcome.get("error")
    if error is not None:
        return CheckObservation(held=False, observed=f"raises-{error['type']}", detail=dict(outcome))
    held = any(w["category"] == "UserWarning" and fragment in w["message"] for w in outcome["warnings"])
    return CheckObservation(held=held, observed="warns" if held else "silent", detail=dict(outcome))


# ---------------------------------------------------------------------------
# Observing


def _draw_payload(draw, device: torch.device, dtypes: list[str]) -> dict[str, Any]:
    return {
        "device": str(device),
        "seed": draw(st.integers(0, 2**31 - 1), label="data seed"),
        "dtype": draw(st.sampled_from(dtypes), label="dtype"),
        "shape": [draw(st.integers(1, 3), label="batch"), draw(st.integers(1, 4), label="heads"),
                  draw(st.integers(1, 96), label="sequence"), draw(st.sampled_from([8, 16, 64]), label="head dim")],
        "causal": draw(st.booleans(), label="is_causal"),
    }


def _in_process(payload: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    with preserved_global_state():
        return sdpa_backend_runs(dict(payload, mode=mode, runs=IN_PROCESS_RUNS))["runs"]


def _float_dtypes(device: torch.device) -> list[str]:
    return ["float32", "float64", "bfloat16"] if device.type == "cpu" else ["float32", "float16", "bfloat16"]


@check("sdpa:math", source=SDPA)
def sdpa_math(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    payload = dict(_draw_payload(draw, device, _float_dtypes(device)), backend="MATH")
    seen = judge_repeatable(_in_process(payload, mode), mode, alert_allowed=False)
    seen.detail["example"] = payload
    return seen


@check("sdpa:torch-choice", source=SDPA)
def sdpa_torch_choice(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    payload = dict(_draw_payload(draw, device, _float_dtypes(device)), backend=None)
    seen = judge_repeatable(_in_process(payload, mode), mode, alert_allowed=True)
    seen.detail["example"] = payload
    return seen


def require_cuda(device: torch.device, *, capability: Callable[[tuple[int, int]], bool] | None = None,
                 needs: str = "") -> tuple[int, int]:
    if device.type != "cuda" or not torch.cuda.is_available():
        raise CheckSkipped("needs a CUDA device" + (f" ({needs})" if needs else ""), needs_device="cuda")
    cap = torch.cuda.get_device_capability(device)
    if capability is not None and not capability(cap):
        raise CheckSkipped(f"needs a CUDA device {needs}; this one is sm{cap[0]}{cap[1]}", needs_device="cuda")
    return cap


def observe_fresh(target: str, payload: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    """``target(payload)``'s runs in a fresh process, with the device backend's environment."""
    backend = backend_for(device.type)
    env = child_env(dict(backend.environment) if backend is not None and backend.environment else None)
    return run_in_child(target, payload, env=env, timeout=300, what=f"{target} in a fresh process")["runs"]


def _backend_check(key: str) -> Callable[..., CheckObservation]:
    promise = BACKENDS[key]

    def observe(draw, entry, device: torch.device, mode: str) -> CheckObservation:
        require_cuda(device)
        payload = dict(_draw_payload(draw, device, ["float16", "bfloat16"]), backend=promise.backend,
                       mode=mode, runs=FRESH_RUNS)
        seen = judge_backend(promise, mode, observe_fresh(SDPA_CHILD, payload, device))
        seen.detail["example"] = payload
        return seen

    observe.__name__ = observe.__qualname__ = f"sdpa_{key}_backward"
    return check(f"sdpa:{key}-backward", source=SDPA, device="cuda", max_examples=2)(observe)


for _key in BACKENDS:
    _backend_check(_key)


# ---------------------------------------------------------------------------
# flex_attention


def _flex_outcome(call: Callable[[], Any], mode: str) -> dict[str, Any]:
    """Run ``call`` under ``mode``; the innermost error of a compile wrapper is the one judged."""
    import warnings

    outcome: dict[str, Any] = {"error": None, "warnings": []}
    with preserved_global_state(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enter_mode(mode)
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the observation
            inner, wrappers = exc, []
            while getattr(inner, "inner_exception", None) or inner.__cause__:
                wrappers.append(type(inner).__name__)
                inner = getattr(inner, "inner_exception", None) or inner.__cause__
            outcome["error"] = {"type": type(inner).__name__, "message": str(inner)[:600]}
            if wrappers:
                outcome["raised_through"] = wrappers
    outcome["warnings"] = [{"category": w.category.__name__, "message": str(w.message)[:400]} for w in caught]
    return outcome


def _flex_inputs(draw, device: torch.device, dtype: torch.dtype, length: int | None = None):
    seed = draw(st.integers(0, 2**31 - 1), label="data seed")
    heads = draw(st.integers(1, 4), label="heads")
    length = length or draw(st.sampled_from([16, 32, 64]), label="sequence")
    g = torch.Generator(device="cpu").manual_seed(seed)
    tensors = [torch.randn(1, heads, length, 16, generator=g).to(device=device, dtype=dtype).requires_grad_()
               for _ in range(3)]
    return tensors, {"seed": seed, "shape": [1, heads, length, 16], "dtype": str(dtype).removeprefix("torch.")}


CPU_BACKWARD = "FlexAttention does not support backward on CPU"


@check("flex_attention:cpu-backward", source=FLEX, device="cpu")
def flex_cpu_backward(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    """Inputs that require grad on the CPU: a NotImplementedError, in every mode, never the alert."""
    if device.type != "cpu":
        raise CheckSkipped("the promise is about the CPU", needs_device="cpu")
    from torch.nn.attention.flex_attention import flex_attention

    (q, k, v), example = _flex_inputs(draw, device, torch.float32)
    outcome = _flex_outcome(lambda: flex_attention(q, k, v).sum().backward(), mode)
    alert_warnings = [w for w in outcome["warnings"] if _alerted(w["message"])]
    seen = judge_error("NotImplementedError", CPU_BACKWARD, outcome)
    if alert_warnings:
        seen = CheckObservation(held=False, observed="alert-warning", detail=seen.detail)
    seen.detail["example"] = example
    return seen


FLASH_PRE_SM100 = "requires SM100+"
FLASH_NO_WRITE_ORDER = "requires dQ write-order metadata"
FLASH_WARNING = "does not have a deterministic implementation for this configuration"


def _flex_flash_backward(draw, device: torch.device, mode: str) -> dict[str, Any]:
    """flex_attention compiled with ``BACKEND='FLASH'`` and a causal block mask, then its backward."""
    if importlib.util.find_spec("flash_attn") is None or importlib.util.find_spec("flash_attn.cute") is None:
        raise CheckUnsupported("flex_attention's FLASH backend needs flash-attn-4 (flash_attn.cute), not installed")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    (q, k, v), example = _flex_inputs(draw, device, torch.bfloat16, length=256)
    mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, 1, 1, 256, 256, device=str(device))
    torch._dynamo.reset()
    try:
        compiled = torch.compile(flex_attention)
        outcome = _flex_outcome(lambda: compiled(q, k, v, block_mask=mask,
                                                 kernel_options={"BACKEND": "FLASH"}).sum().backward(), mode)
    finally:
        torch._dynamo.reset()
    outcome["example"] = example
    return outcome


def _flash_check(entry_id: str, capability: Callable[[tuple[int, int]], bool], needs: str, error_type: str,
                 fragment: str) -> None:
    def observe(draw, entry, device: torch.device, mode: str) -> CheckObservation:
        require_cuda(device, capability=capability, needs=needs)
        outcome = _flex_flash_backward(draw, device, mode)
        if mode == "error":
            return judge_error(error_type, fragment, outcome)
        if mode == "warn_only":
            return judge_user_warning(FLASH_WARNING, outcome)
        return CheckObservation(held=None, observed="raises" if outcome["error"] else "returns", detail=outcome)

    observe.__name__ = observe.__qualname__ = "flex_" + entry_id.split(":")[1].replace("-", "_")
    check(entry_id, source=FLEX, device="cuda", max_examples=1)(observe)


_flash_check("flex_attention:flash-backward-before-sm100", lambda cap: cap[0] < 10, "below sm100",
             "NotImplementedError", FLASH_PRE_SM100)
_flash_check("flex_attention:flash-backward-without-write-order", lambda cap: cap[0] >= 10, "of sm100 or newer",
             "ValueError", FLASH_NO_WRITE_ORDER)
