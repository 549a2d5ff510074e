"""The ``sdpa`` and ``flex-attention`` sources: their data, their checks, and planted faults each
check must catch (a documented NotImplementedError that comes as RuntimeError or not at all; a
once-per-process warning that an in-process check would miss)."""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from detconf.findings_rule import torch_in, torch_range
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import detconf.conformance.registry  # noqa: F401  (registers the checks)
from detconf import vocabulary
from detconf.conformance.catalog import data_file, load_catalog, read_entries_file
from detconf.conformance.checks import attention
from detconf.conformance.planned import needs_device
from detconf.engine.checks import CheckSkipped, has_check
from detconf.engine.entry import CatalogError

ENTRIES = load_catalog(["sdpa", "flex-attention"])
CPU = torch.device("cpu")
ONE = settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), database=None)


# ---------------------------------------------------------------------------
# The data


def test_the_sources_are_named_and_sdpa_is_default_while_flex_is_opt_in():
    assert {"sdpa", "flex-attention"} <= set(vocabulary.CHECK_SOURCES)
    assert "sdpa" in vocabulary.DEFAULT_SOURCES
    assert "flex-attention" in vocabulary.OPT_IN_SOURCES and "flex-attention" not in vocabulary.DEFAULT_SOURCES


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_every_entry_has_its_text_a_torch_range_and_a_check(entry):
    assert entry.promise == "behaves" and entry.sentence.strip()
    assert entry.torch, f"{entry.id} carries no torch range"
    assert has_check(entry.source, entry.id)


def test_cuda_promises_are_planned_as_cuda_only_and_skipped_here_with_the_reason():
    cuda = [e for e in ENTRIES if e.devices == ("cuda",)]
    assert len(cuda) == 5
    for e in cuda:
        assert needs_device(e.source, e.id, e.op) == "cuda"


def test_the_documented_texts_match_what_the_checks_look_for():
    by_id = {e.id: e.sentence for e in ENTRIES}
    for key, promise in attention.BACKENDS.items():
        assert promise.warns in by_id[f"sdpa:{key}-backward"]
    assert attention.BACKENDS["cudnn"].excluded_text in by_id["sdpa:cudnn-backward"]
    assert attention.CPU_BACKWARD in by_id["flex_attention:cpu-backward"]
    assert attention.FLASH_PRE_SM100 in by_id["flex_attention:flash-backward-before-sm100"]
    assert attention.FLASH_NO_WRITE_ORDER in by_id["flex_attention:flash-backward-without-write-order"]


def test_the_flex_cpu_error_text_is_the_installed_torchs(monkeypatch):
    """The CPU backward error, in the installed torch: type and text as the data say."""
    from torch.nn.attention.flex_attention import flex_attention

    entry = next(e for e in ENTRIES if e.id == "flex_attention:cpu-backward")
    if not torch_in(torch.__version__, torch_range(entry.torch)):
        pytest.skip(f"torch {torch.__version__} is outside the promise's range {entry.torch} (its CPU backward runs)")
    q = torch.randn(1, 1, 16, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match=attention.CPU_BACKWARD):
        flex_attention(q, q, q)


def test_a_broken_data_file_is_a_one_line_error(tmp_path):
    rows = json.loads(data_file("sdpa").read_text(encoding="utf-8"))
    bad = tmp_path / "sdpa.json"
    bad.write_text(json.dumps(rows + rows[:1]), encoding="utf-8")
    with pytest.raises(CatalogError) as dup:
        read_entries_file(bad, source="sdpa")
    bad.write_text(json.dumps([dict(rows[0], promise="raises")]), encoding="utf-8")
    with pytest.raises(CatalogError) as promise:
        read_entries_file(bad, source="sdpa")
    for exc in (dup, promise):
        assert "\n" not in str(exc.value) and "sdpa" in str(exc.value)


# ---------------------------------------------------------------------------
# flex_attention: a NotImplementedError, not RuntimeError, not nothing


def _outcome(call, mode="error"):
    return attention._flex_outcome(call, mode)


def _raise(exc):
    def call():
        raise exc
    return call


def test_a_documented_not_implemented_error_holds():
    seen = attention.judge_error("NotImplementedError", "backward on CPU",
                                 _outcome(_raise(NotImplementedError("FlexAttention does not support backward on CPU"))))
    assert seen.held is True and seen.observed == "raises-NotImplementedError"


@pytest.mark.parametrize("planted,observed", [
    (_raise(RuntimeError("FlexAttention does not support backward on CPU")), "raises-RuntimeError"),
    (lambda: None, "returns"),
    (_raise(NotImplementedError("flex_attention does not have a deterministic implementation, but you set "
                                "'torch.use_deterministic_algorithms(True)'")), "raises-NotImplementedError"),
])
def test_planted_runtime_error_no_error_or_the_alert_fails_the_promise(planted, observed):
    seen = attention.judge_error("NotImplementedError", "", _outcome(planted))
    assert seen.held is False and seen.observed == observed


def test_the_error_inside_a_compile_wrapper_is_the_one_judged():
    wrapper = RuntimeError("backend='inductor' raised")
    wrapper.__cause__ = ValueError("requires dQ write-order metadata")
    outcome = _outcome(_raise(wrapper))
    assert outcome["error"]["type"] == "ValueError" and outcome["raised_through"] == ["RuntimeError"]
    assert attention.judge_error("ValueError", attention.FLASH_NO_WRITE_ORDER, outcome).held is True


def test_warn_only_needs_a_user_warning_and_a_return():
    def warns():
        warnings.warn("... " + attention.FLASH_WARNING + " ...", UserWarning)
    assert attention.judge_user_warning(attention.FLASH_WARNING, _outcome(warns, "warn_only")).held is True
    assert attention.judge_user_warning(attention.FLASH_WARNING, _outcome(lambda: None, "warn_only")).held is False
    raised = _outcome(_raise(NotImplementedError("requires SM100+")), "warn_only")
    assert attention.judge_user_warning(attention.FLASH_WARNING, raised).held is False


@pytest.mark.parametrize("mode", ["error", "warn_only"])
def test_the_flex_cpu_check_holds_here_and_fails_on_a_planted_runtime_error(mode, monkeypatch):
    import torch.nn.attention.flex_attention as flex

    entry = next(e for e in ENTRIES if e.id == "flex_attention:cpu-backward")

    def run():
        @ONE
        @given(st.data())
        def once(data):
            results.append(attention.flex_cpu_backward(data.draw, entry, CPU, mode))
        results: list = []
        once()
        return results[0]

    if torch_in(torch.__version__, torch_range(entry.torch)):  # where the docs make the promise, it holds here
        assert run().held is True

    def planted(*args, **kwargs):
        raise RuntimeError("FlexAttention does not support backward on CPU")
    monkeypatch.setattr(flex, "flex_attention", planted)
    seen = run()
    assert seen.held is False and seen.observed == "raises-RuntimeError"


def test_the_flex_cpu_check_is_skipped_off_the_cpu():
    with pytest.raises(CheckSkipped) as skip:
        attention.flex_cpu_backward(lambda *a, **k: 0, None, torch.device("meta"), "error")
    assert skip.value.needs_device == "cpu"


# ---------------------------------------------------------------------------
# Once-per-process warnings


PLANTED_TEXT = attention.BACKENDS["flash"].warns
_warned = {"done": False}


def planted_warn_once_runs(payload):
    """A child target shaped like ``sdpa_backend_runs`` whose op warns only the first time in a
    process (``TORCH_WARN_ONCE``); ``payload["every_time"]`` / ``["never"]`` plant other faults."""
    runs = []
    for _ in range(payload["runs"]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if not payload.get("never") and (payload.get("every_time") or not _warned["done"]):
                _warned["done"] = True
                warnings.warn(PLANTED_TEXT + " To explicitly enable determinism ...", UserWarning)
        runs.append({"warnings": [{"category": w.category.__name__, "message": str(w.message)} for w in caught],
                     "error": None, "fingerprint": "same"})
    return {"runs": runs}


PLANTED = "tests.test_attention_sources:planted_warn_once_runs"
FLASH = attention.BACKENDS["flash"]


def test_a_warn_once_op_is_seen_warning_only_the_first_time_in_process():
    _warned["done"] = False
    earlier_case = planted_warn_once_runs({"runs": 1})["runs"]
    this_case = planted_warn_once_runs({"runs": 3})["runs"]
    assert earlier_case[0]["warnings"] and not any(r["warnings"] for r in this_case)
    seen = attention.judge_backend(FLASH, "warn_only", this_case)  # what an in-process check would see
    assert seen.held is False and seen.observed == "never-warned"


def test_the_fresh_process_sees_the_warning_once_whatever_ran_here():
    _warned["done"] = True  # this process already warned
    runs = attention.observe_fresh(PLANTED, {"runs": 3}, CPU)
    assert [len(r["warnings"]) for r in runs] == [1, 0, 0]
    seen = attention.judge_backend(FLASH, "warn_only", runs)
    assert seen.held is True and seen.observed == "warned-once"


@pytest.mark.parametrize("fault,observed", [({"every_time": True}, "warned:1/1/1"), ({"never": True}, "never-warned")])
def test_a_warning_every_time_or_never_fails_the_once_per_process_promise(fault, observed):
    runs = attention.observe_fresh(PLANTED, {"runs": 3, **fault}, CPU)
    seen = attention.judge_backend(FLASH, "warn_only", runs)
    assert seen.held is False and seen.observed == observed


def _run(fp="a", warned=False, error=None):
    return {"warnings": [{"category": "UserWarning", "message": FLASH.warns}] if warned else [], "error": error,
            "fingerprint": fp}


def test_error_mode_needs_silence_and_repeatable_bytes():
    assert attention.judge_backend(FLASH, "error", [_run(), _run(), _run()]).held is True
    assert attention.judge_backend(FLASH, "error", [_run("a"), _run("b")]).observed == "differs"
    assert attention.judge_backend(FLASH, "error", [_run(warned=True), _run()]).held is False
    assert attention.judge_backend(FLASH, "error", [_run(error={"type": "RuntimeError", "message": "x"})]).held is False
    assert attention.judge_backend(FLASH, "off", [_run("a"), _run("b")]).held is None


def test_cudnn_is_excluded_in_error_mode_with_its_warning():
    cudnn = attention.BACKENDS["cudnn"]
    refused = {"warnings": [{"category": "UserWarning", "message": "cuDNN SDPA is not deterministic."}],
               "error": {"type": "RuntimeError", "message": "No available kernel. Aborting execution."},
               "fingerprint": None}
    assert attention.judge_backend(cudnn, "error", [refused]).held is True
    assert attention.judge_backend(cudnn, "error", [_run(), _run()]).held is False  # cuDNN ran: not excluded
    silent = dict(refused, warnings=[])
    assert attention.judge_backend(cudnn, "error", [silent]).held is False


def test_the_fused_backend_checks_are_skipped_on_the_cpu_with_the_reason():
    from detconf.engine.checks import check_for

    for key in attention.BACKENDS:
        with pytest.raises(CheckSkipped) as skip:
            check_for("sdpa", f"sdpa:{key}-backward")(lambda *a, **k: 0, None, CPU, "warn_only")
        assert skip.value.needs_device == "cuda" and "CUDA" in str(skip.value)


# ---------------------------------------------------------------------------
# Math and torch's own choice, in process


@pytest.mark.parametrize("entry_id", ["sdpa:math", "sdpa:torch-choice"])
def test_the_cpu_sdpa_checks_hold_and_catch_a_planted_nondeterministic_kernel(entry_id, monkeypatch):
    from detconf.engine.checks import check_for

    fn = check_for("sdpa", entry_id)

    def run(mode):
        results: list = []

        @ONE
        @given(st.data())
        def once(data):
            results.append(fn(data.draw, None, CPU, mode))
        once()
        return results[0]

    assert run("error").held is True and run("warn_only").held is True
    real = torch.nn.functional.scaled_dot_product_attention
    calls = {"n": 0}

    def noisy(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs) + calls["n"] * 1e-3
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", noisy)
    seen = run("error")
    assert seen.held is False and seen.observed == "differs"


def test_the_general_contract_accepts_the_alert_for_torchs_choice_but_not_for_math():
    alert = {"type": "RuntimeError", "message": "x does not have a deterministic implementation, but you set ..."}
    runs = [{"warnings": [], "error": alert, "fingerprint": None}]
    assert attention.judge_repeatable(runs, "error", alert_allowed=True).held is True
    assert attention.judge_repeatable(runs, "error", alert_allowed=False).held is False
