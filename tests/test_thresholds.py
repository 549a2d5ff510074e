"""Inputs at kernels' thresholds: in the stress and perturbation tiers a recipe whose kernel
switches algorithm by a count (``THRESHOLDS``) draws examples just below and just above each
switch that applies to the case; the normal tier draws as before."""
import pytest
import torch
from hypothesis import settings

from detconf.conformance import harness, kit, profiles
from detconf.conformance.catalog import snapshot_entries
from detconf.conformance.plan import Case
from detconf.conformance.recipes import _GRID_ROUTES, THRESHOLDS
from detconf.engine import strategies
from detconf.engine.strategies import PERTURB_THRESHOLD_NUMEL, stress_scale, threshold_sides

DOCS = {e.id: e for e in snapshot_entries("2.13.0")}
CUMSUM = "cumsum[floating|complex,cuda]"
CI = settings(**profiles.PROFILES["ci"])
STRESS = settings(**profiles.PROFILES["stress"])
GRAIN = next(sw["at"] for sw in THRESHOLDS["torch.cumsum"] if sw["device"] == "cpu")


@pytest.fixture
def stress():
    before = strategies.current_scale()
    strategies.set_scale("stress", stress_scale(None))
    try:
        yield
    finally:
        strategies.set_scale(before)


@pytest.fixture
def perturb_tier():
    strategies.set_threshold_limit(PERTURB_THRESHOLD_NUMEL)
    try:
        yield
    finally:
        strategies.set_threshold_limit(None)


def sizes_by_form(entry_id: str, prof: settings, examples: int, *, compiled: bool = False) -> dict[str, list[int]]:
    """The number of elements of input ``x`` per example, per call form, as a case draws them."""
    case = Case(DOCS[entry_id], "cpu", "error")
    with kit.stable_draws(1 if compiled else None):
        programs = harness.drawn_programs(case, torch.device("cpu"), prof, examples)
    out: dict[str, list[int]] = {}
    for prog in programs:
        out.setdefault(prog.meta["op_function"], []).append(prog.inputs["x"].numel())
    return out


class FirstChoice:
    """A draw function that takes the first option of every choice."""

    def __call__(self, strategy, label=None):
        raise AssertionError("only integer choices are expected here")

    def draw_integer(self, min_value, max_value, **_):
        return min_value


def test_sides_straddle_each_way_a_kernel_may_compare():
    below, above = threshold_sides(GRAIN)
    for switched in (lambda n: n > GRAIN, lambda n: n >= GRAIN, lambda n: not n <= GRAIN - 1):
        assert not switched(below) and switched(above)
    with pytest.raises(Exception, match="at"):
        threshold_sides(1)


def test_cumsum_stress_examples_straddle_the_cpu_grain_size(stress):
    got = sizes_by_form(CUMSUM, STRESS, STRESS.max_examples)
    assert len(got) == 3  # torch.cumsum, Tensor.cumsum, Tensor.cumsum_
    for form, sizes in got.items():
        assert sorted(sizes) == [GRAIN - 1, GRAIN + 1], (form, sizes)


def test_the_perturbation_tier_also_straddles_it_and_keeps_drawing_afterwards(perturb_tier):
    got = sizes_by_form(CUMSUM, CI, CI.max_examples)
    for form, sizes in got.items():
        assert sizes[:2] == [GRAIN - 1, GRAIN + 1], (form, sizes)
        assert len(sizes) == CI.max_examples and set(sizes) <= {GRAIN - 1, GRAIN + 1}


def test_the_normal_tier_draws_no_threshold_example():
    assert strategies.threshold_limit() is None
    got = sizes_by_form(CUMSUM, CI, CI.max_examples)
    assert all(n <= strategies.scale_limits("small").max_numel for sizes in got.values() for n in sizes), got


def test_a_switch_applies_only_to_its_device_and_compile_setting(perturb_tier):
    # On the CPU the CUDA-only switches (compiled cumsum at 1,000,003; embedding backward) do not
    # apply, and the eager CPU switch does not apply to a compiled case.
    got = sizes_by_form(CUMSUM, CI, 2, compiled=True)
    assert all(n < GRAIN - 1 for sizes in got.values() for n in sizes), got


def test_a_switch_past_the_limit_is_left_out(stress):
    strategies.set_scale("stress", stress_scale(0))  # the floor: 64 Ki elements
    limit = strategies.threshold_limit()
    assert limit == strategies.STRESS_MIN_NUMEL
    big = [sw for sws in THRESHOLDS.values() for sw in sws if sw["at"] + 1 > limit]
    assert big, "a recorded switch beyond 64 Ki elements (compiled cumsum) is what this test is about"
    ex = kit.Example(FirstChoice(), DOCS[CUMSUM], {}, torch.device("cpu"))
    ex.device = torch.device("cuda")  # the side is chosen from the data only; nothing is built on it
    assert ex.threshold_side("elements", [dict(sw, compile="eager") for sw in big]) is None
    assert ex.threshold_side("elements", [dict(sw, compile="eager", at=GRAIN) for sw in big]) in threshold_sides(GRAIN)


def test_every_recorded_switch_says_where_and_fits_two_stress_examples():
    per_place: dict[tuple, int] = {}
    for op, switches in THRESHOLDS.items():
        for sw in switches:
            assert sw["source"] and sw["switch"] and sw["quantity"] in ("elements", "indices", "channels"), (op, sw)
            key = (op, sw["quantity"], sw["device"], sw["compile"] != "eager")
            per_place[key] = per_place.get(key, 0) + 1
    # The stress profile draws 2 examples: one switch (two sides) per op, quantity, device and
    # compile setting is what it covers whole.
    assert STRESS.max_examples >= 2 and max(per_place.values()) == 1, per_place


SCATTER_ADD = "scatter_add_[cuda]"
COLUMNS = next(sw["at"] for sw in THRESHOLDS["torch.Tensor.scatter_add_"] if sw["device"] == "cpu")


def _scatter_add_calls(prog) -> list[tuple]:
    """(index shape, index strides, columns the kernel counts) of each aten.scatter_add call the
    program makes: what can_use_expanded_index_path reads."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Calls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.scatter_add, torch.ops.aten.scatter_add_):
                index = args[2]
                seen.append((tuple(index.shape), index.stride(), index.numel() // index.size(0), args[1]))
            return func(*args, **(kwargs or {}))

    with Calls():
        prog.fn(**{k: v.clone() for k, v in prog.inputs.items()})
    return seen


def test_scatter_add_stress_examples_straddle_the_cpu_sorting_switch(stress):
    """Every call form gets one example below and one above 16 columns, each an index expanded
    along dim 0 (strides (1, 0)) over contiguous tensors: the kernel's choice differs between
    the two and nothing else does; the result is scatter_add's on the same values."""
    case = Case(DOCS[SCATTER_ADD], "cpu", "error")
    with kit.stable_draws(None):
        programs = harness.drawn_programs(case, torch.device("cpu"), STRESS, STRESS.max_examples)
    by_form: dict[str, list[int]] = {}
    for prog in programs:
        x, index, src = prog.inputs["x"], prog.inputs["index"], prog.inputs["src"]
        assert x.is_contiguous() and src.is_contiguous() and index.dim() == 1 and x.dtype != torch.float16
        [(shape, strides, columns, dim)] = _scatter_add_calls(prog)
        assert dim == 0 and strides == (1, 0) and shape == (index.numel(), x.shape[1]) == tuple(src.shape)
        by_form.setdefault(prog.meta["constants"]["form"], []).append(columns)
        expected = x.clone().scatter_add_(0, index.unsqueeze(1).repeat(1, x.shape[1]), src)  # a contiguous index
        assert torch.equal(prog.fn(**{k: v.clone() for k, v in prog.inputs.items()}), expected)
    assert sorted(by_form) == ["Tensor.scatter_add", "Tensor.scatter_add_", "torch.scatter_add"]
    assert all(sorted(cols) == [COLUMNS - 1, COLUMNS + 1] for cols in by_form.values()), by_form


def test_scatter_adds_normal_tier_and_compiled_cases_draw_as_before():
    """No switch applies outside the stress and perturbation tiers, nor to a compiled case: the
    examples are the general ones (any dim, an index as drawn)."""
    case = Case(DOCS[SCATTER_ADD], "cpu", "error")
    with kit.stable_draws(None):
        programs = harness.drawn_programs(case, torch.device("cpu"), CI, CI.max_examples)
    assert programs and not any(p.meta["op_function"] == "scatter_add_expanded_op" for p in programs)
    strategies.set_threshold_limit(PERTURB_THRESHOLD_NUMEL)
    try:
        with kit.stable_draws(1):
            compiled = harness.drawn_programs(case, torch.device("cpu"), CI, 2)
    finally:
        strategies.set_threshold_limit(None)
    assert compiled and not any(p.meta["op_function"] == "scatter_add_expanded_op" for p in compiled)


GRID = "grid_sample.backward[cuda]"


def test_grid_samples_cudnn_route_straddles_cudnns_channel_limit_where_it_applies(stress, monkeypatch):
    """The switch is CUDA's (no CUDA here): moved to the CPU, the stress tier's cuDNN-route
    examples take 1,023 and 1,025 channels, the native routes keep their drawn channels; on the
    CPU as recorded (CUDA) nothing changes."""
    [switch] = THRESHOLDS["torch.nn.functional.grid_sample"]
    assert switch["device"] == "cuda" and switch["at"] == 1024

    def channels(routes_seen: dict) -> dict[str, list[int]]:
        case = Case(DOCS[GRID], "cpu", "error")
        with kit.stable_draws(None):
            programs = harness.drawn_programs(case, torch.device("cpu"), STRESS, STRESS.max_examples)
        assert len(programs) == len(_GRID_ROUTES) * STRESS.max_examples  # each example runs every route, in order
        for k, prog in enumerate(programs):
            routes_seen.setdefault(_GRID_ROUTES[k % len(_GRID_ROUTES)], []).append(prog.inputs["x"].shape[1])
        return routes_seen

    as_recorded = channels({})
    assert all(c <= 8 for cs in as_recorded.values() for c in cs), as_recorded
    monkeypatch.setitem(THRESHOLDS, "torch.nn.functional.grid_sample", (dict(switch, device="cpu"),))
    moved = channels({})
    assert sorted(moved["cuDNN"]) == [1023, 1025], moved
    assert all(c <= 8 for route, cs in moved.items() if route != "cuDNN" for c in cs), moved
