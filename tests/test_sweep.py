"""Tests for the undocumented-op sweep: conformance/sweep.py and conformance/recipes_sweep.py.

The sweep makes one entry per OpInfo of torch's op database and runs the
OpInfo's own sample inputs through the generic ``opinfo:`` recipe. These tests
check the catalog (one unique entry per OpInfo, documented ops marked), the
recipe on representative ops (two runs in deterministic mode agree, or the
documented ops raise the determinism alert), the reseeding of random ops, and
that a missing op database is a one-line catalog error.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detconf.conformance import recipes_sweep, sweep
from detconf.engine import docspec
import detconf.conformance.registry  # noqa: F401  (registers the recipes)
from tests import warm
from detconf.engine.entry import CatalogError, Entry
from detconf.engine.program import Program, RecipeSkipped, recipe_for
from detconf.engine.runner import DETERMINISM_ALERT, observe

ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")
EXAMPLES = settings(max_examples=4, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def entries() -> dict[str, Entry]:
    return {e.id: e for e in sweep.sweep_entries()}


@pytest.fixture(autouse=True)
def _restore_global_state():
    mode = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        torch.set_num_threads(threads)


def _observations(entry: Entry, mode: str = "error") -> list:
    """Observations of a few examples of ``entry``'s recipe on the CPU."""
    seen = []

    @EXAMPLES
    @given(st.data())
    def explore(data):
        program = recipe_for(entry.op)(data.draw, entry, {}, CPU)
        assert isinstance(program, Program)
        seen.append((program, observe(program, mode)))

    explore()
    assert seen
    return seen


# -- catalog -------------------------------------------------------------------


def test_one_entry_per_opinfo(entries):
    op_db = sweep.load_op_db()
    assert len(entries) == len(op_db) == len(sweep.sweep_entries())
    ids = [sweep.opinfo_name(op) for op in op_db]
    assert len(set(ids)) == len(ids)
    for position, (op, name) in enumerate(zip(op_db, ids)):
        entry = entries[name]
        assert entry.op == sweep.OP_PREFIX + name
        assert entry.source == "sweep" and entry.list_name == "sweep" and entry.promise == "deterministic"
        assert entry.devices == () and entry.position == position
        assert entry.backward == bool(op.supports_autograd)
        assert "sweep:" in entry.sentence


def test_entries_read_like_the_issue(entries):
    assert entries["add"].sentence == "OpInfo torch.add (sweep: not in the deterministic-mode lists)"
    assert entries["div.trunc_rounding"].op == "opinfo:div.trunc_rounding"
    assert entries["add"].backward and not entries["argmax"].backward


def test_every_entry_has_the_generic_recipe(entries):
    for entry in entries.values():
        assert recipe_for(entry.op) is recipes_sweep.opinfo_sample


def test_documented_ops_maps_qualified_names_to_opinfos():
    names = [("put", ""), ("index_put", ""), ("add", ""), ("resize_", ""), ("nn.functional.interpolate", "nearest"),
             ("nn.functional.interpolate", "bilinear"), ("nn.functional.max_unpool1d", ""),
             ("nn.functional.max_unpool1d", "grad"), ("nn.functional.pad", "reflect"),
             ("nn.functional.pad", "constant"), ("scatter_reduce", "sum"), ("scatter_reduce", "prod"),
             ("index_add", ""), ("linalg.det", ""), ("nn.functional.conv2d", "")]

    def entry(op):
        return Entry(id=op, op=op, sentence="s", promise="raises")

    found = sweep.documented_ops(
        [entry(op) for op in ("torch.Tensor.put_", "torch.nn.functional.interpolate", "torch.nn.MaxUnpool1d",
                              "torch.nn.ReflectionPad2d", "torch.Tensor.scatter_reduce", "torch.index_add_",
                              "torch.Tensor.resize_", "torch.nn.Conv2d", "torch.nn.NoSuchModule", "torch.linalg")],
        names)
    assert found == {"put", "resize_", "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear",
                     "nn.functional.max_unpool1d", "nn.functional.max_unpool1d.grad", "nn.functional.pad.reflect",
                     "scatter_reduce.sum", "scatter_reduce.prod", "index_add", "nn.functional.conv2d"}


def test_documented_ops_of_the_installed_docs():
    found = sweep.documented_ops(docspec.installed_entries())
    for name in ("put", "index_put", "index_copy", "scatter_add", "gather", "bincount", "histc", "cumsum", "median",
                 "bmm", "index_select", "repeat_interleave", "resize_", "scatter", "index_add",
                 "nn.functional.max_unpool1d", "nn.functional.max_unpool3d", "nn.functional.interpolate.bicubic",
                 "nn.functional.ctc_loss", "nn.functional.nll_loss", "nn.functional.embedding_bag",
                 "nn.functional.grid_sample", "nn.functional.pad.replicate", "nn.functional.avg_pool3d",
                 "nn.functional.fractional_max_pool2d", "nn.functional.conv_transpose3d"):
        assert name in found, name
    for name in ("add", "sum", "matmul", "nn.functional.dropout", "linalg.det"):
        assert name not in found, name


def test_documented_entries_carry_the_qualifier(entries):
    assert sweep.DOCUMENTED in entries["put"].qualifiers
    assert sweep.DOCUMENTED in entries["nn.functional.max_unpool2d"].qualifiers
    assert sweep.DOCUMENTED not in entries["add"].qualifiers


def test_random_ops_are_named(entries):
    for name in ("nn.functional.dropout", "bernoulli", "normal", "rand_like", "randint_like", "multinomial",
                 "uniform", "nn.functional.rrelu", "nn.functional.fractional_max_pool2d", "svd_lowrank"):
        assert sweep.is_random_op(name), name
        assert sweep.RESEEDED in entries[name].qualifiers
    for name in ("__rand__", "add", "nn.functional.normalize", "native_layer_norm"):
        assert not sweep.is_random_op(name), name


def test_missing_op_database_is_a_one_line_catalog_error(monkeypatch):
    monkeypatch.setattr(sweep, "_OP_DB", None)
    monkeypatch.setitem(sys.modules, "torch.testing._internal.common_methods_invocations", None)
    argv = list(sys.argv)
    with pytest.raises(CatalogError) as info:
        sweep.sweep_entries([])
    message = str(info.value)
    assert "\n" not in message and "expecttest" in message and "requirements-base.txt" in message
    assert sys.argv == argv


def test_importing_the_op_database_leaves_global_state_alone(monkeypatch):
    monkeypatch.setattr(sweep, "_OP_DB", None)
    argv = list(sys.argv)
    state = torch.get_rng_state()
    sweep.load_op_db()
    assert not torch.backends.flags_frozen()  # the determinism guard sets cudnn flags
    assert sys.argv == argv
    assert torch.equal(torch.get_rng_state(), state)


# -- recipe ----------------------------------------------------------------------

DETERMINISTIC_ON_CPU = ["add", "index_put", "sum", "matmul", "cat", "item", "broadcast_shapes", "equal",
                        "nn.functional.embedding", "linalg.eigh"]


@pytest.mark.parametrize("name", DETERMINISTIC_ON_CPU)
def test_representative_ops_run_identically_twice(entries, name):
    for program, obs in _observations(entries[name]):
        assert obs.error is None and obs.raised is None and obs.unsupported is None, (program.describe, obs)
        assert obs.identical is True, (program.describe, obs.mismatch)


def test_backward_entries_differentiate_the_sample_tensors(entries):
    for program, obs in _observations(entries["add"]):
        assert program.grad_inputs, program.describe
        assert obs.identical is True
    for program, _ in _observations(entries["argmax"]):
        assert program.grad_inputs == ()


@pytest.mark.parametrize("name", ["put", "nn.functional.max_unpool1d"])
def test_documented_raisers_raise_the_alert_or_agree(entries, name):
    raised = 0
    for program, obs in _observations(entries[name]):
        assert obs.error is None, (program.describe, obs.error)
        if obs.raised:
            assert DETERMINISM_ALERT.search(obs.raised)
            raised += 1
        else:
            assert obs.identical is True, (program.describe, obs.mismatch)
    assert raised, f"{name}: no example raised the determinism alert"


@pytest.mark.parametrize("name", ["nn.functional.dropout", "bernoulli", "rand_like", "multinomial",
                                  "nn.functional.rrelu"])
def test_random_ops_are_reseeded_and_agree(entries, name):
    for program, obs in _observations(entries[name]):
        assert program.meta["reseeded"]
        assert obs.error is None and obs.raised is None, (program.describe, obs)
        assert obs.identical is True, (program.describe, obs.mismatch)


class _RandomOpInfo:
    """An OpInfo stand-in whose op really draws from the global generator
    (op_db's own random OpInfos already fix a seed internally)."""

    name, variant_test_name, supports_autograd, decorators = "fake_rand_like", "", False, ()

    @staticmethod
    def op(x):
        return torch.rand_like(x)

    @staticmethod
    def gradcheck_wrapper(op, *args, **kwargs):
        return op(*args, **kwargs)

    def supported_dtypes(self, device_type):
        return {torch.float32}

    def supported_backward_dtypes(self, device_type):
        return set()

    @staticmethod
    def sample_inputs_func(opinfo, device, dtype, requires_grad):
        from torch.testing._internal.opinfo.core import SampleInput

        return iter([SampleInput(torch.zeros(64, device=device, dtype=dtype))])


@pytest.mark.parametrize("reseeded", [True, False])
def test_the_reseed_makes_a_random_op_repeatable(monkeypatch, reseeded):
    monkeypatch.setattr(recipes_sweep, "find_opinfo", lambda name: _RandomOpInfo())
    monkeypatch.setattr(sweep, "is_random_op", lambda name: reseeded)
    entry = Entry(id="fake_rand_like", op="opinfo:fake_rand_like", sentence="s", promise="deterministic",
                  source="sweep")
    for program, obs in _observations(entry, mode="error"):
        assert program.meta["reseeded"] is reseeded
        assert obs.error is None and obs.identical is reseeded


def test_the_choice_fixes_seed_and_sample_and_the_repro_rebuilds_it(entries):
    entry = entries["matmul"]

    def build(choice):
        return recipe_for(entry.op)(lambda strategy: choice, entry, {}, CPU)

    a, b, c = build(5), build(5), build(5 + 8)
    assert a.describe == b.describe and a.inputs.keys() == b.inputs.keys()
    assert all(torch.equal(a.inputs[k], b.inputs[k]) for k in a.inputs)
    assert a.meta["samples"] == 8 and c.meta["sample_index"] == a.meta["sample_index"] == 5
    assert c.meta["seed"] != a.meta["seed"]
    assert not all(torch.equal(a.inputs[k], c.inputs[k]) for k in a.inputs)

    inputs = {k: v.detach().clone().requires_grad_(k in a.grad_inputs) for k, v in a.inputs.items()}
    result = a.fn(**inputs)
    namespace = {"torch": torch}
    exec(a.repro, namespace)
    assert torch.equal(namespace["out"].detach(), result["out"])


def test_an_op_without_dtypes_on_the_device_is_skipped(entries, monkeypatch):
    opinfo = recipes_sweep.find_opinfo("add")
    monkeypatch.setattr(type(opinfo), "supported_dtypes", lambda self, device_type: set())

    @EXAMPLES
    @given(st.data())
    def build(data):
        with pytest.raises(RecipeSkipped, match="no dtype"):
            recipe_for("opinfo:add")(data.draw, entries["add"], {}, CPU)

    build()


def test_an_unknown_opinfo_is_skipped():
    entry = Entry(id="no_such_op", op="opinfo:no_such_op", sentence="s", promise="deterministic", source="sweep")
    with pytest.raises(RecipeSkipped, match="no OpInfo"):
        recipe_for(entry.op)(lambda strategy: 0, entry, {}, CPU)


# -- helpers ---------------------------------------------------------------------


def test_lifting_and_filling_round_trip():
    a, b, c = torch.ones(2), torch.zeros(3), torch.arange(4)
    value = (a, [b, (c, 3)], {"w": a, "n": None, "size": torch.Size([2, 3])})
    lifter = recipes_sweep._Lifter(value)
    template, has = lifter.lift(value, "x")
    assert has and list(lifter.inputs) == ["x[0]", "x[1][0]", "x[1][1][0]"]  # ``a`` twice is one input
    filled = recipes_sweep._fill(template, {k: v + 1 for k, v in lifter.inputs.items()})
    assert torch.equal(filled[0], a + 1) and filled[2]["w"] is filled[0]
    assert torch.equal(filled[1][1][0], c + 1) and filled[1][1][1] == 3
    assert filled[2]["size"] == torch.Size([2, 3]) and filled[2]["n"] is None
    shape = (2, 3)
    assert recipes_sweep._Lifter(shape).lift(shape, "s") == (shape, False)


def test_views_keep_their_storage_and_aliasing():
    base = torch.arange(12.0)
    window, overlap, expanded = base[2:6], base.as_strided((2, 2), (1, 2), 3), torch.ones(1).expand(3)
    lifter = recipes_sweep._Lifter((window, overlap, expanded))
    template, _ = lifter.lift((window, overlap, expanded), "x")
    assert list(lifter.inputs) == ["x[0]", "x[2]"]  # window and overlap share one storage input
    assert lifter.inputs["x[0]"].shape == (12,)
    clones = {k: v.clone() for k, v in lifter.inputs.items()}
    w, o, e = recipes_sweep._fill(template, clones)
    assert torch.equal(w, window) and torch.equal(o, overlap) and torch.equal(e, expanded)
    assert w.untyped_storage().data_ptr() == o.untyped_storage().data_ptr() and e.stride() == (0,)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
def test_compressed_sparse_inputs_are_lifted_dense():
    csr = torch.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr()
    lifter = recipes_sweep._Lifter(csr)
    template, _ = lifter.lift(csr, "x")
    assert lifter.inputs["x"].layout == torch.strided
    rebuilt = recipes_sweep._fill(template, lifter.inputs)
    assert rebuilt.layout == torch.sparse_csr and torch.equal(rebuilt.to_dense(), csr.to_dense())


@pytest.mark.parametrize("name", ["as_strided.partial_views", "sparse.sampled_addmm", "block_diag",
                                  "linalg.householder_product", "diagonal_scatter"])
def test_samples_with_unusual_layouts_or_gradients_run(entries, name):
    # Views into larger storages, CSR tensors, odd output and gradient strides,
    # and gradients that are None.
    for program, obs in _observations(entries[name]):
        assert obs.error is None and obs.raised is None, (program.describe, obs.error)
        assert obs.identical is True, (program.describe, obs.mismatch)


def test_cuda_only_opinfos_are_skipped_on_cpu(entries):
    with pytest.raises(RecipeSkipped, match="cuda only"):
        recipe_for("opinfo:jiterator_unary")(lambda strategy: 0, entries["jiterator_unary"], {}, CPU)


def test_python_results_are_compared_as_tensors():
    out = recipes_sweep.as_comparable((1.5, True, torch.Size([2]), None, "text", [torch.ones(1)]))
    assert [t.dtype for t in out[:3]] == [torch.float32, torch.bool, torch.int64]
    assert len(out) == 4 and isinstance(out[3], list)


def test_odd_strides_are_made_plain():
    t = torch.ones(6).as_strided((6, 1), (1, 6))
    assert t.is_contiguous() and t.stride(-1) != 1
    plain = recipes_sweep.as_comparable(t)
    assert plain.stride() == (1, 1) and torch.equal(plain, t)
    plain.view(torch.uint8)


def test_zero_tensor_gradients_are_compared_as_zeros():
    # sgn's gradient is a ZeroTensor on some releases (2.14): it has no storage to view as bytes.
    zero = torch._efficientzerotensor(3)
    assert zero._is_zerotensor()
    plain = recipes_sweep.as_comparable(zero)
    assert not plain._is_zerotensor() and plain.tolist() == [0.0, 0.0, 0.0]
    plain.view(torch.uint8).numpy()


@pytest.mark.parametrize("name", ["sgn"])
def test_ops_with_zero_tensor_gradients_run(entries, name):
    for program, obs in _observations(entries[name]):
        assert obs.error is None, (program.describe, obs.error)


def test_float8_results_are_compared_as_float32():
    out = recipes_sweep.as_comparable(torch.tensor([0.5, -2.0]).to(torch.float8_e4m3fn))
    assert out.dtype == torch.float32 and out.tolist() == [0.5, -2.0]


def test_uninitialized_outputs_are_marked(entries):
    program = recipe_for("opinfo:empty_like")(lambda strategy: 0, entries["empty_like"], {}, CPU)
    assert program.meta["uninitialized"]
    program = recipe_for("opinfo:zeros_like")(lambda strategy: 0, entries["zeros_like"], {}, CPU)
    assert not program.meta["uninitialized"]


@pytest.mark.parametrize("ci_env", ["", "1"], ids=["local", "CI-env"])
@pytest.mark.parametrize("profile,max_examples,derandomize", [("ci", 6, True), ("thorough", 100, False)])
def test_loading_the_op_database_keeps_the_chosen_hypothesis_profile(profile, max_examples, derandomize, ci_env):
    """Under a CI environment variable Hypothesis derandomizes its default profile; ours must not inherit that."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TF_BUILD", "GITHUB_ACTIONS")}
    if ci_env:
        env["CI"] = ci_env

    code = (f"from detconf.conformance import profiles; profiles.load({profile!r})\n"
            "from detconf.conformance.sweep import load_op_db; load_op_db()\n"
            "from hypothesis import settings; s = settings()\n"
            "print(settings._current_profile, s.max_examples, s.derandomize)\n")
    out = warm.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.split() == [profile, str(max_examples), str(derandomize)]
