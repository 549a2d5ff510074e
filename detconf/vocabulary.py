"""The words detconf speaks: modes, sources, promises, expectations, verdicts, the schema version.

This module is torch-free and imports nothing of the project, so every layer
(engine, conformance, the pytest plugin, reports) takes its vocabulary from
here. ``docs/results-schema.md`` lists the same words; a test keeps the two equal.
"""
from __future__ import annotations

#: The files of an end-of-run report folder (``reports.build``); the folder holds nothing else.
REPORT_FILES = ("matrix.csv", "results.csv", "matrix.md", "matrix.html", "matrix.png", "summary.json")

#: Version of the results-file format (docs/results-schema.md).
SCHEMA_VERSION = 3
#: The longest line a results file may hold: the writer never comes near it, every reader rejects
#: a longer one (it bounds what one line can cost).
MAX_LINE_BYTES = 16 << 20
#: Older schema versions readers still take (1: rows without phase or reach; 2: rows without
#: the compile setting, which are eager).
READABLE_SCHEMAS = (1, 2, 3)

#: Determinism settings a case runs under, with the call that sets each. ``off`` is the positive control.
MODE_CALLS: dict[str, str] = {
    "error": "torch.use_deterministic_algorithms(True)",
    "warn_only": "torch.use_deterministic_algorithms(True, warn_only=True)",
    "off": "torch.use_deterministic_algorithms(False)",
}
MODES = tuple(MODE_CALLS)
#: The two flags each mode sets: (enabled, warn_only) of ``torch.use_deterministic_algorithms``.
MODE_FLAGS: dict[str, tuple[bool, bool]] = {"error": (True, False), "warn_only": (True, True), "off": (False, False)}


def debug_level(enabled: bool, warn_only: bool) -> int:
    """The debug mode the two flags make (``torch.get_deterministic_debug_mode``): 0 off, 1 warn,
    2 error."""
    return (1 if warn_only else 2) if enabled else 0


DEFAULT_MODES = ("error", "warn_only")
#: Modes in which determinism is on.
DETERMINISTIC_MODES = ("error", "warn_only")

#: How the program is run: as written, or through ``torch.compile`` with a backend. The docs make no
#: exception for compiled code, so each setting has the same expectations.
COMPILE_SETTINGS: dict[str, str] = {
    "eager": "the op functions run as written (no torch.compile)",
    "aot_eager": "torch.compile(backend='aot_eager'): Dynamo and AOTAutograd graphs, run by the eager kernels",
    "inductor": "torch.compile(backend='inductor'): Dynamo, AOTAutograd and Inductor's generated code",
}
COMPILERS = tuple(COMPILE_SETTINGS)
#: The compile settings a run uses unless told (``--compile``), as DEFAULT_MODES for modes.
DEFAULT_COMPILERS = ("eager",)

#: Catalog sources, in matrix order. ``sweep`` runs only when asked for by name.
SOURCES: dict[str, str] = {
    "torch-docs": "the two lists of torch.use_deterministic_algorithms.__doc__",
    "ascend": "the Ascend NPU deterministic-computation list",
    "vendor": "the vendor profiles of the backends installed distributions provide: each vendor's own list "
              "(docs/backends.md)",
    "flag-api": "the flag API: use_deterministic_algorithms and its getters, the debug mode",
    "repro-notes": "the reproducibility notes: seeds, CUBLAS_WORKSPACE_CONFIG, cuDNN, fill_uninitialized_memory, "
                   "DataLoader",
    "sdpa": "scaled_dot_product_attention per backend (math, flash, efficient, cuDNN): determinism, once-per-process "
            "warnings, backends excluded under the mode",
    "flex-attention": "flex_attention backward: its NotImplementedError / ValueError (not the alert) and its "
                      "UserWarning under warn_only",
    "batch-invariance": "Inductor's batch_invariant setting: f(x[:k]) equals f(x)[:k] bit for bit where torch promises "
                        "it (Inductor, the setting on), measured (recorded) elsewhere",
    "sweep": "every OpInfo of torch's op database, under the general contract",
}
SOURCE_NAMES = tuple(SOURCES)
OP_SOURCES = ("torch-docs", "ascend", "vendor")
CHECK_SOURCES = ("flag-api", "repro-notes", "sdpa", "flex-attention", "batch-invariance")
#: Sources a run uses only when named (``--source``): the sweep, flex attention, whose CUDA
#: cells compile with Inductor (tens of seconds each), and batch invariance (a promise of compiled
#: code only; its cells compile two batch sizes each).
OPT_IN_SOURCES = ("sweep", "flex-attention", "batch-invariance")
DEFAULT_SOURCES = tuple(s for s in OP_SOURCES + CHECK_SOURCES if s not in OPT_IN_SOURCES)
#: Sources whose expectations hold on every device the docs speak of, named by the sentence or not.
STRICT_SOURCES = ("torch-docs",)
#: The device types torch's determinism docstring names. On any other (a PrivateUse1 backend),
#: a torch-docs sentence that names devices gets the general contract.
DOC_DEVICES = ("cpu", "cuda", "mps")
#: Sources whose ops are not in the documented lists (nondeterminism there is "undocumented").
UNLISTED_SOURCES = ("sweep",)

#: What an entry promises.
PROMISES: dict[str, str] = {
    "deterministic": "the op acts deterministically in deterministic mode",
    "raises": "the op throws the determinism RuntimeError in deterministic mode",
    "behaves": "a documented behaviour of the flag API or the reproducibility notes holds (judged by a check)",
}

#: What a case expects, from (entry, device, mode).
EXPECTATIONS: dict[str, str] = {
    "deterministic": "no determinism alert; outputs and gradients bitwise identical across runs",
    "raises": "the determinism RuntimeError in every run",
    "warns": "the determinism UserWarning in every run, and the op returns",
    "deterministic-or-raises": "general contract, mode error: bitwise identical, or the determinism RuntimeError",
    "deterministic-or-warns": "general contract, mode warn_only: bitwise identical, or the warning and the op returns",
    "holds": "the documented behaviour holds (flag API, reproducibility notes)",
    "observe": "mode off, the positive control: record whether runs differed",
}

#: Every verdict, ordered worst first: when examples disagree, the worst verdict stands.
#: Each maps to (passing, one-line meaning).
VERDICTS: dict[str, tuple[bool, str]] = {
    "nondeterministic": (False, "outputs differed between runs where determinism is promised"),
    "undocumented-nondeterminism": (False, "sweep: outputs differed in deterministic mode for an op the docs do not list"),
    "wrong-result": (False, "deterministic, but the output differs from the default algorithm or a CPU reference"),
    "missing-raise": (False, "documented to raise in deterministic mode, did not"),
    "undocumented-raise": (False, "raised although the docs promise no error"),
    "stale-doc": (False, "documented to raise, did not, and was bitwise deterministic (docs out of date)"),
    "missing-warning": (False, "documented to warn in warn_only mode, did not"),
    "spurious-warning": (False, "warned although no warning is documented"),
    "violated": (False, "a flag-API or reproducibility promise did not hold"),
    "not-reached": (False, "no example dispatched the operator the sentence is about: nothing was judged"),
    "harness-error": (False, "the suite itself failed (must be zero)"),
    "missing": (False, "a planned case with no row: the run crashed or was cut short (set by the reports)"),
    "conforms": (True, "behaves as documented"),
    "nondeterminism-seen": (True, "mode off: run-to-run differences seen (informational)"),
    "no-difference-seen": (True, "mode off: no difference seen (informational)"),
    "recorded": (True, "nothing promised; the observation is recorded (informational)"),
    "unsupported": (True, "op or dtype not implemented on that device"),
    "skipped": (True, "device absent or test skipped"),
}
FAILING = tuple(v for v, (passing, _) in VERDICTS.items() if not passing)
#: Verdicts the reports give, never a run: a planned case the run record lists and no row judged.
REPORT_ONLY = ("missing",)
PASSING = tuple(v for v, (passing, _) in VERDICTS.items() if passing)
#: Display order for tables and legends: conforms, failures from the worst, unsupported and skipped,
#: then the informational verdicts.
INFORMATIONAL = ("nondeterminism-seen", "no-difference-seen", "recorded")
DISPLAY_ORDER = ("conforms",) + FAILING + ("unsupported", "skipped") + INFORMATIONAL


#: Verdicts that speak of the documented kernel's behaviour, or of its absence (no raise, no
#: warning, no difference): true only for an example that reached the kernel. An example that
#: did not reach it gets ``not-reached`` instead. What a program did regardless of its route
#: (differed in deterministic mode, raised or warned unasked, wrong result) stands.
REACH_GATED = ("conforms", "stale-doc", "missing-raise", "missing-warning", "no-difference-seen",
               "nondeterminism-seen")
#: Phases of a backward entry: the whole program under the mode, or only the backward.
PHASES: dict[str, str] = {
    "program": "forward and backward under the mode, as users run it",
    "backward-only": "forward with determinism off, only the backward under the mode",
}


def is_passing(verdict: str) -> bool:
    """True for a passing verdict; ``KeyError`` for a word that is not a verdict."""
    return VERDICTS[verdict][0]


def meaning(verdict: str) -> str:
    return VERDICTS[verdict][1]


#: The suite's Hypothesis profiles (``--hypothesis-profile``), as settings keyword arguments:
#: :mod:`detconf.conformance.profiles` registers them; a run records the settings in effect and a
#: certification accepts only a derandomized profile whose settings are these (docs/certify.md).
HYPOTHESIS_PROFILES: dict[str, dict] = {
    # derandomize is spelled out: under a CI environment variable Hypothesis's own
    # default turns it on, and "dev"/"thorough" promise fresh examples every run.
    "dev": {"max_examples": 10, "derandomize": False, "deadline": None},
    "ci": {"max_examples": 6, "derandomize": True, "database": None, "deadline": None, "print_blob": True},
    "thorough": {"max_examples": 100, "derandomize": False, "deadline": None},
    "stress": {"max_examples": 2, "derandomize": True, "database": None, "deadline": None, "print_blob": True},
}

def base_profile(name: str) -> str:
    """The suite's profile a Hypothesis profile name stands for: Hypothesis's pytest plugin
    re-registers the chosen profile as ``stress-with-verbose-verbosity`` (``--hypothesis-verbosity``)
    or ``ci-with-explain-phase`` (``--hypothesis-explain``), the same examples under a new name."""
    return name.split("-with-")[0]


#: The distributions whose pytest plugins a certified run may load without the statement naming
#: them (``certify --allow-plugin``): pytest, its xdist, Hypothesis and detconf itself.
KNOWN_PLUGIN_DISTRIBUTIONS = ("pytest", "pytest-xdist", "hypothesis", "detconf")


#: torch's default float32 math mode per device type, by operator family (what
#: ``engine.mathmode.describe`` reports at the start of a run): IEEE float32 on the CPU; on CUDA,
#: IEEE matmuls and cuDNN's TF32 for convolutions and RNNs. A run under another mode (e.g.
#: ``torch.set_float32_matmul_precision("medium")``: bf16 matmuls) certifies only when the
#: statement declares it (``certify --declare-math-mode``).
DEFAULT_MATH_MODE: dict[str, dict[str, str]] = {
    "cpu": {"matmul": "ieee", "conv": "ieee", "rnn": "ieee"},
    "cuda": {"matmul": "ieee", "conv": "tf32", "rnn": "tf32"},
}
