"""Targets as kernel sets: where a sentence covers several kernels on a device, a case must reach
each of them; rows carry reach per kernel, and a case that missed one names it."""
import json
from pathlib import Path

import pytest
from hypothesis import settings

from detconf.conformance.catalog import snapshot_entries
from detconf.conformance.harness import failure_message, judge
from detconf.conformance.plan import Case
from detconf.engine import program, verdict
from detconf.engine.devices import backends
from detconf.engine.program import Program, recipe
from detconf.engine.trace import TargetError, Targets, reached
from tests.emulated_gpu import emulated_cuda
from tests.planted import _x, planted_entry

FAST = settings(max_examples=5, derandomize=True, database=None, deadline=None)
CPU = backends()["cpu"]
TWO = Targets(("aten.mul",), required={"cpu": (("aten.mul",), ("aten.add", "aten.add_"))})


@recipe("planted.reaches_one_of_two_kernels", targets=TWO)
def reaches_one(draw, entry, case, device):
    return Program(fn=lambda x: x * 2, inputs={"x": _x(draw, device)}, describe="2x: the mul kernel only")


@recipe("planted.reaches_both_kernels", targets=TWO)
def reaches_both(draw, entry, case, device):
    return Program(fn=lambda x: x * 2 + 1, inputs={"x": _x(draw, device)}, describe="2x + 1: both kernels")


_calls = iter(range(10**9))


@recipe("planted.one_kernel_and_racing", targets=TWO)
def one_kernel_and_racing(draw, entry, case, device):
    return Program(fn=lambda x: x * float(next(_calls)), inputs={"x": _x(draw, device) + 1},
                   describe="x times a counter: the mul kernel, never the same bytes")


def run(op):
    return judge(Case(planted_entry(op, "deterministic"), "cpu", "error"), CPU, hypothesis_settings=FAST)


def test_a_case_that_misses_a_required_kernel_is_not_reached_and_names_it():
    row = run("planted.reaches_one_of_two_kernels")
    assert row["verdict"] == "not-reached"
    assert row["detail"]["reach_by_kernel"] == {"aten.mul": 1.0, "aten.add|aten.add_": 0.0}
    assert row["detail"]["unreached_kernels"] == ["aten.add|aten.add_"]
    assert "unreached_kernels: ['aten.add|aten.add_']" in failure_message(row)


def test_a_case_that_reaches_every_kernel_conforms():
    row = run("planted.reaches_both_kernels")
    assert row["verdict"] == "conforms"
    assert row["detail"]["reach_by_kernel"] == {"aten.mul": 1.0, "aten.add|aten.add_": 1.0}
    assert "unreached_kernels" not in row["detail"]


def test_a_failure_on_the_kernels_that_were_reached_stands():
    assert run("planted.one_kernel_and_racing")["verdict"] == "nondeterministic"


def test_the_rule_itself():
    assert verdict.with_kernels("conforms", ["k"]) == "not-reached"
    assert verdict.with_kernels("no-difference-seen", ["k"]) == "not-reached"
    assert verdict.with_kernels("missing-raise", ["k"]) == "missing-raise"
    assert verdict.with_kernels("conforms", []) == "conforms"
    with pytest.raises(TargetError):
        Targets(("aten.mul",), required={"cpu": ((),)})


GRID = {e.id: e for e in snapshot_entries("2.11.0")}["grid_sample.backward[cuda]"]


def test_grid_sample_backward_covers_cudnns_kernel_on_cuda():
    kernels = program.kernels_for(GRID, {}, "cuda")
    assert ("aten.cudnn_grid_sampler_backward",) in kernels and len(kernels) == 3
    assert program.kernels_for(GRID, {}, "cpu") == ()
    # The H100 row that said conforms: its examples dispatched the native 2-D kernel only.
    evidence = {"aten.grid_sampler_2d.default": 6, "aten.grid_sampler_2d_backward.default": 6}
    assert not all(reached(k, evidence) for k in kernels)


def test_grid_sample_runs_every_route_and_a_device_without_cudnn_is_not_reached():
    """On the emulated GPU (host tensors) the cuDNN route falls back to the native kernel: the
    positive control saw no difference, but never on cuDNN's backward, so it says nothing of it.
    (In error mode the host's deterministic kernel is stale-doc: a failure stands.)"""
    assert program.forms_for(GRID) == ("native 2-D", "native 3-D", "cuDNN")
    assert judge(Case(GRID, "cuda", "error"), emulated_cuda(), hypothesis_settings=FAST)["verdict"] == "stale-doc"
    row = judge(Case(GRID, "cuda", "off"), emulated_cuda(), hypothesis_settings=FAST)
    assert row["verdict"] == "not-reached", row["detail"]
    assert row["detail"]["unreached_kernels"] == ["aten.cudnn_grid_sampler_backward"]
    assert row["detail"]["reach_by_kernel"]["aten.grid_sampler_3d_backward"] > 0


# --- interpolate: the native kernel of each mode, or the route the mode takes off the CPU -------

LINEAR = {e.id: e for e in snapshot_entries("2.11.0")}[
    "interpolate(mode='linear'|'bilinear'|'bicubic'|'trilinear').backward[cuda]"]
DECOMPOSED = {"bilinear": "aten.upsample_bilinear2d_backward", "trilinear": "aten.upsample_trilinear3d_backward"}


def test_interpolate_covers_each_modes_kernel_on_cuda_and_the_decomposition_off_the_cpu():
    assert [program.kernels_for(LINEAR, kw, "cuda") for kw in LINEAR.case_kwargs()] == [
        (("aten.upsample_linear1d_backward",),),
        (("aten.upsample_bilinear2d_backward", "aten._unsafe_index_put"),),
        (("aten.upsample_bicubic2d_backward",),),
        (("aten.upsample_trilinear3d_backward", "aten._unsafe_index_put"),)]
    assert program.targets_for(LINEAR, {"mode": "bilinear"}, "cpu") == ("aten.upsample_bilinear2d_backward",)
    assert program.kernels_for(LINEAR, {"mode": "bilinear"}, "cpu") == ()
    # The H100 row (torch 2.11, error mode) that said conforms at reach 0.5: its bilinear and
    # trilinear programs dispatched the decomposition, which its targets did not name.
    evidence = {"aten._unsafe_index.Tensor": 1, "aten._unsafe_index_put.default": 1, "aten.new_zeros.default": 1}
    assert reached(program.targets_for(LINEAR, {"mode": "bilinear"}, "cuda"), evidence)
    assert not reached(("aten.upsample_bilinear2d_backward",), evidence)


def _gpu(**semantics):
    from tests.emulated_gpu import UPSAMPLE_BACKWARD

    return emulated_cuda(alerts=UPSAMPLE_BACKWARD, **semantics)


def test_interpolate_that_routes_around_its_alert_is_stale_doc_on_cuda():
    """As torch 2.11 on an H100: under the mode, bilinear and trilinear take the decomposition
    (no alert, deterministic) while the docs say differentiating them throws; linear and bicubic
    raise. The case is judged on every mode's route and fails (it said conforms before)."""
    row = judge(Case(LINEAR, "cuda", "error"), _gpu(routes=True), hypothesis_settings=FAST)
    assert row["verdict"] == "stale-doc", row["detail"]
    # the decomposition counts as the bilinear kernel's route (the failure stops the exploration)
    assert row["detail"]["reach_by_kernel"]["aten.upsample_bilinear2d_backward|aten._unsafe_index_put"] > 0
    warn = judge(Case(LINEAR, "cuda", "warn_only"), _gpu(routes=True), hypothesis_settings=FAST)
    assert warn["verdict"] == "missing-warning", warn["detail"]


def test_interpolate_where_every_mode_alerts_conforms():
    for mode in ("error", "warn_only"):
        row = judge(Case(LINEAR, "cuda", mode), _gpu(), hypothesis_settings=FAST)
        assert row["verdict"] == "conforms", (mode, row["detail"])
    row = judge(Case(LINEAR, "cuda", "error", phase="backward-only"), _gpu(routes=True), hypothesis_settings=FAST)
    assert row["verdict"] == "conforms", row["detail"]  # the forward ran with the mode off: native kernels


def test_targets_without_the_decomposition_leave_its_modes_unreached(monkeypatch):
    """The planted fault: targets that name only the native kernels. The kernel sets catch what
    the per-case reach (0.5, conforms) did not."""
    from detconf.conformance import recipes

    monkeypatch.setattr(recipes, "_INTERP_DECOMPOSED", ())
    row = judge(Case(LINEAR, "cuda", "error"), _gpu(routes=True), hypothesis_settings=FAST)
    assert row["verdict"] == "not-reached", row["detail"]
    assert sorted(row["detail"]["unreached_kernels"]) == sorted(DECOMPOSED.values())


def test_a_required_kernel_the_compiler_replaced_is_reached_through_the_same_example_in_eager(monkeypatch):
    """The H100 run of 2026-11-27: interpolate(mode='nearest').backward[complement,cuda] under
    Inductor was `not-reached`, since the compiled graphs hold Inductor's own index_put where eager
    dispatches upsample_nearest*_backward (reach via 'decomposed'). Compiled, a required kernel is
    reached when the compiled program reached the operation and the same example in eager
    dispatched that kernel; an example whose eager run dispatches none of it stays not-reached.
    (On the CPU here, with the CUDA entry's kernel set handed to the judge.)"""
    from collections import Counter

    from detconf.conformance import harness
    from detconf.conformance.complements import complements
    from detconf.engine.compiled import Compiler

    entry = {e.id: e for e in complements(snapshot_entries("2.11.0"))}[
        "interpolate(mode='nearest').backward[complement,cuda]"]
    case = Case(entry, "cpu", "error", compile="inductor")
    cpu = backends()["cpu"]
    prog = harness.drawn_programs(case, cpu.torch_device(), settings(max_examples=1, derandomize=True, database=None,
                                                                     deadline=None), 1)[0]
    kwargs = {"mode": "nearest"}
    targets, kernels = program.targets_for(entry, kwargs, "cuda"), program.kernels_for(entry, kwargs, "cuda")
    assert kernels  # CUDA requires each mode's kernel
    compiler = Compiler("inductor")

    def judged():
        with cpu.active(), compiler.case():
            return harness.judge_program(case, case.expected, cpu, prog, kwargs, targets, compiler=compiler,
                                         kernels=kernels)

    record = judged()
    assert record.verdict == "conforms", record.detail
    assert record.detail["compiled"]["reach_via"] == "decomposed"
    assert list(record.detail["kernels"].values()) == [True]
    monkeypatch.setattr(harness, "eager_ops", lambda *a, **k: Counter())  # eager reaches no required kernel
    assert judged().verdict == "not-reached"
