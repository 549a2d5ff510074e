"""Running a program through ``torch.compile``: the compile axis.

The docs make no exception for compiled code, so a case judged under ``aot_eager`` or
``inductor`` has the same expectation as in eager. A :class:`Compiler` belongs to one case:
it compiles the case's op functions with a recording backend, reuses them across the case's
examples (Dynamo caches compiled code per function and guards; the backend object stays the
same for the whole case), and tells, per run:

- how many compiled graphs ran (zero: the program ran in eager, e.g. past Dynamo's
  recompile limit, so the example is no evidence about compiled code);
- the ATen operators of the graphs that ran, forward and backward, as the compiler
  received them (after AOTAutograd and, for Inductor, its decompositions);
- the graph breaks Dynamo took, with their reasons (a break puts code back in eager);
- the seconds spent compiling (kept apart from the op's run time).

A dispatch trace cannot run under compile (Dynamo skips frames while a dispatch mode is
active), so reach is read from the recorded graphs instead; see :func:`compiled_reach`.
Everything here is torch-level plumbing; the verdict stays in :mod:`engine.verdict`.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import torch

from detconf.vocabulary import COMPILERS
from detconf.engine.determinism import environment
from detconf.engine.trace import reached

__all__ = ["CompileSnapshot", "Compiler", "ask_vector_isa", "compile_unavailable", "compiled_reach",
           "flushes_denormals", "is_compile_failure", "keeping_denormals", "private_cache", "CACHE_ENV_VARS",
           "OUTSIDE_CACHE_VAR"]

#: Environment variables that point compiled artefacts somewhere: the plugin sets them to a
#: run-private folder so that a run neither reads nor leaves another run's kernels.
CACHE_ENV_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
#: Set by :func:`private_cache` (xdist's workers inherit it): the Inductor cache folder the
#: environment named before the private one, "" where it named none (torch's default folder).
#: :func:`ask_vector_isa` asks Inductor about the CPU there.
OUTSIDE_CACHE_VAR = "DETCONF_INDUCTOR_CACHE_OUTSIDE"


def compile_unavailable(setting: str, codegen: str | None) -> str | None:
    """Why ``setting`` cannot run with this torch on a device whose Inductor code generator is
    ``codegen`` (:attr:`engine.backends.Backend.inductor_codegen`: ``cpp``, ``triton`` or None);
    None: it can."""
    if setting not in COMPILERS:
        raise ValueError(f"compile setting must be one of {COMPILERS}, got {setting!r}")
    if setting == "eager":
        return None
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        importlib.import_module("torch._dynamo")
    except Exception as exc:  # noqa: BLE001 - a build without Dynamo
        return f"torch._dynamo cannot be imported: {type(exc).__name__}: {exc}"
    if setting == "inductor":
        if codegen == "cpp":
            compiler = os.environ.get("CXX") or next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)
            if not compiler or not shutil.which(compiler):
                return "Inductor's C++ backend needs a C++ compiler and none was found (CXX, g++, c++, clang++)"
        elif codegen == "triton":
            try:
                from torch.utils._triton import has_triton
            except Exception:  # noqa: BLE001
                return "Inductor needs Triton on this device and torch.utils._triton is missing"
            if not has_triton():
                return "Inductor needs Triton on this device and Triton is not installed"
    return None


def is_compile_failure(exc: BaseException) -> bool:
    """Is ``exc`` (or an exception it wraps) Dynamo's, AOTAutograd's or Inductor's own failure,
    rather than an error of the op the program calls?"""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        module = type(e).__module__ or ""
        if module.startswith(("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx.experimental")):
            return True
        e = e.__cause__ or e.__context__
    return False


@contextlib.contextmanager
def private_cache(prefix: str = "detconf-compile-") -> Iterator[str]:
    """A fresh folder for compiled artefacts, named in :data:`CACHE_ENV_VARS` while the body runs
    (and the folder named before it in :data:`OUTSIDE_CACHE_VAR`)."""
    folder = tempfile.mkdtemp(prefix=prefix)
    outside = os.environ.get(OUTSIDE_CACHE_VAR, os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    try:
        with environment({"TORCHINDUCTOR_CACHE_DIR": folder, "TRITON_CACHE_DIR": os.path.join(folder, "triton"),
                          OUTSIDE_CACHE_VAR: outside}):
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_vector_isa_asked = False
_vector_isa_problem: str | None = None  # set once the answer left Inductor in the wrong folder


def ask_vector_isa(ask: bool = True) -> bool:
    """Ask Inductor, once per process, which vector instruction sets the CPU has, in the cache
    folder outside the run's private one (:data:`OUTSIDE_CACHE_VAR`); True when asked there.
    ``ask=False`` (a graph for another device) only raises where an earlier answer went wrong.

    Inductor's first C++ compile in a process builds and loads a probe per instruction set in its
    cache folder and keeps the answer for the process's life; in a run's empty private folder
    that cost 8.5 to 10.6 s of a first compile (2-core sandbox), against about 1 s where the
    probes are already built. The probes depend on the compiler, its flags and torch's version
    (Inductor's key for them), not on anything a case compiles, so they are built once where any
    ``torch.compile`` of this environment keeps them; the run's kernels stay in its private
    folder, which torch is asked for afterwards: a torch that kept the other folder is a
    ``RuntimeError`` here, for that compile and every later one of the process. Not asked where
    no private folder was made (nothing then sets the variable): Inductor asks where it
    compiles, as without the suite."""
    global _vector_isa_asked, _vector_isa_problem
    if _vector_isa_problem is not None:
        raise RuntimeError(_vector_isa_problem)  # every later compile of the process: its kernels would go there too
    if _vector_isa_asked or not ask:
        return False
    _vector_isa_asked = True
    outside = os.environ.get(OUTSIDE_CACHE_VAR)
    private = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if outside is None or not private:
        return False
    try:
        from torch._inductor import cpu_vec_isa

        with environment({"TORCHINDUCTOR_CACHE_DIR": outside or None}):  # unset: torch's default folder
            cpu_vec_isa.valid_vec_isa_list()
    except Exception:  # noqa: BLE001 - Inductor asks again where it compiles (it keeps answers, not failures)
        return False
    now = _inductor_cache_dir()
    if now is not None and os.path.realpath(now) != os.path.realpath(private):
        _vector_isa_problem = (f"Inductor kept the cache folder it was asked about the CPU in ({now}) instead of the "
                               f"run's own ({private}): this torch would put the run's kernels there")
        raise RuntimeError(_vector_isa_problem)
    return True


def _inductor_cache_dir() -> str | None:
    """The folder Inductor writes into now (torch's own answer), None where this torch cannot say."""
    for name in ("torch._inductor.runtime.cache_dir_utils", "torch._inductor.runtime.runtime_utils"):
        try:
            return importlib.import_module(name).cache_dir()
        except (ImportError, AttributeError):
            continue
    return None


def _graph_ops(gm: Any) -> Counter:
    """The operators an FX graph calls, by overload name (``aten.put.default``)."""
    ops: Counter = Counter()
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            ops[str(node.target)] += 1
    return ops


@dataclass
class _Graph:
    """One graph Dynamo handed to the backend, with the ATen graphs compiled for it."""

    index: int
    ops: Counter = field(default_factory=Counter)
    calls: int = 0
    #: Graph breaks Dynamo took while tracing the frame this graph came from. Dynamo counts a
    #: break when it traces, not when compiled code runs: a reused graph carries its breaks.
    break_reasons: list[str] = field(default_factory=list)


@dataclass
class CompileSnapshot:
    """What the compiled program did in one run (plain data)."""

    graphs_run: int = 0
    ops: Counter = field(default_factory=Counter)
    graph_breaks: int = 0
    break_reasons: list[str] = field(default_factory=list)
    compile_s: float = 0.0
    #: Every break reason Dynamo gave in this case so far (why a function with no graph runs in eager).
    case_break_reasons: list[str] = field(default_factory=list)


class Compiler:
    """Compiles one case's op functions with ``setting``'s backend and records what ran.

    Use :meth:`case` around the whole case (it resets Dynamo before and after, so no compiled
    state passes from one case to the next), :meth:`compile` to get the compiled form of a
    program's function, and :meth:`run` around each run to get its :class:`CompileSnapshot`.
    """

    def __init__(self, setting: str, codegen: str | None = None) -> None:
        if setting not in COMPILERS or setting == "eager":
            raise ValueError(f"a Compiler needs a compile backend ({', '.join(COMPILERS[1:])}), got {setting!r}")
        self.setting = setting
        #: The device's Inductor code generator (``cpp``: :func:`ask_vector_isa` at a case's start).
        self.codegen = codegen
        self.compile_s = 0.0
        self.graphs: list[_Graph] = []
        self._current: _Graph | None = None
        self._breaks_mark: Counter = Counter()
        self.break_reasons_seen: set[str] = set()
        self._compiling = 0  # depth of the timed compile calls in progress
        #: How many times a compile (or a compiled call) switched on flush-to-zero and it was undone.
        self.denormals_restored = 0
        self._backend = self._make_backend()

    @contextlib.contextmanager
    def _timing(self) -> Iterator[None]:
        """Count the body's seconds in ``compile_s`` (once where timed calls nest); a compile
        leaves the process's denormal handling as it found it (:func:`keeping_denormals`)."""
        self._compiling += 1
        started = time.perf_counter()
        try:
            with keeping_denormals(self):
                yield
        finally:
            self._compiling -= 1
            if not self._compiling:
                self.compile_s += time.perf_counter() - started

    # -- the recording backend
    def _record_aten(self, compile_aten: Callable[..., Any]) -> Callable[..., Any]:
        # Timed here too: AOTAutograd compiles a backward graph lazily, at the first backward
        # call, outside the backend call below; its seconds are compiling, not the op's run time.
        def recording(gm, example_inputs, *args, **kwargs):
            if self._current is not None:
                self._current.ops.update(_graph_ops(gm))
            with self._timing():
                return compile_aten(gm, example_inputs, *args, **kwargs)

        return recording

    def _make_backend(self) -> Callable[..., Any]:
        if self.setting == "aot_eager":
            from torch._dynamo.backends.common import aot_autograd
            from torch._dynamo.backends.debugging import boxed_nop
            from torch._functorch.partitioners import min_cut_rematerialization_partition

            # torch's own aot_eager, with a recording step before its no-op compilers.
            inner = aot_autograd(fw_compiler=self._record_aten(boxed_nop), bw_compiler=self._record_aten(boxed_nop),
                                 partition_fn=min_cut_rematerialization_partition,
                                 keep_inference_input_mutations=True)
        else:
            from torch._inductor.compile_fx import compile_fx, compile_fx_inner

            record = self._record_aten(compile_fx_inner)

            def inner(gm, example_inputs):
                return compile_fx(gm, example_inputs, inner_compile=record)

        def backend(gm, example_inputs):
            graph = _Graph(index=len(self.graphs), break_reasons=self._new_breaks())
            self.graphs.append(graph)
            self._current = graph
            with self._timing():
                compiled = inner(gm, example_inputs)

            def counted(*args):
                graph.calls += 1
                self._current = graph  # a lazily compiled backward belongs to the graph that ran last
                return compiled(*args)

            return _wrapped_like(counted, compiled)

        return backend

    def _new_breaks(self) -> list[str]:
        """Break reasons counted since the last graph was handed to the backend."""
        now = Counter(_graph_break_counter())
        new = now - self._breaks_mark
        self._breaks_mark = now
        reasons = {_first_line(reason) for reason in new}
        self.break_reasons_seen |= reasons
        return sorted(reasons)

    # -- use
    @contextlib.contextmanager
    def case(self) -> Iterator["Compiler"]:
        if self.setting == "inductor":
            ask_vector_isa(ask=self.codegen == "cpp")  # a RuntimeError where torch kept the other folder
        dynamo = importlib.import_module("torch._dynamo")
        dynamo.reset()
        _graph_break_counter().clear()
        self._breaks_mark = Counter()
        self.break_reasons_seen = set()
        try:
            with keeping_denormals(self):
                yield self
        finally:
            dynamo.reset()
            _graph_break_counter().clear()

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The compiled form of ``fn`` (a plain op function or a ``functools.partial`` of one).

        Static shapes (``dynamic=False``): each function is compiled for the sizes it is called
        with, as a program's first compile is. Left to Dynamo's automatic dynamic shapes, the
        second op function of a case would be traced symbolically -- every partial runs through
        one wrapper frame of Dynamo's, whose earlier sizes it would take for a changing size --
        and Inductor's symbolic C++ code generation costs minutes per pooling backward."""
        return torch.compile(fn, backend=self._backend, dynamic=False)

    @contextlib.contextmanager
    def run(self) -> Iterator[CompileSnapshot]:
        """Around one run: afterwards the snapshot holds the graphs that ran, their operators,
        the graph breaks taken and the compile seconds spent during the run."""
        snap = CompileSnapshot()
        calls_before = [g.calls for g in self.graphs]
        breaks_before = Counter(_graph_break_counter())
        compile_before = self.compile_s
        try:
            with keeping_denormals(self), _collector_paused_for_dynamo():
                yield snap
        finally:
            reasons: set[str] = set()
            graph_breaks = 0
            for i, graph in enumerate(self.graphs):
                before = calls_before[i] if i < len(calls_before) else 0
                if graph.calls > before:
                    snap.graphs_run += graph.calls - before
                    snap.ops.update(graph.ops)
                    reasons.update(graph.break_reasons)
                    graph_breaks += len(graph.break_reasons)
            breaks = Counter(_graph_break_counter())
            breaks.subtract(breaks_before)
            fresh = {_first_line(reason) for reason, n in breaks.items() if n > 0}
            snap.graph_breaks = max(graph_breaks, sum(n for n in breaks.values() if n > 0), len(reasons | fresh))
            snap.break_reasons = sorted(reasons | fresh)
            snap.compile_s = self.compile_s - compile_before
            self.break_reasons_seen |= fresh
            snap.case_break_reasons = sorted(self.break_reasons_seen)


def _dynamo_frees_cache_entries_in_gc() -> bool:
    """Can a cyclic garbage collection during a compiled call crash this torch's Dynamo?

    On 2.5.1 a compiled call after other cases' compiled calls died of a segmentation fault in
    Dynamo's walk over the frame's cache entries (``torch/_dynamo/cache_size.py``,
    ``_has_same_id_matched_objs``: ``PyObject_GetAttr`` on a freed cache entry), now and then
    -- always with pytest's log capture on, where allocation triggers collections at other
    moments; never with the collector paused for the call. Cache entries are removed by weakref
    callbacks when an object a guard matched by identity dies (a class such as an
    ``autograd.Function`` defined per example dies only in a cyclic collection), which a
    collection inside the walk runs in the middle of it. Not seen on 2.11, 2.13 or 2.14."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(torch.__version__).release < (2, 6)
    except InvalidVersion:
        return False


def _collector_paused_for_dynamo() -> contextlib.AbstractContextManager:
    """No cyclic garbage collection during a compiled run where Dynamo cannot take one
    (:func:`_dynamo_frees_cache_entries_in_gc`); the garbage of the run is collected after it,
    outside Dynamo, when allocation next triggers a collection."""
    if not _dynamo_frees_cache_entries_in_gc():
        return contextlib.nullcontext()
    from detconf.gc_pause import gc_paused

    return gc_paused()


def flushes_denormals() -> bool:
    """Does this thread flush subnormal floats to zero (x86's FTZ/DAZ bits set)?

    Python's own float arithmetic runs on the same SSE unit as torch's CPU kernels, so halving
    the smallest normal double gives zero exactly when the processor flushes."""
    return (sys.float_info.min / 2.0) == 0.0


@contextlib.contextmanager
def keeping_denormals(owner: Any = None) -> Iterator[None]:
    """Leave the process's denormal handling as the body found it.

    Inductor's C++ backend up to 2.5 builds its kernels with ``-ffast-math``, and GCC before 13
    then links ``crtfastmath.o`` into the shared object, whose constructor sets FTZ/DAZ for the
    process when the kernel is loaded: from the first compiled case on, every later case of the
    worker (eager ones too) would run with subnormals flushed to zero, and Hypothesis refuses to
    draw floats at all ("we can't represent subnormal floats right now"). Where the body switched
    flushing on, it is switched off again (``torch.set_flush_denormal(False)``); a process that
    flushed before (the user's own ``torch.set_flush_denormal(True)``) is left so."""
    before = flushes_denormals()
    try:
        yield
    finally:
        if not before and flushes_denormals():
            torch.set_flush_denormal(False)
            if owner is not None:
                owner.denormals_restored = getattr(owner, "denormals_restored", 0) + 1


def _wrapped_like(wrapper: Callable[..., Any], compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` with ``compiled``'s name and attributes (``_boxed_call`` among them), but none
    of the attributes that make Dynamo look through it.

    Not ``functools.wraps``: AOTAutograd's compiled function carries
    ``_torchdynamo_orig_callable`` (it is wrapped in ``torch._dynamo.disable``), and
    ``functools.wraps`` copies it, with ``__wrapped__``, onto the wrapper. Dynamo then wraps the
    backend's result in ``disable`` again, and releases up to 2.5 (``innermost_fn``) follow
    ``_torchdynamo_orig_callable`` to the innermost function: the wrapper is dropped, no call is
    counted, and every compiled run would look like a run in eager."""
    functools.update_wrapper(wrapper, compiled, updated=())
    for name, value in getattr(compiled, "__dict__", {}).items():
        if name.startswith("_torchdynamo") or name == "__wrapped__":
            continue
        try:
            setattr(wrapper, name, value)
        except (AttributeError, TypeError):
            pass
    wrapper.__dict__.pop("__wrapped__", None)
    return wrapper


def _graph_break_counter() -> Counter:
    from torch._dynamo.utils import counters

    return counters["graph_break"]


def _first_line(text: str) -> str:
    return str(text).strip().splitlines()[0][:300] if str(text).strip() else "graph break"


def compiled_reach(targets: Iterable[str] | None, snaps: Iterable[CompileSnapshot], eager_reached: bool | None) -> tuple[bool | None, str | None]:
    """Did the compiled program reach the sentence's operator? (reached, how).

    - ``"graph"``: a target is among the operators of a compiled graph that ran.
    - ``"decomposed"``: every run ran compiled graphs with no graph break, and the same
      example in eager dispatched a target: the whole program, the documented operation
      included, was compiled, and the compiler replaced the operator by others (Inductor
      lowers ``put`` to ``index_put``). The verdict is then about what the compiled
      program does with that operation, which is the question.

    Not reached: a run that ran no compiled graph (the program ran in eager), or a graph
    break with no target in the graphs (the operation may have run in eager).
    """
    snaps = list(snaps)
    if targets is None:
        return None, None
    targets = tuple(targets)
    ops: Counter = Counter()
    for s in snaps:
        ops.update(s.ops)
    if reached(targets, ops) and all(s.graphs_run for s in snaps):
        return True, "graph"
    whole = bool(snaps) and all(s.graphs_run and not s.graph_breaks for s in snaps)
    if whole and eager_reached:
        return True, "decomposed"
    return False, None
