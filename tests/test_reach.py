"""Reach: the dispatch trace, target declarations and matching, and that every documented
entry of every release names its targets."""
import pytest
import torch
import torch.nn.functional as F

import detconf.conformance.registry  # noqa: F401  (registers every recipe)
from detconf.conformance import catalog
from detconf.vocabulary import OP_SOURCES
from detconf.engine import program
from detconf.engine.determinism import deterministic_mode
from detconf.engine.program import NOT_JUDGED, NoTargets, Program, declared_targets, targets_for
from detconf.engine.runner import _run_once, run_program
from detconf.engine.trace import DispatchTrace, TargetError, Targets, matches, reached, top_ops


def test_a_target_without_overload_matches_every_overload_and_with_one_only_that():
    assert matches("aten.index_add", "aten.index_add.default")
    assert matches("aten.index_add", "aten.index_add.dimname")
    assert matches("aten.median.dim", "aten.median.dim")
    assert not matches("aten.median.dim", "aten.median.default")
    assert not matches("aten.index_add", "aten.index_add_.default")  # in place is another operator
    assert not matches("aten.add", "aten.addmm.default")


@pytest.mark.parametrize("bad", ["index_add", "aten.a.b.c", ""])
def test_a_malformed_target_is_refused(bad):
    with pytest.raises(TargetError):
        Targets.of(bad)


def test_targets_per_device_stand_instead_of_the_default():
    t = Targets.of("aten.convolution", cuda=("aten.convolution", "aten.cudnn_convolution"))
    assert t.for_device("cpu") == ("aten.convolution",)
    assert t.for_device("cuda") == ("aten.convolution", "aten.cudnn_convolution")


def test_the_trace_sees_forward_and_backward_operators_and_counts_calls():
    x = torch.arange(16.0).reshape(1, 1, 4, 4).requires_grad_()
    trace = DispatchTrace()
    with trace:
        y = F.max_pool2d(x, 2)
        y.sum().backward()
        y2 = F.max_pool2d(x.detach(), 2)
    ops = trace.ops
    assert ops["aten.max_pool2d_with_indices.default"] == 2
    assert ops["aten.max_pool2d_with_indices_backward.default"] == 1
    assert torch.equal(y2, y.detach())
    assert list(top_ops({"b": 1, "a": 1, "c": 5}, 2)) == ["c", "a"]


def test_an_operator_that_raises_the_alert_counts_as_reached():
    x = torch.zeros(4)
    trace = DispatchTrace()
    with deterministic_mode("error"), pytest.raises(RuntimeError, match="deterministic"):
        with trace:
            x.put_(torch.tensor([0, 0]), torch.ones(2), accumulate=False)
    assert reached(["aten.put_"], trace.ops)


def test_tracing_does_not_change_what_runs():
    x = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    prog = Program(fn=lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), inputs={"x": x},
                   grad_inputs=("x",))
    with deterministic_mode("error"):
        traced = _run_once(prog, lambda: None)
        plain = _run_once(prog, lambda: None, trace=False)
    assert traced.labels == plain.labels
    assert all(torch.equal(a, b) for a, b in zip(traced.outputs, plain.outputs))
    assert traced.ops and not plain.ops


def test_run_program_says_whether_a_target_was_reached():
    prog = Program(fn=lambda x: x.cumsum(0), inputs={"x": torch.ones(4)})
    assert run_program(prog, "error", targets=("aten.cumsum",)).observation.reached is True
    assert run_program(prog, "error", targets=("aten.cumprod",)).observation.reached is False
    assert run_program(prog, "error").observation.reached is None  # not judged
    unreachable = Program(fn=prog.fn, inputs=prog.inputs, meta={"unreachable": "empty"})
    assert run_program(unreachable, "error", targets=("aten.cumsum",)).observation.reached is False


def test_backward_only_runs_the_forward_outside_the_mode_and_the_backward_inside():
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(("forward", torch.are_deterministic_algorithms_enabled()))
            return x * 2

        @staticmethod
        def backward(ctx, g):
            seen.append(("backward", torch.are_deterministic_algorithms_enabled()))
            return g * 2

    prog = Program(fn=lambda x: Probe.apply(x), inputs={"x": torch.ones(3)}, grad_inputs=("x",))
    run_program(prog, "error", phase="backward-only")
    assert seen == [("forward", False), ("backward", True)] * 2
    seen.clear()
    run_program(prog, "error")
    assert seen == [("forward", True), ("backward", True)] * 2
    assert not torch.are_deterministic_algorithms_enabled()  # the guard restored the flag
    with pytest.raises(ValueError, match="gradients"):
        run_program(Program(fn=lambda x: x, inputs={"x": torch.ones(1)}), "error", phase="backward-only")


def _all_documented_entries():
    seen = {}
    for version in catalog.doc_versions():
        for e in catalog.snapshot_entries(version):
            seen.setdefault((e.source, e.id), e)
    for e in catalog.load_catalog(OP_SOURCES):
        seen.setdefault((e.source, e.id), e)
    return [e for e in seen.values() if e.promise != "behaves"]


@pytest.mark.parametrize("device", ["cpu", "cuda", "mps", "npu"])
def test_every_documented_entry_of_every_release_names_its_targets(device):
    entries = _all_documented_entries()
    assert len(entries) > 100
    for e in entries:
        for case in e.case_kwargs():
            targets = targets_for(e, case, device)
            assert targets, (e.source, e.id, case)
            for t in targets:
                Targets.of(t)


def test_backward_entries_target_a_backward_operator():
    for e in _all_documented_entries():
        if e.backward and e.source == "torch-docs":
            for case in e.case_kwargs():
                targets = targets_for(e, case, "cuda")
                assert any("backward" in t or t.split(".")[1] in ("index_put", "index_put_", "_index_put_impl_",
                                                                   "index_add", "index_add_", "scatter_add",
                                                                   "scatter_add_")
                           for t in targets), (e.id, targets)


def test_interpolate_targets_follow_the_mode_of_the_case():
    e = next(e for e in catalog.snapshot_entries("2.13.0") if e.op == "torch.nn.functional.interpolate")
    assert targets_for(e, {"mode": "bilinear"}, "cpu") == ("aten.upsample_bilinear2d_backward",)
    assert targets_for(e, {"mode": "linear"}, "cpu") == ("aten.upsample_linear1d_backward",)
    # off the CPU, under the mode, bilinear goes to a decomposition (tests/test_kernel_sets.py)
    assert targets_for(e, {"mode": "bilinear"}, "cuda") == ("aten.upsample_bilinear2d_backward",
                                                            "aten._unsafe_index_put")
    assert targets_for(e, {"mode": "linear"}, "cuda") == ("aten.upsample_linear1d_backward",)


def test_the_sweep_declares_that_reach_is_not_judged_and_unknown_ops_have_no_targets():
    assert declared_targets("opinfo:add") == NOT_JUDGED
    with pytest.raises(NoTargets, match="no targets for 'torch.nosuchop'"):
        declared_targets("torch.nosuchop")


def test_a_target_declared_for_only_some_ops_of_a_recipe_is_refused():
    with pytest.raises(ValueError, match="none for 'planted.b'"):
        program.recipe("planted.a", "planted.b", targets={"planted.a": "aten.add"})(lambda *a: None)


def _traced_bytes_differ(monkeypatch=None, trace_class=None) -> tuple[int, list[str]]:
    """Every example of every documented CPU entry (mode error, the program phase), run once
    traced and once not: (examples compared, those whose output or gradient bytes differ)."""
    from hypothesis import settings

    import detconf.engine.runner as runner
    from detconf.conformance.harness import drawn_programs
    from detconf.conformance.plan import plan
    from detconf.engine import docspec
    from detconf.engine.runner import compare_runs

    if trace_class is not None:
        monkeypatch.setattr(runner, "DispatchTrace", trace_class)
    ci = settings(max_examples=6, derandomize=True, database=None, deadline=None)
    compared, differ = 0, []
    for case in plan(docspec.installed_entries(), ["cpu"], ["error"]):
        if case.phase != "program" or case.entry.promise == "behaves":
            continue
        for prog in drawn_programs(case, torch.device("cpu"), ci, 6):
            with deterministic_mode("error", rng=True):
                plain = _run_once(prog, lambda: None, trace=False)
                traced = _run_once(prog, lambda: None, trace=True)
            if any(r.alert_error or r.unsupported or r.other_error for r in (plain, traced)):
                continue  # a documented raise: nothing to compare
            compared += 1
            same, mismatch, _ = compare_runs(plain, traced)
            if not same:
                differ.append(f"{case.id}: {mismatch}")
    return compared, differ


def test_the_dispatch_trace_leaves_the_bytes_of_every_documented_example_as_they_are():
    # Reach is read with a TorchDispatchMode, and while any dispatch mode is active torch's
    # composite code takes its tensor-subclass-friendly paths (isTensorSubclassLike). Both
    # compared runs are traced; were the trace to change what an op computes, a verdict would be
    # about another computation than a user's untraced call. On the CPU it changes no byte.
    compared, differ = _traced_bytes_differ()
    assert compared >= 300 and differ == []


def test_the_trace_comparison_sees_a_trace_that_changes_what_an_op_computes(monkeypatch):
    class Steering(DispatchTrace):  # planted: a trace that sends index_add to another computation
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if str(func).startswith("aten.index_add") and isinstance(out, torch.Tensor) and out.is_floating_point():
                out = out + 1
            return out

    compared, differ = _traced_bytes_differ(monkeypatch, Steering)
    # Seen where index_add runs: the entry itself and the backward formulas built on it.
    assert compared >= 300 and {d.split("[")[0] for d in differ} == {"index_add", "index_select.backward",
                                                                     "repeat_interleave.backward"}
