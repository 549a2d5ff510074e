"""The perturbation tier: planted faults that only show across fresh processes or under
disturbance are caught by it and missed by the normal tier (both verdicts shown), and what a
row says about its processes, its perturbations and its sensitivity."""
import json

import pytest
from hypothesis import settings

from detconf.conformance.harness import judge
from detconf.conformance.perturbed import judge_perturbed, merge_rows
from detconf.conformance.plan import Case
from detconf.engine.devices import backends
from detconf.engine.perturb import PERTURBATIONS, distortion_variable
from tests import planted, planted_perturb  # noqa: F401  (registers the planted recipes here)
from tests.planted import planted_entry

CI = settings(max_examples=6, derandomize=True, database=None, deadline=None)
CPU = backends()["cpu"]
IMPORTS = ("tests.planted", "tests.planted_perturb")


def case(op: str, mode: str = "error", promise: str = "deterministic") -> Case:
    return Case(planted_entry(op, promise), "cpu", mode)


def normal(op: str, mode: str = "error") -> dict:
    return judge(case(op, mode), CPU, hypothesis_settings=CI)


def perturbed(op: str, mode: str = "error") -> dict:
    return judge_perturbed(case(op, mode), profile="ci", runs=2, imports=IMPORTS)


def test_a_result_that_depends_on_the_process_is_caught_only_across_processes():
    assert normal("planted.depends_on_process")["verdict"] == "conforms"
    row = perturbed("planted.depends_on_process")
    assert row["verdict"] == "nondeterministic", row["detail"]
    across = row["detail"]["across_processes"]
    assert across["differing"] == across["compared"] > 0
    assert across["first"]["processes"] == [0, 1] and len(set(across["first"]["fingerprints"])) == 2
    assert "across processes [0, 1] (runs agreed within each)" in row["detail"]["shown_by"]
    assert "processes [0, 1] gave different bytes" in row["detail"]["mismatch"]


def test_a_kernel_that_reads_memory_it_never_wrote_is_caught_by_the_scribble():
    assert normal("planted.reads_stale_memory")["verdict"] == "conforms"
    row = perturbed("planted.reads_stale_memory")
    assert row["verdict"] == "nondeterministic", row["detail"]
    assert "bytes differ" in row["detail"]["mismatch"]  # within one process: the runs themselves
    assert row["detail"]["shown_by"] == "process 0 on its own (runs within it; between or during them: scribbled-memory)"
    assert "scribbled-memory" in row["detail"]["perturbations"]


@pytest.mark.skipif(distortion_variable() is None, reason="this torch's Inductor cannot distort benchmarks")
def test_a_choice_made_by_benchmarking_is_caught_by_the_distortion():
    assert normal("planted.benchmark_choice")["verdict"] == "conforms"
    row = perturbed("planted.benchmark_choice")
    assert row["verdict"] == "nondeterministic", row["detail"]
    assert "distortion none vs inverse" in row["detail"]["shown_by"]
    assert [p["distortion"] for p in row["detail"]["processes"]] == ["none", "inverse"]



def test_a_case_that_writes_much_to_stderr_is_judged_not_timed_out():
    """The zygote's forked processes share its standard error, a pipe: unread, it fills at 64 KiB
    and every process writing to it stops, until the case times out. The parent reads it as it
    comes (its last lines name a zygote that died). Planted (the pipe left unread), the case is a
    harness-error after the timeout."""
    row = judge_perturbed(case("planted.writes_to_stderr"), profile="ci", runs=2, imports=IMPORTS, timeout=60)
    assert row["verdict"] == "conforms", row["detail"]


def test_a_zygote_that_died_is_named_with_the_last_of_its_stderr():
    from detconf.conformance.perturbed import Zygote

    zygote = Zygote("ci", ("tests.no_such_module_for_the_zygote",))
    try:
        zygote.child.wait(timeout=120)
        with pytest.raises(RuntimeError, match=r"the zygote ended \(1\): .*No module named 'tests\.no_such_module"):
            zygote.ask({"case": None}, timeout=10)
    finally:
        zygote.close()

def test_a_deterministic_op_conforms_and_the_row_names_every_perturbation():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a test worker under -n 2 has one: the one-thread probe would have nothing to compare
    try:
        row = perturbed("planted.deterministic")
    finally:
        torch.set_num_threads(threads)
    assert row["verdict"] == "conforms", row["detail"]
    detail = row["detail"]
    assert detail["tier"] == "perturb" and row["runs"] == 2 * 2
    across = detail["across_processes"]
    assert across["compared"] == across["inputs_checked"] > 0 and across["differing"] == 0
    applied = set(detail["perturbations"])
    assert {"fresh-process", "empty-compile-cache", "fixed-threads", "scribbled-memory"} <= applied <= set(PERTURBATIONS)
    assert ("distorted-benchmarking" in applied) == (distortion_variable() is not None)
    processes = detail["processes"]
    assert len({p["pid"] for p in processes}) == 2 and len({p["threads"] for p in processes}) == 1
    assert detail["sensitivity"]["threads"]["compared"] > 0 and "per_example" not in detail


def test_mode_off_differences_across_processes_are_sensitivity_never_a_failure():
    row = perturbed("planted.depends_on_process", mode="off")
    assert row["verdict"] == "nondeterminism-seen"
    assert row["detail"]["sensitivity"]["across_processes"] == "differs"
    quiet = perturbed("planted.deterministic", mode="off")
    assert quiet["verdict"] == "no-difference-seen" and quiet["detail"]["sensitivity"]["across_processes"] == "same"


def _process_row(per_example, verdict="conforms", pid=1):
    return {"verdict": verdict, "observed": "deterministic", "runs": 2, "expected": "deterministic",
            "detail": {"per_example": per_example, "process": {"pid": pid, "index": 0, "perturbations": []}}}


def test_processes_that_drew_other_inputs_are_a_harness_error():
    rows = [_process_row([["aaa", "f1", None]]), _process_row([["bbb", "f1", None]], pid=2)]
    row = merge_rows(case("planted.deterministic"), rows)
    assert row["verdict"] == "harness-error" and "did not judge the same examples" in row["detail"]["error"]


def test_a_process_that_crashed_is_a_harness_error():
    rows = [_process_row([["aaa", "f1", None]]), {"crashed": "the process ended (signal 9) without a row"}]
    row = merge_rows(case("planted.deterministic"), rows)
    assert row["verdict"] == "harness-error" and "process 1: the process ended (signal 9)" in row["detail"]["error"]


def test_a_failure_within_one_process_stands_and_is_attributed_to_it():
    rows = [_process_row([["aaa", "f1", None]]), _process_row([["aaa", None, None]], verdict="nondeterministic", pid=2)]
    row = merge_rows(case("planted.deterministic"), rows)
    assert row["verdict"] == "nondeterministic" and row["detail"]["shown_by"] == "process 1 on its own (runs within it)"


def test_outputs_of_a_documented_alert_may_differ_across_processes():
    # warn_only on an op documented to throw: it warns and runs its nondeterministic kernel, so
    # fresh processes may give other bytes (memory it never wrote); that is no missing warning.
    rows = [_process_row([["aaa", "f1", None]]), _process_row([["aaa", "f2", None]], pid=2)]
    for r in rows:
        r.update(observed="warned+nondeterministic", expected="warns")
    alert = Case(planted_entry("planted.deterministic", "raises"), "cpu", "warn_only")
    assert alert.expected == "warns"
    row = merge_rows(alert, rows)
    assert row["verdict"] == "conforms" and row["detail"]["across_processes"]["differing"] == 1
    # The same difference where determinism is promised is a verdict.
    promised = merge_rows(case("planted.deterministic"), [_process_row([["aaa", "f1", None]]),
                                                          _process_row([["aaa", "f2", None]], pid=2)])
    assert promised["verdict"] == "nondeterministic"


WARM_UP_CHECK = """
import gc, os, sys
from hypothesis import given, settings, strategies as st
from detconf.engine.perturb import warm_up
if sys.argv[1] == "warm":
    warm_up()
frozen = gc.get_freeze_count()
pid = os.fork()
if pid == 0:
    calls = []
    real = gc.collect
    gc.collect = lambda *a: calls.append(a) or real(*a)
    @settings(max_examples=1, database=None, derandomize=True)
    @given(st.integers(0, 1))
    def first(_):
        pass
    first()
    os._exit(10 + min(len(calls), 9))
_, status = os.waitpid(pid, 0)
print(frozen > 0, os.waitstatus_to_exitcode(status) - 10)
"""


@pytest.mark.parametrize("how, frozen, collections", [("warm", "True", "0"), ("cold", "False", "1")])
def test_the_zygote_warm_up_spares_each_forked_process_the_first_test_costs(how, frozen, collections):
    # Hypothesis's first test in a process registers the global generators with a full garbage
    # collection; after warm_up in the forking process, a forked one collects nothing.
    import subprocess
    import sys

    from tests.test_reports import REPO

    out = subprocess.run([sys.executable, "-c", WARM_UP_CHECK, how], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.split() == [frozen, collections], out.stdout



ZYGOTE_CUDA_CHECK = """
import functools, io, json, sys
import torch, torch.cuda, torch.version
if torch.version.cuda is None:
    torch.version.cuda = "13.0"  # as a CUDA build says it: code that branches on it runs here too
calls = []
def watch(module, name):
    real = getattr(module, name, None)
    if callable(real):
        @functools.wraps(real)
        def watched(*args, **kwargs):
            calls.append(module.__name__ + "." + name)
            return real(*args, **kwargs)
        setattr(module, name, watched)
for name in ("is_available", "device_count", "init", "_lazy_init", "current_device", "set_device", "synchronize",
             "get_device_properties", "get_device_capability", "get_device_name", "mem_get_info"):
    watch(torch.cuda, name)
for name in [n for n in dir(torch._C) if n.startswith("_cuda_")]:
    watch(torch._C, name)
sys.stdin = io.StringIO("")  # no request: the zygote prepares, then ends at the end of its input
from detconf.conformance.perturbed import serve
print(json.dumps({"served": serve({"profile": "ci", "imports": []})["served"], "calls": calls}))
"""


def test_the_zygote_asks_nothing_of_cuda_before_it_forks():
    """A process that has called the CUDA runtime (``torch.cuda.is_available()`` included, unless
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1``) cannot use CUDA in a child it forks (PyTorch's "poison
    fork"): every perturbed process on a GPU would fail. The zygote's whole preparation (the
    suite's imports, the profile, Inductor's configuration, the warm-up) runs here with torch's
    CUDA queries watched, as on a CUDA build; none may be called. Planted (``warm_up`` asking
    ``torch.cuda.is_available()``), this test fails."""
    import subprocess
    import sys

    from tests.test_reports import REPO

    out = subprocess.run([sys.executable, "-c", ZYGOTE_CUDA_CHECK], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-800:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"served": 0, "calls": []}, out.stdout[-800:]



ZYGOTE_BACKWARD_CHECK = """
import io, os, sys
import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
_setup_privateuseone_for_python_backend("emulated")  # an accelerator device: autograd keeps a thread for it
sys.stdin = io.StringIO("")
from detconf.conformance.perturbed import serve
serve({"profile": "ci", "imports": []})
pid = os.fork()
if pid == 0:
    try:
        x = torch.ones(2, requires_grad=True)
        (x * 3).sum().backward()
        os._exit(0 if x.grad.tolist() == [3.0, 3.0] else 2)
    except RuntimeError as exc:
        print(exc)
        os._exit(1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_process_the_zygote_forks_on_an_accelerator_machine_can_run_a_backward():
    """Autograd's first backward in a process starts a thread per accelerator device; a child
    forked after that refuses every backward (torch's "Autograd and Fork"). On a machine whose
    torch sees a GPU, a zygote that ran a backward would make every backward case of the tier a
    harness-error; on the CPU sandbox there is no such thread. An emulated accelerator (a Python
    PrivateUse1 backend) brings it here. Planted (the warm-up with a backward), this test fails."""
    import subprocess
    import sys

    import torch
    import torch.utils.backend_registration as registration

    from tests.test_reports import REPO

    if not hasattr(registration, "_setup_privateuseone_for_python_backend"):
        pytest.skip(f"torch {torch.__version__} cannot register a Python PrivateUse1 backend")
    out = subprocess.run([sys.executable, "-c", ZYGOTE_BACKWARD_CHECK], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.splitlines()[-1] == "child 0", out.stdout[-800:]


def test_each_input_and_each_output_block_of_the_last_run_is_scribbled_as_the_device_held_it(monkeypatch):
    """Before each run after the first, one block per input and one per output of the previous
    run, the size of the storage the device allocated, on that device (not the host copy the runs
    are compared by: on a GPU that copy lives on the CPU, and its block would be scribbled there;
    on the CPU the copy is the output itself, so a meta tensor shows that a block keeps its
    device). Here the output is a 10-element view of a 40-element float64 storage, and both inputs
    have one size. Planted (one block per size, or the view's own size), this test fails."""
    import torch

    from detconf.engine import perturb
    from detconf.engine.program import Program
    from detconf.engine.runner import _storage_block, run_program

    scribbled = []
    monkeypatch.setattr(perturb, "scribble", lambda device, sizes, generator: scribbled.append((device, sizes)) or 0)
    program = Program(fn=lambda x, y: torch.cat([x, y, x, y]).double()[:10],
                      inputs={"x": torch.arange(10.0), "y": torch.ones(10)})
    run_program(program, "error", runs=3, perturber=perturb.Perturber(perturb.ProcessSetup(index=0, threads=1)))
    cpu = torch.device("cpu")
    assert scribbled == [(cpu, [40, 40]), (cpu, [320, 40, 40]), (cpu, [320, 40, 40])]
    # A block keeps the device that held the output (here "meta", as a GPU's would keep "cuda:0").
    meta = torch.device("meta")
    assert _storage_block(torch.empty(40, dtype=torch.float64, device=meta)[:10]) == (meta, 320)
    scribbled.clear()
    monkeypatch.setattr(perturb.Perturber, "_gen", lambda self, device: None)  # torch has no meta generator
    perturb.Perturber(perturb.ProcessSetup(index=0, threads=1)).before_run({"x": torch.ones(10)}, [(meta, 320)])
    assert scribbled == [(cpu, [40]), (meta, [320])]

@pytest.mark.parametrize("workers, expected", [("1", 1 << 22), ("16", 1 << 21)])  # the ceiling; 16 GiB / 32 / 256
def test_threshold_examples_fit_the_devices_memory_with_every_process_judging_at_once(monkeypatch, workers, expected):
    """Each test worker's zygote forks PROCESSES processes at once, each sized by the device's free
    memory: a 16 GiB GPU shared by 16 workers gives each process 1/32 of it, not 1/16."""
    from types import SimpleNamespace

    from detconf.conformance.perturbed import PROCESSES, threshold_limit
    from detconf.engine.strategies import PERTURB_THRESHOLD_NUMEL, STRESS_BYTES_PER_ELEMENT

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    free = 16 << 30
    limit = threshold_limit(SimpleNamespace(index=0, free_memory=lambda index: free))
    assert limit == expected and limit * STRESS_BYTES_PER_ELEMENT * int(workers) * PROCESSES <= free

    def cannot_say(index):
        raise RuntimeError("driver")

    assert threshold_limit(SimpleNamespace(index=0, free_memory=cannot_say)) == PERTURB_THRESHOLD_NUMEL
    assert threshold_limit(SimpleNamespace(index=None, free_memory=None)) == PERTURB_THRESHOLD_NUMEL


class _EmulatedStream:
    """A GPU stream as ``engine.perturb.competing_load`` uses one, on the CPU (``torch.cpu.Stream``
    takes no device)."""

    def __init__(self, device=None):
        self.device = device

    def synchronize(self):
        return None


def test_the_competing_load_leaves_the_default_random_generator_alone(monkeypatch):
    """The load runs while the case's runs draw from the device's default generator, each run
    seeded alike: a draw of its own there would move the runs' stream by when it happens, and a
    seeded random op would differ between runs. Planted (the load's matrix drawn with
    ``torch.randn``), this test fails."""
    import contextlib
    import time

    import torch

    from detconf.engine.perturb import competing_load

    monkeypatch.setattr(torch.cpu, "Stream", _EmulatedStream)
    monkeypatch.setattr(torch.cpu, "stream", lambda stream: contextlib.nullcontext())
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    with competing_load(torch.device("cpu"), side=8) as steps:
        deadline = time.monotonic() + 30
        while steps[0] < 2 and time.monotonic() < deadline:  # the load has made its matrix and is running
            time.sleep(0.001)
        drawn = torch.rand(4)
    assert steps[0] >= 2
    assert torch.equal(drawn, expected)

def test_one_process_runs_the_differential_and_a_wrong_result_is_still_caught():
    # Processes judge the same inputs: process 0 compares them with the reference, the others
    # compare runs only (the normal tier's differential, done once).
    setups = __import__("detconf.conformance.perturbed", fromlist=["process_setups"]).process_setups(3)
    assert [s["differential"] for s in setups] == [True, False, False]
    row = perturbed("planted.wrong_when_deterministic")
    assert row["verdict"] == "wrong-result", row["detail"]
    assert normal("planted.wrong_when_deterministic")["verdict"] == "wrong-result"


def test_a_process_that_failed_and_shrank_keeps_its_verdict_not_a_harness_error():
    rows = [_process_row([["aaa", "f1", None], ["ccc", "f3", None]], verdict="wrong-result"),
            _process_row([["aaa", "f1", None], ["bbb", "f2", None]], pid=2)]
    row = merge_rows(case("planted.deterministic"), rows)
    assert row["verdict"] == "wrong-result"
    assert "process 0 failed on its own (wrong-result)" in row["detail"]["across_processes"]["not_compared"]


def test_a_perturbed_process_asks_inductor_everything_in_its_own_empty_cache(monkeypatch, tmp_path):
    """Its empty compile cache holds Inductor's question about the CPU too (a run's processes
    ask it outside their run's own folder: engine.compiled.ask_vector_isa)."""
    import os
    import random

    import torch

    from detconf.engine.compiled import OUTSIDE_CACHE_VAR
    from detconf.engine.perturb import ProcessSetup, enter_process

    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(name, "/the-runs-own")
    monkeypatch.setenv(OUTSIDE_CACHE_VAR, "")
    variable = distortion_variable()
    if variable is not None:
        from torch._inductor import config

        monkeypatch.setenv(variable, "")
        monkeypatch.setattr(config.test_configs, "distort_benchmarking_result",
                            config.test_configs.distort_benchmarking_result)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # this worker's threads stay as they are
    state = random.getstate()
    try:
        applied = enter_process(ProcessSetup(index=0, threads=1), str(tmp_path))
    finally:
        random.setstate(state)
    assert "empty-compile-cache" in applied["perturbations"]
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path / "inductor-0-"))
    assert OUTSIDE_CACHE_VAR not in os.environ
