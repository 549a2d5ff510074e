"""Planted ops that only the perturbation tier can catch: each is bitwise repeatable within one
process, so two runs back to back agree, and differs where the tier disturbs what the mode claims
to freeze. Imported by the perturbation tier's zygote too (``imports=``), so its forked processes
know the recipes."""
import os
import time

import torch
from hypothesis import strategies as st

from detconf.engine.perturb import register_scribbler
from detconf.engine.program import Program, recipe


def _x(draw, device):
    n = draw(st.integers(2, 6))
    return torch.arange(n, dtype=torch.float32, device=device) + 0.5


@recipe("planted.depends_on_process", targets="aten.add")
def depends_on_process(draw, entry, case, device):
    """Adds a value taken from the process (its id): the same in every run of one process."""
    return Program(fn=lambda x: x + float(os.getpid() + 1), inputs={"x": _x(draw, device)},
                   describe="x + f(process id)")


# A stand-in for a device's caching allocator: a freed block goes back to a pool and the next
# request of its size gets it as it was left. A block new to the pool is zeros (fresh pages).
# The kernel below reads its scratch block without writing it: within one process it reads the
# same bytes every run (nobody else writes them), and whatever was scribbled there otherwise.
_POOL: dict[int, list[torch.UntypedStorage]] = {}


def _take(nbytes: int) -> torch.UntypedStorage:
    free = _POOL.setdefault(nbytes, [])
    if free:
        return free.pop()
    block = torch.UntypedStorage(nbytes)
    block.fill_(0)
    return block


def _give(block: torch.UntypedStorage) -> None:
    _POOL.setdefault(block.nbytes(), []).append(block)


def _scribble_pool(device, nbytes, generator):
    """The perturbation tier's scribble, through the pool: take a block, fill it, give it back."""
    if device.type != "cpu":
        return
    block = _take(nbytes)
    view = torch.empty(0, dtype=torch.uint8).set_(block)
    view.random_(0, 2**8, generator=generator)
    _give(block)


register_scribbler("cpu", _scribble_pool)


@recipe("planted.reads_stale_memory", targets="aten.add")
def reads_stale_memory(draw, entry, case, device):
    """Adds the low bits of a scratch block it never wrote (taken from the pool, given back)."""

    def fn(x):
        block = _take(x.numel() * 4)
        garbage = torch.empty(0, dtype=torch.int32).set_(block).clone()
        _give(block)
        return x + (garbage & 7).to(x.dtype)

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="x + stale scratch bytes")


# Autotuning: a kernel chosen by timing its candidates once per process (cached, as Inductor
# caches its choice), with the timings passed through the distortion Inductor applies to its own
# benchmarks (torch._inductor.runtime.benchmarking.may_distort_benchmarking_result). The two
# candidates differ in the last bit, as two reduction orders do; the second is clearly slower.
_CHOICE: dict[tuple, int] = {}


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return float((time.perf_counter() - start) * 10**3)


def _fast(x):
    return x * 2


def _slow(x):
    time.sleep(0.002)
    return torch.nextafter(x * 2, torch.full_like(x, float("inf")))


@recipe("planted.benchmark_choice", targets="aten.mul")
def benchmark_choice(draw, entry, case, device):
    """Runs whichever candidate benchmarked fastest in this process."""

    def fn(x):
        key = (tuple(x.shape), x.dtype, x.device.type)
        if key not in _CHOICE:
            from torch._inductor.runtime.benchmarking import may_distort_benchmarking_result

            bench = may_distort_benchmarking_result(_time)  # reads the setting at call time
            timings = [bench(lambda c=c: c(x)) for c in (_fast, _slow)]
            _CHOICE[key] = min(range(2), key=timings.__getitem__)
        return (_fast, _slow)[_CHOICE[key]](x)

    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="autotuned x * 2")


@recipe("planted.writes_to_stderr", targets="aten.mul")
def writes_to_stderr(draw, entry, case, device):
    """Deterministic, and says a lot on the process's standard error each call (as a device's
    library or a compiler's log may): 16 KiB a call, past a pipe's 64 KiB within one case."""
    def fn(x):
        os.write(2, b"#" * (16 << 10))
        return x * 2
    return Program(fn=fn, inputs={"x": _x(draw, device)}, describe="x * 2, 16 KiB to stderr")
