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
