"""Tests of the flag-API and reproducibility-note checks (conformance/checks/).

- the catalogs load, and every entry has exactly one registered check (and back);
- each check, run on the CPU in each mode, gives the expected ``held``
  (True, or None where the promise is informational; CUDA-only checks skip);
- planted faults (a lying getter, an ``empty`` that returns zeros, an ignored
  seed) turn the verdict red;
- global state comes back even when a check raises midway;
- malformed catalogs raise CatalogError naming the file.

Expectations follow what the installed torch can do (``tests/capabilities.py``):
a check may report ``unsupported`` only where a probe shows this torch lacks
the capability, and a test that needs a missing capability skips naming it.
"""
from __future__ import annotations

import json
import os
import random
import sys
import types
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detconf.engine import checks as check_registry
from detconf.engine.checks import CheckObservation, CheckSkipped, CheckUnsupported, check_for, has_check
from detconf.engine.entry import CatalogError
import detconf.conformance.registry  # noqa: F401  (registers the checks)
from detconf.conformance.checks import CATALOG_FILES, CHECK_SOURCES, load_check_entries
from detconf.engine.determinism import capture_state, preserved_global_state
from detconf.conformance.checks import uninitialized_memory
from tests.capabilities import (
    UDA_SETS_INDUCTOR,
    can_make_uninitialized,
    has_inductor_deterministic,
    kernel_missing_for,
    require_inductor_deterministic,
    use_deterministic_algorithms_sets_inductor,
)

CPU = torch.device("cpu")
MODES = ("error", "warn_only", "off")
ENTRIES = {source: load_check_entries(source) for source in CHECK_SOURCES}
ALL_ENTRIES = [e for source in CHECK_SOURCES for e in ENTRIES[source]]
BY_ID = {e.id: e for e in ALL_ENTRIES}

# Promises that are informational in every mode ("nothing is promised; record").
ALWAYS_INFORMATIONAL = {
    "DataLoader(num_workers=2,generator)",
    "DataLoader(num_workers=2)",
} | {e.id for e in ALL_ENTRIES if e.id.startswith("fill_uninitialized_memory=False:")}

# Promises that hold only while deterministic mode is on; "off" is recorded.
INFORMATIONAL_WHEN_OFF = {
    "use_deterministic_algorithms->inductor.config.deterministic",
    "set_deterministic_debug_mode->inductor.config.deterministic",
    "torch.compile:deterministic",
} | {e.id for e in ALL_ENTRIES if e.id.startswith("fill_uninitialized_memory:") and e.dtypes}

# What torch 2.13.0 does against the documentation. Should torch change, the
# test fails so that the table (and the report) is updated.
KNOWN_VIOLATIONS = {
    # set_deterministic_debug_mode calls torch._C directly and leaves
    # torch._inductor.config.deterministic alone, unlike use_deterministic_algorithms.
    "set_deterministic_debug_mode->inductor.config.deterministic": ("error", "warn_only"),
}

# Each of these starts one or two Python interpreters (or compiles) per example:
# one example, in one mode (the compile check in every mode, one example each).
SUBPROCESS_CHECKS = {"fill_uninitialized_memory:default", "manual_seed[fresh-processes]"}
COSTLY_CHECKS = {"torch.compile:deterministic"}
DATALOADER_CHECKS = {e.id for e in ALL_ENTRIES if e.list_name == "dataloader"}

# Checks of Inductor's deterministic setting: unsupported where torch has none.
INDUCTOR_SETTING_CHECKS = {
    "use_deterministic_algorithms->inductor.config.deterministic",
    "set_deterministic_debug_mode->inductor.config.deterministic",
}


def expected_held(entry, mode: str) -> bool | None:
    if entry.id in KNOWN_VIOLATIONS and mode in KNOWN_VIOLATIONS[entry.id]:
        return False
    if entry.id in ALWAYS_INFORMATIONAL or (mode == "off" and entry.id in INFORMATIONAL_WHEN_OFF):
        return None
    return True


Seen = CheckObservation | CheckSkipped | CheckUnsupported


def observe(entry, mode: str, examples: int, device: torch.device = CPU) -> list[Seen]:
    """Run the entry's check under Hypothesis, as the generated tests will.

    A :class:`CheckUnsupported` is kept with what the example drew (``.draws``,
    by label), so a test can ask whether this torch really lacks the capability."""
    fn = check_for(entry.source, entry.id)
    seen: list[Seen] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=("generate",),
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def run(data):
        draws: dict[str, Any] = {}

        def draw(strategy, label=None):
            value = data.draw(strategy, label=label)
            draws[label] = value
            return value

        try:
            seen.append(fn(draw, entry, device, mode))
        except CheckSkipped as skipped:
            seen.append(skipped)
        except CheckUnsupported as lack:
            lack.draws = dict(draws)
            seen.append(lack)

    run()
    assert seen, f"{entry.id}: no example ran"
    return seen


def _fill_op(entry) -> tuple[str, bool]:
    """(op, fill flag) of a fill check: ``fill_uninitialized_memory:empty[complex]`` -> ("empty", True)."""
    head, op = entry.id.split(":", 1)
    return op.split("[", 1)[0], head == "fill_uninitialized_memory"


def unfillable(entry, mode: str, lack: CheckUnsupported) -> bool:
    """The unsupported example drew a dtype for which this torch cannot make the op's
    uninitialized memory under the same mode and fill flag (probed)."""
    dtype = getattr(lack, "draws", {}).get("dtype")
    op, fill = _fill_op(entry)
    return (isinstance(dtype, torch.dtype) and kernel_missing_for(str(lack), [dtype]) is dtype
            and not can_make_uninitialized(dtype, op, deterministic=mode != "off", fill=fill))


def assert_unsupported_only_where_torch_lacks_it(entry, mode: str, results) -> list[Seen]:
    """Every ``unsupported`` is backed by a probe; return the other results."""
    lacking = [r for r in results if isinstance(r, CheckUnsupported)]
    for lack in lacking:
        if entry.id in INDUCTOR_SETTING_CHECKS:
            assert not has_inductor_deterministic(), f"{entry.id}: unsupported, but torch has it: {lack}"
            assert "torch._inductor.config.deterministic" in str(lack), lack
        elif entry.id.startswith("fill_uninitialized_memory"):
            assert unfillable(entry, mode, lack), f"{entry.id}: unsupported for a dtype this torch fills: {lack} {getattr(lack, 'draws', {})}"
        else:
            raise AssertionError(f"{entry.id}: unsupported, but nothing this torch lacks explains it: {lack}")
    return [r for r in results if not isinstance(r, CheckUnsupported)]


@pytest.fixture
def fillable_dtypes_only(monkeypatch):
    """Make the fill checks draw only dtypes this torch can fill under deterministic mode
    (probed before any test plants a fault in ``torch.empty``); skip a class that has none."""

    def restrict(cls: str, op: str) -> list[torch.dtype]:
        fillable = [d for d in uninitialized_memory.DTYPE_CLASSES[cls] if can_make_uninitialized(d, op)]
        if not fillable:
            pytest.skip(f"torch {torch.__version__} cannot fill {op}'s memory for any {cls} dtype "
                        "under deterministic mode (no fill kernel)")
        monkeypatch.setitem(uninitialized_memory.DTYPE_CLASSES, cls, fillable)
        return fillable

    return restrict


def full_state() -> dict[str, Any]:
    """Every setting the guard promises to restore, RNG states included, comparable with ==."""
    state = capture_state(rng=True)
    summary = state.summary()
    summary["torch_rng"] = state.rng["torch"].tolist()
    summary["random_rng"] = state.rng["random"]
    np_state = state.rng["numpy"]
    summary["numpy_rng"] = (np_state[0], np_state[1].tolist(), *np_state[2:])
    return summary


# ---------------------------------------------------------------------------
# Catalog and registry


def test_sources_are_the_two_check_sources():
    assert CHECK_SOURCES == ("flag-api", "repro-notes")
    assert len(ENTRIES["flag-api"]) >= 10 and len(ENTRIES["repro-notes"]) >= 40


def test_every_entry_has_a_check_and_every_check_an_entry():
    for source in CHECK_SOURCES:
        ids = {e.id for e in ENTRIES[source]}
        missing = sorted(i for i in ids if not has_check(source, i))
        assert not missing, f"entries without a check in {source}: {missing}"
        # The registry is a private dict of engine.checks; read it, never write it.
        registered = set(check_registry.registered_checks(source))
        orphans = sorted(registered - ids)
        assert not orphans, f"checks without an entry in {source}: {orphans}"


@pytest.mark.parametrize("entry", ALL_ENTRIES, ids=lambda e: f"{e.source}:{e.id}")
def test_entry_fields(entry):
    assert entry.promise == "behaves"
    assert entry.source in CHECK_SOURCES
    assert entry.sentence.strip() and ("docstring" in entry.sentence or "Reproducibility notes" in entry.sentence)
    if entry.source == "flag-api":
        assert entry.list_name == "flag-api"
    else:
        assert entry.list_name in {"fill-uninitialized-memory", "cublas-workspace", "cudnn", "seeds", "dataloader", "inductor"}
    if entry.list_name in ("cublas-workspace", "cudnn"):
        assert entry.devices == ("cuda",)
    else:
        assert entry.devices == ()


def test_catalog_covers_each_fill_op_and_dtype_class():
    ids = {e.id for e in ENTRIES["repro-notes"]}
    for op in ("empty", "empty_like", "empty_strided", "new_empty", "resize_"):
        for cls in ("floating", "complex", "integer"):
            assert f"fill_uninitialized_memory:{op}[{cls}]" in ids
        assert f"fill_uninitialized_memory=False:{op}" in ids
    for config in ("unset", "wrong", ":4096:8", ":16:8"):
        for op in ("mm", "mv", "bmm"):
            assert f"CUBLAS_WORKSPACE_CONFIG={config}:{op}" in ids
    for op in ("randn", "rand", "dropout", "randperm", "multinomial", "svd_lowrank"):
        assert f"manual_seed:{op}" in ids


def test_catalog_files_round_trip_through_entry_json():
    for source in CHECK_SOURCES:
        raw = json.loads(CATALOG_FILES[source].read_text())
        assert [e.to_json() for e in ENTRIES[source]] == raw


# ---------------------------------------------------------------------------
# Every check on the CPU, every mode


def _plan() -> list[tuple[Any, str, int]]:
    plan = []
    for entry in ALL_ENTRIES:
        if entry.id in SUBPROCESS_CHECKS:
            plan.append((entry, "error", 1))
        elif entry.id in COSTLY_CHECKS:
            plan.extend((entry, mode, 1) for mode in MODES)
        elif entry.id in DATALOADER_CHECKS:
            plan.extend((entry, mode, 2) for mode in MODES)
        else:
            plan.extend((entry, mode, 5) for mode in MODES)
    return plan


@pytest.mark.parametrize(("entry", "mode", "examples"), _plan(), ids=lambda v: v.id if hasattr(v, "id") else str(v))
def test_check_on_cpu(entry, mode, examples):
    if entry.id in INDUCTOR_SETTING_CHECKS:
        require_inductor_deterministic()  # without it: test_inductor_checks_are_unsupported_without_the_setting
    before = full_state()
    results = observe(entry, mode, examples)
    assert full_state() == before, f"{entry.id} ({mode}) left global state changed"
    if entry.devices == ("cuda",):
        assert all(isinstance(r, CheckSkipped) for r in results)
        assert all("needs a CUDA device" in str(r) for r in results)
        return
    skipped = [r for r in results if isinstance(r, CheckSkipped)]
    assert not skipped, f"{entry.id} skipped on CPU: {skipped[0]}"
    results = assert_unsupported_only_where_torch_lacks_it(entry, mode, results)
    if not results:
        pytest.skip(f"{entry.id}: every drawn example needs a dtype for which torch {torch.__version__} "
                    "cannot fill uninitialized memory under deterministic mode (no fill kernel)")
    want = expected_held(entry, mode)
    for obs in results:
        assert isinstance(obs, CheckObservation)
        assert obs.held is want, f"{entry.id} ({mode}): held={obs.held!r}, expected {want!r}; {obs.observed}: {obs.detail}"
        assert isinstance(obs.observed, str) and obs.observed
        json.dumps(obs.detail)  # JSON-safe evidence


@pytest.mark.parametrize("entry_id", sorted(INDUCTOR_SETTING_CHECKS))
def test_inductor_checks_are_unsupported_without_the_setting(monkeypatch, entry_id):
    # A release without the setting (2.5.1) is the real thing; elsewhere plant the
    # absence: an Inductor config module that has no ``deterministic``.
    if has_inductor_deterministic():
        import torch._inductor

        absent = types.ModuleType("torch._inductor.config")
        monkeypatch.setattr(torch._inductor, "config", absent)
        monkeypatch.setitem(sys.modules, "torch._inductor.config", absent)
    assert not has_inductor_deterministic()
    before = full_state()
    results = observe(BY_ID[entry_id], "error", 2)
    assert full_state() == before
    assert all(isinstance(r, CheckUnsupported) for r in results), results
    assert all("torch._inductor.config.deterministic" in str(r) for r in results)


def test_cuda_checks_skip_on_a_cuda_device_that_is_absent():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the checks run for real")
    for entry in ALL_ENTRIES:
        if entry.devices == ("cuda",):
            results = observe(entry, "error", 1, device=torch.device("cuda"))
            assert all(isinstance(r, CheckSkipped) for r in results), entry.id


# ---------------------------------------------------------------------------
# Facts the checks record on this torch (the report quotes them)


def test_fill_checks_see_nan_and_max_in_deterministic_mode(fillable_dtypes_only):
    for op in ("empty", "resize_"):
        fillable_dtypes_only("integer", op)
        fillable_dtypes_only("complex", op)
        (obs,) = observe(BY_ID[f"fill_uninitialized_memory:{op}[integer]"], "error", 1)
        assert obs.observed == "filled-max"
        (obs,) = observe(BY_ID[f"fill_uninitialized_memory:{op}[complex]"], "warn_only", 1)
        assert obs.observed == "filled-nan"


def test_fill_flag_off_is_recorded_not_judged():
    results = observe(BY_ID["fill_uninitialized_memory=False:empty"], "error", 5)
    assert all(r.held is None and r.detail["fill_uninitialized_memory"] is False for r in results)
    assert all(r.observed in {"filled-nan", "filled-max", "zeros", "unfilled"} for r in results)


def test_dataloader_without_recipe_records_differences():
    results = observe(BY_ID["DataLoader(num_workers=2)"], "off", 2)
    assert all(r.held is None for r in results)
    assert any(r.observed.startswith("differs:") for r in results)


# ---------------------------------------------------------------------------
# Planted faults turn the verdict red


def _any_violation(results) -> bool:
    return any(isinstance(r, CheckObservation) and r.held is False for r in results)


def _all_violations(results) -> bool:
    return all(isinstance(r, CheckObservation) and r.held is False for r in results)


@pytest.mark.parametrize(
    ("getter", "lie", "entry_id", "mode"),
    [
        ("are_deterministic_algorithms_enabled", False, "use_deterministic_algorithms->are_deterministic_algorithms_enabled", "error"),
        ("are_deterministic_algorithms_enabled", False, "set_deterministic_debug_mode(debug_mode='warn'|1)", "off"),
        ("are_deterministic_algorithms_enabled", True, "use_deterministic_algorithms->are_deterministic_algorithms_enabled", "off"),
        ("is_deterministic_algorithms_warn_only_enabled", False, "use_deterministic_algorithms(warn_only)->is_deterministic_algorithms_warn_only_enabled", "warn_only"),
        ("is_deterministic_algorithms_warn_only_enabled", True, "use_deterministic_algorithms[warn_only-default]", "error"),
        ("get_deterministic_debug_mode", 0, "use_deterministic_algorithms->get_deterministic_debug_mode", "error"),
        ("get_deterministic_debug_mode", 2, "set_deterministic_debug_mode(debug_mode='default'|0)", "error"),
    ],
)
def test_fault_a_getter_that_lies(monkeypatch, getter, lie, entry_id, mode):
    entry = BY_ID[entry_id]
    assert not _any_violation(observe(entry, mode, 3))
    monkeypatch.setattr(torch, getter, lambda: lie)
    assert _all_violations(observe(entry, mode, 3)), f"{entry_id} stayed green with a lying {getter}"


def test_fault_set_deterministic_debug_mode_ignored(monkeypatch):
    entry = BY_ID["set_deterministic_debug_mode(debug_mode='error'|2):put_(accumulate=False)"]
    monkeypatch.setattr(torch, "set_deterministic_debug_mode", lambda debug_mode: None)
    assert _all_violations(observe(entry, "off", 3))


def test_fault_debug_mode_that_misreads_integers(monkeypatch):
    # 1 and 2 swapped: the integer spelling lands on the wrong level and the
    # string spelling no longer round-trips through get_deterministic_debug_mode.
    real = torch.set_deterministic_debug_mode
    swapped = {1: 2, 2: 1}

    def misreads(debug_mode):
        return real(swapped.get(debug_mode, debug_mode) if isinstance(debug_mode, int) else debug_mode)

    entry = BY_ID["set_deterministic_debug_mode(debug_mode='warn'|1)"]
    monkeypatch.setattr(torch, "set_deterministic_debug_mode", misreads)
    assert _all_violations(observe(entry, "off", 4))


_real_zeros, _real_zeros_like = torch.zeros, torch.zeros_like


def _zeroing_resize_(original):
    def resize_(self, *sizes, **kwargs):
        old = self.numel()
        original(self, *sizes, **kwargs)
        self.view(-1)[old:].zero_()
        return self

    return resize_


@pytest.mark.parametrize("op", ["empty", "empty_like", "empty_strided", "new_empty", "resize_"])
@pytest.mark.parametrize("cls", ["floating", "complex", "integer"])
def test_fault_an_empty_that_returns_zeros(monkeypatch, fillable_dtypes_only, op, cls):
    entry = BY_ID[f"fill_uninitialized_memory:{op}[{cls}]"]
    fillable_dtypes_only(cls, op)  # the fault must be caught on every dtype torch can fill
    if op == "empty":
        monkeypatch.setattr(torch, "empty", lambda *a, **k: _real_zeros(*a, **k))
    elif op == "empty_like":
        monkeypatch.setattr(torch, "empty_like", lambda *a, **k: _real_zeros_like(*a, **k))
    elif op == "empty_strided":
        monkeypatch.setattr(torch, "empty_strided", _zeros_strided)
    elif op == "new_empty":
        monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, size, **k: self.new_zeros(size, **k))
    else:
        monkeypatch.setattr(torch.Tensor, "resize_", _zeroing_resize_(torch.Tensor.resize_))
    results = observe(entry, "error", 3)
    assert _all_violations(results), [r.observed for r in results]
    assert all(r.observed == "zeros" for r in results)


def _zeros_strided(size, stride, **kwargs):
    numel = 1 + sum((s - 1) * st_ for s, st_ in zip(size, stride))
    return _real_zeros(numel, **kwargs).as_strided(size, stride)


@pytest.mark.parametrize("op", ["randn", "rand", "dropout", "randperm", "multinomial", "svd_lowrank"])
def test_fault_a_seed_that_is_ignored(monkeypatch, op):
    entry = BY_ID[f"manual_seed:{op}"]
    assert not _any_violation(observe(entry, "error", 3))
    monkeypatch.setattr(torch, "manual_seed", lambda seed: torch.default_generator)
    results = observe(entry, "error", 3)
    assert _all_violations(results), [r.observed for r in results]


def test_fault_python_and_numpy_seeds_ignored(monkeypatch):
    monkeypatch.setattr(random, "seed", lambda *a, **k: None)
    assert _all_violations(observe(BY_ID["random.seed"], "off", 3))
    monkeypatch.setattr(np.random, "seed", lambda *a, **k: None)
    assert _all_violations(observe(BY_ID["np.random.seed"], "off", 3))


def test_fault_dataloader_generator_ignored(monkeypatch):
    # A Generator whose manual_seed does nothing: the sampler's order and the
    # workers' base seed then come from fresh entropy each time.
    class IgnoresSeed(torch.Generator):
        def manual_seed(self, seed):
            self.seed()
            return self

    monkeypatch.setattr(torch, "Generator", IgnoresSeed)
    assert _any_violation(observe(BY_ID["DataLoader(num_workers=2,worker_init_fn,generator)"], "off", 2))


# ---------------------------------------------------------------------------
# State comes back when a check raises midway


class Planted(RuntimeError):
    pass


def _raise(*args, **kwargs):
    raise Planted("planted failure")


def _unusual_state():
    """A starting state unlike anything the checks set, so a leak shows."""
    torch.use_deterministic_algorithms(False, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    if has_inductor_deterministic():  # a torch without the setting cannot have it set (nor leak it)
        import torch._inductor.config as inductor_config

        inductor_config.deterministic = "sentinel"


@pytest.mark.parametrize(
    ("entry_id", "target", "name"),
    [
        ("use_deterministic_algorithms->are_deterministic_algorithms_enabled", torch, "are_deterministic_algorithms_enabled"),
        ("set_deterministic_debug_mode(debug_mode='warn'|1)", torch, "get_deterministic_debug_mode"),
        ("fill_uninitialized_memory:empty[floating]", torch, "empty"),
        ("fill_uninitialized_memory=False:resize_", torch.Tensor, "resize_"),
        ("manual_seed:randn", torch, "randn"),
        ("manual_seed:svd_lowrank", torch, "svd_lowrank"),
        ("random.seed", random, "random"),
        ("np.random.seed", np.random, "rand"),
        ("use_deterministic_algorithms->inductor.config.deterministic", torch, "use_deterministic_algorithms"),
        ("set_deterministic_debug_mode->inductor.config.deterministic", torch, "set_deterministic_debug_mode"),
    ],
)
def test_state_restored_when_a_check_raises_midway(monkeypatch, entry_id, target, name):
    entry = BY_ID[entry_id]
    if entry_id in INDUCTOR_SETTING_CHECKS:
        require_inductor_deterministic()  # without it the check stops (unsupported) before the planted call
    with preserved_global_state(rng=True):
        _unusual_state()
        before = full_state()
        monkeypatch.setattr(target, name, _raise)
        with pytest.raises(Planted):
            observe(entry, "error", 1)
        monkeypatch.undo()
        assert full_state() == before


def test_guard_restores_cudnn_flags_env_and_cuda_related_state(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # put back after the test
    before = full_state()
    with pytest.raises(Planted):
        with preserved_global_state(rng=True):
            torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
            torch.backends.cudnn.deterministic = not torch.backends.cudnn.deterministic
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.utils.deterministic.fill_uninitialized_memory = not torch.utils.deterministic.fill_uninitialized_memory
            torch.manual_seed(1234)
            random.seed(1)
            np.random.seed(1)
            raise Planted()
    assert full_state() == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_use_deterministic_algorithms_leaks_inductor_setting_on_rejected_mode():
    # Recorded fact of torch 2.13.0: the rejected call has already set Inductor's flag.
    # Only a torch whose use_deterministic_algorithms sets that flag can leak it.
    require_inductor_deterministic()
    if not use_deterministic_algorithms_sets_inductor():
        pytest.skip(f"torch {torch.__version__} lacks {UDA_SETS_INDUCTOR}")
    results = observe(BY_ID["use_deterministic_algorithms[mode-not-bool]"], "off", 3)
    assert all(r.held is True for r in results)
    assert all("inductor-config-changed" in r.observed for r in results)


# ---------------------------------------------------------------------------
# The CUDA-only code paths, as far as a CPU can take them


def _one_draw(fn):
    """Call ``fn(draw)`` once under Hypothesis and return its result."""
    box = []

    @settings(max_examples=1, deadline=None, database=None, derandomize=True, phases=("generate",))
    @given(st.data())
    def run(data):
        box.append(fn(data.draw))

    run()
    return box[0]


def test_conv_runs_repeat_on_cpu():
    from detconf.conformance.checks.cuda_env import _conv_differences, _conv_runs

    with preserved_global_state():
        torch.use_deterministic_algorithms(True)
        runs, example = _one_draw(lambda draw: _conv_runs(draw, CPU))
    assert len(runs) == 3 and example["module"].startswith("Conv")
    assert _conv_differences(runs) == []


@pytest.mark.parametrize(
    ("config", "mode", "result", "held", "observed"),
    [
        ("unset", "error", {"error": "... CUBLAS_WORKSPACE_CONFIG=:4096:8 ...", "warnings": [], "fingerprints": []}, True, "raises"),
        ("unset", "error", {"error": None, "warnings": [], "fingerprints": ["a", "a", "a"]}, False, "repeats"),
        ("wrong", "warn_only", {"error": None, "warnings": [{"category": "UserWarning", "message": "set CUBLAS_WORKSPACE_CONFIG"}] * 3, "fingerprints": ["a", "a", "a"]}, True, "warns-repeats"),
        ("wrong", "warn_only", {"error": "CUBLAS_WORKSPACE_CONFIG", "warnings": [], "fingerprints": []}, False, "raises"),
        (":4096:8", "error", {"error": None, "warnings": [], "fingerprints": ["a", "a", "a"]}, True, "repeats"),
        (":16:8", "error", {"error": None, "warnings": [], "fingerprints": ["a", "b", "a"]}, False, "differs"),
        (":16:8", "warn_only", {"error": None, "warnings": [{"category": "UserWarning", "message": "CUBLAS_WORKSPACE_CONFIG"}], "fingerprints": ["a", "a", "a"]}, False, "warns-repeats"),
        ("unset", "off", {"error": None, "warnings": [], "fingerprints": ["a", "b", "a"]}, None, "differs"),
    ],
)
def test_cublas_verdicts(config, mode, result, held, observed):
    from detconf.conformance.checks.cuda_env import _cublas_verdict

    obs = _cublas_verdict(config, mode, ":4096:8" if config != "unset" else None, {"runs": 3}, result)
    assert obs.held is held and obs.observed == observed
    # A row's "fingerprints" is an object (example -> hash) to every reader: the child's per-run
    # list goes by another name (the H100 run's reports refused a list there).
    assert "fingerprints" not in obs.detail and obs.detail["run_fingerprints"] == result["fingerprints"]


def test_child_targets_of_the_checks_resolve():
    from detconf.child import resolve_target

    for target in ("detconf.conformance.children:default_fill", "detconf.conformance.children:seeded_ops",
                   "detconf.conformance.children:cublas_runs", "detconf.conformance.isolated:judge_payload"):
        assert callable(resolve_target(target))


def test_default_fill_child_reports_the_fresh_process_default():
    from detconf.child import run_in_child

    result = run_in_child("detconf.conformance.children:default_fill", {"numel": 8}, timeout=120)
    assert result == {"default": True, "empty_all_nan": True}


# ---------------------------------------------------------------------------
# Malformed catalogs


def _entry_json(**overrides) -> dict[str, Any]:
    record = ENTRIES["flag-api"][0].to_json()
    record.update(overrides)
    return record


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[{"entry_id": "x", ', "malformed JSON"),
        ('{"entry_id": "x"}', "expected a JSON list"),
        ("[1]", "expected an object"),
        (json.dumps([{k: v for k, v in _entry_json().items() if k != "entry_id"}]), "malformed catalog entry"),
        (json.dumps([_entry_json(colour="red")]), "colour"),
        (json.dumps([_entry_json(promise="maybe")]), "promise"),
        (json.dumps([_entry_json(source="repro-notes")]), "expected 'flag-api'"),
        (json.dumps([_entry_json(), _entry_json()]), "duplicate entry id"),
    ],
)
def test_malformed_catalog_raises_catalog_error(tmp_path, text, needle):
    path = tmp_path / "broken_catalog.json"
    path.write_text(text)
    with pytest.raises(CatalogError) as info:
        load_check_entries("flag-api", path=path)
    message = str(info.value)
    assert "broken_catalog.json" in message
    assert needle in message
    assert "\n" not in message


def test_unknown_source_is_rejected():
    with pytest.raises(ValueError, match="unknown check source"):
        load_check_entries("torch-docs")
