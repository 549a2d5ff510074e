"""Checks for the CUDA library settings of the reproducibility notes (``--source repro-notes``).

cuBLAS: "If one of these environment variable configurations is not set, a
RuntimeError will be raised from these operations when called with CUDA
tensors: torch.mm, torch.mv, torch.bmm" (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` or
``:16:8``). torch reads the variable once per process, so each example runs in
a child interpreter with the variable set (or unset) for it.

cuDNN: with ``torch.backends.cudnn.benchmark = False`` cuDNN picks its
algorithm deterministically, and the algorithm itself is deterministic when
``torch.use_deterministic_algorithms(True)`` or
``torch.backends.cudnn.deterministic = True`` is set.

Both need a CUDA device; elsewhere they raise CheckSkipped.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from hypothesis import strategies as st

from detconf.engine.checks import CheckObservation, check

from detconf.child import child_env, run_in_child
from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import mode_is_on, preserved_global_state, set_cudnn

from detconf.engine.fingerprint import tensor_bytes

from ._support import REPRO_NOTES, require_cuda, synchronize

CUBLAS_VAR = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_GOOD = (":4096:8", ":16:8")
# Values torch does not accept; ":4096:2" is a valid cuBLAS setting that torch
# nevertheless rejects (it compares against the two documented strings).
CUBLAS_WRONG = (":4096:2", ":16:4", "4096:8", ":4096:8:16:8", "", " :4096:8", "deterministic")
CUBLAS_OPS = ("mm", "mv", "bmm")

def _cublas_check(config: str, op: str):
    """``config``: "unset", "wrong" or one of the two documented values."""

    def cublas_workspace(draw, entry, device: torch.device, mode: str) -> CheckObservation:
        require_cuda(device)
        if config == "wrong":
            value: str | None = draw(st.sampled_from(CUBLAS_WRONG), label=CUBLAS_VAR)
        elif config == "unset":
            value = None
        else:
            value = config
        payload = {
            "op": op,
            "mode": mode,
            "seed": draw(st.integers(0, 2**31 - 1), label="data seed"),
            "m": draw(st.sampled_from([64, 257, 1024]), label="m"),
            "k": draw(st.sampled_from([64, 513, 4096]), label="k"),
            "n": draw(st.sampled_from([64, 255, 1024]), label="n"),
            "batch": draw(st.integers(1, 8), label="batch"),
            "runs": 3,
        }
        env = child_env({CUBLAS_VAR: value} if value is not None else None, unset=(CUBLAS_VAR,) if value is None else ())
        # The child sees only the device the parent tests (as its cuda:0).
        if device.index is not None:
            visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
            env["CUDA_VISIBLE_DEVICES"] = visible[device.index] if device.index < len(visible) else str(device.index)
        result = run_in_child("detconf.conformance.children:cublas_runs", payload, env=env, timeout=300,
                              what=f"{CUBLAS_VAR}={value!r} {op}")
        return _cublas_verdict(config, mode, value, payload, result)

    cublas_workspace.__name__ = f"cublas_{config}_{op}"
    return cublas_workspace


def _cublas_verdict(config: str, mode: str, value: str | None, payload: dict[str, Any], result: dict[str, Any]) -> CheckObservation:
    error = result["error"]
    cublas_warnings = [w for w in result["warnings"] if CUBLAS_VAR in w["message"]]
    raised = error is not None
    raised_cublas = raised and CUBLAS_VAR in error
    prints = result["fingerprints"]
    repeats = len(prints) >= 2 and len(set(prints)) == 1
    if raised_cublas:
        observed = "raises"
    elif raised:
        observed = "other-error"
    elif cublas_warnings:
        observed = "warns" + ("-repeats" if repeats else "-differs")
    else:
        observed = "repeats" if repeats else "differs"
    if not mode_is_on(mode):
        held = None
    elif config in ("unset", "wrong"):
        held = raised_cublas if mode == "error" else (not raised and bool(cublas_warnings) and len(prints) == payload["runs"])
    else:
        held = not raised and not cublas_warnings and repeats
    return CheckObservation(
        held=held,
        observed=observed,
        # The child's per-run hashes are "run_fingerprints": a row's "fingerprints" is the object
        # example -> hash that readers (reports/load.py) expect.
        detail={CUBLAS_VAR: value, **payload, **{k: v for k, v in result.items() if k != "fingerprints"},
                "run_fingerprints": prints, "cublas_warnings": len(cublas_warnings)},
    )


for _config in ("unset", "wrong") + CUBLAS_GOOD:
    for _op in CUBLAS_OPS:
        check(f"{CUBLAS_VAR}={_config}:{_op}", source=REPRO_NOTES, max_examples=2, device="cuda")(_cublas_check(_config, _op))


# ---------------------------------------------------------------------------
# cuDNN convolutions

CONV_RUNS = 3


def _conv_runs(draw, device: torch.device) -> tuple[list[list[bytes]], dict[str, Any]]:
    """Forward and backward of a drawn convolution, CONV_RUNS times on the same inputs."""
    dim = draw(st.integers(1, 3), label="spatial dims")
    transposed = draw(st.booleans(), label="transposed")
    batch = draw(st.sampled_from([4, 16]), label="batch")
    channels = draw(st.sampled_from([8, 32, 64]), label="channels")
    size = {1: 256, 2: 32, 3: 12}[dim]
    kernel = draw(st.sampled_from([1, 3, 5]), label="kernel")
    dtype = draw(st.sampled_from([torch.float32, torch.float16]), label="dtype")
    seed = draw(st.integers(0, 2**31 - 1), label="data seed")
    cls = {
        (1, False): torch.nn.Conv1d, (2, False): torch.nn.Conv2d, (3, False): torch.nn.Conv3d,
        (1, True): torch.nn.ConvTranspose1d, (2, True): torch.nn.ConvTranspose2d, (3, True): torch.nn.ConvTranspose3d,
    }[(dim, transposed)]
    g = torch.Generator(device="cpu").manual_seed(seed)
    module = cls(channels, channels, kernel, padding=kernel // 2)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    module = module.to(device=device, dtype=dtype)
    x = torch.randn((batch, channels) + (size,) * dim, generator=g).to(device=device, dtype=dtype)
    runs = []
    for _ in range(CONV_RUNS):
        inp = x.clone().requires_grad_(True)
        module.zero_grad(set_to_none=True)
        out = module(inp)
        out.backward(torch.ones_like(out))
        synchronize(device)
        runs.append([tensor_bytes(out), tensor_bytes(inp.grad), tensor_bytes(module.weight.grad)])
    example = {"module": cls.__name__, "batch": batch, "channels": channels, "size": size, "kernel": kernel, "dtype": str(dtype)}
    return runs, example


def _conv_differences(runs: list[list[bytes]]) -> list[str]:
    names = ("output", "grad_input", "grad_weight")
    return [names[i] for i in range(3) if len({r[i] for r in runs}) > 1]


def _conv_observation(draw, device: torch.device, mode: str, *, cudnn_deterministic: bool, judged: bool) -> CheckObservation:
    """Run the convolutions with cuDNN benchmark off and the given cudnn.deterministic."""
    require_cuda(device)
    with preserved_global_state():
        enter_mode(mode)
        set_cudnn(benchmark=False, deterministic=cudnn_deterministic)
        runs, example = _conv_runs(draw, device)
    differing = _conv_differences(runs)
    return CheckObservation(
        held=(not differing) if judged else None,
        observed="repeats" if not differing else "differs:" + ",".join(differing),
        detail={**example, "cudnn.benchmark": False, "cudnn.deterministic": cudnn_deterministic, "runs": CONV_RUNS,
                "differing": differing},
    )


@check("cudnn.benchmark=False:conv", source=REPRO_NOTES, device="cuda")
def conv_repeats_without_benchmark(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # benchmark off picks one algorithm; deterministic mode makes it a deterministic one.
    return _conv_observation(draw, device, mode, cudnn_deterministic=False, judged=mode_is_on(mode))


@check("cudnn.deterministic=True:conv", source=REPRO_NOTES, device="cuda")
def conv_repeats_with_cudnn_deterministic(draw, entry, device: torch.device, mode: str) -> CheckObservation:
    # "torch.backends.cudnn.deterministic = True" alone covers convolutions: judged in
    # every mode, "off" being the case where it is the only setting.
    return _conv_observation(draw, device, mode, cudnn_deterministic=True, judged=True)
