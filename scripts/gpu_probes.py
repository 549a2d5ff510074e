"""Independent checks on a GPU, in plain torch (no detconf code): what the suite's CUDA verdicts
and known findings rest on, one line per check, to compare with the suite's rows of the same run.

    python3 scripts/gpu_probes.py [--device cuda] [--json OUT.json]

Each check runs its op on identical seeded inputs several times: under
``use_deterministic_algorithms(True)`` (does it raise?), under ``warn_only=True`` (does it warn?),
and with the mode off (do the runs differ?), in two phases where the docs speak of
differentiation: ``program`` (forward and backward under the mode) and ``backward-only`` (the
forward with the mode off). Sizes are loads where GPU races show (10^5 to 10^7 elements).
Exit status 0 when every check ran (whatever it saw), 1 when one could not run, 2 without the device.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import warnings

import torch
import torch.nn.functional as F

RUNS = 5


def _digest(*tensors: torch.Tensor | None) -> str:
    h = hashlib.sha256()
    for t in tensors:
        if t is not None:
            h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def _mode(mode: str) -> None:
    torch.use_deterministic_algorithms(mode != "off", warn_only=mode == "warn_only")


def run(make, fn, *, mode: str, phase: str, grads: bool) -> dict:
    """``fn(*make())`` RUNS times in ``mode``: raised (first message), warned (alert texts), and
    how many distinct results (output and input gradients) the runs gave."""
    seen, raised, warned = set(), None, set()
    for _ in range(RUNS):
        inputs = make()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                _mode("off" if phase == "backward-only" else mode)
                out = fn(*inputs)
                if grads:
                    _mode(mode)
                    out.backward(torch.ones_like(out))
                torch.cuda.synchronize() if out.is_cuda else None
        except RuntimeError as exc:
            raised = " ".join(str(exc).split())[:120]
            continue
        finally:
            torch.use_deterministic_algorithms(False)
        warned |= {" ".join(str(w.message).split())[:80] for w in caught
                   if "deterministic" in str(w.message)}
        grads_ = [t.grad for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        seen.add(_digest(out, *grads_))
    return {"raised": raised, "warned": sorted(warned), "distinct": len(seen), "runs": RUNS}


def _seeded(shape, device, *, requires_grad=True, seed=0, dtype=torch.float32):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype).to(device).requires_grad_(requires_grad)


def checks(device: str):
    """(name, make, fn, differentiated)"""
    big2 = (8, 16, 64, 64)
    big3 = (4, 8, 16, 32, 32)
    yield ("interpolate bilinear 4-D backward", lambda: (_seeded(big2, device),),
           lambda x: F.interpolate(x, size=(255, 255), mode="bilinear", align_corners=False), True)
    yield ("interpolate trilinear 5-D backward", lambda: (_seeded(big3, device),),
           lambda x: F.interpolate(x, size=(47, 95, 95), mode="trilinear", align_corners=False), True)
    yield ("interpolate linear 3-D backward", lambda: (_seeded((64, 64, 512), device),),
           lambda x: F.interpolate(x, size=2047, mode="linear", align_corners=False), True)
    yield ("interpolate bicubic 4-D backward", lambda: (_seeded(big2, device),),
           lambda x: F.interpolate(x, size=(255, 255), mode="bicubic", align_corners=False), True)
    yield ("MaxPool3d backward (return_indices=False)", lambda: (_seeded(big3, device),),
           lambda x: F.max_pool3d(x, 3, stride=1), True)
    yield ("MaxPool3d backward (return_indices=True)", lambda: (_seeded(big3, device),),
           lambda x: F.max_pool3d(x, 3, stride=1, return_indices=True)[0], True)
    yield ("grid_sample cuDNN route backward (4-D, bilinear, zeros, align_corners=True)",
           lambda: (_seeded((8, 16, 32, 32), device), (_seeded((8, 128, 128, 2), device, requires_grad=False) * 0.9)),
           lambda x, g: F.grid_sample(x, g, align_corners=True), True)
    yield ("ReplicationPad2d backward (F.pad replicate)", lambda: (_seeded(big2, device),),
           lambda x: F.pad(x, (3, 3, 3, 3), mode="replicate"), True)
    yield ("cumsum float32, 4M", lambda: (_seeded((1 << 22,), device, requires_grad=False),),
           lambda x: torch.cumsum(x, 0), False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", help="also write every result to this file")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_probes: no CUDA device here", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else args.device
    print(f"torch {torch.__version__} on {name}; {RUNS} runs per cell")
    results, failed = [], 0
    for label, make, fn, differentiated in checks(args.device):
        phases = ("program", "backward-only") if differentiated else ("program",)
        for phase in phases:
            for mode in ("error", "warn_only", "off"):
                if phase == "backward-only" and mode == "off":
                    continue
                start = time.perf_counter()
                try:
                    seen = run(make, fn, mode=mode, phase=phase, grads=differentiated)
                except Exception as exc:  # noqa: BLE001 - a check that cannot run is said, not fatal
                    failed += 1
                    seen = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"}
                seen.update(check=label, phase=phase, mode=mode, seconds=round(time.perf_counter() - start, 2))
                results.append(seen)
                said = seen.get("error") or (f"raised: {seen['raised']}" if seen["raised"] else
                                             f"warned: {seen['warned'][0]}" if seen["warned"] else
                                             f"no alert, {seen['distinct']} distinct result(s) in {seen['runs']} runs")
                print(f"{label} | {phase} | {mode}: {said}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"torch": torch.__version__, "device": name, "results": results}, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
