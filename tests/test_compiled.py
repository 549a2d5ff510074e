"""The compile axis: plan, recording, and planted faults that only compiled code has.

Every verdict here comes through the whole path (recipe -> Hypothesis -> compiled runner ->
verdict -> row). aot_eager keeps most tests fast; Inductor runs where its generated code is
the point (it needs a C++ compiler: the test skips naming it when none is found).
"""
import functools
import json
import types

import pytest
import torch
from hypothesis import settings

from detconf.conformance.catalog import load_catalog
from detconf.conformance.harness import failure_message, judge
from detconf.conformance.plan import Case, plan
from detconf.vocabulary import COMPILERS
from detconf.engine.compiled import Compiler, compile_unavailable, compiled_reach, CompileSnapshot, is_compile_failure
from detconf.engine.devices import backends
from detconf.engine.observation import Observation
from detconf.engine.runner import RunRecord, _classify
from detconf.engine.verdict import verdict_for
from tests.planted import planted_entry

FAST = settings(max_examples=3, derandomize=True, database=None, deadline=None)
CPU = backends()["cpu"]
ALERT = ("put_ does not have a deterministic implementation, but you set "
         "'torch.use_deterministic_algorithms(True)'.")
needs_inductor = pytest.mark.skipif(compile_unavailable("inductor", "cpp") is not None,
                                    reason=f"Inductor unavailable: {compile_unavailable('inductor', 'cpp')}")


def run(op, promise, mode, compile, **kw):
    entry = planted_entry(op, promise, backward=kw.get("backward", False))
    return judge(Case(entry, "cpu", mode, None, "program", compile), CPU, hypothesis_settings=kw.get("settings", FAST))


# -- plan ------------------------------------------------------------------------------------
def test_compiled_cases_carry_their_setting_in_id_and_eager_ids_do_not_change():
    catalog = [e for e in load_catalog(["torch-docs"]) if e.id == "put_(accumulate=False)"]
    cases = plan(catalog, ["cpu"], ["error"], ["eager", "inductor", "aot_eager"])
    assert [c.id for c in cases] == ["put_(accumulate=False)-cpu-error", "put_(accumulate=False)-cpu-error-aot_eager",
                                     "put_(accumulate=False)-cpu-error-inductor"]
    assert Case.from_json(json.loads(json.dumps(cases[2].to_json()))) == cases[2]


def test_backward_only_phase_is_eager_only():
    catalog = [e for e in load_catalog(["torch-docs"]) if e.backward][:3]
    cases = plan(catalog, ["cpu"], ["error"], ["eager", "inductor"])
    assert {c.phase for c in cases if c.compile == "eager"} == {"program", "backward-only"}
    assert {c.phase for c in cases if c.compile == "inductor"} == {"program"}


def test_checks_run_compiled_only_where_they_compile_what_they_observe():
    import detconf.conformance.registry  # noqa: F401
    from detconf.engine.checks import compiles

    catalog = load_catalog(["flag-api", "repro-notes"])
    cases = plan(catalog, ["cpu"], ["error"], ["eager", "inductor"],
                 compiles=lambda e: compiles(e.source, e.id))
    compiled = {c.entry.id for c in cases if c.compile == "inductor"}
    assert compiled and all(i.startswith("fill_uninitialized_memory") for i in compiled)
    assert "fill_uninitialized_memory:default" not in compiled  # a fresh process shows the default: eager only
    assert len({c.entry.id for c in cases if c.compile == "eager"}) == len(catalog)


def test_unknown_compile_setting_is_refused():
    with pytest.raises(ValueError, match="unknown compile setting 'jit'"):
        plan(load_catalog(["flag-api"]), ["cpu"], ["error"], ["jit"])
    with pytest.raises(ValueError):
        Case(planted_entry("planted.deterministic", "deterministic"), "cpu", "error", compile="jit")
    assert COMPILERS == ("eager", "aot_eager", "inductor")


# -- planted faults under compile -------------------------------------------------------------
@pytest.mark.parametrize("mode,verdict", [("error", "stale-doc"), ("warn_only", "missing-warning")])
def test_an_alert_swallowed_by_the_compiled_path_is_caught(mode, verdict):
    eager = run("planted.alert_swallowed_when_compiled", "raises", mode, "eager")
    assert eager["verdict"] == "conforms"
    row = run("planted.alert_swallowed_when_compiled", "raises", mode, "aot_eager")
    assert row["verdict"] == verdict, row["detail"]
    assert row["compile"] == "aot_eager" and row["reach"] == 1.0
    assert row["detail"]["compiled"]["reach_via"] == "decomposed"  # whole program compiled, no break
    assert "under torch.compile(backend='aot_eager')" in failure_message(row)


def test_a_compiled_op_that_returns_different_bytes_per_call_is_nondeterministic():
    assert run("planted.drifts_when_compiled", "deterministic", "error", "eager")["verdict"] == "conforms"
    row = run("planted.drifts_when_compiled", "deterministic", "error", "aot_eager")
    assert row["verdict"] == "nondeterministic"
    assert "bytes differ" in row["detail"]["mismatch"]
    assert row["detail"]["compiled"]["graphs_run"] == [1, 1]  # the same compiled function, called twice


def test_a_compiled_backward_that_drifts_is_caught():
    row = run("planted.grad_changes_every_call", "deterministic", "error", "aot_eager", backward=True)
    assert row["verdict"] == "nondeterministic"
    assert "grad[x]" in row["detail"]["mismatch"]


def test_an_op_left_to_eager_by_a_graph_break_is_unsupported_not_judged_as_compiled():
    row = run("planted.op_left_to_eager", "deterministic", "error", "aot_eager")
    assert row["verdict"] == "unsupported"
    assert row["detail"]["unsupported"].startswith("not compiled: a graph break")
    assert row["graph_breaks"] >= 1 and row["graph_break_reasons"]


def test_a_deterministic_compiled_op_conforms_and_records_its_graphs():
    row = run("planted.reaches_its_kernel", "deterministic", "error", "aot_eager")
    assert row["verdict"] == "conforms" and row["reach"] == 1.0
    assert row["detail"]["compiled"]["reach_via"] == "graph"
    assert any(op.startswith("aten.index_add") for op in row["dispatched"])
    assert row["compile_s"] >= 0 and row["graph_breaks"] == 0


def test_a_kernel_routed_around_under_compile_is_not_reached():
    row = run("planted.routes_around_its_kernel", "deterministic", "error", "aot_eager")
    # Eager does not reach the kernel either: no example is evidence, and nothing is excused as "not compiled".
    assert row["verdict"] == "not-reached"
    assert row["reach"] == 0.0


def test_eager_rows_say_eager_and_carry_no_compile_time():
    row = run("planted.deterministic", "deterministic", "error", "eager")
    assert row["compile"] == "eager" and row["compile_s"] is None and row["graph_breaks"] is None


# -- recognising the alert and compiler failures ----------------------------------------------
def _wrapped(inner: BaseException, outer: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as e:
            raise outer from e
    except BaseException as e:  # noqa: BLE001
        return e


def test_the_alert_is_recognised_inside_the_compilers_exception_types():
    from torch._dynamo.exc import TorchRuntimeError

    record = RunRecord()
    _classify(_wrapped(RuntimeError(ALERT), TorchRuntimeError("Dynamo failed to run FX node")), record, "forward")
    assert record.alert_error.startswith("put_ does not have a deterministic implementation")
    assert record.alert_wrapped == "TorchRuntimeError"


def test_a_compiler_failure_is_unsupported_and_a_plain_error_is_not():
    from torch._dynamo.exc import TorchRuntimeError

    record = RunRecord()
    _classify(_wrapped(ValueError("bad shape"), TorchRuntimeError("lowering failed")), record, "forward")
    assert record.unsupported.startswith("compile failed: TorchRuntimeError")
    assert is_compile_failure(_wrapped(ValueError("x"), TorchRuntimeError("y")))
    plain = RunRecord()
    _classify(ValueError("bad shape"), plain, "forward")
    assert plain.other_error == "ValueError: bad shape" and plain.unsupported is None


def test_an_alert_only_on_stderr_is_a_missing_warning_and_never_silence():
    obs = Observation(runs=2, identical=True, stderr_alerts=["Warning: put_ does not have a deterministic "
                                                             "implementation"], stderr_alert_runs=2)
    assert verdict_for("warns", obs) == "missing-warning"
    assert verdict_for("deterministic-or-warns", obs) == "missing-warning"
    assert verdict_for("deterministic", obs) == "spurious-warning"
    assert verdict_for("deterministic", Observation(runs=2, identical=True)) == "conforms"


def test_compiled_reach_needs_the_program_compiled():
    ran = CompileSnapshot(graphs_run=1)
    ran.ops.update({"aten.index_add.default": 1})
    assert compiled_reach(("aten.index_add",), [ran, ran], True) == (True, "graph")
    lowered = CompileSnapshot(graphs_run=1)
    assert compiled_reach(("aten.put",), [lowered, lowered], True) == (True, "decomposed")
    assert compiled_reach(("aten.put",), [lowered, lowered], False) == (False, None)
    broke = CompileSnapshot(graphs_run=1, graph_breaks=1)
    assert compiled_reach(("aten.put",), [broke, broke], True) == (False, None)
    eager = CompileSnapshot(graphs_run=0)
    assert compiled_reach(("aten.index_add",), [eager, ran], True) == (False, None)
    assert compiled_reach(None, [ran], True) == (None, None)


def test_a_compiler_belongs_to_one_case_and_resets_dynamo():
    compiler = Compiler("aot_eager")
    fn = compiler.compile(lambda x: x * 3)
    with compiler.case():
        with compiler.run() as snap:
            fn(torch.ones(2))
        assert snap.graphs_run == 1 and "aten.mul.Tensor" in snap.ops
        with compiler.run() as again:
            fn(torch.ones(2))
        assert again.graphs_run == 1 and again.compile_s == 0.0  # reused, not compiled again
    with pytest.raises(ValueError):
        Compiler("eager")


def test_the_recording_wrapper_is_not_looked_through_by_dynamo():
    # Dynamo wraps a backend's result in disable(), which (2.5) follows _torchdynamo_orig_callable
    # to the innermost function: a wrapper made with functools.wraps copied that attribute from
    # AOTAutograd's compiled function, was dropped, and every compiled run looked like eager.
    from torch._dynamo.eval_frame import innermost_fn

    from detconf.engine.compiled import _wrapped_like

    def compiled(*args):
        return args

    compiled._boxed_call = True
    compiled._torchdynamo_orig_callable = lambda *args: args
    compiled.__wrapped__ = compiled._torchdynamo_orig_callable

    def wrapper(*args):
        return compiled(*args)

    wrapped = _wrapped_like(wrapper, compiled)
    assert innermost_fn(wrapped) is wrapper and not hasattr(wrapped, "__wrapped__")
    assert wrapped._boxed_call is True and wrapped.__name__ == "compiled"
    compiler = Compiler("aot_eager")
    with compiler.case():
        fn = compiler.compile(lambda x: x * 3)
        with compiler.run() as snap:
            fn(torch.ones(2))
    assert snap.graphs_run == 1, snap  # 0 on torch 2.5.1 with the old wrapper


def _flush_denormal_supported() -> bool:
    from detconf.engine.compiled import flushes_denormals

    was = flushes_denormals()
    try:
        return bool(torch.set_flush_denormal(True)) and flushes_denormals()
    finally:
        torch.set_flush_denormal(was)


def test_a_compile_that_switches_on_flush_to_zero_leaves_it_as_it_was():
    from detconf.engine.compiled import flushes_denormals, keeping_denormals

    if not _flush_denormal_supported():
        pytest.skip("this CPU has no flush-to-zero mode torch can set (torch.set_flush_denormal returns False)")
    assert not flushes_denormals()
    owner = types.SimpleNamespace()
    with keeping_denormals(owner):
        torch.set_flush_denormal(True)  # what loading a -ffast-math kernel does (crtfastmath.o)
        assert flushes_denormals()
    assert not flushes_denormals() and owner.denormals_restored == 1
    try:  # a process that flushed before (the user's choice) is left so
        torch.set_flush_denormal(True)
        with keeping_denormals():
            pass
        assert flushes_denormals()
    finally:
        torch.set_flush_denormal(False)


@needs_inductor
def test_an_inductor_compile_leaves_the_process_denormals_as_they_were():
    # Inductor 2.5.1 built its C++ kernels with -ffast-math; GCC < 13 links crtfastmath.o into the
    # shared object, which set FTZ/DAZ on load: every later case of the worker flushed subnormals,
    # and Hypothesis refused to draw floats ("we can't represent subnormal floats right now").
    from hypothesis import given
    from hypothesis import strategies as st

    from detconf.engine.compiled import flushes_denormals

    assert not flushes_denormals()
    compiler = Compiler("inductor")
    with compiler.case():
        fn = compiler.compile(lambda x: x * 2 + 1)
        with compiler.run() as snap:
            out = fn(torch.ones(4))
        assert not flushes_denormals()
    assert snap.graphs_run == 1 and torch.equal(out, torch.full((4,), 3.0))
    assert not flushes_denormals()

    @FAST
    @given(st.floats(-1.0, 1.0))
    def draws(value):
        assert -1.0 <= value <= 1.0

    draws()


def _square_sum(x, *, k):
    return (x * x * k).sum()


def _cube_sum(x, *, k):
    return (x * x * x * k).sum()


def test_a_backward_compiled_at_the_first_backward_call_counts_as_compiling(monkeypatch):
    # AOTAutograd compiles the backward graph lazily, outside the backend call: its seconds
    # are compiling all the same, not the op's run time.
    import time
    import torch._dynamo.backends.debugging as debugging

    compiled = []
    real = debugging.boxed_nop

    def slow(gm, example_inputs):
        compiled.append(gm)
        time.sleep(0.3)
        return real(gm, example_inputs)

    monkeypatch.setattr(debugging, "boxed_nop", slow)
    compiler = Compiler("aot_eager")
    x = torch.ones(3, requires_grad=True)
    with compiler.case():
        fn = compiler.compile(functools.partial(_square_sum, k=2))
        with compiler.run() as forward:
            out = fn(x)
        with compiler.run() as backward:
            out.backward()
    assert len(compiled) == 2 and torch.equal(x.grad, torch.full((3,), 4.0))
    assert forward.compile_s >= 0.3 and backward.compile_s >= 0.3
    assert compiler.compile_s >= 0.6 and compiler.compile_s == pytest.approx(forward.compile_s + backward.compile_s)


def test_compiled_functions_are_specialised_to_their_sizes_never_traced_symbolically(monkeypatch):
    # Every partial runs through one wrapper frame of Dynamo's: with automatic dynamic shapes,
    # the second op function of a case (another size) would be traced with symbolic sizes.
    import torch._dynamo.backends.debugging as debugging

    inputs = []
    real = debugging.boxed_nop

    def seeing(gm, example_inputs):
        inputs.append(list(example_inputs))
        return real(gm, example_inputs)

    monkeypatch.setattr(debugging, "boxed_nop", seeing)
    compiler = Compiler("aot_eager")
    with compiler.case():
        for op, size in ((_square_sum, 2), (_cube_sum, 3), (_square_sum, 5)):
            fn = compiler.compile(functools.partial(op, k=2))
            with compiler.run():
                fn(torch.ones(size))
    assert len(inputs) == 3
    symbolic = [i for graph in inputs for i in graph
                if isinstance(i, torch.SymInt) or (isinstance(i, torch.Tensor) and not all(
                    type(s) is int for s in i.shape))]
    assert not symbolic, symbolic


# -- Inductor ----------------------------------------------------------------------------------
@needs_inductor
def test_inductor_runs_the_planted_swallowed_alert_and_a_real_alerting_op():
    row = run("planted.alert_swallowed_when_compiled", "raises", "error", "inductor")
    assert row["verdict"] == "stale-doc"
    assert row["compile_s"] > 0


def test_inductor_without_a_cxx_compiler_is_unsupported(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    assert "C++ compiler" in compile_unavailable("inductor", "cpp")
    row = run("planted.deterministic", "deterministic", "error", "inductor")
    assert row["verdict"] == "unsupported" and "C++ compiler" in row["detail"]["unsupported"]
    assert compile_unavailable("aot_eager", "cpp") is None


def _catalog_case(entry_id, mode, compile):
    entry = next(e for e in load_catalog(["torch-docs"]) if e.id == entry_id)
    return Case(entry, "cpu", mode, None, "program", compile)


def test_an_alert_raised_while_dynamo_traces_counts_as_the_documented_raise():
    """MaxUnpool1d's fake-tensor run raises the alert while Dynamo traces, before any graph
    exists; the user gets the RuntimeError (wrapped), which is what the docs promise."""
    row = judge(_catalog_case("MaxUnpool1d", "error", "aot_eager"), CPU, hypothesis_settings=FAST)
    assert row["verdict"] == "conforms", row["detail"]
    assert row["reach"] == 1.0 and row["detail"]["compiled"]["reach_via"] == "alert"
    assert row["detail"]["raised"].startswith("max_unpooling")  # the op's own sentence, not Dynamo's wrapper
    assert row["detail"]["alert_wrapped"]


def test_compiled_against_eager_is_adjudicated_by_a_float64_reference():
    """Compiled != eager is no wrong result when eager's own low-precision arithmetic strays:
    a float64 eager reference decides (a compiled result that misses it too is wrong)."""
    row = run("planted.eager_low_precision_strays", "deterministic", "error", "aot_eager")
    assert row["verdict"] == "conforms", row["detail"]
    assert "agrees with a float64 eager reference" in row["detail"]["compiled"]["eager_differs"]
    wrong = run("planted.wrong_when_compiled", "deterministic", "error", "aot_eager")
    assert wrong["verdict"] == "wrong-result"
    assert "float64 eager reference" in wrong["detail"]["wrong_result"]


# -- the plugin --------------------------------------------------------------------------------
def test_compile_option_runs_the_axis_side_by_side_with_eager_in_a_private_cache(tmp_path):
    import glob
    import tempfile

    from tests.test_plugin import pytest_run, read_rows

    before = set(glob.glob(f"{tempfile.gettempdir()}/detconf-compile-*"))
    out = pytest_run("--source", "torch-docs", "-k", "put_", "--device", "cpu",
                     "--compile", "eager", "--compile", "aot_eager", "--hypothesis-profile", "ci", "-n", "2",
                     "--results", str(tmp_path / "r.jsonl"), "--no-report-build", timeout=600)
    assert set(glob.glob(f"{tempfile.gettempdir()}/detconf-compile-*")) == before  # the cache folder went with the run
    run, rows = read_rows(tmp_path / "r.jsonl")
    rows = [r for r in rows if r["entry_id"] == "put_(accumulate=False)"]
    assert run["env"]["compile"] == ["eager", "aot_eager"]
    cells = {(r["mode"], r["compile"]): r for r in rows}
    assert set(cells) == {("error", "eager"), ("warn_only", "eager"), ("error", "aot_eager"), ("warn_only", "aot_eager")}
    assert cells[("error", "aot_eager")]["verdict"] == "conforms"
    # The row names the test as pytest does: without the "@group" xdist's loadgroup adds on workers.
    assert cells[("error", "aot_eager")]["nodeid"].endswith("::test_documented[put_(accumulate=False)-cpu-error-aot_eager]")
    # The C++-only warning under aot_eager: missing-warning on 2.11 to 2.14. Where the known
    # finding's torch range covers this torch, it is recorded and the test xfails, not fails; on
    # a release the finding has not been confirmed for, the run fails naming the case.
    from detconf.conformance.findings import known_finding, load_findings

    warn = cells[("warn_only", "aot_eager")]
    recorded = known_finding(dict(warn, verdict="missing-warning"), load_findings())
    if warn["verdict"] == "conforms":
        # The Python warning reaches warnings (torch 2.15.0 on the CPU): the finding's range must
        # leave this torch out, and the run passes.
        assert recorded is None or recorded.verdict != "missing-warning", recorded
        assert "known_finding" not in warn["detail"] and out.returncode == 0, out.stdout[-3000:]
        return
    assert warn["verdict"] == "missing-warning"
    recorded = known_finding(warn, load_findings())
    if recorded is not None and recorded.verdict == "missing-warning":
        assert warn["detail"]["known_finding"] == recorded.why
        assert out.returncode == 0, out.stdout[-3000:]
    else:
        assert "known_finding" not in warn["detail"]
        assert out.returncode == 1, out.stdout[-3000:]
        assert "put_(accumulate=False)-cpu-warn_only-aot_eager" in out.stdout


def test_an_unknown_compile_setting_is_a_one_line_usage_error(tmp_path):
    from tests.test_plugin import pytest_run

    out = pytest_run("--compile", "jit", "--results", str(tmp_path / "r.jsonl"), "--collect-only")
    assert out.returncode == 4
    assert "argument --compile: invalid choice: 'jit'" in out.stderr


def test_the_rerun_command_of_a_compiled_case_keeps_the_compile_setting():
    import types
    from pathlib import Path

    from detconf.plugin.rerun import rerun_command

    option = types.SimpleNamespace(source=["torch-docs"], doc_version=None, no_complements=False, mode=["error"],
                                   runs=2, isolate=False, results="r.jsonl", detconf_compile=["eager", "inductor"])
    config = types.SimpleNamespace(option=option, _detconf_backends=[CPU],
                                   getoption=lambda name: getattr(option, name.lstrip("-").replace("-", "_")))
    node = types.SimpleNamespace(path=Path("/suite/conformance/test_documented.py"),
                                 name="test_documented[put_(accumulate=False)-cpu-error-inductor]")
    rerun = rerun_command(config, node)
    assert "--compile eager --compile inductor" in rerun and "-cpu-error-inductor]" in rerun
    option.detconf_compile = None  # eager only: nothing to add, the ids have no suffix
    assert "--compile" not in rerun_command(config, node)


# -- Inductor's question about the CPU, asked outside the run's own cache folder ---------------
@pytest.fixture
def not_asked_yet(monkeypatch):
    """:func:`ask_vector_isa` as in a process that has not asked; Inductor's answer faked: the
    list holds the cache folder each question was asked in (None: torch's default)."""
    import os

    from torch._inductor import cpu_vec_isa

    from detconf.engine import compiled

    monkeypatch.setattr(compiled, "_vector_isa_asked", False)
    monkeypatch.setattr(compiled, "_vector_isa_problem", None)
    asked: list = []
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list",
                        lambda: asked.append(os.environ.get("TORCHINDUCTOR_CACHE_DIR")) or [])
    monkeypatch.delenv(compiled.OUTSIDE_CACHE_VAR, raising=False)
    return asked


@pytest.mark.parametrize("named", [True, False])
def test_the_cpus_vector_sets_are_asked_once_in_the_folder_named_before_the_runs_own(named, not_asked_yet, monkeypatch,
                                                                                    tmp_path):
    import os

    from detconf.engine import compiled
    from detconf.engine.compiled import OUTSIDE_CACHE_VAR, ask_vector_isa, private_cache

    if named:
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    else:
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with private_cache() as folder:
        assert os.environ[OUTSIDE_CACHE_VAR] == (str(tmp_path / "mine") if named else "")
        with private_cache() as inner:  # a folder inside a run's own keeps what the run found
            assert os.environ[OUTSIDE_CACHE_VAR] == (str(tmp_path / "mine") if named else "")
        assert ask_vector_isa(ask=False) is False and not_asked_yet == []  # a graph for another device
        assert ask_vector_isa() is True
        assert not_asked_yet == [str(tmp_path / "mine") if named else None]  # None: torch's default folder
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == folder != inner
        assert ask_vector_isa() is False and len(not_asked_yet) == 1  # once per process
    assert OUTSIDE_CACHE_VAR not in os.environ
    monkeypatch.setattr(compiled, "_vector_isa_asked", False)
    assert ask_vector_isa() is False and len(not_asked_yet) == 1  # no run's own folder: Inductor asks where it compiles


@needs_inductor
def test_a_torch_that_keeps_the_folder_it_was_asked_in_makes_every_inductor_case_a_harness_error(not_asked_yet,
                                                                                                 monkeypatch, tmp_path):
    from detconf.engine import compiled

    outside = str(tmp_path / "outside")
    monkeypatch.setattr(compiled, "_inductor_cache_dir", lambda: outside)  # as a torch that memoized it would answer
    with compiled.private_cache() as folder:
        rows = [run("planted.alert_swallowed_when_compiled", "raises", "error", "inductor") for _ in range(2)]
    for row in rows:
        assert row["verdict"] == "harness-error", row["detail"]
        assert (f"Inductor kept the cache folder it was asked about the CPU in ({outside}) instead of the run's own "
                f"({folder})") in row["detail"]["error"]
    assert len(not_asked_yet) == 1


@needs_inductor
def test_a_run_builds_no_probe_of_the_cpu_in_its_own_folder_and_keeps_its_kernels_there(tmp_path):
    """In a fresh process (Inductor keeps its answer for the process's life): the first Inductor
    case's question goes to torch's default folder; the kernel the case compiles is built in the
    run's own folder, with none of Inductor's probes beside it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "one_compile.py"
    script.write_text("""
import json, os, sys
import torch
from torch._inductor.cpu_vec_isa import VecISA
from detconf.engine.compiled import Compiler, private_cache
with private_cache() as folder:
    compiler = Compiler("inductor", "cpp")
    with compiler.case():
        compiler.compile(lambda x: (x.sin() * 3).cumsum(0))(torch.randn(16))
    sources = [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs if f.endswith(".cpp")]
    probe = VecISA._avx_code.strip()  # the source Inductor builds per instruction set
    print(json.dumps({"sources": len(sources), "probes": sum(probe in open(p).read() for p in sources)}))
""")
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH"))
                                        if p)  # this checkout's detconf, whatever else the environment names
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["sources"] >= 1 and found["probes"] == 0, found
