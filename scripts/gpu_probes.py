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


# --- what the emulated GPU (tests/emulated_gpu.py) assumes, class by class, asked of the real one ---


def _winner(out: torch.Tensor, rows: int) -> str:
    """Which of ``rows`` duplicate writes (write j carries the value j) is in ``out[0]``."""
    won = int(out.reshape(-1)[0].item())
    return "first" if won == 0 else "last" if won == rows - 1 else f"write {won} of {rows}"


def _on(mode: str, fn):
    _mode(mode)
    try:
        return fn()
    finally:
        torch.use_deterministic_algorithms(False)


def emulation(device: str) -> dict:
    """One fact per class the emulation models: TF32, duplicate-write winners, random streams,
    eigenvector signs, accumulation order, alerts, routes; and one the perturbation tier and the
    upstream scripts assume (the emulation does not model it): the allocator hands a freed block
    to the next request of its size, bytes and all (CUDA's caching allocator)."""
    facts: dict = {}
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    facts["tf32.defaults"] = {"cudnn.allow_tf32": cudnn.allow_tf32, "cuda.matmul.allow_tf32": matmul.allow_tf32,
                              "float32_matmul_precision": torch.get_float32_matmul_precision()}
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 16, 32, 32, generator=g), torch.randn(32, 16, 3, 3, generator=g)
    exact = F.conv2d(x.double(), w.double())
    tf32 = {}
    for mode in ("error", "off"):
        out = _on(mode, lambda: F.conv2d(x.to(device), w.to(device)).cpu())
        tf32[mode] = out
        facts[f"tf32.conv2d.{mode}.rel_err"] = float((out.double() - exact).abs().max() / exact.abs().max())
    facts["tf32.conv2d.error_vs_off_bitwise_equal"] = bool(torch.equal(tf32["error"], tf32["off"]))
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    mm = (a.to(device) @ b.to(device)).cpu().double()
    facts["tf32.mm.rel_err"] = float((mm - a.double() @ b.double()).abs().max() / (a.double() @ b.double()).abs().max())

    rows = 4096
    src = torch.arange(rows, dtype=torch.float32).reshape(rows, 1)
    dup = torch.zeros(rows, dtype=torch.long)
    writes = {
        "index_copy": lambda: torch.zeros(4, 1, device=device).index_copy_(0, dup.to(device), src.to(device)),
        "index_put": lambda: torch.zeros(4, device=device).index_put_((dup.to(device),), src.reshape(-1).to(device)),
        "scatter": lambda: torch.zeros(4, device=device).scatter_(0, dup.to(device), src.reshape(-1).to(device)),
    }
    for mode in ("error", "off"):
        for op, fn in writes.items():
            try:
                facts[f"winner.{op}.{mode}"] = sorted({_winner(_on(mode, fn).cpu(), rows) for _ in range(RUNS)})
            except RuntimeError as exc:
                facts[f"winner.{op}.{mode}"] = "raised: " + " ".join(str(exc).split())[:100]
    cpu = torch.zeros(4, 1).index_copy_(0, dup, src)
    facts["winner.index_copy.cpu"] = _winner(cpu, rows)

    torch.manual_seed(0)
    here = torch.rand(8, device=device).cpu()
    torch.manual_seed(0)
    facts["stream.rand_equal_to_cpu"] = bool(torch.equal(here, torch.rand(8)))

    m = torch.randn(8, 8, generator=g, dtype=torch.float64)
    m = m + m.T
    v_dev = torch.linalg.eigh(m.to(device)).eigenvectors.cpu()
    v_cpu = torch.linalg.eigh(m).eigenvectors
    facts["signs.eigh_columns_flipped_vs_cpu"] = int(((v_dev * v_cpu).sum(0) < 0).sum())

    idx = torch.randint(0, 16, (1 << 20,), generator=g)
    val = torch.randn(1 << 20, generator=g)
    for mode in ("error", "off"):
        outs = {_digest(_on(mode, lambda: torch.zeros(16, device=device).index_add_(0, idx.to(device), val.to(device))))
                for _ in range(RUNS)}
        facts[f"shuffle.index_add.{mode}.distinct"] = len(outs)

    grad = torch.randn(2, 3, 64, 64, generator=g, device="cpu").to(device)
    try:
        _on("error", lambda: torch.ops.aten.upsample_bilinear2d_backward(grad, [64, 64], [2, 3, 32, 32], False))
        facts["alerts.aten.upsample_bilinear2d_backward.error"] = "no alert"
    except RuntimeError as exc:
        facts["alerts.aten.upsample_bilinear2d_backward.error"] = "raised: " + " ".join(str(exc).split())[:100]

    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    for mode in ("error", "off"):
        t = torch.randn(1, 2, 8, 8, device=device, requires_grad=True)

        def route():
            with Ops() as ops:
                y = F.interpolate(t, size=(16, 16), mode="bilinear", align_corners=False)
                y.sum().backward()
            return sorted({n for n in ops.names if "upsample" in n or "index_put" in n})
        facts[f"routes.interpolate_bilinear.{mode}"] = _on(mode, route)

    # A block freed and asked for again at its size: the same memory, still holding its bytes?
    # Then two runs of an op that reads memory nobody wrote, each output freed once copied to the
    # host (as the suite's runs free theirs), read the same bytes: empty_like's distinct results.
    n = 1 << 16
    block = torch.full((n,), 7.0, device=device)
    where = block.data_ptr()
    del block
    again = torch.empty(n, device=device)
    facts["allocator.freed_block_handed_back"] = again.data_ptr() == where
    facts["allocator.freed_block_bytes_kept"] = bool((again == 7.0).all())
    del again
    like = torch.zeros(3, 5, device=device)
    for mode in ("error", "off"):
        facts[f"allocator.empty_like.{mode}.distinct"] = len(
            {_digest(_on(mode, lambda: torch.empty_like(like).cpu())) for _ in range(RUNS)})
    return facts


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
    try:
        facts = emulation(args.device)
    except Exception as exc:  # noqa: BLE001 - said, not fatal
        failed += 1
        facts = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}
    for key, value in facts.items():
        print(f"emulation | {key}: {value}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"torch": torch.__version__, "device": name, "results": results, "emulation": facts}, fh,
                      indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
