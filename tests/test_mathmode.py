"""Float32 math modes: captured through torch._C without a warning, put back exactly, and read
as the precision torch's kernels use (engine.mathmode)."""
import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

from detconf.engine import mathmode
from detconf.engine.determinism import _flags_unfrozen, preserved_global_state
from detconf.engine.mathmode import capture, describe, float32_precision, restore, unit_roundoff
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
#: torch.backends.*.fp32_precision (2.13 has it; older releases such as 2.5.1 have the legacy flags only).
HAS_FP32_API = hasattr(torch._C, "_get_fp32_precision_getter")


def require_fp32_api():
    if not HAS_FP32_API:
        pytest.skip(f"torch {torch.__version__} has no fp32_precision API (torch._C._get_fp32_precision_getter)")


@pytest.fixture(autouse=True)
def pristine():
    """Every test starts and ends with the settings it found, warnings turned into errors."""
    with preserved_global_state(), warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def set_cudnn_tf32(value: bool) -> None:
    """What a user writes (``torch.backends.cudnn.allow_tf32 = value``), even after torch's test
    utilities froze the flags."""
    with _flags_unfrozen():
        torch.backends.cudnn.allow_tf32 = value


def set_cuda_matmul_tf32(value: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = value


def set_fp32(backend: str, op: str, value: str) -> None:
    torch._C._set_fp32_precision_setter(backend, op, value)


# ----------------------------------------------------------------------------- capture
def test_capture_is_flat_json_safe_and_in_a_stable_order():
    first, second = capture(), capture()
    assert list(first) == list(second) and first == second
    assert json.loads(json.dumps(first)) == first
    assert all(v is None or isinstance(v, (bool, str)) for v in first.values())
    # The settings every torch since 1.12 has, named after their torch.backends attribute.
    assert {"cuda.matmul.allow_tf32", "float32_matmul_precision", "cudnn.allow_tf32"} <= first.keys()
    assert first["cudnn.allow_tf32"] is torch._C._get_cudnn_allow_tf32()
    assert first["float32_matmul_precision"] == torch.get_float32_matmul_precision()


def test_capture_reads_the_fp32_precision_settings_torch_accepts():
    require_fp32_api()
    got = capture()
    assert got["fp32_precision"] == torch.backends.fp32_precision
    assert got["cuda.matmul.fp32_precision"] == torch.backends.cuda.matmul.fp32_precision
    assert got["cuda.conv.fp32_precision"] == torch.backends.cudnn.conv.fp32_precision
    assert got["cuda.fp32_precision"] == torch.backends.cudnn.fp32_precision
    for op in ("matmul", "conv", "rnn"):
        assert got[f"mkldnn.{op}.fp32_precision"] == getattr(torch.backends.mkldnn, op).fp32_precision
    assert "cudnn.conv.fp32_precision" not in got or torch._C._get_fp32_precision_getter("cudnn", "conv")


def test_reading_neither_warns_nor_initialises_cuda_even_in_a_mixed_state():
    """torch refuses to report the legacy flags once the new API set something else (mixed
    legacy / new state): capture still answers, silently."""
    require_fp32_api()
    initialised = torch.cuda.is_initialized()  # an earlier test in this worker may have started CUDA on a GPU
    set_fp32("cuda", "matmul", "tf32")  # the new API alone: legacy float32_matmul_precision stays "highest"
    set_fp32("cuda", "conv", "ieee")
    with pytest.raises(RuntimeError):
        torch._C._get_cublas_allow_tf32()  # what a plain read meets
    got = capture()  # warnings are errors here
    assert got["cuda.matmul.allow_tf32"] is None  # torch refuses to say: derived, not stored
    assert got["float32_matmul_precision"] == "highest"  # the stored setting, read all the same
    assert got["cudnn.allow_tf32"] is True
    assert got["cuda.matmul.fp32_precision"] == "tf32" and got["cuda.conv.fp32_precision"] == "ieee"
    assert capture() == got  # reading changed nothing
    assert torch.cuda.is_initialized() == initialised


def test_the_deprecation_warning_of_torch_2_9_never_surfaces(monkeypatch):
    """torch 2.9 warns once per process from C++ when a legacy TF32 getter first runs, through
    torch._C too (TORCH_WARN_ONCE: spent only when the warning returns). Emulated here: resolving
    the getters spends it silenced, so neither a case recording warnings nor -W error sees it."""
    real, spent = torch._C._get_cublas_allow_tf32, []

    def warns_once():
        if not spent:
            warnings.warn("Please use the new API settings to control TF32 behavior, ...", UserWarning)
            spent.append(True)
        return real()

    monkeypatch.setattr(torch._C, "_get_cublas_allow_tf32", warns_once)
    mathmode._getters.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as seen:  # what the runner does around a case
            warnings.simplefilter("always")
            first = capture()
        assert seen == [] and spent
        assert capture() == first  # and -W error (this test's filter) stays quiet
    finally:
        monkeypatch.undo()
        mathmode._getters.cache_clear()


def test_capture_skips_what_an_older_torch_lacks(monkeypatch):
    """torch 2.5.1 has no fp32_precision getters (and no fp16-accumulation one): their keys are
    absent, the rest is read, and restore works with what there is."""
    for name in ("_get_fp32_precision_getter", "_get_cublas_allow_fp16_accumulation"):
        monkeypatch.delattr(torch._C, name, raising=False)
    monkeypatch.setattr(mathmode, "_getters", mathmode._getters.__wrapped__)  # resolve again, uncached
    got = capture()
    assert not any(k.endswith("fp32_precision") for k in got)
    assert "cuda.matmul.allow_fp16_accumulation" not in got
    assert got["cudnn.allow_tf32"] is torch._C._get_cudnn_allow_tf32()
    set_cudnn_tf32(not got["cudnn.allow_tf32"])
    restore(got)
    assert capture() == got


# ----------------------------------------------------------------------------- restore
FLIPS = {
    "cudnn.allow_tf32": lambda: set_cudnn_tf32(not capture()["cudnn.allow_tf32"]),  # torch may refuse to say
    "matmul precision high": lambda: torch.set_float32_matmul_precision("high"),
    "matmul precision medium": lambda: torch.set_float32_matmul_precision("medium"),
    "cuda.matmul.allow_tf32": lambda: set_cuda_matmul_tf32(not capture()["cuda.matmul.allow_tf32"]),
    "fp16 reduction": lambda: torch._C._set_cublas_allow_fp16_reduced_precision_reduction(False, False)
    if isinstance(torch._C._get_cublas_allow_fp16_reduced_precision_reduction(), tuple)
    else torch._C._set_cublas_allow_fp16_reduced_precision_reduction(False),
}
NEW_API_FLIPS = {
    "generic tf32": lambda: set_fp32("generic", "all", "tf32"),
    "generic bf16": lambda: set_fp32("generic", "all", "bf16"),
    "cuda matmul tf32": lambda: set_fp32("cuda", "matmul", "tf32"),
    "cudnn conv ieee": lambda: set_fp32("cuda", "conv", "ieee"),
    "mkldnn bf16": lambda: set_fp32("mkldnn", "all", "bf16"),
}


@pytest.mark.parametrize("flip", sorted(FLIPS) + sorted(NEW_API_FLIPS))
def test_restore_puts_back_what_a_flip_changed(flip):
    if flip in NEW_API_FLIPS:
        require_fp32_api()
    saved = capture()
    (FLIPS.get(flip) or NEW_API_FLIPS[flip])()
    assert capture() != saved
    restore(saved)
    assert capture() == saved


MIXED = {  # states a user of the new API alone (or of both APIs) is in, and torch refuses to report
    "new cuda matmul only": lambda: set_fp32("cuda", "matmul", "tf32"),
    "high, then cuda matmul none": lambda: (torch.set_float32_matmul_precision("high"), set_fp32("cuda", "matmul", "none")),
    "cudnn off, then conv tf32": lambda: (set_cudnn_tf32(False), set_fp32("cuda", "conv", "tf32")),
}


@pytest.mark.parametrize("state", sorted(MIXED))
@pytest.mark.parametrize("flip", ["matmul precision high", "matmul precision highest", "cudnn.allow_tf32"])
def test_restore_from_a_mixed_state_gives_the_same_state_back(state, flip):
    require_fp32_api()
    MIXED[state]()
    saved = capture()
    {"matmul precision high": lambda: torch.set_float32_matmul_precision("high"),
     "matmul precision highest": lambda: torch.set_float32_matmul_precision("highest"),
     "cudnn.allow_tf32": FLIPS["cudnn.allow_tf32"]}[flip]()
    assert capture() != saved
    restore(saved)
    assert capture() == saved


def test_restore_leaves_an_entry_following_its_parent():
    """torch's getters resolve "none" (follow the parent), so the value read for an entry that
    follows equals its parent's: restore writes "none" there, not the value, so that it keeps
    following when the parent changes later."""
    require_fp32_api()
    set_fp32("generic", "all", "tf32")  # cuda/all and cuda/matmul follow it
    saved = capture()
    assert saved["cuda.matmul.fp32_precision"] == "tf32"
    set_fp32("cuda", "matmul", "ieee")
    restore(saved)
    assert capture() == saved
    set_fp32("generic", "all", "ieee")
    assert capture()["cuda.matmul.fp32_precision"] == "ieee"  # still following


def test_restore_writes_nothing_when_nothing_changed(monkeypatch):
    g = mathmode._getters()
    writes = []

    def recording(name, fn):
        def wrapper(*args):
            writes.append((name, args))
            return fn(*args)
        return wrapper

    monkeypatch.setattr(g, "set_fp32", recording("fp32", g.set_fp32) if g.set_fp32 else None)
    monkeypatch.setattr(g, "legacy", [(k, get, put and recording(k, put)) for k, get, put in g.legacy])
    monkeypatch.setattr(g, "plain_setters", {k: recording(k, put) for k, put in g.plain_setters.items()})
    saved = capture()
    restore(saved)
    assert writes == []
    set_cudnn_tf32(not saved["cudnn.allow_tf32"])
    restore(saved)
    assert writes and writes[0][0] == "cudnn.allow_tf32"  # the legacy flag first, then what it moved
    assert capture() == saved


# ----------------------------------------------------------------------------- the rules
CUDA = "cuda"


@pytest.mark.parametrize("settings,matmul", [
    ({}, "ieee"),
    ({"cuda.matmul.allow_tf32": False, "float32_matmul_precision": "highest"}, "ieee"),
    ({"cuda.matmul.allow_tf32": True, "float32_matmul_precision": "high"}, "tf32"),
    ({"cuda.matmul.allow_tf32": True}, "tf32"),  # torch 2.5.1: the flag alone
    ({"float32_matmul_precision": "high"}, "tf32"),
    # "medium" permits bf16 where a fast bf16 algorithm exists; on CUDA torch uses TF32
    # (set_float32_matmul_precision.__doc__, and it sets cuda/matmul to tf32).
    ({"float32_matmul_precision": "medium"}, "tf32"),
    ({"float32_matmul_precision": "highest", "cuda.matmul.fp32_precision": "none"}, "ieee"),
    # fp32_precision takes precedence, resolved op -> backend all -> generic
    ({"float32_matmul_precision": "high", "cuda.matmul.fp32_precision": "ieee"}, "ieee"),
    ({"float32_matmul_precision": "highest", "cuda.matmul.fp32_precision": "tf32"}, "tf32"),
    ({"cuda.matmul.fp32_precision": "none", "cuda.fp32_precision": "tf32"}, "tf32"),
    ({"cuda.matmul.fp32_precision": "none", "cuda.fp32_precision": "none", "fp32_precision": "tf32"}, "tf32"),
    ({"cuda.matmul.fp32_precision": "ieee", "fp32_precision": "tf32"}, "ieee"),
    ({"cuda.matmul.fp32_precision": "default", "float32_matmul_precision": "highest"}, "ieee"),  # early API's word
    ({"fp32_precision": "bf16", "float32_matmul_precision": "highest"}, "ieee"),  # cuda has no bf16
    # a mixed state (new unset, legacy on: torch refuses to report the legacy flag): the coarser answer
    ({"cuda.matmul.allow_tf32": None, "float32_matmul_precision": "high", "cuda.matmul.fp32_precision": "none"}, "tf32"),
])
def test_cuda_matmul_precision(settings, matmul):
    assert float32_precision(CUDA, "matmul", settings) == matmul
    assert float32_precision("cuda:1", "matmul", settings) == matmul  # an index changes nothing


@pytest.mark.parametrize("settings,conv", [
    ({}, "ieee"),
    ({"cudnn.allow_tf32": True}, "tf32"),  # torch's default
    ({"cudnn.allow_tf32": False}, "ieee"),
    ({"cudnn.allow_tf32": True, "float32_matmul_precision": "highest"}, "tf32"),  # matmul's setting is not conv's
    ({"cudnn.allow_tf32": False, "float32_matmul_precision": "high", "cuda.matmul.allow_tf32": True}, "ieee"),
    ({"cudnn.allow_tf32": True, "cuda.conv.fp32_precision": "ieee"}, "ieee"),
    ({"cudnn.allow_tf32": False, "cuda.conv.fp32_precision": "tf32"}, "tf32"),
    ({"cudnn.allow_tf32": False, "cuda.conv.fp32_precision": "none", "cuda.fp32_precision": "tf32"}, "tf32"),
    ({"cudnn.allow_tf32": True, "cudnn.fp32_precision": "none", "cudnn.conv.fp32_precision": "ieee"}, "ieee"),
])
def test_cuda_conv_precision(settings, conv):
    assert float32_precision(CUDA, "conv", settings) == conv


def test_cuda_rnn_follows_its_own_entry():
    s = {"cudnn.allow_tf32": True, "cuda.conv.fp32_precision": "ieee", "cuda.rnn.fp32_precision": "tf32"}
    assert (float32_precision(CUDA, "conv", s), float32_precision(CUDA, "rnn", s)) == ("ieee", "tf32")


@pytest.mark.parametrize("device,family,settings,expected", [
    ("cpu", "matmul", {}, "ieee"),
    ("cpu", "matmul", {"float32_matmul_precision": "highest"}, "ieee"),
    ("cpu", "matmul", {"float32_matmul_precision": "high"}, "ieee"),  # torch 2.5.1: no oneDNN TF32 path
    ("cpu", "matmul", {"float32_matmul_precision": "medium"}, "bf16"),  # torch 2.5.1: oneDNN's bf32 matmul
    ("cpu", "conv", {"float32_matmul_precision": "medium"}, "ieee"),
    ("cpu", "conv", {"cudnn.allow_tf32": True, "cuda.matmul.allow_tf32": True}, "ieee"),  # CUDA's flags
    ("cpu", "matmul", {"mkldnn.matmul.fp32_precision": "bf16"}, "bf16"),
    ("cpu", "matmul", {"mkldnn.matmul.fp32_precision": "tf32"}, "tf32"),
    ("cpu", "conv", {"mkldnn.conv.fp32_precision": "none", "mkldnn.fp32_precision": "bf16"}, "bf16"),
    ("cpu", "rnn", {"mkldnn.rnn.fp32_precision": "none", "fp32_precision": "tf32"}, "tf32"),
    ("cpu", "matmul", {"mkldnn.matmul.fp32_precision": "ieee", "fp32_precision": "bf16"}, "ieee"),
    ("xpu", "matmul", {"mkldnn.allow_tf32": True}, "tf32"),
    ("xpu", "conv", {"mkldnn.allow_tf32": False}, "ieee"),
    ("mps", "matmul", {"float32_matmul_precision": "high", "cuda.matmul.allow_tf32": True}, "ieee"),
    ("mps", "conv", {"cudnn.allow_tf32": True}, "ieee"),
    ("npu", "matmul", {"npu.matmul.fp32_precision": "tf32"}, "tf32"),  # a vendor's own entry
    ("npu", "matmul", {"fp32_precision": "bf16"}, "bf16"),  # the generic setting, where set
])
def test_precision_of_other_devices(device, family, settings, expected):
    assert float32_precision(device, family, settings) == expected


def test_the_rules_read_the_settings_now_by_default():
    assert float32_precision("cpu", "conv") == "ieee"
    set_cudnn_tf32(True)
    assert float32_precision("cuda", "conv") == "tf32"
    set_cudnn_tf32(False)
    assert float32_precision("cuda", "conv") == "ieee"
    torch.set_float32_matmul_precision("high")
    assert float32_precision("cuda", "matmul") == "tf32"
    torch.set_float32_matmul_precision("medium")
    assert float32_precision("cuda", "matmul") == "tf32"
    assert float32_precision("cpu", "matmul") == "bf16"  # torch sets oneDNN's matmul to bf16 with it
    torch.set_float32_matmul_precision("highest")
    assert float32_precision("cuda", "matmul") == float32_precision("cpu", "matmul") == "ieee"


def test_unknown_family_or_precision_is_refused_by_name():
    with pytest.raises(ValueError, match="family must be one of"):
        float32_precision("cuda", "attention", {})
    with pytest.raises(ValueError, match="precision must be one of"):
        unit_roundoff("fp8")


def test_unit_roundoff():
    assert unit_roundoff("ieee") == 2.0 ** -24 == torch.finfo(torch.float32).eps / 2
    assert unit_roundoff("tf32") == 2.0 ** -11
    assert unit_roundoff("bf16") == 2.0 ** -8 == torch.finfo(torch.bfloat16).eps / 2


# ----------------------------------------------------------------------------- describe
def test_describe_shows_the_precision_and_the_settings_that_decide_it():
    s = dict(capture(), **{"cudnn.allow_tf32": True, "float32_matmul_precision": "highest",
                           "cuda.matmul.allow_tf32": False})
    if HAS_FP32_API:
        s.update({"cuda.matmul.fp32_precision": "none", "cuda.conv.fp32_precision": "tf32",
                  "cuda.rnn.fp32_precision": "tf32"})
    cuda = describe("cuda", settings=s)
    assert list(cuda) == ["matmul", "conv", "rnn", "settings"]
    assert (cuda["matmul"], cuda["conv"], cuda["rnn"]) == ("ieee", "tf32", "tf32")
    assert list(cuda["settings"])[:3] == ["cuda.matmul.allow_tf32", "float32_matmul_precision", "cudnn.allow_tf32"]
    assert not any(k.startswith(("mkldnn.", "cpu.")) for k in cuda["settings"])
    cpu = describe("cpu", settings=s)
    assert "cudnn.allow_tf32" not in cpu["settings"] and "float32_matmul_precision" in cpu["settings"]
    assert json.loads(json.dumps(describe("cuda"))) == describe("cuda")
    assert list(describe("cuda")["settings"]) == list(describe("cuda")["settings"])


def test_describe_takes_a_backends_own_answer():
    own = describe("emulated", settings={}, precision=lambda family: "tf32" if family == "conv" else "ieee")
    assert (own["matmul"], own["conv"]) == ("ieee", "tf32")

    def broken(family):
        raise RuntimeError("driver gone")

    assert describe("emulated", settings={}, precision=broken)["conv"] is None


# ----------------------------------------------------------------------------- the run record
def test_the_run_record_shows_each_devices_math_mode(tmp_path):
    """A user's settings at the start (a plugin that asks for "medium" and turns cuDNN's TF32
    off) are what the run record's env.math_mode shows, per device of the run."""
    (tmp_path / "medium_plugin.py").write_text(
        "import torch\n"
        "torch.set_float32_matmul_precision('medium')\n"
        "torch._C._set_cudnn_allow_tf32(False)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    results = tmp_path / "r.jsonl"
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q",
                          "-p", "medium_plugin", "--device", "cpu", "--source", "flag-api", "--mode", "error",
                          "-n", "0", "--no-report-build", "-k", "debug_mode", "--results", str(results)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert results.exists(), out.stdout[-2000:] + out.stderr[-2000:]
    run = json.loads(results.read_text().splitlines()[0])
    math_mode = run["env"]["math_mode"]
    assert sorted(math_mode) == ["cpu"]  # the devices of the run
    cpu = math_mode["cpu"]
    assert (cpu["matmul"], cpu["conv"], cpu["rnn"]) == ("bf16", "ieee", "ieee")  # oneDNN's bf16 matmul
    assert cpu["settings"]["float32_matmul_precision"] == "medium"
    assert "cudnn.allow_tf32" not in cpu["settings"]  # CUDA's flag decides nothing on the CPU
