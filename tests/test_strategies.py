"""Tests for engine.strategies: argument validation, bounds, duplicates, layouts, seeding, shrinking."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from detconf.engine import strategies as S

FAST = settings(max_examples=25, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _restore_scale():
    before = S.current_scale()
    yield
    S.set_scale(before)


# -- validation names the argument -------------------------------------------


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: S.tensors(shape="3x4"), "shape"),
        (lambda: S.tensors(shape=(2, -1)), "shape"),
        (lambda: S.tensors(shape=(2,), dtype="float32"), "dtype"),
        (lambda: S.tensors(shape=(2,), dtype=torch.quint8), "dtype"),
        (lambda: S.tensors(shape=(2,), low="a"), "low"),
        (lambda: S.tensors(shape=(2,), low=float("nan")), "low"),
        (lambda: S.tensors(shape=(2,), low=3, high=1), "high"),
        (lambda: S.tensors(shape=(2,), contiguous=1), "contiguous"),
        (lambda: S.tensors(shape=(2,), device="nowhere"), "device"),
        (lambda: S.shapes(min_dims=3, max_dims=2), "max_dims"),
        (lambda: S.shapes(min_dims=-1), "min_dims"),
        (lambda: S.shapes(min_side=4, max_side=2), "max_side"),
        (lambda: S.shapes(max_side=2.5), "max_side"),
        (lambda: S.shapes(min_dims=2, min_side=4, max_numel=10), "max_numel"),
        (lambda: S.index_tensors(size=0, num_indices=3), "size"),
        (lambda: S.index_tensors(size=4, num_indices=-1), "num_indices"),
        (lambda: S.index_tensors(size=4, num_indices=3, duplicates=1.5), "duplicates"),
        (lambda: S.index_tensors(size=4, num_indices=3, duplicates=True), "duplicates"),
        (lambda: S.index_tensors(size=4, num_indices=5, unique=True), "unique"),
        (lambda: S.index_tensors(size=4, shape=(2, 3), unique=True), "unique"),
        (lambda: S.index_tensors(size=4, num_indices=3, unique=True, duplicates=0.5), "duplicates"),
        (lambda: S.index_tensors(size=4, num_indices=3, shape=(3,)), "num_indices"),
        (lambda: S.index_tensors(size=4, num_indices=3, dtype=torch.float32), "dtype"),
        (lambda: S.float_dtypes(("floaty",)), "classes"),
        (lambda: S.float_dtypes(42), "classes"),
        (lambda: S.float_dtypes(exclude=("float32",)), "exclude"),
        (lambda: S.set_scale("huge"), "name"),
        (lambda: S.scale_limits("huge"), "name"),
    ],
)
def test_invalid_arguments_are_rejected_eagerly_naming_the_argument(make, argument):
    with pytest.raises(InvalidArgument, match=argument):
        make()


def test_drawn_invalid_values_are_rejected_naming_the_argument():
    strategy = S.index_tensors(size=st.just(2), num_indices=st.just(5), unique=True)
    with pytest.raises(InvalidArgument, match="unique"):
        find(strategy, lambda t: True)
    with pytest.raises(InvalidArgument, match="high"):
        find(S.tensors(shape=(2,), low=st.just(5), high=st.just(1)), lambda t: True)


# -- shapes --------------------------------------------------------------------


@FAST
@given(S.shapes(min_dims=1, max_dims=3, min_side=2, max_side=5))
def test_shapes_stay_within_bounds(shape):
    assert 1 <= len(shape) <= 3
    assert all(2 <= side <= 5 for side in shape)


@FAST
@given(S.shapes(min_dims=2, max_dims=4, max_numel=40))
def test_shapes_respect_max_numel(shape):
    n = 1
    for side in shape:
        n *= side
    assert n <= 40


@FAST
@given(S.shapes())
def test_default_shapes_follow_the_small_scale(shape):
    assert all(side <= S.scale_limits("small").max_side for side in shape)


def test_shapes_shrink_to_the_smallest_shape():
    assert find(S.shapes(min_dims=2, max_dims=4, min_side=1), lambda s: True) == (1, 1)


def test_large_scale_allows_larger_shapes():
    S.set_scale("large")
    assert S.current_scale() == "large"
    big = find(S.shapes(min_dims=1, max_dims=1), lambda s: s[0] > S.scale_limits("small").max_side)
    assert big[0] <= S.scale_limits("large").max_side


# -- dtypes --------------------------------------------------------------------


def test_float32_comes_first_so_shrinking_lands_on_it():
    assert find(S.float_dtypes(), lambda d: True) == torch.float32
    assert find(S.float_dtypes(("complex", "floating")), lambda d: True) == torch.complex64


@pytest.mark.parametrize(
    "classes, check",
    [
        (("floating",), lambda d: d.is_floating_point),
        (("complex",), lambda d: d.is_complex),
        (("integer",), lambda d: not d.is_floating_point and not d.is_complex and d != torch.bool),
        (("bool",), lambda d: d == torch.bool),
    ],
)
def test_float_dtypes_draw_only_the_requested_classes(classes, check):
    @FAST
    @given(S.float_dtypes(classes))
    def inner(dtype):
        assert check(dtype)

    inner()


def test_float_dtypes_cover_reduced_precision_and_honour_exclude():
    seen = set()

    @FAST
    @given(S.float_dtypes(exclude=(torch.float64,)))
    def inner(dtype):
        seen.add(dtype)

    inner()
    assert torch.float64 not in seen
    assert {torch.float16, torch.bfloat16} & seen


# -- tensors ------------------------------------------------------------------


@FAST
@given(S.tensors(shape=S.shapes(), dtype=S.float_dtypes(("floating", "complex", "integer", "bool")),
                 low=-3, high=3, contiguous=st.sampled_from([True, False])))
def test_tensors_respect_dtype_and_range(t):
    assert t.device.type == "cpu"
    if t.dtype == torch.bool:
        return
    if t.is_complex():
        assert t.real.abs().max() <= 3 and t.imag.abs().max() <= 3
    else:
        assert t.to(torch.float64).abs().max() <= 3


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_non_contiguous_tensors_are_strided_views(shape):
    t = find(S.tensors(shape=shape, contiguous=False), lambda t: True)
    assert tuple(t.shape) == shape
    assert not t.is_contiguous()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.complex128])
def test_every_dtype_builds(dtype):
    t = S.build_tensor((4, 3), dtype, 7, low=-5, high=5)
    assert t.dtype == dtype and tuple(t.shape) == (4, 3)


def test_build_tensor_is_reproducible_from_its_seed():
    a = S.build_tensor((6, 5), torch.float32, 123, contiguous=False)
    b = S.build_tensor((6, 5), torch.float32, 123, contiguous=False)
    c = S.build_tensor((6, 5), torch.float32, 124, contiguous=False)
    assert torch.equal(a, b) and a.stride() == b.stride()
    assert not torch.equal(a, c)


def test_tensors_shrink_to_float32_seed_zero_and_match_build_tensor():
    t = find(S.tensors(shape=S.shapes(), dtype=S.float_dtypes()), lambda t: t.numel() >= 1)
    assert t.dtype == torch.float32 and tuple(t.shape) == (1,)
    assert torch.equal(t, S.build_tensor((1,), torch.float32, 0))


def test_same_drawn_parameters_give_the_same_tensor():
    strategy = S.tensors(shape=(4, 4), dtype=torch.float64)
    first = find(strategy, lambda t: True)
    second = find(strategy, lambda t: True)
    assert torch.equal(first, second)


# -- index tensors -------------------------------------------------------------


@FAST
@given(S.index_tensors(size=st.integers(1, 10), num_indices=st.integers(0, 30)))
def test_indices_lie_in_range(idx):
    assert idx.dtype == torch.int64 and idx.dim() == 1
    if idx.numel():
        assert idx.min() >= 0 and idx.max() < 10


@FAST
@given(S.index_tensors(size=50, num_indices=40, duplicates=0.9))
def test_duplicates_knob_produces_duplicates(idx):
    distinct = idx.unique().numel()
    assert distinct == round(40 * 0.1)


@FAST
@given(S.index_tensors(size=50, num_indices=40, duplicates=1.0))
def test_full_duplication_sends_everything_to_one_target(idx):
    assert idx.unique().numel() == 1


@FAST
@given(S.index_tensors(size=50, num_indices=40, duplicates=0.0))
def test_no_duplication_gives_distinct_targets_when_they_fit(idx):
    assert idx.unique().numel() == 40


@FAST
@given(S.index_tensors(size=st.integers(1, 30), unique=True))
def test_unique_indices_have_no_duplicates(idx):
    assert idx.unique().numel() == idx.numel()


@FAST
@given(S.index_tensors(size=6, shape=(3, 4), dtype=torch.int32))
def test_index_tensors_take_a_shape_and_dtype(idx):
    assert tuple(idx.shape) == (3, 4) and idx.dtype == torch.int32
    assert idx.min() >= 0 and idx.max() < 6


def test_build_indices_is_reproducible_from_its_seed():
    a = S.build_indices((20,), 7, 5, duplicates=0.5)
    b = S.build_indices((20,), 7, 5, duplicates=0.5)
    assert torch.equal(a, b)


def test_index_tensors_shrink_to_no_indices():
    assert find(S.index_tensors(size=5), lambda t: True).numel() == 0


# -- the examples depend on the seed, not on the modules a process has loaded --------------------

PLANTED_CONSTANTS = "".join(f"C{i} = {1000 + 7 * i}\n" for i in range(300))


def _derandomized_draws() -> list[int]:
    seen: list[int] = []

    @settings(derandomize=True, max_examples=300, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 10_000))
    def probe(x):
        seen.append(x)

    probe()
    return seen


def test_a_derandomized_draw_is_the_same_whatever_local_modules_are_loaded(tmp_path, monkeypatch):
    """The suite's profiles turn off Hypothesis's local constants (``conformance.profiles``): a
    module of the user's, a vendor's or a checkout's own, loaded or not, changes no example. The
    same draw with Hypothesis's own behaviour put back takes the planted module's numbers: what
    this test would see if the suite let it."""
    import importlib

    from hypothesis.internal.conjecture import providers

    from detconf.conformance import profiles

    hypothesis_own = profiles._local_constants_of_hypothesis or getattr(providers, "_get_local_constants", None)
    if hypothesis_own is None:
        pytest.skip("this Hypothesis mixes no local constants into its draws")
    (tmp_path / "planted_constants_module.py").write_text(PLANTED_CONSTANTS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # where Hypothesis keeps what it read (.hypothesis/constants)
    before = _derandomized_draws()
    planted = importlib.import_module("planted_constants_module")
    try:
        assert _derandomized_draws() == before
        monkeypatch.setattr(providers, "_get_local_constants", hypothesis_own)
        mixed = _derandomized_draws()
        numbers = {v for k, v in vars(planted).items() if k.startswith("C")}
        assert mixed != before and numbers & set(mixed), "Hypothesis's own draw did not take the planted numbers"
    finally:
        monkeypatch.undo()  # the suite's replacement back, then what Hypothesis worked out forgotten
        profiles.without_local_constants()
        sys.modules.pop("planted_constants_module", None)
    assert _derandomized_draws() == before


def test_a_suite_run_writes_nothing_of_hypothesis_into_the_folder_it_runs_from(tmp_path):
    """With the ``ci`` profile (no example database) a run from another folder leaves no
    ``.hypothesis`` there: Hypothesis kept the constants it read from local modules under
    ``.hypothesis/constants/`` in the working folder."""
    from tests import warm

    root = Path(__file__).resolve().parents[1]
    out = warm.run([sys.executable, "-m", "pytest", str(root / "conformance"), "--rootdir", str(root), "-q",
                    "-p", "no:cacheprovider", "--source", "torch-docs", "--device", "cpu", "--mode", "error",
                    "-n", "0", "--hypothesis-profile", "ci", "-k", "index_add", "--no-report-build",
                    "--results", str(tmp_path / "out" / "r.jsonl")],
                   cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "passed" in out.stdout
    assert not (tmp_path / ".hypothesis").exists(), sorted(p.name for p in (tmp_path / ".hypothesis").rglob("*"))[:5]


def test_a_process_that_imports_the_harness_alone_draws_without_local_constants():
    """Whoever judges a case (the plugin, an isolated or perturbed child, a vendor's script calling
    ``conformance.harness``) draws as the profiles do, whether or not it loaded them itself."""
    from hypothesis.internal.conjecture import providers

    from tests import warm

    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis mixes no local constants into its draws")
    code = ("import json\n"
            "from hypothesis.internal.conjecture import providers\n"
            "own = providers._get_local_constants\n"
            "import detconf.conformance.harness\n"
            "print(json.dumps([providers._get_local_constants is not own, len(providers._get_local_constants())]))\n")
    out = warm.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                   text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "[true, 0]", out.stdout
