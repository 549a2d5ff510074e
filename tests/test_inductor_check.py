"""The ``torch.compile:deterministic`` check (conformance/checks/inductor.py) owns its compiled state.

On an H100 (torch 2.11) all three CUDA cells were ``harness-error``: ``FailOnRecompileLimitHit``
under ``fullgraph=True``. Dynamo caches compiled code per code object and guards on global state
(each mode, each device, the thread count recompile ``_program``), and off the CPU the harness runs
a check inside its dispatch trace, whose ``__torch_dispatch__`` Dynamo then traces and recompiles
per operator: the limit (8) came in the first example. On ``--device opencl`` Inductor's "Device
opencl not supported" was a harness error too. Here, on the CPU with Inductor's C++ backend:

- (a) the check, run many times in one process under more than 8 distinct guard states, after
  ``_program`` was compiled elsewhere under 12 more ("another device"), never hits the limit;
- (b) a device Inductor cannot compile for is ``unsupported``, naming the device, never
  ``harness-error``;
- (c) a planted nondeterministic compiled program is ``violated``; an honest one ``conforms``
  with the evidence that compiled graphs ran;
- (d) a program Dynamo leaves to eager (wholly, or past a graph break) is ``unsupported``: it is
  no evidence about compiled code;
- the check runs compiled code inside the dispatch trace the harness opens off the CPU (where the
  old check recompiled the trace's ``__torch_dispatch__`` until the limit: the H100's failure).

Without a C++ compiler these tests skip, naming what is missing.
"""
from __future__ import annotations

import contextlib
import types
from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import detconf.conformance.registry  # noqa: F401  (registers the checks)
from detconf.conformance.checks import inductor, load_check_entries
from detconf.conformance.harness import judge
from detconf.conformance.plan import Case
from detconf.engine.checks import CheckObservation, CheckUnsupported, check_for
from detconf.engine.determinism import preserved_global_state
from detconf.engine.devices import backends
from detconf.engine.trace import DispatchTrace

CPU = torch.device("cpu")
CPU_BACKEND = backends()["cpu"]
MODES = ("error", "warn_only", "off")
ENTRY = next(e for e in load_check_entries("repro-notes") if e.id == "torch.compile:deterministic")
CHECK = check_for("repro-notes", ENTRY.id)
FAST = settings(max_examples=2, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(autouse=True)
def _inductor_cpu():
    lack = inductor._compile_unavailable(CPU)
    if lack is not None:
        pytest.skip(f"Inductor cannot compile for the CPU here: {lack}")
    yield
    torch._dynamo.reset()  # no compiled state of these tests reaches the next test


def observe(mode: str, *, examples: int = 1, device: torch.device = CPU):
    """The check's observations (or the CheckUnsupported it raised) under Hypothesis, as the harness
    draws them; any other exception propagates."""
    seen = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True, phases=("generate",),
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        try:
            seen.append(CHECK(lambda strategy, label=None: data.draw(strategy, label=label), ENTRY, device, mode))
        except CheckUnsupported as lack:
            seen.append(lack)

    run()
    return seen


@contextlib.contextmanager
def guard_state(grad: bool, threads: int):
    """A global state Dynamo guards on (grad mode, thread count), put back afterwards."""
    saved_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        with torch.set_grad_enabled(grad):
            yield
    finally:
        torch.set_num_threads(saved_threads)


def _recompile_limit_error() -> type[Exception]:
    """Dynamo's hard failure at its recompile limit under ``fullgraph=True``:
    ``FailOnRecompileLimitHit`` (2.7+), ``FailOnCacheLimitHit`` before the rename, and
    ``CacheLimitExceeded`` ("cache_size_limit reached") in 2.5 and earlier."""
    exc = torch._dynamo.exc
    for name in ("FailOnRecompileLimitHit", "FailOnCacheLimitHit", "CacheLimitExceeded"):
        if hasattr(exc, name):
            return getattr(exc, name)
    raise AssertionError(f"torch {torch.__version__}: torch._dynamo.exc has no recompile-limit exception")


#: 2 x 2 x 3 = 12 distinct guard states: more than Dynamo's recompile limit of 8.
GUARD_STATES = [(grad, threads, mode) for grad in (True, False) for threads in (1, 2) for mode in MODES]


def _judge(mode: str, backend=CPU_BACKEND, device: str = "cpu", hypothesis_settings=FAST) -> dict:
    return judge(Case(ENTRY, device, mode), backend, hypothesis_settings=hypothesis_settings)


# ---------------------------------------------------------------------------
# (a) no recompile limit, whatever ran before in the process


def test_a_many_guard_states_in_one_process_never_hit_the_recompile_limit():
    assert len(set(GUARD_STATES)) > 8
    seen = {}
    for grad, threads, mode in GUARD_STATES:  # the old check raised FailOnRecompileLimitHit at the 9th
        with guard_state(grad, threads):
            (seen[grad, threads, mode],) = observe(mode)
    for (grad, threads, mode), obs in seen.items():
        assert isinstance(obs, CheckObservation), f"{grad=} {threads=} {mode}: {obs}"
        assert obs.detail["graphs_run"] == [1, 1]
        if mode != "off":
            assert obs.held is True, obs.detail


def test_a_program_compiled_elsewhere_under_other_global_state_does_not_count_against_the_check():
    # "Another device": _program compiled by someone else in this process under 12 guard states
    # (the code object's cache is shared by every torch.compile of it), never reset.
    elsewhere = torch.compile(inductor._program, backend="eager", fullgraph=True, dynamic=False)
    args = (torch.randn(inductor.ROWS, inductor.COLS), torch.zeros(inductor.UPDATES, dtype=torch.long),
            torch.zeros(inductor.UPDATES, inductor.COLS, dtype=torch.long), torch.randn(inductor.UPDATES, inductor.COLS))
    for grad, threads, mode in GUARD_STATES:
        with preserved_global_state(), guard_state(grad, threads):
            inductor.enter_mode(mode)
            with contextlib.suppress(_recompile_limit_error()):
                elsewhere(args[0].clone(), *args[1:])
    seen = {mode: observe(mode)[0] for mode in MODES}  # the old check: FailOnRecompileLimitHit
    for mode, obs in seen.items():
        assert isinstance(obs, CheckObservation), f"{mode}: {obs}"
        assert obs.detail["graphs_run"] == [1, 1]


def test_a_harness_rows_for_three_modes_after_a_full_cache_are_judged():
    elsewhere = torch.compile(inductor._program, backend="eager", fullgraph=True, dynamic=False)
    args = (torch.randn(inductor.ROWS, inductor.COLS), torch.zeros(inductor.UPDATES, dtype=torch.long),
            torch.zeros(inductor.UPDATES, inductor.COLS, dtype=torch.long), torch.randn(inductor.UPDATES, inductor.COLS))
    for grad, threads, mode in GUARD_STATES:
        with preserved_global_state(), guard_state(grad, threads):
            inductor.enter_mode(mode)
            with contextlib.suppress(_recompile_limit_error()):
                elsewhere(args[0].clone(), *args[1:])
    verdicts = {mode: _judge(mode)["verdict"] for mode in MODES}
    assert verdicts == {"error": "conforms", "warn_only": "conforms", "off": "recorded"}


# ---------------------------------------------------------------------------
# (b) a device Inductor cannot compile for: unsupported, naming the device


@pytest.fixture
def inductor_refuses_the_device(monkeypatch):
    """Inductor finds no wrapper code generator for the device, as for a PrivateUse1 device it has
    no backend for: graph.py's own "Device <type> not supported" (its caches are off, so that a
    cached kernel cannot answer in its place)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch._inductor.graph as graph

    if not hasattr(graph, "get_wrapper_codegen_for_device"):
        pytest.skip(f"torch {torch.__version__}: torch._inductor.graph has no get_wrapper_codegen_for_device to plant")
    monkeypatch.setattr(graph, "get_wrapper_codegen_for_device", lambda *args, **kwargs: None)
    # The config modules' own patch(), not monkeypatch: their settings live in the module's
    # _config, not its __dict__, so monkeypatch's undo deletes the key (pytest sees no __dict__
    # entry to restore) and, on 2.5's config module, every later read of it raises KeyError.
    with contextlib.ExitStack() as stack:
        stack.enter_context(inductor_config.patch(fx_graph_cache=False))
        if hasattr(functorch_config, "enable_autograd_cache"):
            stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
        torch._dynamo.reset()
        yield


def test_b_a_device_inductor_refuses_is_unsupported_naming_it(inductor_refuses_the_device):
    for mode in ("error", "off"):
        (lack,) = observe(mode)
        assert isinstance(lack, CheckUnsupported), lack
        assert "Inductor cannot compile for device 'cpu'" in str(lack)
        assert "Device cpu not supported" in str(lack)


def test_b_through_the_harness_the_row_is_unsupported_not_harness_error(inductor_refuses_the_device):
    row = _judge("error")
    assert row["verdict"] == "unsupported", row["detail"]
    assert "Device cpu not supported" in row["detail"]["unsupported"]


def _inductor_error(inner: Exception) -> Exception:
    exc_type = getattr(torch._inductor.exc, "InductorError", None)
    if exc_type is not None:
        return exc_type(inner, None)
    try:  # older releases: Dynamo's own wrapper, whose signature changed over time
        return torch._dynamo.exc.BackendCompilerFailed(lambda *a: None, inner, None)
    except TypeError:
        return torch._dynamo.exc.BackendCompilerFailed(lambda *a: None, inner)


def test_b_inductors_error_for_opencl_names_the_device():
    import torch._inductor.exc  # noqa: F401

    opencl = types.SimpleNamespace(type="opencl")
    wrapped = _inductor_error(AssertionError("Device opencl not supported"))
    lack = inductor._compile_failure(wrapped, opencl)
    assert isinstance(lack, CheckUnsupported)
    assert "Inductor cannot compile for device 'opencl'" in str(lack) and "Device opencl not supported" in str(lack)
    # Raised from inside the compiled call (Dynamo wraps the backend's error, cause kept).
    try:
        try:
            raise wrapped
        except Exception as inner:
            raise RuntimeError("compile_wrapper") from inner
    except RuntimeError as outer:
        assert "'opencl'" in str(inductor._compile_failure(outer, opencl))


def test_b_the_recompile_limit_stays_a_harness_error():
    exc = _recompile_limit_error()("Hard failure due to fullgraph=True")
    assert inductor._compile_failure(exc, CPU) is None


def test_b_the_ops_own_error_is_not_a_compile_failure():
    assert inductor._compile_failure(RuntimeError("index out of range"), CPU) is None


# ---------------------------------------------------------------------------
# (c) planted faults: the verdict turns red


def _planted_nondeterministic(x, index, index2d, src):
    added, put, scattered, reduced = _honest(x, index, index2d, src)
    return added + torch.rand_like(added), put, scattered, reduced  # a fresh draw in every call


_honest = inductor._program


def test_c_a_nondeterministic_compiled_program_is_violated(monkeypatch):
    monkeypatch.setattr(inductor, "_program", _planted_nondeterministic)
    for mode in ("error", "warn_only"):
        (obs,) = observe(mode)
        assert obs.held is False and obs.observed == "differs:index_add", obs
        assert obs.detail["graphs_run"] == [1, 1]
    row = _judge("error")
    assert row["verdict"] == "violated" and row["observed"] == "differs:index_add"
    (obs,) = observe("off")
    assert obs.held is None  # informational with the mode off


def test_c_the_honest_program_conforms_with_evidence_that_compiled_code_ran():
    row = _judge("error")
    assert row["verdict"] == "conforms", row["detail"]
    assert row["detail"]["graphs_run"] == [1, 1]
    assert row["detail"]["inductor_deterministic"] in ("True", "absent")


# ---------------------------------------------------------------------------
# (d) no compiled code ran: no evidence


_in_eager = torch._dynamo.disable(_honest)


def _all_in_eager(x, index, index2d, src):
    return _in_eager(x, index, index2d, src)  # Dynamo may not trace into it: the whole program runs in eager


def test_d_a_program_dynamo_leaves_to_eager_is_unsupported(monkeypatch):
    monkeypatch.setattr(inductor, "_program", _all_in_eager)
    (lack,) = observe("error")
    assert isinstance(lack, CheckUnsupported), lack
    assert "no compiled graph ran" in str(lack)


def _breaks(x, index, index2d, src):
    added = x.index_add(0, index, src)
    torch._dynamo.graph_break()
    return added, *_honest(x, index, index2d, src)[1:]


def test_d_a_graph_break_is_unsupported(monkeypatch):
    monkeypatch.setattr(inductor, "_program", _breaks)
    (lack,) = observe("error")
    assert isinstance(lack, CheckUnsupported), lack
    assert "graph break" in str(lack)


# ---------------------------------------------------------------------------
# Off the CPU the harness traces a check's operators (a TorchDispatchMode around the check). Dynamo
# compiles under an active mode by tracing the mode's own __torch_dispatch__, which under
# fullgraph=True recompiled once per operator and hit the recompile limit in the first example:
# the H100's harness-error, reproduced here on the CPU. The check runs its program outside the mode.


def test_a_the_check_inside_the_harness_dispatch_trace_runs_compiled_code():
    with DispatchTrace() as trace:  # the old check: FailOnRecompileLimitHit in the first example
        (obs,) = observe("error")
    assert obs.held is True and obs.detail["graphs_run"] == [1, 1]
    assert not any("index_put" in op or "scatter_add" in op for op in trace.ops), trace.ops


@pytest.mark.parametrize("mode", MODES)
def test_a_a_device_other_than_the_cpu_gets_a_judged_row(mode):
    # A device of its own name whose tensors are CPU tensors: the harness opens its dispatch trace
    # around the check, as for cuda or opencl (the old check: harness-error in every mode).
    fakedev = replace(CPU_BACKEND, name="fakedev", torch_device_for=lambda index: CPU)
    row = _judge(mode, backend=fakedev, device="fakedev")
    assert row["verdict"] == ("recorded" if mode == "off" else "conforms"), row["detail"]
    assert row["detail"]["graphs_run"] == [1, 1]
