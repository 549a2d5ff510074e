"""Tests for conformance/recipes.py.

Every documented op has a recipe; every recipe, given a representative entry,
builds examples whose ``fn`` is a pure function of its inputs on the CPU
(two runs give bitwise-identical outputs and gradients) and whose ``repro``
rebuilds the same example.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from detconf.engine.entry import Entry
from detconf.engine.program import Program, has_recipe, recipe_for
import detconf.conformance.registry  # noqa: F401  (registers the recipes)
from detconf.conformance.catalog import TORCH_DOCS as SNAPSHOT_DIR
from detconf.engine.runner import observe
from detconf.engine.strategies import current_scale, set_scale
from tests.capabilities import kernel_missing_for

DOCS = SNAPSHOT_DIR  # the project's copy of every release's docstring

# torch's own notice, not a finding.
pytestmark = pytest.mark.filterwarnings(r"ignore:index_reduce\(\) is in beta:UserWarning")

# Every op any release from 1.8.0 to 2.15.0 names, spelled as the docs spell it.
DOCUMENTED_OPS = (
    "torch.Tensor.__getitem__", "torch.__getitem__",
    "torch.Tensor.index_copy", "torch.index_copy",
    "torch.Tensor.index_put", "torch.index_put",
    "torch.Tensor.index_reduce", "torch.Tensor.put_", "torch.Tensor.resize_",
    "torch.Tensor.scatter", "torch.Tensor.scatter_add_", "torch.scatter_add_",
    "torch.Tensor.scatter_reduce",
    "torch.bincount", "torch.bmm", "torch.cumsum", "torch.empty", "torch.gather", "torch.histc",
    "torch.index_add", "torch.index_add_", "torch.index_select", "torch.kthvalue", "torch.median",
    "torch.mm", "torch.mv", "torch.repeat_interleave",
    "torch.nn.AdaptiveAvgPool2d", "torch.nn.AdaptiveAvgPool3d", "torch.nn.AdaptiveMaxPool2d",
    "torch.nn.AvgPool3d", "torch.nn.CTCLoss", "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d",
    "torch.nn.ConvTranspose1d", "torch.nn.ConvTranspose2d", "torch.nn.ConvTranspose3d",
    "torch.nn.Embedding", "torch.nn.EmbeddingBag", "torch.nn.FractionalMaxPool2d",
    "torch.nn.FractionalMaxPool3d", "torch.nn.MaxPool2d", "torch.nn.MaxPool3d",
    "torch.nn.MaxUnpool1d", "torch.nn.MaxUnpool2d", "torch.nn.MaxUnpool3d", "torch.nn.NLLLoss",
    "torch.nn.ReflectionPad1d", "torch.nn.ReflectionPad2d", "torch.nn.ReflectionPad3d",
    "torch.nn.ReplicationPad1d", "torch.nn.ReplicationPad2d", "torch.nn.ReplicationPad3d",
    "torch.nn.functional.grid_sample", "torch.nn.functional.interpolate",
)

# Named in the fill_uninitialized_memory note of some releases (2.1.0).
FILL_OPS = ("torch.empty_like", "torch.empty_strided", "torch.empty_permuted")


def _entry(op: str, *, cases=((),), **flags) -> Entry:
    return Entry(id=f"{op}:{sorted(flags.items())}:{cases}", op=op, sentence="s", promise="deterministic",
                 cases=cases, **flags)


def _cases(name: str, *values) -> tuple:
    return tuple(((name, v),) for v in values)


# Entries that exercise each recipe's condition fields; any op not listed
# here gets a forward entry and a backward entry.
SPECIAL_ENTRIES = [
    _entry("torch.Tensor.__getitem__", backward=True, qualifiers=("tensor-list-index",)),
    _entry("torch.Tensor.index_put", cases=_cases("accumulate", False, True)),
    _entry("torch.Tensor.index_put", cases=_cases("accumulate", True), dtypes=("floating", "complex")),
    _entry("torch.Tensor.index_reduce", cases=_cases("reduce", "prod", "mean"), dtypes=("floating",)),
    _entry("torch.Tensor.put_", cases=_cases("accumulate", False, True)),
    _entry("torch.Tensor.put_", cases=_cases("accumulate", True), backward=True),
    _entry("torch.Tensor.resize_", quantized=True),
    _entry("torch.Tensor.resize_"),
    _entry("torch.Tensor.scatter", qualifiers=("src-tensor",)),
    _entry("torch.Tensor.scatter_add_", qualifiers=("1d-input",)),
    _entry("torch.Tensor.scatter_reduce", cases=_cases("reduce", "sum", "mean", "prod", "amax")),
    _entry("torch.Tensor.scatter_reduce", cases=_cases("reduce", "prod"), backward=True),
    _entry("torch.bincount"),
    _entry("torch.bincount", weights_given=True),
    _entry("torch.bmm"),
    _entry("torch.bmm", sparse_dense=True),
    _entry("torch.cumsum", dtypes=("floating", "complex")),
    _entry("torch.cumsum", dtypes=("integer",)),
    _entry("torch.empty"),
    _entry("torch.gather", backward=True),
    _entry("torch.gather", backward=True, qualifiers=("1d-input",)),
    _entry("torch.median", indices_output=True),
    _entry("torch.median"),
    _entry("torch.nn.EmbeddingBag", backward=True, cases=_cases("mode", "max")),
    _entry("torch.nn.EmbeddingBag", backward=True, cases=_cases("mode", "sum", "mean")),
    _entry("torch.nn.functional.interpolate", backward=True,
           cases=_cases("mode", "linear", "bilinear", "bicubic", "trilinear")),
    _entry("torch.nn.functional.interpolate", cases=_cases("mode", "nearest", "area")),
]


# Ops without a derivative: no backward entry.
NOT_DIFFERENTIABLE = {"torch.histc", "torch.bincount", "torch.empty", "torch.Tensor.resize_", *FILL_OPS}


def _entries() -> list[Entry]:
    entries = list(SPECIAL_ENTRIES)
    special = {e.op for e in SPECIAL_ENTRIES}
    for op in DOCUMENTED_OPS + FILL_OPS:
        if op not in special:
            entries.append(_entry(op))
            if op not in NOT_DIFFERENTIABLE:
                entries.append(_entry(op, backward=True))
    return entries


ENTRIES = _entries()


def _entry_id(entry: Entry) -> str:
    tags = [name for name in ("backward", "indices_output", "weights_given", "quantized", "sparse_dense")
            if getattr(entry, name)]
    tags += list(entry.dtypes) + list(entry.qualifiers)
    cases = "|".join(",".join(f"{k}={v!r}" for k, v in case) for case in entry.cases if case)
    return entry.op + (f"({cases})" if cases else "") + (f"[{','.join(tags)}]" if tags else "")


@pytest.fixture(autouse=True)
def _restore_global_state():
    """Deterministic mode, warn_only, fill_uninitialized_memory, threads and scale come back as they were."""
    mode = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    threads = torch.get_num_threads()
    scale = current_scale()
    set_scale("small")
    # Tiny examples: a single thread avoids thread-pool overhead on busy machines.
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.set_num_threads(threads)
        set_scale(scale)


# -- coverage ----------------------------------------------------------------


@pytest.mark.parametrize("op", DOCUMENTED_OPS + FILL_OPS)
def test_every_documented_op_has_a_recipe(op):
    assert has_recipe(op), f"no recipe for {op}"


def _ops_named_in_docs() -> set[str]:
    names = set()
    for path in DOCS.glob("*/use_deterministic_algorithms.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("* "):
                names.update(re.findall(r":(?:class|func|meth):`~?([\w.]+)`", line))
    return names


def test_every_op_named_in_the_local_doc_snapshots_has_a_recipe():
    named = _ops_named_in_docs()
    assert named, "no ops found in the doc snapshots"
    assert sorted(op for op in named if not has_recipe(op)) == []
    assert named <= set(DOCUMENTED_OPS) | set(FILL_OPS)



def test_histc_never_asks_uint8_data_for_its_own_range():
    """``min == max == 0`` takes the data's range and widens an all-equal one by one on each side,
    which uint8 zeros cannot hold: torch refuses the input (a harness-error that a random profile
    drew once). Planted (the data's range offered to uint8 again), some draw asks for it."""
    from detconf.conformance import harness
    from detconf.conformance.findings import fact_entries
    from detconf.conformance.plan import Case

    entry = {e.id: e for e in fact_entries("2.13.0", torch_version="2.13.0+cu130")}["histc[integer,cuda]"]
    drawn = harness.drawn_programs(Case(entry, "cpu", "error"), torch.device("cpu"),
                                   settings(max_examples=200, derandomize=True, database=None, deadline=None), 200)
    uint8 = [p.describe for p in drawn if "uint8" in p.describe]
    assert uint8 and not [d for d in uint8 if "min=0, max=0" in d], uint8[:3]

def test_aliases_share_one_recipe():
    for old, new in [("torch.__getitem__", "torch.Tensor.__getitem__"),
                     ("torch.index_put", "torch.Tensor.index_put"),
                     ("torch.index_copy", "torch.Tensor.index_copy"),
                     ("torch.index_add_", "torch.index_add"),
                     ("torch.scatter_add_", "torch.Tensor.scatter_add_")]:
        assert recipe_for(old) is recipe_for(new)


# -- running recipes -------------------------------------------------------------


def _outputs(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, dict):
        result = list(result.values())
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in _outputs(item)]
    return []


def _bytes(t: torch.Tensor | None) -> torch.Tensor | None:
    if t is None:
        return None
    t = t.detach().cpu()
    if t.is_sparse:
        t = t.to_dense()
    # A fresh tensor with default strides: ``contiguous()`` keeps odd strides on
    # size-1 dims (a one-element view with stride 2), which ``view`` rejects.
    flat = torch.empty(t.shape, dtype=t.dtype).copy_(t).reshape(-1)
    return flat.view(torch.uint8)


def _seeded_grad(out: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if out.is_complex():
        real = torch.rand(out.shape, generator=gen, dtype=torch.float64)
        imag = torch.rand(out.shape, generator=gen, dtype=torch.float64)
        return torch.complex(real, imag).to(out.dtype)
    return torch.rand(out.shape, generator=gen, dtype=torch.float64).to(out.dtype)


def _run(program: Program) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """One run as the runner does it: fresh clones, requires_grad on grad_inputs, backward."""
    inputs = {name: t.clone() for name, t in program.inputs.items()}
    for name in program.grad_inputs:
        inputs[name].requires_grad_()
    outs = _outputs(program.fn(**inputs))
    assert outs, "fn returned no tensor"
    grads: list[torch.Tensor | None] = []
    if program.grad_inputs:
        diff = [o for o in outs if o.requires_grad]
        assert diff, f"backward entry, but no output depends on {program.grad_inputs}"
        torch.autograd.backward(diff, [_seeded_grad(o, i) for i, o in enumerate(diff)])
        grads = [inputs[name].grad for name in program.grad_inputs]
    return [_bytes(o) for o in outs], [_bytes(g) for g in grads]


def _assert_same(first, second, what: str, describe: str) -> None:
    assert len(first) == len(second)
    for i, (a, b) in enumerate(zip(first, second)):
        assert (a is None) == (b is None), f"{what} #{i} present in only one run: {describe}"
        if a is not None:
            assert torch.equal(a, b), f"{what} #{i} differs between runs: {describe}"


def _check_program(program: Program, entry: Entry) -> None:
    assert isinstance(program, Program)
    assert program.describe and program.repro
    for name, t in program.inputs.items():
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu", name
    assert set(program.grad_inputs) <= set(program.inputs)
    if entry.backward:
        assert program.grad_inputs, "a backward entry needs grad_inputs"
        for name in program.grad_inputs:
            t = program.inputs[name]
            assert t.is_floating_point() or t.is_complex(), f"{name} is not differentiable"
    else:
        assert program.grad_inputs == ()

    uninitialized = program.meta.get("uninitialized", False)
    if uninitialized and entry.quantized:
        # Growing a quantized tensor exposes memory torch cannot fill: only
        # shapes are defined, and deterministic mode rightly refuses.
        torch.use_deterministic_algorithms(False)
        a = _outputs(program.fn(**{k: v.clone() for k, v in program.inputs.items()}))
        b = _outputs(program.fn(**{k: v.clone() for k, v in program.inputs.items()}))
        assert [t.shape for t in a] == [t.shape for t in b]
        return
    if uninitialized:
        # Defined only when deterministic mode fills new memory.
        torch.use_deterministic_algorithms(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
    else:
        torch.use_deterministic_algorithms(False)
    outs1, grads1 = _run(program)
    outs2, grads2 = _run(program)
    _assert_same(outs1, outs2, "output", program.describe)
    _assert_same(grads1, grads2, "gradient", program.describe)


RECIPE_SETTINGS = settings(max_examples=4, deadline=None, database=None, derandomize=True,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                  HealthCheck.filter_too_much])


def _missing_kernel(program: Program, entry: Entry, exc: Exception) -> str | None:
    """The runner's ``unsupported`` message when ``exc`` means this torch has no kernel
    for the dtype of one of the example's inputs (2.5.1: ``"replication_pad1d" not
    implemented for 'Half'``); None for any other failure."""
    mode = "error" if program.meta.get("uninitialized") and not entry.quantized else "off"
    obs = observe(program, mode)
    dtypes = {t.dtype for t in program.inputs.values()}
    if obs.unsupported and kernel_missing_for(obs.unsupported, dtypes) and kernel_missing_for(str(exc), dtypes):
        return obs.unsupported
    return None


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_recipe_output_is_a_pure_function_of_its_inputs_on_cpu(entry):
    # An example whose dtype this torch has no kernel for is one the conformance
    # suite judges ``unsupported``: Hypothesis draws another. Each case must still
    # run bitwise repeatable examples; none at all (float32 always has kernels) fails.
    make = recipe_for(entry.op)
    for case in entry.case_kwargs():
        missing: list[str] = []

        @RECIPE_SETTINGS
        @given(st.data())
        def check(data):
            program = make(data.draw, entry, case, torch.device("cpu"))
            try:
                _check_program(program, entry)
            except (RuntimeError, NotImplementedError, TypeError) as exc:
                unsupported = _missing_kernel(program, entry, exc)
                if unsupported is None:
                    raise
                missing.append(unsupported)
                reject()

        try:
            check()
        except Unsatisfiable:
            pytest.fail(f"{entry.op} {case}: no example ran; every one lacked a kernel: {sorted(set(missing))}")


@pytest.mark.parametrize("op", sorted(set(DOCUMENTED_OPS) - {"torch.empty"}))
def test_repro_rebuilds_the_same_example(op):
    entry = _entry(op)

    @settings(RECIPE_SETTINGS, max_examples=1)
    @given(st.data())
    def check(data):
        program = recipe_for(op)(data.draw, entry, {}, torch.device("cpu"))
        if program.meta.get("uninitialized"):
            return
        namespace: dict = {}
        exec(compile(program.repro, f"<repro {op}>", "exec"), namespace)
        torch.use_deterministic_algorithms(False)
        expected, _ = _run(program)
        got = [_bytes(t) for t in _outputs(namespace["out"])]
        _assert_same(expected, got, "repro output", program.describe)

    check()


def test_case_kwargs_reach_the_op():
    entry = _entry("torch.Tensor.scatter_reduce", cases=_cases("reduce", "prod"))

    @settings(RECIPE_SETTINGS, max_examples=2)
    @given(st.data())
    def check(data):
        program = recipe_for(entry.op)(data.draw, entry, {"reduce": "prod"}, torch.device("cpu"))
        assert "'prod'" in program.meta["source"]
        assert program.meta["kwargs"]["reduce"] == "prod"

    check()


def test_large_scale_draws_larger_examples():
    set_scale("large")
    entry = _entry("torch.index_add")
    sizes = []

    @settings(RECIPE_SETTINGS, max_examples=8, derandomize=False)
    @given(st.data())
    def check(data):
        program = recipe_for(entry.op)(data.draw, entry, {}, torch.device("cpu"))
        sizes.append(program.inputs["index"].numel())

    check()
    assert max(sizes) > 64


def test_fractional_pooling_from_narrow_samples_is_compared_run_against_run_only():
    """The H100 run of 2026-11-27: FractionalMaxPool3d compiled with Inductor placed its windows
    from bfloat16 samples otherwise than eager (5.11 off, and off a float64 eager reference too):
    where windows start is the precision a kernel computes int((i + sample) * alpha) in. Such
    examples compare run against run; float32 and float64 examples keep their references, and a
    wrong value there is still caught."""
    from detconf.conformance import harness
    from detconf.conformance.catalog import snapshot_entries
    from detconf.conformance.plan import Case
    from detconf.engine import comparison

    entry = {e.id: e for e in snapshot_entries("2.11.0")}["FractionalMaxPool3d.backward[cuda]"]
    case = Case(entry, "cpu", "error")
    progs = harness.drawn_programs(case, torch.device("cpu"), settings(max_examples=40, derandomize=True,
                                                                       database=None, deadline=None), 40)
    narrow = [p for p in progs if p.inputs["x"].dtype in (torch.float16, torch.bfloat16)]
    wide = [p for p in progs if p.inputs["x"].dtype in (torch.float32, torch.float64)]
    assert narrow and wide
    out = [("out", torch.arange(6, dtype=torch.float32))]
    wrong = [("out", torch.arange(6, dtype=torch.float32) + 1)]
    for p in narrow:
        rules = comparison.derive(p.compare)
        assert rules.runs_only and "float16/bfloat16 samples" in rules.describe()[0]["reason"]
    for p in wide:
        rules = comparison.derive(p.compare)
        assert not rules.runs_only and comparison.compare(wrong, out, rules) is not None
