"""The Ascend profile: the 49 APIs of the Ascend deterministic-computation list.

The catalog (``conformance/data/ascend.json``) must match the table exactly
(the project's copy, ``conformance/data/ascend-table-1.txt``, and the source
document where it is at hand); every entry must have a recipe; and every API
callable with plain torch must keep the list's promise on the CPU too: with
``torch.use_deterministic_algorithms(True)``, two runs give bitwise-identical
outputs and gradients.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from detconf.engine.entry import Entry, load_entries_file, make_entry_id
import detconf.conformance.registry  # noqa: F401  (registers the recipes)
from detconf.engine.program import RecipeSkipped, has_recipe, recipe_for
from detconf.engine.runner import observe
from tests.capabilities import kernel_missing_for

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "conformance" / "data" / "ascend.json"
TABLE_COPY = ROOT / "conformance" / "data" / "ascend-table-1.txt"
# The source document as the project received it (outside the repository).
SEED = ROOT.parent / "shared" / "seeds" / "002_7a10ec293d9f2990.txt"
TABLE_HEADING = "API名称"  # the table's only column heading; the API names follow it

ENTRIES = load_entries_file(CATALOG, source="ascend")
PLAIN_TORCH = [e for e in ENTRIES if not e.op.startswith("torch_npu.")]
TORCH_NPU = [e for e in ENTRIES if e.op.startswith("torch_npu.")]
HAS_TORCH_NPU = importlib.util.find_spec("torch_npu") is not None


def _op_for(row: str) -> str:
    """The qualified op for a table row: the table writes one method without its ``torch.`` prefix."""
    return "torch." + row if row.startswith("Tensor.") else row


def _table_copy() -> list[str]:
    lines = TABLE_COPY.read_text(encoding="utf-8").splitlines()
    assert lines and lines[0].startswith("#"), "the table copy starts with a header naming its source"
    return [line.strip() for line in lines[1:] if line.strip()]


# ---------------------------------------------------------------------------
# The catalog against the table


def test_catalog_has_the_49_apis_of_table_1():
    assert len(ENTRIES) == 49
    assert [e.position for e in ENTRIES] == list(range(49))
    for e in ENTRIES:
        assert (e.source, e.list_name, e.promise, e.devices) == ("ascend", "ascend-table-1", "deterministic", ("npu",))
        assert e.doc_version is None and e.cases == ((),) and not e.backward


def test_entry_ids_are_unique_and_follow_make_entry_id():
    ids = [e.id for e in ENTRIES]
    assert len(set(ids)) == len(ids)
    shorts = [e.short_op for e in ENTRIES]
    for e in ENTRIES:
        expected = make_entry_id(e.op, devices=("npu",))
        if shorts.count(e.short_op) > 1 and e.op.startswith("torch.Tensor."):
            expected = "Tensor." + expected  # torch.addmm and torch.Tensor.addmm: the method says so
        assert e.id == expected


def test_ops_and_sentences_match_the_table_copy():
    rows = _table_copy()
    assert len(rows) == 49
    assert [e.op for e in ENTRIES] == [_op_for(r) for r in rows]
    for e, row in zip(ENTRIES, rows):
        assert e.sentence.endswith(f"table 1: {row}")


def test_table_copy_matches_the_source_document():
    if not SEED.is_file():
        pytest.skip(f"the Ascend source document is not at {SEED}; the table copy stands in for it")
    lines = [line.strip() for line in SEED.read_text(encoding="utf-8").splitlines()]
    rows = [line for line in lines[lines.index(TABLE_HEADING) + 1:] if line]
    assert rows == _table_copy()


# ---------------------------------------------------------------------------
# Recipes


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.id)
def test_every_entry_has_a_recipe(entry: Entry):
    assert has_recipe(entry.op), f"no recipe for {entry.op!r}"


@pytest.mark.skipif(HAS_TORCH_NPU, reason="torch_npu is installed: its APIs run rather than skip")
@pytest.mark.parametrize("entry", TORCH_NPU, ids=lambda e: e.id)
def test_torch_npu_apis_skip_without_torch_npu(entry: Entry):
    def draw(strategy):
        raise AssertionError("the recipe drew an example before finding torch_npu missing")

    with pytest.raises(RecipeSkipped, match=r"needs torch_npu \(not installed\)"):
        # Without torch_npu, torch does not even know the "npu" device type.
        recipe_for(entry.op)(draw, entry, {}, torch.device("cpu"))


def _documented_cpu_raise(entry: Entry, kwargs: dict) -> str | None:
    """The torch-docs entry (if any) that documents a determinism error for this call on the CPU.

    ``torch.Tensor.put_(accumulate=False)`` raises on every device in
    deterministic mode; the Ascend list promises it deterministic on the NPU
    only, so on the CPU a documented raise keeps the general contract.
    """
    from detconf.engine import docspec

    for doc in docspec.installed_entries():
        if doc.promise == "raises" and doc.op == entry.op and doc.applies_to("cpu"):
            if any(set(case) <= set(kwargs.items()) for case in doc.cases):
                return doc.id
    return None


CPU_EXAMPLES = settings(max_examples=3, derandomize=True, database=None, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("entry", PLAIN_TORCH, ids=lambda e: e.id)
def test_plain_torch_api_is_deterministic_on_cpu(entry: Entry):
    # An example whose dtype this torch has no CPU kernel for (2.5.1: "trace" not
    # implemented for 'Half') is ``unsupported`` in the suite: Hypothesis draws
    # another. Some example must run; none at all fails.
    recipe = recipe_for(entry.op)
    missing: list[str] = []

    @CPU_EXAMPLES
    @given(st.data())
    def check(data: st.DataObject) -> None:
        program = recipe(data.draw, entry, {}, torch.device("cpu"))
        obs = observe(program, "error")
        where = f"\n{program.describe}\n{program.repro}"
        assert obs.error is None, obs.error + where
        if obs.unsupported and kernel_missing_for(obs.unsupported, {t.dtype for t in program.inputs.values()}):
            missing.append(obs.unsupported)
            reject()
        assert obs.unsupported is None, obs.unsupported + where
        if obs.raised:
            documented = _documented_cpu_raise(entry, program.meta.get("kwargs", {}))
            assert documented, f"undocumented determinism error on cpu: {obs.raised}{where}"
            return
        assert obs.identical is True, f"{obs.mismatch} (max abs diff {obs.max_abs_diff}){where}"

    try:
        check()
    except Unsatisfiable:
        pytest.fail(f"{entry.op}: no example ran; every one lacked a CPU kernel: {sorted(set(missing))}")


@pytest.mark.parametrize("entry", [e for e in PLAIN_TORCH if recipe_for(e.op).__module__ == "detconf.conformance.recipes_ascend"
                                   and e.op != "torch.ops.aten.convolution_backward"], ids=lambda e: e.id)
def test_ascend_recipes_differentiate(entry: Entry):
    """The list is about training: the recipes written for it run backward too."""

    @settings(CPU_EXAMPLES, max_examples=1)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        program = recipe_for(entry.op)(data.draw, entry, {}, torch.device("cpu"))
        assert program.grad_inputs, f"{entry.op}: forward only"

    check()


# ---------------------------------------------------------------------------
# torch_npu recipes against a stand-in module (plumbing only)


def _stand_in_torch_npu():
    """A ``torch_npu`` look-alike built from torch ops, following the documented signatures.

    It checks the shapes the torch_npu reference asks for and computes
    something differentiable of the right shape; it says nothing about
    Ascend's kernels. It lets the recipes' argument plumbing run here.
    """
    import types

    import torch.nn.functional as F

    def npu_linear(x, weight, bias=None):
        return F.linear(x, weight, bias)

    def npu_convolution(x, weight, bias, stride, padding, dilation, groups):
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)

    def npu_convolution_transpose(x, weight, bias, padding, output_padding, stride, dilation, groups):
        return F.conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation)

    def npu_group_norm_swish(x, num_groups, weight, bias, eps=1e-5, swish_scale=1.0):
        y = F.group_norm(x, num_groups, weight, bias, eps)
        grouped = x.reshape(x.shape[0], num_groups, -1)
        mean, var = grouped.mean(-1), grouped.var(-1, correction=0)
        return y * torch.sigmoid(swish_scale * y), mean, torch.rsqrt(var + eps)

    def npu_deformable_conv2d(x, weight, offset, bias, kernel_size, stride, padding, dilation=(1, 1, 1, 1),
                              groups=1, deformable_groups=1, modulated=True):
        kh, kw = kernel_size
        assert len(stride) == len(padding) == len(dilation) == 4 and modulated
        assert weight.shape[2:] == (kh, kw) and weight.shape[1] * groups == x.shape[1]
        out = F.conv2d(x, weight, bias, stride[2:], (padding[0], padding[2]), dilation[2:], groups)
        assert offset.shape == (x.shape[0], 3 * deformable_groups * kh * kw) + out.shape[2:], offset.shape
        return out + 0 * offset.sum(), offset * 1

    def npu_ps_roi_pooling(x, rois, spatial_scale, group_size, output_dim):
        n, r = x.shape[0], rois.shape[2]
        assert x.shape[1] == output_dim * group_size ** 2 and rois.shape == (n, 5, r)
        pooled = x.mean((2, 3)).reshape(n, output_dim, group_size, group_size)
        return pooled.repeat_interleave(r, 0)

    module = types.ModuleType("torch_npu")
    for fn in (npu_linear, npu_convolution, npu_convolution_transpose, npu_group_norm_swish,
               npu_deformable_conv2d, npu_ps_roi_pooling):
        setattr(module, fn.__name__, fn)
    return module


@pytest.mark.skipif(HAS_TORCH_NPU, reason="torch_npu is installed: the real module is tested on the npu device")
@pytest.mark.parametrize("entry", TORCH_NPU, ids=lambda e: e.id)
def test_torch_npu_recipes_run_against_a_stand_in(entry: Entry, monkeypatch):
    import sys

    from detconf.conformance import recipes_ascend

    monkeypatch.setitem(sys.modules, "torch_npu", _stand_in_torch_npu())
    monkeypatch.setattr(recipes_ascend, "_require_torch_npu", lambda entry, device: None)
    recipe = recipe_for(entry.op)

    @settings(CPU_EXAMPLES, max_examples=2)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        program = recipe(data.draw, entry, {}, torch.device("cpu"))
        assert program.grad_inputs and "import torch_npu" in program.repro
        obs = observe(program, "off")
        assert obs.error is None and obs.unsupported is None, f"{obs.error or obs.unsupported}\n{program.repro}"

    check()


def test_every_torch_npu_api_and_cuda_note_declares_the_device_its_promise_is_about():
    """Certification accepts a skip 'about another device' only where the plan says so
    (``needs_device`` of the planned entry, from ``recipe(device=)`` / ``check(device=)``): each
    recipe that raises ``RecipeSkipped(needs_device="npu")`` declares it, and nothing else does."""
    from detconf.conformance.planned import needs_device
    from detconf.engine.checks import registered_checks

    npu = [e for e in ENTRIES if e.op.startswith("torch_npu.")]
    assert npu and all(needs_device(e.source, e.id, e.op) == "npu" for e in npu)
    assert all(needs_device(e.source, e.id, e.op) is None for e in PLAIN_TORCH)
    cuda = [i for i in registered_checks("repro-notes") if needs_device("repro-notes", i, None)]
    assert {needs_device("repro-notes", i, None) for i in cuda} == {"cuda"}
    assert all(i.startswith(("CUBLAS_WORKSPACE_CONFIG=", "cudnn.")) for i in cuda), cuda
