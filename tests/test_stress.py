"""The stress tier (profile ``stress``): examples built to make races visible, the same in every
mode, sized to the device's memory; a race that shows only under load is missed by the normal
tier and caught by the stress tier."""
import math

import pytest
import torch
from hypothesis import settings

from detconf.conformance import harness, profiles
from detconf.conformance.catalog import snapshot_entries
from detconf.conformance.plan import Case
from detconf.engine import strategies
from detconf.engine.devices import backends
from detconf.engine.strategies import STRESS_BYTES_PER_ELEMENT, STRESS_MIN_NUMEL, STRESS_NUMEL, stress_scale
from tests.emulated_gpu import emulated_cuda

DOCS = {e.id: e for e in snapshot_entries("2.11.0")}
CI = settings(**profiles.PROFILES["ci"])
STRESS = settings(**profiles.PROFILES["stress"])
#: A small device for the tests: 64 Ki elements at most (16 MiB at 256 bytes per element).
SMALL_DEVICE = STRESS_MIN_NUMEL * STRESS_BYTES_PER_ELEMENT


@pytest.fixture
def stress():
    """The stress tier for the body, the scale put back afterwards."""
    before = strategies.current_scale()
    strategies.set_scale("stress", stress_scale(SMALL_DEVICE))
    try:
        yield
    finally:
        strategies.SCALES["stress"] = stress_scale(None)
        strategies.set_scale(before)


@pytest.mark.parametrize("free, numel", [
    (None, STRESS_NUMEL),                                  # unknown memory: the ceiling
    (80 << 30, STRESS_NUMEL),                              # an H100: the ceiling
    (SMALL_DEVICE, STRESS_MIN_NUMEL),
    (1 << 20, STRESS_MIN_NUMEL),                           # too little memory: the floor
    (3 * SMALL_DEVICE, 2 * STRESS_MIN_NUMEL),              # rounded down to a power of two
])
def test_stress_sizes_follow_the_free_memory(free, numel):
    scale = stress_scale(free)
    assert scale.max_numel == scale.max_indices == numel
    assert scale.max_bins == 16
    if free is not None and numel > STRESS_MIN_NUMEL:
        assert numel * STRESS_BYTES_PER_ELEMENT <= free



def test_the_memory_a_worker_caches_without_using_counts_as_free(monkeypatch):
    """A caching allocator (CUDA's) keeps freed blocks, which the driver counts as used: the
    free memory the stress tier sizes its examples by must not shrink as one worker's cache grows.
    Planted (the driver's figure alone), this test fails."""
    from detconf.engine import devices

    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (10 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda index: 6 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda index: 2 * gib)
    assert devices._cuda_free(0) == 14 * gib
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda index: 6 * gib)  # all of it in use
    assert devices._cuda_free(0) == 10 * gib

def _programs(entry_id, mode, device="cpu"):
    case = Case(DOCS[entry_id], device, mode)
    return harness.drawn_programs(case, torch.device("cpu"), STRESS, STRESS.max_examples)


@pytest.mark.parametrize("entry_id, index", [
    ("index_add[cuda]", "index"), ("put_(accumulate=True)[cuda]", "index"), ("bincount[weights,cuda]", "input"),
    ("scatter_add_[cuda]", "index"), ("index_put(accumulate=True)[cpu]", "idx0"),
])
def test_stress_examples_write_thousands_of_times_per_destination(stress, entry_id, index):
    for prog in _programs(entry_id, "off"):
        idx = prog.inputs[index]
        writes_per_target = idx.numel() / max(1, int(torch.unique(idx).numel()))
        assert idx.numel() >= STRESS_MIN_NUMEL // 64, prog.describe
        assert writes_per_target >= 1000, (entry_id, prog.describe, writes_per_target)


@pytest.mark.parametrize("entry_id", ["cumsum[floating|complex,cuda]", "histc[cuda]", "NLLLoss[cuda]",
                                      "MaxPool3d.backward[cuda]", "AvgPool3d.backward[cuda]",
                                      "ReflectionPad1d.backward[cuda]", "interpolate(mode='linear'|'bilinear'|"
                                      "'bicubic'|'trilinear').backward[cuda]"])
def test_stress_examples_are_large_and_within_the_memory_budget(stress, entry_id):
    budget = strategies.scale_limits().max_numel
    for prog in _programs(entry_id, "off"):
        largest = max(t.numel() for t in prog.inputs.values())
        size = prog.meta["constants"].get("size")
        if size is not None:  # upsampling: the load is the output, whose gradient lands on a small input
            x = prog.inputs["x"]
            largest = max(largest, x.shape[0] * x.shape[1] * math.prod(size))
        assert largest >= budget // 64, (prog.describe, largest)
        assert sum(t.numel() for t in prog.inputs.values()) <= 64 * budget, prog.describe


def test_stress_pooling_windows_overlap(stress):
    for prog in _programs("MaxPool3d.backward[cuda]", "off"):
        kernel, stride = prog.meta["constants"].get("kernel_size"), prog.meta["constants"].get("stride")
        if kernel is not None and stride is not None:
            assert stride == 1 and kernel > 1 or kernel == 1, prog.describe


def test_stress_examples_are_the_same_in_every_mode(stress):
    inputs = {mode: [{k: v.clone() for k, v in p.inputs.items()} for p in _programs("index_add[cuda]", mode)]
              for mode in ("error", "warn_only", "off")}
    for mode in ("warn_only", "off"):
        assert len(inputs[mode]) == len(inputs["error"])
        for a, b in zip(inputs["error"], inputs[mode]):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_normal_tier_draws_per_mode():
    programs = {mode: harness.drawn_programs(Case(DOCS["index_add[cuda]"], "cpu", mode), torch.device("cpu"), CI, 2)
                for mode in ("error", "off")}
    assert any(not torch.equal(a.inputs["index"], b.inputs["index"]) if a.inputs["index"].shape == b.inputs["index"].shape
               else True for a, b in zip(programs["error"], programs["off"]))


def test_a_race_under_load_is_missed_by_the_normal_tier_and_caught_by_the_stress_tier():
    """An emulated kernel that races only above 1,000 writes: the normal tier's examples stay
    below (conforms); the stress tier's are far above (nondeterministic), and the positive
    control sees it there too, on the same examples."""
    gpu = emulated_cuda(race_above=1000, shuffle=False, free_bytes=SMALL_DEVICE)
    entry = DOCS["index_add[cuda]"]
    normal = harness.judge(Case(entry, "cuda", "error"), gpu, hypothesis_settings=CI)
    assert normal["verdict"] == "conforms", normal["detail"]
    assert normal["detail"]["max_numel"] < 1000
    before = strategies.current_scale()
    strategies.set_scale("stress")
    try:
        rows = {mode: harness.judge(Case(entry, "cuda", mode), gpu, hypothesis_settings=STRESS)
                for mode in ("error", "off")}
    finally:
        strategies.SCALES["stress"] = stress_scale(None)
        strategies.set_scale(before)
    assert rows["error"]["verdict"] == "nondeterministic", rows["error"]["detail"]
    assert rows["off"]["verdict"] == "nondeterminism-seen"
    for row in rows.values():
        assert row["runs"] >= harness.STRESS_RUNS and row["detail"]["tier"] == "stress"
        assert row["detail"]["max_numel"] >= STRESS_MIN_NUMEL // 64


def test_stress_rows_reproduce_from_their_repro(stress):
    """A stress example's reproducer rebuilds the same inputs (seeded builders, explicit sizes)."""
    prog = _programs("index_add[cuda]", "error")[0]
    namespace: dict = {}
    lines = [line for line in prog.repro.splitlines() if not line.startswith("out = ")
             and not line.endswith(".requires_grad_()") and not line.startswith("#")]
    exec("\n".join(lines), namespace)
    for name, tensor in prog.inputs.items():
        assert torch.equal(namespace[name], tensor), name
    assert math.prod(prog.inputs["index"].shape) >= 1000


@pytest.mark.parametrize("renamed", ["stress-with-verbose-verbosity", "stress-with-quiet-verbosity-with-explain-phase"])
def test_a_verbosity_flag_keeps_the_stress_tier(renamed):
    """S08: Hypothesis's plugin re-registers the chosen profile under a new name for
    --hypothesis-verbosity / --hypothesis-explain; the stress scale stays on (it fell back to
    'small'), and an isolated child, where the new name is not registered, loads 'stress'."""
    before = settings._current_profile
    try:
        settings.register_profile(renamed, parent=settings.get_profile("stress"), verbosity=settings().verbosity)
        profiles.load(renamed)
        assert strategies.current_scale() == "stress" and settings().max_examples == 2
        del settings._profiles[renamed]
        profiles.load(renamed)  # as in a child process
        assert settings._current_profile == "stress" and strategies.current_scale() == "stress"
    finally:
        settings._profiles.pop(renamed, None)
        profiles.load(before)


def _bins(x: torch.Tensor, reverse: bool) -> torch.Tensor:
    """16 bins of 262,144 float32 terms each, each summed one term after another in float32 (a
    long accumulation, as put_(accumulate=True) does), front to back or back to front."""
    import numpy as np

    rows = x.view(-1, 16).numpy()
    rows = rows[::-1] if reverse else rows
    return torch.from_numpy(np.cumsum(rows, axis=0, dtype=rows.dtype)[-1].copy())


def test_a_long_float32_reduction_in_another_order_is_no_wrong_result_and_a_real_error_is():
    """S04: the stress tier's 262,144-term float32 bins (with cancellation: half the terms near +3,
    half near -3), summed in two orders, differ by 0.66 where float32's rtol allows 0.013; the
    second look against float64 (the float32 noise of neighbouring inputs' own runs) passes
    them, and still catches a bin that is 50 too large (about 10x that noise)."""
    from detconf.engine import comparison

    rows = torch.randn(262_144, 16, generator=torch.Generator().manual_seed(3))
    rows[: 131_072] += 3.0
    rows[131_072:] -= 3.0
    x = rows.reshape(-1)
    actual, reference = [("out", _bins(x, False))], [("out", _bins(x, True))]
    wide = [("out", _bins(x.double(), True))]
    assert comparison.compare(actual, reference) is not None  # the fixed tolerance alone: a false alarm
    neighbours = [[("out", _bins(torch.nextafter(x, torch.full_like(x, s * math.inf)), True))] for s in (1, -1)]
    assert comparison.adjudicate(actual, reference, wide, neighbours=neighbours, reference_noise=False) is None
    wrong = [("out", actual[0][1] + torch.tensor([0.0] * 15 + [50.0]))]
    assert comparison.adjudicate(wrong, reference, wide, neighbours=neighbours, reference_noise=False) is not None
