"""What the perturbation tier disturbs, inside one process.

Two runs back to back in one process share allocator state and stale memory, compiled-code
caches, autotuning choices and the thread pool. The tier judges each case in several fresh
processes (:mod:`conformance.perturbed`); this module is what one such process applies:

- per process (:func:`enter_process`): an empty Inductor (and Triton) cache folder of its own,
  benchmarking distorted where the installed torch has the setting (process 0 keeps true
  timings, process 1 inverts them, later ones draw them at random: a choice made by timing flips
  between processes 0 and 1 whenever it is clear-cut), the Python ``random`` generator seeded
  from the operating system, and the same thread-pool size in every process (thread count is
  configuration, not noise);
- between runs (:meth:`Perturber.before_run`): memory the op could read uninitialized is
  scribbled: blocks of the sizes the program's tensors use are allocated on the device under
  test, filled with random bytes and freed, so the next allocation of that size can hand the
  scribbled bytes to the op;
- during the runs (:meth:`Perturber.during`): on a GPU, a competing load (matrix products on a
  stream of their own) keeps the device busy.

Every perturbation applied is named (:data:`PERTURBATIONS`), so that a row says what its
processes went through. Torch's CPU allocator is glibc's ``malloc``: a freed block is handed back
to a later request only sometimes (small blocks are reused, large ones are returned to the
operating system), so on the CPU a scribble makes a stale read likely to differ, not certain.
A device's caching allocator (CUDA's) hands a freed block to the next request of its size.
"""
from __future__ import annotations

import contextlib
import gc
import os
import platform
import random
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from detconf.engine.backends import HOST
from detconf.engine.compiled import OUTSIDE_CACHE_VAR
from detconf.engine.fingerprint import sha256, tensor_bytes

__all__ = ["DISTORTIONS", "PERTURBATIONS", "Perturber", "ProcessSetup", "distortion_variable", "enter_process",
           "inputs_digest", "register_scribbler", "scribble", "warm_up"]

#: Every perturbation a row may name in ``detail.perturbations``, with what it does.
PERTURBATIONS: dict[str, str] = {
    "fresh-process": "each process is forked from a process that imported the suite and ran no case (only "
                     "the warm-up: a 3-element torch op and a one-example Hypothesis test)",
    "empty-compile-cache": "each process compiles into an empty Inductor/Triton cache folder of its own",
    "distorted-benchmarking": "Inductor's benchmark timings are distorted differently in each process "
                              "(none, inverse, random)",
    "scribbled-memory": "before every run, blocks of the program's tensor sizes are filled with random bytes "
                        "on the device and freed",
    "competing-load": "a GPU runs matrix products on a stream of its own during the runs",
    "fixed-threads": "every process uses the same CPU thread-pool size",
}
#: Benchmark distortion per process index (the last one repeats): true timings, inverted, random.
DISTORTIONS = ("", "inverse", "random")
#: The environment variable torch's Inductor reads for its benchmark distortion.
_DISTORT_VARIABLE = "TORCHINDUCTOR_DISTORT_BENCHMARKING_RESULT"


def distortion_variable() -> str | None:
    """The distortion's environment variable where the installed torch's Inductor has the setting
    (``config.test_configs.distort_benchmarking_result``), else None."""
    try:
        from torch._inductor import config
    except Exception:  # noqa: BLE001 - a torch without Inductor has nothing to distort
        return None
    tests = getattr(config, "test_configs", None)
    return _DISTORT_VARIABLE if tests is not None and hasattr(tests, "distort_benchmarking_result") else None


@dataclass(frozen=True)
class ProcessSetup:
    """What one perturbed process applies; JSON-safe (travels to the process as its fields)."""

    index: int
    threads: int
    scribble: bool = True
    probe_threads: bool = False  # run each example once more on one thread (sensitivity, never a verdict)
    # Compare each example with the reference (float64, the mode-off algorithm, the host): one
    # process does, on the same inputs; the others compare runs only.
    differential: bool = True

    @property
    def distortion(self) -> str:
        return DISTORTIONS[min(self.index, len(DISTORTIONS) - 1)]


def warm_up() -> None:
    """Pay, once in the process that forks the tier's processes, the one-time costs that every
    forked process would otherwise pay on its first example: torch's first operator (a 3-element
    tensor on the CPU, below every parallel grain: no thread pool starts; no backward: autograd's
    first backward starts a thread per accelerator device, and a child forked after that refuses
    every backward, "Unable to handle autograd's threading in combination with fork-based
    multiprocessing"), and
    Hypothesis's first test (it registers the global random generators, with a full garbage
    collection) and its reading of the integer and string constants of the project's modules,
    and the host's ``uname`` (which the rows' device description reads). Then the heap is
    collected and frozen (``gc.freeze``): the forked processes do not scan it again.

    This runs torch code in that process, but no case: it draws no example, runs no recipe and
    allocates no tensor the size of one, so each case still starts in a process that ran none."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    x = torch.ones(3)
    (x * 2).sum()
    del x

    @settings(max_examples=1, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 1))
    def first_test(_: int) -> None:
        return None

    first_test()
    # Hypothesis reads the constants of the project's modules (parsing each) on the first draw
    # that may use one, not on every first test; its function for that is private: called
    # where this Hypothesis has it.
    try:
        from hypothesis.internal.conjecture import providers

        getattr(providers, "_get_local_constants", lambda: None)()
    except Exception:  # noqa: BLE001 - another Hypothesis: each process reads them itself
        pass
    platform.uname()  # every row describes its device; platform asks `uname` once per process
    gc.collect()
    gc.freeze()


def enter_process(setup: ProcessSetup, cache_root: str) -> dict:
    """Apply ``setup``'s per-process perturbations in this (fresh) process; return what was applied:
    the names (``perturbations``) and the settings that differ between processes."""
    applied = ["fresh-process"]
    cache = tempfile.mkdtemp(prefix=f"inductor-{setup.index}-", dir=cache_root)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    os.environ.pop(OUTSIDE_CACHE_VAR, None)  # empty for all Inductor asks: its CPU probes too
    applied.append("empty-compile-cache")
    seed = int.from_bytes(os.urandom(8), "little")
    random.seed(seed)  # a forked process would repeat its parent's stream
    settings: dict = {"pid": os.getpid(), "random_seed": seed}
    variable = distortion_variable()
    if variable is not None:
        os.environ[variable] = setup.distortion
        from torch._inductor import config

        config.test_configs.distort_benchmarking_result = setup.distortion
        settings["distortion"] = setup.distortion or "none"
        applied.append("distorted-benchmarking")
    torch.set_num_threads(setup.threads)
    settings["threads"] = torch.get_num_threads()
    applied.append("fixed-threads")
    if setup.scribble:
        applied.append("scribbled-memory")
    return {"perturbations": applied, "settings": settings}


#: Extra scribblers per device type, for allocators that keep freed blocks outside the device's
#: own ``torch.empty`` path (a vendor's pool). Each takes (device, nbytes, generator).
_SCRIBBLERS: dict[str, list[Callable[[torch.device, int, torch.Generator], None]]] = {}


def register_scribbler(device_type: str, fn: Callable[[torch.device, int, torch.Generator], None]) -> None:
    """Have :func:`scribble` also call ``fn`` for blocks on ``device_type``."""
    _SCRIBBLERS.setdefault(device_type, []).append(fn)


def scribble(device: torch.device, sizes: list[int], generator: torch.Generator) -> int:
    """Allocate a block of each size (bytes) on ``device``, fill it with random bytes and free it
    (freed in reverse order: the first size is handed out first again); return the bytes written."""
    blocks = []
    for nbytes in sizes:
        block = torch.empty(nbytes, dtype=torch.uint8, device=device)
        block.random_(0, 2**8, generator=generator)
        blocks.append(block)
    for fn in _SCRIBBLERS.get(device.type, []):
        for nbytes in sizes:
            fn(device, nbytes, generator)
    while blocks:
        del blocks[-1]
    return sum(sizes)


def inputs_digest(inputs: dict[str, torch.Tensor]) -> str:
    """The SHA-256 of a program's inputs (name, dtype, shape, bytes): equal inputs across processes."""
    chunks: list[bytes | str] = []
    for name in sorted(inputs):
        t = inputs[name]
        if isinstance(t, torch.Tensor):
            t = t.detach()
            if t.is_sparse:
                t = t.to_dense()
            if t.is_quantized:
                t = t.int_repr()
            chunks += [name, str(t.dtype), repr(tuple(t.shape)), tensor_bytes(t)]
    return sha256(chunks, length=32)


@dataclass
class Perturber:
    """The between-run and during-run perturbations of one process (see the module docstring)."""

    setup: ProcessSetup
    scribbled_bytes: int = 0
    load_steps: int = 0
    _generator: torch.Generator | None = field(default=None, repr=False)

    def _gen(self, device: torch.device) -> torch.Generator:
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        return self._generator

    def before_run(self, inputs: dict[str, torch.Tensor], blocks: list[tuple[torch.device, int]]) -> None:
        """Scribble a block the size of each input and of each output of the previous run on the
        device that holds it (``blocks``: the outputs' storages as their device held them,
        ``engine.runner.RunRecord.blocks``, not the host copies the runs are compared by), one
        block per tensor, so that each of the next run's fresh inputs and outputs may be handed a
        scribbled block, not only the first request of a size."""
        if not self.setup.scribble:
            return
        by_device: dict[torch.device, list[int]] = {}
        for t in inputs.values():
            if isinstance(t, torch.Tensor) and not t.is_sparse:
                by_device.setdefault(t.device, []).append(max(1, t.numel() * t.element_size()))
        for device, nbytes in blocks:
            by_device.setdefault(device, []).append(max(1, int(nbytes)))
        for device, sizes in by_device.items():
            self.scribbled_bytes += scribble(device, sorted(sizes, reverse=True), self._gen(device))

    @contextlib.contextmanager
    def during(self, device: torch.device) -> Iterator[None]:
        """A competing load on ``device`` while the body runs (GPUs with streams only)."""
        module = getattr(torch, device.type, None)
        if device.type == HOST or module is None or not hasattr(module, "Stream"):
            yield
            return
        with competing_load(device) as steps:
            yield
        self.load_steps += steps[0]

    def applied(self) -> list[str]:
        """The names of what this process did between and during runs."""
        names = []
        if self.scribbled_bytes:
            names.append("scribbled-memory")
        if self.load_steps:
            names.append("competing-load")
        return names


@contextlib.contextmanager
def competing_load(device: torch.device, side: int = 2**11) -> Iterator[list[int]]:
    """Matrix products on a stream of their own on ``device`` until the body ends; yields a
    one-item list that holds the number of products launched when it ends. Its matrix draws no
    random number: a draw from the device's default generator while the runs draw from it would
    move their stream between runs (a seeded random op would differ, and be blamed). (Not
    exercised on a machine without a GPU, but for ``tests/test_perturb.py``'s emulated stream.)"""
    module = getattr(torch, device.type)
    stop = threading.Event()
    steps = [0]

    def work() -> None:
        stream = module.Stream(device=device)
        with module.stream(stream):
            a = torch.linspace(-1.0, 1.0, side * side, device=device).reshape(side, side)
            while not stop.is_set():
                a = (a @ a).tanh_()
                steps[0] += 1
                if steps[0] % 8 == 0:
                    stream.synchronize()
            stream.synchronize()

    thread = threading.Thread(target=work, name="detconf-competing-load", daemon=True)
    thread.start()
    try:
        yield steps
    finally:
        stop.set()
        thread.join(timeout=60)
