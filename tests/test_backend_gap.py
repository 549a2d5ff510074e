"""A device that lacks an operator: ``unsupported`` naming the operator, never ``harness-error``,
and never hiding a case whose documented operator ran.

No OpenCL stack is needed: a device's gap is played by a library operator that refuses a tensor
with a storage offset (as torch-opencl's ``as_strided`` does) while every tensor is reported to
sit on a device ``fakedev``. The CPU replay gets fresh copies (offset 0), where the operator runs:
exactly a backend gap. Where torch-opencl is installed, ``test_real_opencl_cases`` runs a few
real cases on ``--device opencl``.
"""
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st

import detconf.engine.trace as trace_module
from detconf.conformance.harness import judge
from detconf.conformance.plan import Case
from detconf.vocabulary import DOC_DEVICES
from detconf.engine import devices, opencl_runtime
from detconf.engine.entry import Entry
from detconf.engine.program import Program, recipe
from detconf.engine.runner import backend_gap, missing_kernel, run_program
from detconf.engine.trace import DispatchTrace, OpFailure, is_out_of_memory
from detconf.engine.verdict import expected_outcome, verdict_for
from tests.planted import planted_entry
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
FAST = settings(max_examples=3, derandomize=True, database=None, deadline=None)
CPU = devices.backends()["cpu"]
#: A device of its own name whose tensors are CPU tensors: with the ``fakedev`` fixture, the
#: harness treats it as any device other than the CPU (it traces the building of examples).
FAKEDEV = replace(CPU, name="fakedev", torch_device_for=lambda index: torch.device("cpu"))

_LIB = torch.library.Library("detconf_gap_test", "DEF")
_LIB.define("no_offset(Tensor x) -> Tensor")
_LIB.define("always_fails(Tensor x) -> Tensor")
_LIB.define("no_offset_put(Tensor x) -> Tensor")
_LIB.define("out_of_memory_under_the_mode(Tensor x) -> Tensor")
_LIB.define("mixed_devices_under_the_mode(Tensor x) -> Tensor")


def _no_offset(x):
    if x.storage_offset() != 0:
        raise RuntimeError("as_strided: storage_offset is required")
    return x * 2


def _always_fails(x):
    raise RuntimeError("a bad call: fails everywhere")


def _no_offset_put(x):
    if x.storage_offset() != 0:
        raise RuntimeError("as_strided: storage_offset is required")
    return x.clone().put_(torch.tensor([0, 0]), torch.ones(2), accumulate=False)  # alerts on the CPU


def _mixed_devices_under_the_mode(x):
    # As a program that left a weight on the CPU beside the device's input (the run, mode error);
    # the CPU replay (mode off), every tensor on the CPU, runs.
    if torch.are_deterministic_algorithms_enabled():
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                           "cuda:0 and cpu!")
    return x * 2


_LIB.impl("mixed_devices_under_the_mode", _mixed_devices_under_the_mode, "CompositeExplicitAutograd")


def _out_of_memory_under_the_mode(x):
    # As a device that ran out of memory in the run (mode error), where the CPU replay (mode off) fits.
    if torch.are_deterministic_algorithms_enabled():
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    return x * 2


_LIB.impl("out_of_memory_under_the_mode", _out_of_memory_under_the_mode, "CompositeExplicitAutograd")
_LIB.impl("no_offset", _no_offset, "CompositeExplicitAutograd")
_LIB.impl("no_offset_put", _no_offset_put, "CompositeExplicitAutograd")
_LIB.impl("always_fails", _always_fails, "CompositeExplicitAutograd")


def gap_op(x):
    return torch.ops.detconf_gap_test.no_offset(x[1:])  # a view with a storage offset


def bad_call_op(x):
    return torch.ops.detconf_gap_test.always_fails(x)


def put_then_gap_op(x):
    y = x.clone().index_add_(0, torch.tensor([0, 0]), torch.ones(2))
    return torch.ops.detconf_gap_test.no_offset(y[1:])


def _offset_tensor():
    return torch.arange(5, dtype=torch.float32)[1:]


@pytest.fixture
def fakedev(monkeypatch):
    """Every traced operator's tensors count as living on the device ``fakedev``."""
    monkeypatch.setattr(trace_module, "_devices_of", lambda args, kwargs: ("fakedev",))


# --- the pieces ----------------------------------------------------------------------------------

def test_trace_names_the_failing_operator_and_replays_it_on_cpu(fakedev):
    trace = DispatchTrace()
    with pytest.raises(RuntimeError, match="storage_offset"), trace:
        gap_op(_offset_tensor())
    assert trace.failure.op == "detconf_gap_test.no_offset.default"
    assert trace.failure.devices == ("fakedev",) and trace.failure.cpu_replay == "ok"


def test_a_failure_on_the_cpu_itself_is_not_replayed():
    trace = DispatchTrace()
    with pytest.raises(RuntimeError), trace:
        gap_op(_offset_tensor())
    assert trace.failure.devices == ("cpu",) and trace.failure.cpu_replay is None and not trace.failure.off_cpu


def test_backend_gap_only_for_an_off_cpu_call_that_runs_on_cpu():
    exc = RuntimeError("as_strided: storage_offset is required")
    gap = OpFailure("aten.permute.default", ("cpu", "opencl"), exc, "ok")
    assert backend_gap(exc, gap) == ("aten.permute.default fails on opencl (the same call runs on cpu): "
                                     "RuntimeError: as_strided: storage_offset is required")
    # Planted: the same call fails on the CPU too (a bad call), on the CPU only, or another exception.
    assert backend_gap(exc, OpFailure("aten.permute.default", ("opencl",), exc, "fails on cpu too: x")) is None
    assert backend_gap(exc, OpFailure("aten.permute.default", ("cpu",), exc, None)) is None
    assert backend_gap(ValueError("other"), gap) is None
    assert backend_gap(exc, None) is None
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = exc
    assert backend_gap(wrapped, gap).startswith("aten.permute.default fails on opencl")


def test_a_device_out_of_memory_is_never_a_missing_kernel():
    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    assert is_out_of_memory(oom) and is_out_of_memory(RuntimeError("NPU out of memory. Tried to allocate 2 GiB"))
    assert not is_out_of_memory(RuntimeError("as_strided: storage_offset is required"))
    assert backend_gap(oom, OpFailure("aten.mm.default", ("cuda",), oom, "ok")) is None


def test_missing_kernel_reads_the_dispatchers_message_for_this_device_only():
    msg = ("child process failed: NotImplementedError: Could not run 'aten::normal_' with arguments from the "
           "'opencl' backend. This could be because the operator doesn't exist for this backend")
    assert missing_kernel(msg, "opencl").startswith("aten::normal_ has no opencl kernel: child process failed")
    assert missing_kernel(msg, "npu") is None  # planted: another device's missing kernel is not this one's
    assert missing_kernel("RuntimeError: something else", "opencl") is None


# --- through the runner ----------------------------------------------------------------------------

def test_a_missing_operator_on_the_device_is_unsupported_and_named(fakedev):
    obs = run_program(Program(fn=gap_op, inputs={"x": _offset_tensor()}), "error",
                      targets=("detconf_gap_test.no_offset",)).observation
    assert obs.error is None
    assert obs.unsupported.startswith("detconf_gap_test.no_offset.default fails on fakedev (the same call runs on cpu)")
    assert verdict_for("deterministic", obs) == "unsupported"
    assert not obs.target_ran_before_gap  # the target is what failed: it never ran


def test_a_device_out_of_memory_is_a_harness_error_not_unsupported(fakedev):
    """An example that does not fit in the device's memory says nothing of its kernels: it is the
    harness's error (examples sized for the device), never a gap that passes as ``unsupported``.
    The op runs out of memory in the run and fits on the CPU replay. Planted (no error read as
    out of memory), it is unsupported."""
    obs = run_program(Program(fn=lambda x: torch.ops.detconf_gap_test.out_of_memory_under_the_mode(x),
                              inputs={"x": _offset_tensor()}), "error").observation
    assert obs.unsupported is None and "out of memory" in obs.error
    assert verdict_for("deterministic", obs) == "harness-error"


def test_a_call_given_tensors_on_different_devices_is_a_harness_error_not_unsupported(fakedev):
    """A program that left a tensor on the CPU beside the device's: the replay with every tensor
    on the CPU runs, but the device lacks nothing. Planted (no error read as mixed devices), it is
    unsupported."""
    obs = run_program(Program(fn=lambda x: torch.ops.detconf_gap_test.mixed_devices_under_the_mode(x),
                              inputs={"x": _offset_tensor()}), "error").observation
    assert obs.unsupported is None and "same device" in obs.error
    assert verdict_for("deterministic", obs) == "harness-error"


@pytest.mark.parametrize("inner", [torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB"),
                                   RuntimeError("Expected all tensors to be on the same device, but found at least "
                                                "two devices, cuda:0 and cpu!")])
def test_a_compiler_that_wraps_out_of_memory_or_mixed_devices_is_a_harness_error(inner):
    """Under torch.compile the op's error arrives wrapped in Dynamo's; a wrapped compile failure
    is ``unsupported`` (the program cannot be compiled), but not when the error inside is one that
    is never the device's or the compiler's lack. Planted (mixed devices left to the compile
    failure rule), the second case is unsupported."""
    from torch._dynamo.exc import TorchRuntimeError

    from detconf.engine.runner import RunRecord, _classify

    outer = TorchRuntimeError("Dynamo failed to run FX node")
    outer.__cause__ = inner
    record = RunRecord()
    _classify(outer, record, "forward")
    assert record.unsupported is None and record.other_error.startswith("TorchRuntimeError")


def test_planted_a_call_that_fails_on_cpu_too_stays_a_harness_error(fakedev):
    obs = run_program(Program(fn=bad_call_op, inputs={"x": _offset_tensor()}), "error").observation
    assert obs.unsupported is None and "a bad call" in obs.error
    assert verdict_for("deterministic", obs) == "harness-error"


def test_planted_the_same_failure_on_the_cpu_is_a_harness_error():
    obs = run_program(Program(fn=gap_op, inputs={"x": _offset_tensor()}), "error").observation
    assert obs.unsupported is None and "storage_offset" in obs.error
    assert verdict_for("deterministic", obs) == "harness-error"


def test_a_gap_after_the_documented_operator_ran_does_not_hide_it(fakedev):
    prog = Program(fn=put_then_gap_op, inputs={"x": torch.arange(4, dtype=torch.float32)})
    obs = run_program(prog, "error", targets=("aten.index_add_",)).observation
    assert obs.reached and obs.target_ran_before_gap
    assert obs.unsupported.endswith("(after the documented operator ran)")
    # The kernel ran to its end without the alert: a documented raise is missing, not unsupported.
    assert verdict_for("raises", obs) == "missing-raise"
    assert verdict_for("warns", obs) == "missing-warning"
    assert verdict_for("deterministic", obs) == "unsupported"
    # Planted: without the flag the same observation would hide the missing raise.
    obs.target_ran_before_gap = None
    assert verdict_for("raises", obs) == "unsupported"


@pytest.mark.parametrize("mode", ["error", "warn_only"])
def test_the_cpu_replay_is_not_part_of_the_run(fakedev, mode):
    """The replay runs put_ on the CPU, which alerts under the mode: neither its raise nor its
    warning may count as the program's (planted: without the replay's own settings they would)."""
    obs = run_program(Program(fn=lambda x: torch.ops.detconf_gap_test.no_offset_put(x[1:]),
                              inputs={"x": torch.arange(4, dtype=torch.float32)}), mode).observation
    assert obs.raised_runs == 0 and obs.warned_runs == 0
    assert obs.unsupported.startswith("detconf_gap_test.no_offset_put.default fails on fakedev (the same call runs")
    assert verdict_for("deterministic-or-warns" if mode == "warn_only" else "deterministic-or-raises", obs) == "unsupported"


# --- through the harness: a device that cannot build the example ---------------------------------

@recipe("planted.gap_while_building", targets="aten.mul")
def _gap_while_building(draw, entry, case, device):
    n = draw(st.integers(2, 5))
    x = gap_op(torch.arange(n + 1, dtype=torch.float32, device=device))
    return Program(fn=lambda x: x * 2, inputs={"x": x}, describe="x * 2")


@recipe("planted.bad_call_while_building", targets="aten.mul")
def _bad_call_while_building(draw, entry, case, device):
    x = bad_call_op(torch.arange(draw(st.integers(2, 5)), dtype=torch.float32, device=device))
    return Program(fn=lambda x: x * 2, inputs={"x": x}, describe="x * 2")


@pytest.mark.parametrize("promise", ["deterministic", "raises"])
def test_a_device_that_cannot_build_the_example_is_unsupported(fakedev, promise):
    row = judge(Case(planted_entry("planted.gap_while_building", promise), "cpu", "error"), FAKEDEV,
                hypothesis_settings=FAST)
    assert row["verdict"] == "unsupported", row
    assert row["detail"]["unsupported"].startswith("building the example: detconf_gap_test.no_offset.default fails on "
                                                   "fakedev")


def test_planted_a_recipe_with_a_bad_call_stays_a_harness_error(fakedev):
    row = judge(Case(planted_entry("planted.bad_call_while_building", "deterministic"), "cpu", "error"), FAKEDEV,
                hypothesis_settings=FAST)
    assert row["verdict"] == "harness-error"
    assert "a bad call" in row["detail"]["error"]


# --- expectations on a device the docs never name --------------------------------------------------

def _entry(devices_named, promise="deterministic", source="torch-docs"):
    return Entry(id="x", op="torch.Tensor.put_", sentence="s", promise=promise, devices=devices_named, source=source,
                 list_name=promise)


def test_general_contract_on_devices_the_docs_never_name():
    cuda_only = _entry(("cuda",))
    assert expected_outcome(cuda_only, "opencl", "error") == "deterministic-or-raises"
    assert expected_outcome(cuda_only, "opencl", "warn_only") == "deterministic-or-warns"
    assert expected_outcome(_entry(("cuda",), "raises"), "opencl", "error") == "deterministic-or-raises"
    # A sentence that names no device covers every device; torch's own lists stay strict on theirs.
    assert expected_outcome(_entry((), "raises"), "opencl", "error") == "raises"
    assert expected_outcome(_entry(()), "opencl", "error") == "deterministic"
    assert expected_outcome(cuda_only, "cpu", "error") == "deterministic"
    assert expected_outcome(cuda_only, "opencl", "off") == "observe"


def test_doc_devices_are_the_devices_the_docstring_parser_knows():
    from detconf.engine import docspec

    named = {d.lower() for d in docspec._DEVICE_RE.pattern.strip(r"\b()").split("|")}
    assert named == set(DOC_DEVICES)


# --- a PrivateUse1 backend describes itself ------------------------------------------------------

class _Module:
    __name__ = "fakedev_pkg.device"

    def __init__(self, sync=None):
        self.calls = 0
        if sync:
            self.synchronize = self._sync

    def _sync(self):
        self.calls += 1

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def current_device():
        return 0


def test_privateuse1_backend_uses_its_modules_synchronize(monkeypatch):
    mod = _Module(sync=True)
    monkeypatch.setattr(torch, "fakedev", mod, raising=False)
    backend = devices._privateuse1_backend("fakedev")
    info = backend.describe()
    assert info["available"] and info["device_name"] == "fakedev"
    assert info["versions"]["synchronize"] == "torch.fakedev.synchronize" and info["versions"]["privateuse1"] == "fakedev"
    backend.synchronize()
    assert mod.calls == 1


def test_privateuse1_backend_without_synchronize_reads_back(monkeypatch):
    monkeypatch.setattr(torch, "fakedev", _Module(), raising=False)
    monkeypatch.setattr(devices, "RUNTIME_DESCRIBERS", {"fakedev": lambda i: {"device_name": f"Fake #{i}",
                                                                              "versions": {"fake_driver": "1.2"}}})
    read_back = []
    monkeypatch.setattr(devices, "_host_round_trip", lambda name: read_back.append(name))
    backend = devices._privateuse1_backend("fakedev")
    info = backend.describe()
    assert info["device_name"] == "Fake #0" and info["versions"]["fake_driver"] == "1.2"
    assert info["versions"]["synchronize"].startswith("host round trip")
    backend.synchronize()
    assert read_back == ["fakedev"]


def test_privateuse1_runtime_error_is_reported_not_raised(monkeypatch):
    monkeypatch.setattr(torch, "fakedev", _Module(sync=True), raising=False)
    monkeypatch.setattr(devices, "RUNTIME_DESCRIBERS", {"fakedev": lambda i: {"error": "OpenCL runtime: no device #0"}})
    info = devices._privateuse1_backend("fakedev").describe()
    assert info["available"] and info["device_name"] == "fakedev"
    assert info["versions"]["runtime_error"] == "OpenCL runtime: no device #0"


def test_opencl_runtime_without_a_loader_says_so():
    info = opencl_runtime.describe(names=("libdetconf-no-such-opencl.so.1",))
    assert info == {"error": "OpenCL runtime: no OpenCL ICD loader found (tried libdetconf-no-such-opencl.so.1)"}


def _loader_present() -> bool:
    try:
        opencl_runtime._load()
    except opencl_runtime.OpenCLError:
        return False
    return True


@pytest.mark.skipif(not _loader_present(), reason="no OpenCL ICD loader (libOpenCL.so.1) installed")
def test_opencl_runtime_lists_devices_with_names():
    listed = opencl_runtime.devices()
    info = opencl_runtime.describe(len(listed))
    assert info["error"] == f"OpenCL runtime: no device #{len(listed)} ({len(listed)} listed)"
    for dev in listed:
        assert dev["name"] and dev["platform"] and dev["driver_version"]


# --- the real backend, where it is installed -----------------------------------------------------

def _opencl_available() -> bool:
    backend = devices.backends().get("opencl")
    return backend is not None and backend.describe()["available"]


@pytest.mark.skipif(not _opencl_available(), reason="torch-opencl with an OpenCL device is not installed "
                                                    "(scripts/setup-opencl.sh sets it up)")
def test_real_opencl_cases(tmp_path):
    results = tmp_path / "results.jsonl"
    ids = ["resize_[complement]-opencl-error", "bincount[complement,cuda]-opencl-error",
           "index_add[cuda]-opencl-warn_only", "MaxUnpool2d-opencl-error"]
    proc = warm.run(
        [sys.executable, "-m", "pytest", *[f"conformance/test_documented.py::test_documented[{i}]" for i in ids],
         "-p", "no:cacheprovider", "-q", "-n", "0", "--hypothesis-profile", "ci", "--device", "opencl",
         "--mode", "error", "--mode", "warn_only", "--no-report-build", "--results", str(results)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    rows = [r for r in rows if "verdict" in r]
    assert rows, proc.stdout[-2000:] + proc.stderr[-2000:]
    by_id = {f"{r['entry_id']}-{r['mode']}-{r['phase']}": r for r in rows}
    assert not [r for r in rows if r["verdict"] == "harness-error"], proc.stdout[-2000:]
    env = json.loads(results.read_text().splitlines()[0])["env"]
    described = [d for d in env["devices"] if d["device"] == "opencl"][0]
    assert described["device_name"] != "opencl" and "torch-opencl" in described["versions"]["packages"]
    assert by_id["bincount[complement,cuda]-error-program"]["verdict"] == "unsupported"
    assert "aten.bincount" in by_id["bincount[complement,cuda]-error-program"]["detail"]["unsupported"]
    # torch-opencl's resize_ drops the old values and leaves the new memory unfilled.
    assert by_id["resize_[complement]-error-program"]["verdict"] == "nondeterministic"
    assert by_id["MaxUnpool2d-error-program"]["verdict"] == "unsupported"
    assert "max_pool2d_with_indices" in by_id["MaxUnpool2d-error-program"]["detail"]["unsupported"]
