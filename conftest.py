"""detconf's pytest plugin: options, Hypothesis profiles, report header and
result collection.

Rows travel on ``report.user_properties`` (so they survive xdist: workers
send reports to the controller) and the controller appends each one to the
results file the moment its report arrives, so a crash loses at most the test
in flight. Nothing is kept in module globals across processes.

Bad input never gets as far as a test: every option and data file is checked
when pytest has parsed the command line (before torch is imported, before
Hypothesis loads a profile), and the results file is opened, locked
(``fcntl.flock``: one run per file) and given its run record while the plugin
configures, before collection. Each problem is one ``ERROR:`` line (pytest's
usage error, exit status 4). A run appends to the results file (``--fresh-results``
empties it first) and ends with an end record saying how many of the planned
cases got a row; a run that planned none exits 5 (nothing was tested).
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import platform
import re
import secrets
import shlex
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conformance import profiles  # noqa: E402
from detconf.vocabulary import DEFAULT_COMPILE, DEFAULT_MODES, REPORT_FILES, SCHEMA_VERSION  # noqa: E402

#: The suite's root: the checkout, or the folder the packages are installed in (``pip install .``).
ROOT = Path(profiles.__file__).resolve().parent.parent
#: Marks this module as detconf's pytest plugin: ``detconf.plugin`` (the installed entry point)
#: loads it only when pytest has not loaded a checkout's ``conftest.py`` already.
DETCONF_SUITE_PLUGIN = True
#: A checkout writes its results under its own reports/out/; an installed suite under the
#: folder pytest runs in.
DEFAULT_RESULTS = ((ROOT if (ROOT / "pytest.ini").is_file() else Path.cwd()) / "reports" / "out" / "results.jsonl")
ROW_KEY = "detconf_row"
#: Rows are fsynced at most this often (seconds); the run and end records always are.
SYNC_EVERY_S = 2
CONFORMANCE_TEST = "test_documented"
#: The most runs per example ``--runs`` accepts. (Spelled as a power on purpose: Hypothesis
#: also draws the integer literals of 100 or more that it finds in the project's modules, so a
#: new such literal in a module loaded during a run changes the examples every case draws.)
MAX_RUNS = 10**3
#: The matrix built at the end of a run goes to ``<results file without suffix>-report/``.
REPORT_SUFFIX = "-report"

# Hypothesis (and torch) are imported only once the options have been checked, so that a
# usage error comes in well under a second.


# ----------------------------------------------------------------------------- options
def pytest_addoption(parser: pytest.Parser) -> None:
    from detconf.vocabulary import COMPILERS, MODES

    group = parser.getgroup("detconf", "detconf conformance suite")
    group.addoption("--device", action="append", default=None, metavar="NAME",
                    help="device type to test (repeatable): cpu, cuda, mps, npu or a PrivateUse1 name; "
                         "default: every available one")
    group.addoption("--mode", action="append", default=None, metavar="MODE",
                    help=f"{' | '.join(MODES)} (repeatable; default: error and warn_only)")
    group.addoption("--compile", action="append", default=None, choices=COMPILERS, metavar="SETTING",
                    dest="detconf_compile",
                    help="eager | aot_eager | inductor (repeatable; default: eager): run each case's program as "
                         "written or through torch.compile with that backend")
    group.addoption("--source", action="append", default=None, metavar="NAME",
                    help="catalog source (repeatable): torch-docs, ascend, vendor, flag-api, repro-notes, sweep; "
                         "default: all but sweep")
    group.addoption("--doc-version", default=None, metavar="X.Y.Z",
                    help="judge the installed torch against this release's documented promises")
    group.addoption("--no-complements", action="store_true",
                    help="leave out the condition complements of torch-docs entries (list 'complement')")
    group.addoption("--results", default=str(DEFAULT_RESULTS), metavar="PATH",
                    help="JSON-lines results file (default: reports/out/results.jsonl); a run appends to it")
    group.addoption("--fresh-results", action="store_true",
                    help="empty the results file before this run instead of appending to it")
    group.addoption("--runs", default="2", metavar="N", help=f"runs per example (2 to {MAX_RUNS}; default 2)")
    group.addoption("--isolate", action="store_true",
                    help="judge every case in a fresh process (always on for backends that need it, e.g. npu)")
    group.addoption("--no-report-build", action="store_true",
                    help="do not build the matrix (in <results file without suffix>-report/) at the end")
    group.addoption("--worker-memory", default=None, metavar="GIB",
                    help="memory one test worker needs on a device, in GiB (default: the backend's own figure); "
                         "-n is lowered to the number of workers the devices' free memory holds")
    group.addoption("--shard", default=None, metavar="I/N",
                    help="run only part I of N of the plan (a stable split by entry, device and compile "
                         "setting: N runners with 1/N ... N/N cover it once)")


def _compilers(config: pytest.Config) -> list[str]:
    return list(dict.fromkeys(config.getoption("detconf_compile") or DEFAULT_COMPILE))


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _plan(config: pytest.Config):
    """The sorted list of cases; computed once per process, from options only."""
    cached = getattr(config, "_detconf_plan", None)
    if cached is not None:
        return cached
    from conformance.catalog import load_catalog
    from conformance.plan import plan
    from detconf.vocabulary import DEFAULT_SOURCES

    sources = config.getoption("--source") or list(DEFAULT_SOURCES)
    modes = config.getoption("--mode") or list(DEFAULT_MODES)
    catalog = load_catalog(sources, doc_version=config.getoption("--doc-version"))
    if "torch-docs" in sources and not config.getoption("--no-complements"):
        from conformance.complements import complements

        catalog = catalog + complements(catalog)
    config._detconf_catalog_ids = {(e.source, e.id) for e in catalog}
    devices = [b.name for b in config._detconf_backends]
    compilers = _compilers(config)
    compiles = None
    if any(c != "eager" for c in compilers):
        import conformance.registry  # noqa: F401  (the checks say which of them compile what they observe)
        from engine.checks import compiles as check_compiles

        def compiles(entry):
            return check_compiles(entry.source, entry.id)
    import torch

    # A promise limited to some releases (an entry's ``torch`` range) is planned as not
    # applicable to the torch under test: --doc-version's release, else the installed one.
    cases = plan(catalog, devices, list(dict.fromkeys(modes)), compilers, compiles=compiles,
                 torch_version=str(torch.__version__), doc_version=config.getoption("--doc-version"))
    config._detconf_plan_unsharded = len(cases)
    shard = getattr(config, "_detconf_shard", None)
    if shard is not None:
        from conformance.shard import select

        cases = select(cases, *shard)
    config._detconf_plan = cases
    config._detconf_case_by_id = {c.id: c for c in cases}
    return cases


def _unknown_findings(config: pytest.Config) -> list[str]:
    """A warning line for each known finding that names an entry this run's catalog lacks, for
    a source, a torch and docs the run covers (a typo in the findings file: it waives nothing)."""
    import torch

    from detconf.findings_rule import torch_in
    from detconf.vocabulary import DEFAULT_SOURCES

    ids = getattr(config, "_detconf_catalog_ids", None)
    if ids is None:
        return []
    sources = set(config.getoption("--source") or DEFAULT_SOURCES)
    doc_version = config.getoption("--doc-version")
    lines = []
    for index, finding in enumerate(getattr(config, "_detconf_findings", None) or ()):
        if finding.source not in sources or (finding.source, finding.entry_id) in ids:
            continue
        if finding.source == "torch-docs" and (doc_version or config.getoption("--no-complements")):
            continue  # another release's docs, or complements left out: the catalog is not the whole list
        if not torch_in(str(torch.__version__), finding.torch):
            continue
        lines.append(f"warning: known finding #{index} ({finding.source}: {finding.entry_id!r}, torch "
                     f"{finding.torch}) names no entry of the catalog: it waives nothing (a typo?)")
    return lines


# ----------------------------------------------------------------------------- checking the input
def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _runs(value: object) -> int:
    """``--runs`` as a number of runs, or a usage error."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[+-]?[0-9]+", text):
        raise pytest.UsageError(f"--runs must be a whole number from 2 to {MAX_RUNS}, got {str(value)[:40]!r}")
    digits = text.lstrip("+-").lstrip("0") or "0"
    shown = text if len(text) <= 40 else text[:39] + "…"
    if text.startswith("-") or (len(digits) == 1 and int(digits) < 2):
        raise pytest.UsageError(f"--runs must be at least 2 (got {shown}): the suite compares runs")
    if len(digits) > len(str(MAX_RUNS)) or int(digits) > MAX_RUNS:
        raise pytest.UsageError(f"--runs must be at most {MAX_RUNS} (got {shown}): each example runs that often")
    return int(digits)


def _known_profiles() -> list[str]:
    from hypothesis import settings

    from conformance import profiles

    registered = getattr(settings, "_profiles", None)
    return sorted(registered) if isinstance(registered, dict) else sorted({*profiles.PROFILES, "default"})


def _choose_profile(config: pytest.Config) -> None:
    """Check --hypothesis-profile (Hypothesis' plugin loads it next) or, without it, load the
    profile DETCONF_HYPOTHESIS_PROFILE names (default ``dev``); a usage error for an unknown one."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    from conformance import profiles  # noqa: F401  (registers dev, ci and thorough)

    name = getattr(config.option, "hypothesis_profile", None)
    if name is None:
        name = os.environ.get("DETCONF_HYPOTHESIS_PROFILE", "dev")
        try:
            settings.load_profile(name)
        except InvalidArgument:
            raise pytest.UsageError(f"DETCONF_HYPOTHESIS_PROFILE={name!r} is not a hypothesis profile; "
                                    f"known: {', '.join(_known_profiles())}") from None
        return
    if not name.strip():
        raise pytest.UsageError(f"--hypothesis-profile needs a profile name; known: {', '.join(_known_profiles())}")
    try:
        getattr(settings, "get_profile", lambda n: settings._profiles[n])(name)
    except (InvalidArgument, KeyError):
        raise pytest.UsageError(f"unknown hypothesis profile {name!r}; known: {', '.join(_known_profiles())}") from None


def _writes_results(config: pytest.Config) -> bool:
    """Does this session run conformance cases, so that it writes the results file? Not in a
    worker (the controller writes), not for --collect-only, --help and the like, and not for a
    run of the harness's own tests (``pytest tests``), which never touches the results file."""
    if _is_worker(config):
        return False
    option = config.option
    if getattr(option, "version", 0) or any(getattr(option, name, False) for name in (
            "help", "collectonly", "setuponly", "setupplan", "showfixtures", "show_fixtures_per_test", "markers")):
        return False
    suite = ROOT / "conformance"
    for arg in config.args:
        path = Path(str(arg).split("::", 1)[0])
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
        path = Path(os.path.abspath(path))
        if path == suite or suite in path.parents or path in suite.parents:
            return True
    return False


def _in_use(shown: str) -> str:
    return (f"results file {shown} is in use by another run (it holds the file's lock); "
            "wait for it to finish or give another --results")


def _locked(path: Path) -> bool:
    """Does another run hold the results file's lock? (A probe: the lock is taken for the run
    when the plugin configures.)"""
    with open(path, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


#: The longest line a results file may hold (the reports' limit, reports.load.MAX_LINE_BYTES).
MAX_LINE_BYTES = 16 << 20
#: (device, inode, size, mtime) of existing results files found readable line by line in this
#: process: the check when the run takes the file's lock does not read it all again.
_READABLE: set[tuple[int, int, int, int]] = set()


def _line_problem(line: bytes) -> str | None:
    """What makes one line of a results file unreadable to the reports, or None."""
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    if "\x00" in text:
        return "holds a NUL byte"
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return "corrupt JSON line"
    if not isinstance(record, dict) or record.get("record") not in ("run", "result", "end"):
        return "not a results record"
    return None


def _existing_results_problem(path: Path, shown: str, *, fresh: bool) -> str | None:
    """Why a run must not append to (or, with --fresh-results, empty) the existing file ``path``.
    A run appends only to a file every line of which the reports can read: a corrupt line
    anywhere (not only a torn last one) would make the whole file, this run's rows with it,
    unreadable."""
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
        if not first:
            return None
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or record.get("record") != "run":
            return (f"{shown} is not a detconf results file (its first line is not a run record); "
                    "nothing was written to it: give another --results")
        if fresh:
            return None
        if record.get("schema") != SCHEMA_VERSION:
            return (f"{shown} holds schema {record.get('schema')!r} results and this suite writes schema "
                    f"{SCHEMA_VERSION} (one file, one schema): give another --results, or --fresh-results to empty it")
        if last != b"\n":
            return (f"{shown} ends in an incomplete line (a run stopped while writing it?): repair it, give another "
                    "--results, or --fresh-results to empty it")
        info = os.fstat(f.fileno())
        seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if seen in _READABLE:
            return None  # read whole a moment ago (the options' check), unchanged since
        f.seek(0)
        number = 0
        while True:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                _READABLE.add(seen)
                return None
            number += 1
            problem = ("line longer than 16 MiB" if len(line) > MAX_LINE_BYTES else _line_problem(line))
            if problem:
                return (f"{shown}:{number}: {problem}; a run appends only to a file the reports can read: "
                        "repair it, give another --results, or --fresh-results to empty it")


#: Paths that name a standard stream or another file of some process, never a results file.
_STREAM_PATH = re.compile(r"/dev/(stdin|stdout|stderr|fd(/.*)?)|/proc/(self|thread-self|[0-9]+)(/.*)?")


def _standard_streams(config: pytest.Config | None) -> dict[tuple[int, int], str]:
    """(device, inode) -> name of this process's standard streams that are files, as the user
    gave them (pytest's capture has fds 1 and 2 point elsewhere by now: its saved copies)."""
    saved = {0: 0, 1: 1, 2: 2}
    capman = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    capturing = getattr(capman, "_global_capturing", None)
    for fd, name in ((0, "in_"), (1, "out"), (2, "err")):
        copy = getattr(getattr(capturing, name, None), "targetfd_save", None)
        if isinstance(copy, int):
            saved[fd] = copy
    streams = {}
    for fd, real in saved.items():
        try:
            info = os.fstat(real)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            streams[(info.st_dev, info.st_ino)] = ("standard input", "standard output", "standard error")[fd]
    return streams


def _results_problem(text: str, *, fresh: bool, streams: dict | None = None) -> str | None:
    """What is wrong with ``--results text``, found without creating or changing anything."""
    if not text.strip():
        return "--results needs a file path, got ''"
    if text.endswith(("/", os.sep)) or Path(text).name in ("", ".", ".."):
        return f"--results {text} names a folder; give a file path such as {text.rstrip('/' + os.sep) or '.'}/results.jsonl"
    stream = next((p for p in (os.path.normpath(os.path.abspath(text)), os.path.realpath(text))
                   if _STREAM_PATH.fullmatch(p)), None)
    if stream is not None:
        return (f"--results {text} names a standard stream or a process's file ({stream}), not a results file; "
                "give a file path")
    path = Path(text)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        info = None  # a parent is a file: named below
    except OSError as exc:
        return f"cannot use results file {text}: {exc.strerror or exc}"
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            return f"--results {text} is a folder; give a file path such as {text.rstrip('/' + os.sep)}/results.jsonl"
        if not stat.S_ISREG(info.st_mode):
            return f"--results {text} is not a regular file (a device, pipe or socket); give a file path"
        if (info.st_dev, info.st_ino) in (streams or {}):
            return (f"--results {text} is this run's {streams[(info.st_dev, info.st_ino)]}; "
                    "give a file of its own")
        if not os.access(path, os.W_OK):
            return f"results file {text} is not writable"
        try:
            if _locked(path):
                return _in_use(text)
            return _existing_results_problem(path, text, fresh=fresh)
        except OSError as exc:
            return f"cannot read results file {text}: {exc.strerror or exc}"
    parent = path.absolute().parent
    while True:
        try:
            info = os.stat(parent)
            break
        except (FileNotFoundError, NotADirectoryError):
            parent = parent.parent
        except OSError as exc:
            return f"cannot create results file {text}: {parent}: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return f"cannot create results file {text}: {parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create results file {text}: {parent} is not writable"
    return None


def _selection_problem(expression: str | None) -> str | None:
    """Why pytest would refuse a ``-k``/``-m`` expression, or None (pytest's own parser)."""
    if not expression:
        return None
    try:
        from _pytest.mark import expression as parser
    except ImportError:  # a pytest without it checks the expression itself
        return None
    # pytest 8.3 raises ParseError; later releases a SyntaxError located in the expression.
    errors = tuple(e for e in (getattr(parser, "ParseError", None), SyntaxError) if isinstance(e, type))
    try:
        parser.Expression.compile(expression)
    except errors as exc:
        return _one_line(getattr(exc, "message", None) or getattr(exc, "msg", None) or exc)
    return None


def _check_options(config: pytest.Config) -> None:
    """Every option and data file, checked before anything runs; a problem is a one-line usage
    error. Normalises ``--runs`` to an int. Cheap and torch-free (devices are checked in
    pytest_configure, which needs torch)."""
    if getattr(config, "_detconf_checked", False):
        return
    from conformance.catalog import DATA_FILES, SOURCES, data_file, doc_versions, read_entries_file
    from conformance.findings import load_findings
    from detconf.vocabulary import DEFAULT_SOURCES, MODES
    from engine.entry import CatalogError

    option = config.option
    option.runs = _runs(option.runs)
    option.worker_memory = _worker_memory(option.worker_memory)
    if option.shard is not None:
        from conformance.shard import ShardError, parse_shard

        try:
            config._detconf_shard = parse_shard(option.shard)
        except ShardError as exc:
            raise pytest.UsageError(str(exc)) from None
    for mode in option.mode or []:
        if mode not in MODES:
            raise pytest.UsageError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    for source in option.source or []:
        if source not in SOURCES:
            raise pytest.UsageError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    if option.source:  # a source given twice is that source once, as a mode given twice is
        option.source = list(dict.fromkeys(option.source))
    for device in option.device or []:
        if not device.strip() or device != device.strip():
            raise pytest.UsageError(f"--device needs a device name such as cpu or cuda, got {device!r}")
    for flag, expression in (("-k", option.keyword), ("-m", option.markexpr)):
        problem = _selection_problem(expression)
        if problem:
            # pytest finds it only at collection, where xdist workers crash on it one by one.
            raise pytest.UsageError(f"wrong expression passed to {flag}: {expression}: {problem}")
    doc_version = option.doc_version
    if doc_version is not None:
        known = doc_versions()
        if not doc_version.strip():
            raise pytest.UsageError(f"--doc-version needs a release, got ''; known versions: {', '.join(known)}")
        if doc_version not in known:
            raise pytest.UsageError(f"unknown doc version {doc_version!r}; known versions: {', '.join(known)}")
    try:
        for source in option.source or DEFAULT_SOURCES:
            if source in DATA_FILES:
                read_entries_file(data_file(source), source=source)
        config._detconf_findings = load_findings()
    except CatalogError as exc:
        raise pytest.UsageError(_one_line(exc)) from None
    if _writes_results(config):
        problem = _results_problem(str(option.results), fresh=option.fresh_results,
                                   streams=_standard_streams(config))
        if problem:
            raise pytest.UsageError(problem)
    _choose_profile(config)
    config._detconf_checked = True


def _unavailable_reason(name: str, info: dict) -> str:
    import importlib.util

    import torch

    if info.get("error"):
        return info["error"]
    if name == "cuda":
        if not torch.version.cuda and not getattr(torch.version, "hip", None):
            return f"this torch ({torch.__version__}) is built without CUDA"
        return "torch.cuda.is_available() is False (no GPU visible, or no driver)"
    if name == "mps":
        return "torch.backends.mps.is_available() is False (needs Apple silicon with macOS 12.3 or later)"
    if name == "npu":
        if importlib.util.find_spec("torch_npu") is None:
            return "torch_npu is not installed"
        return "torch.npu.is_available() is False"
    return f"torch.{name}.is_available() is False"


@pytest.hookimpl(tryfirst=True)  # before Hypothesis' plugin loads --hypothesis-profile
def pytest_cmdline_main(config: pytest.Config) -> None:
    if getattr(config.option, "help", False) or getattr(config.option, "version", 0):
        return
    _check_options(config)


@pytest.hookimpl(trylast=True)  # after Hypothesis' plugin has loaded --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "help", False):
        return
    _check_options(config)  # already done unless this conftest was not an initial one
    from hypothesis import settings

    from conformance import profiles
    from detconf.gc_pause import gc_paused

    with gc_paused(freeze=True):  # imports torch: its objects live as long as the run
        profiles.load(settings._current_profile)
    # The reproducibility notes' setting for deterministic cuBLAS; it must be in
    # place before CUDA initialises. A value the user set is kept (and recorded).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    config.addinivalue_line("markers", "conformance: a generated conformance test")
    from conformance.catalog import UnknownSource
    from engine.devices import UnknownDevice, resolve_devices
    from engine.entry import CatalogError

    requested = config.getoption("--device")
    try:
        config._detconf_backends = resolve_devices(requested)
    except UnknownDevice as exc:
        raise pytest.UsageError(str(exc)) from None
    if requested:  # asked for by name: it must be here (the default is every available device)
        for backend in config._detconf_backends:
            info = backend.describe()
            if not info["available"]:
                raise pytest.UsageError(_one_line(
                    f"device {backend.name} is not available here: {_unavailable_reason(backend.name, info)}; "
                    "leave out --device to test every available device"))
    _use_devices(config)
    try:
        _plan(config)
    except (UnknownSource, CatalogError) as exc:
        raise pytest.UsageError(_one_line(exc)) from None
    except ValueError as exc:  # unknown doc version and other catalog input errors
        raise pytest.UsageError(str(exc).splitlines()[0]) from None
    if not _is_worker(config):
        config._detconf_unknown_findings = _unknown_findings(config)
    if (any(c != "eager" for c in _compilers(config)) and getattr(config.option, "dist", "no") == "load"
            and getattr(config.option, "numprocesses", None)):
        config.option.dist = "loadgroup"  # see _compile_group: plain "load" would split an entry's modes
    if not _is_worker(config) and any(c != "eager" for c in _compilers(config)):
        # Compiled artefacts go to a folder of this run's own (xdist workers inherit it), so a
        # run neither reuses another run's kernels nor leaves its own behind.
        from engine.compiled import private_cache

        config._detconf_cache = private_cache()
        config._detconf_cache.__enter__()
    if _is_worker(config):
        _share_cpu_between_workers(config)
        if config.workerinput.get("detconf_loadgroup"):
            config.option.loadgroup = True  # workers parse "-n N" as plain "load"; the controller chose loadgroup
    elif _writes_results(config):
        writer = ResultsWriter(Path(config.getoption("--results")), config)
        writer.open(planned=config._detconf_plan)  # a usage error when the file cannot be written
        config.pluginmanager.register(writer, "detconf-results")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: tell each worker that compiled entries are grouped (see _compile_group)."""
    if getattr(node.config.option, "dist", None) == "loadgroup":
        node.workerinput["detconf_loadgroup"] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = getattr(config, "_detconf_cache", None)
    if cache is not None:
        config._detconf_cache = None
        cache.__exit__(None, None, None)


def _share_cpu_between_workers(config: pytest.Config) -> None:
    import torch

    workers = int(config.workerinput.get("workercount", 1) or 1)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


# ----------------------------------------------------------------------------- generation
@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What is loaded by now (torch, Hypothesis, the catalog, the collected cases) stays until the
    end of the run: move it out of the cyclic garbage collector's sight (``gc.freeze``), so that
    the collections during the run, and pytest's own at its end, look only at what the run makes."""
    if any(_is_case(item.nodeid) for item in session.items):
        _freeze_loaded(session.config)


def _freeze_loaded(config: pytest.Config) -> None:
    """``gc.freeze`` what is alive now, after collecting the young generations (the garbage a
    case just left is young: it is not kept for good; a full collection of the heap torch and
    Hypothesis made would cost a tenth of a second), and note how many modules were loaded:
    :func:`pytest_runtest_teardown` freezes again after a case that loaded more."""
    import gc

    gc.collect(1)
    gc.freeze()
    config._detconf_frozen_modules = len(sys.modules)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Modules loaded during a case (the first case loads ``torch._inductor``, through
    ``torch.use_deterministic_algorithms``; a compiled case loads Dynamo's and Inductor's
    machinery) stay until the end of the run like those loaded before it: freeze them too."""
    frozen = getattr(item.config, "_detconf_frozen_modules", None)
    if frozen is not None and len(sys.modules) > frozen and _is_case(item.nodeid):
        _freeze_loaded(item.config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_case" in metafunc.fixturenames:
        from conformance.plan import heaviest_first

        cases = heaviest_first(_plan(metafunc.config))  # an eager-only plan keeps its order
        params = [pytest.param(c, marks=_compile_group(c), id=c.id) for c in cases]
        metafunc.parametrize("conformance_case", params)


def _compile_group(case) -> tuple:
    """The modes of a compiled entry draw the same shape class (conformance.harness): kept on one
    xdist worker (``--dist loadgroup``), the second mode reuses the first one's kernels instead
    of compiling them again at the same time on another worker."""
    if case.compile == "eager":
        return ()
    name = f"{case.entry.source}:{case.entry.id}|{case.device}|{case.phase}|{case.compile}"
    # xdist reads the group after the last "@" only when no "]" follows it.
    return (pytest.mark.xdist_group(name.translate(str.maketrans("[]@", "<>_"))),)


@pytest.fixture
def detconf_settings(request: pytest.FixtureRequest) -> dict:
    from hypothesis import settings

    config = request.config
    from detconf.vocabulary import DEFAULT_SOURCES

    return {
        "backends": {b.name: b for b in config._detconf_backends},
        "runs": config.getoption("--runs"),
        "isolate": config.getoption("--isolate"),
        "sources": config.getoption("--source") or list(DEFAULT_SOURCES),
        "doc_version": config.getoption("--doc-version"),
        "profile": settings._current_profile,
        "findings": config._detconf_findings,
        "rerun": lambda node: rerun_command(config, node),
    }


def rerun_command(config: pytest.Config, node: pytest.Item) -> str:
    """A command that runs ``node`` again from any folder: the test file's absolute path, the
    suite's root (so this plugin loads) and every option that shaped the plan or the run."""
    from hypothesis import settings

    from detconf.vocabulary import DEFAULT_SOURCES

    option = config.option
    args = [sys.executable, "-m", "pytest", f"{node.path}::{node.name}", "--rootdir", str(ROOT)]
    for source in option.source or DEFAULT_SOURCES:
        args += ["--source", source]
    if option.doc_version:
        args += ["--doc-version", option.doc_version]
    if option.no_complements:
        args.append("--no-complements")
    for backend in config._detconf_backends:
        args += ["--device", backend.name]
    for mode in dict.fromkeys(option.mode or DEFAULT_MODES):
        args += ["--mode", mode]
    for setting in _compilers(config):
        if setting != "eager" or len(_compilers(config)) > 1:
            args += ["--compile", setting]
    args += ["--runs", str(option.runs), "--hypothesis-profile", settings._current_profile]
    if getattr(option, "hypothesis_seed", None) is not None:
        args += ["--hypothesis-seed", str(option.hypothesis_seed)]
    if option.isolate:
        args.append("--isolate")
    shard = getattr(config, "_detconf_shard", None)
    if shard is not None:
        args += ["--shard", "{}/{}".format(*shard)]
    args += ["--results", os.path.abspath(option.results)]
    return shlex.join(args)


@pytest.fixture
def record_row(request: pytest.FixtureRequest):
    """Attach a result row to this test's report (the only channel out of a worker)."""

    def record(row: dict) -> None:
        worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
        row = dict(row, nodeid=_plain_nodeid(request.node.nodeid), worker=worker)
        # Plain JSON builtins only: xdist's wire format rejects str subclasses
        # such as torch.__version__ (TorchVersion).
        request.node.user_properties.append((ROW_KEY, json.loads(json.dumps(row, default=str))))

    return record


# ----------------------------------------------------------------------------- header
def pytest_report_header(config: pytest.Config) -> list[str]:
    import torch
    from hypothesis import settings

    from engine.determinism import current_state

    lines = [f"detconf: torch {torch.__version__} (git {getattr(torch.version, 'git_version', '?')[:10]}), "
             f"python {platform.python_version()}, {platform.platform()}"]
    for backend in config._detconf_backends:
        info = backend.describe()
        state = "available" if info["available"] else "absent"
        versions = ", ".join(f"{k} {v}" for k, v in info.get("versions", {}).items())
        lines.append(f"detconf: device {backend.name} ({state}): {info.get('device_name', '')}"
                     + (f" [{versions}]" if versions else ""))
    lines += _device_lines(config)
    lines.append(f"detconf: flags at start: {current_state().summary()}")
    lines.append(f"detconf: hypothesis profile {settings._current_profile}; sources "
                 f"{config.getoption('--source') or 'all'}; modes {config.getoption('--mode') or list(DEFAULT_MODES)}; "
                 f"compile {_compilers(config)}; "
                 f"doc version {config.getoption('--doc-version') or 'installed'}; results {config.getoption('--results')}")
    return lines


# ----------------------------------------------------------------------------- collection of results
def _environment(config: pytest.Config) -> dict:
    import torch
    from hypothesis import settings

    from engine import mathmode

    def git(*args: str) -> str | None:
        # Only the suite's own checkout counts: an installed copy inside some other repository
        # (a venv in a project folder) must not report that repository's commit.
        if not (ROOT / ".git").exists():
            return None
        try:
            out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    def git_revision() -> str:
        return git("describe", "--always", "--dirty") or _installed_version()

    commit = git("rev-parse", "--verify", "HEAD^{commit}")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    shard = getattr(config, "_detconf_shard", None)

    devices = [b.describe() for b in config._detconf_backends]
    cuda = next((d for d in devices if d["device"] == "cuda" and d["available"]), None)
    versions = cuda["versions"] if cuda else {}
    return {
        "torch_version": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "cudnn": versions.get("cudnn"),
        "driver": versions.get("driver"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "suite_revision": git_revision(),
        "suite_commit": commit,
        "suite_dirty": None if status is None else bool(status),
        "shard": None if shard is None else "{}/{}".format(*shard),
        "hypothesis_profile": settings._current_profile,
        "hypothesis_seed": config.getoption("hypothesis_seed", None),
        "doc_version": config.getoption("--doc-version"),
        "sources": config.getoption("--source") or "all",
        "modes": config.getoption("--mode") or list(DEFAULT_MODES),
        "compile": _compilers(config),
        "compiler": _compiler_versions() if any(c != "eager" for c in _compilers(config)) else None,
        "runs": config.getoption("--runs"),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "argv": list(config.invocation_params.args),
        "devices": devices,
        # The float32 math mode of each device at the start (TF32, fp32_precision, ...): what a
        # comparison with another device must allow for. A backend's own answer wins.
        "math_mode": {b.name: mathmode.describe(b.name, precision=getattr(b, "math_precision", None))
                      for b in config._detconf_backends},
    }


def _compiler_versions() -> dict:
    """What the compiled axis ran with: the C++ compiler Inductor uses on CPU, Triton's version."""
    import shutil

    out: dict = {}
    cxx = os.environ.get("CXX") or next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)
    if cxx:
        try:
            first = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()
            out["cxx"] = first[0] if first else cxx
        except (OSError, subprocess.SubprocessError):
            out["cxx"] = cxx
    try:
        import triton  # noqa: F401

        out["triton"] = getattr(triton, "__version__", "?")
    except Exception:  # noqa: BLE001 - absent on CPU-only machines
        pass
    return out


#: rw for user, group and others, less the umask (what open() gives a new file).
_FILE_MODE = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _is_case(nodeid: str) -> bool:
    return f"::{CONFORMANCE_TEST}[" in nodeid


def report_dir(results: Path) -> Path:
    """Where the end-of-run matrix goes: ``reports/out/results.jsonl`` -> ``reports/out/results-report/``."""
    return results.with_name(results.stem + REPORT_SUFFIX)


def _report_dir_problem(out: Path, results: Path | None = None) -> str | None:
    """Why the matrix must not be written into ``out`` (None: it may). The folder is the
    builder's own: it may be absent or hold only what the builder wrote there -- the files its
    manifest lists as they are (``reports.manifest``), the manifest, and the marked temporary
    folders of builds (a killed build's leftover is removed by the next build) -- and, given
    ``results``, the report of that results file and of no other (``r.jsonl`` and ``r.json``
    would share ``r-report/``)."""
    from reports import manifest

    return manifest.folder_problem(out, None if results is None else [results], REPORT_FILES)


_LONE_SURROGATE = re.compile(r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}")


def _as_unicode(value):
    """``value`` (JSON data) with every string made :func:`reports.safe.unicode_text`: lone
    surrogates (``surrogateescape``: bytes a non-UTF-8 locale could not decode) read as the
    UTF-8 they stand for."""
    from reports.safe import unicode_text

    if isinstance(value, str):
        return unicode_text(value)
    if isinstance(value, dict):
        return {_as_unicode(k) if isinstance(k, str) else k: _as_unicode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_unicode(v) for v in value]
    return value


class ResultsWriter:
    """Controller-side plugin: owns the results file for the session.

    :meth:`open` (at configure time, before collection) locks the file, checks that a run
    may append to it and appends the run record; rows are appended as reports arrive; the
    session ends with an end record (planned vs written) and the lock is released at
    unconfigure. Workers never write: their rows reach the controller on the reports.

    The writer knows its file by device and inode (taken when it opened it) and by the size it
    left (:meth:`file_problem`), checked before each row and at the end: a file replaced,
    deleted, truncated or written to by another program stops the run, and the run's own lines
    (kept as written) go to a file beside it; no summary or matrix is made from another file."""

    def __init__(self, path: Path, config: pytest.Config) -> None:
        self.path = path
        self.config = config
        self.run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        self.written: set[str] = set()
        self.fd: int | None = None
        self.counts: dict[str, int] = {}
        self.planned = 0
        self.run_record: dict = {}
        self.run_offset = 0  # where this run's run record starts in the file
        self.size = 0  # bytes in the file, as this writer left it
        self.synced = 0.0  # time.monotonic() of the last fsync
        self.write_error: str | None = None
        self.session: pytest.Session | None = None
        self.ended = False
        self.standby: Standby | None = None  # the end-of-run report builder, warming up meanwhile
        self.standby_answered = False
        self.identity: tuple[int, int] | None = None  # (device, inode) of the file this run writes
        self.abspath = Path(os.path.abspath(path))  # where it is, whatever a case does to the working folder
        self.mine = bytearray()  # every byte this run appended (its run record, rows and end record)
        self.lost: str | None = None  # what happened to the file during the run (replaced, deleted, ...)

    # -- the file
    def open(self, planned: list) -> None:
        """Create, lock and check the file and append the run record; a usage error otherwise."""
        shown = str(self.config.getoption("--results"))
        fresh = self.config.getoption("--fresh-results")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"cannot create the folder of results file {shown}: {exc.strerror or exc}") from None
        existed = self.path.exists()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, _FILE_MODE)
        except OSError as exc:
            raise pytest.UsageError(f"cannot open results file {shown}: {exc.strerror or exc}") from None
        try:
            problem = self._claim(fd, shown, fresh)
            if problem is None:
                self.fd = fd
                self.planned = len(planned)
                # whole_plan: the cases of the plan (after --shard) before any selection (-k, -m,
                # --lf, --deselect, node ids); ``planned`` is what was collected of it.
                self.run_record = {"record": "run", "schema": SCHEMA_VERSION, "run_id": self.run_id,
                                   "started": _now(), "planned": len(planned), "whole_plan": len(planned),
                                   "env": _environment(self.config), **_planned_fields(planned)}
                try:
                    self._append(self.run_record, sync=True)
                    info = os.fstat(fd)
                    self.identity = (info.st_dev, info.st_ino)
                except OSError as exc:
                    problem = f"cannot write results file {shown}: {exc.strerror or exc}"
        except BaseException:
            os.close(fd)
            raise
        if problem is not None:
            self.fd = None
            try:
                if not existed and os.fstat(fd).st_size == 0:
                    os.unlink(self.path)
            finally:
                os.close(fd)
            raise pytest.UsageError(problem)

    def _claim(self, fd: int, shown: str, fresh: bool) -> str | None:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"--results {shown} is not a regular file (a device, pipe or socket); give a file path"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _in_use(shown)
        except OSError as exc:
            return f"cannot lock results file {shown}: {exc.strerror or exc}"
        try:
            problem = _existing_results_problem(self.path, shown, fresh=fresh)
        except OSError as exc:
            return f"cannot read results file {shown}: {exc.strerror or exc}"
        if problem is None and fresh:
            os.ftruncate(fd, 0)
        self.size = self.run_offset = os.fstat(fd).st_size
        return problem

    def _append(self, obj: dict, *, sync: bool = False) -> None:
        """Append one line. A failed write leaves no partial line behind.

        Each line goes to the operating system as it is written (no buffer in this process), so
        a crash or kill of the run loses no written row. ``fsync`` (to survive the machine
        going down too) runs for the run and end records, and for rows at most every
        :data:`SYNC_EVERY_S` seconds: it costs about a millisecond, as much as a small case."""
        text = json.dumps(obj, sort_keys=True, default=str)
        if "\\ud" in text and _LONE_SURROGATE.search(text):
            # Text decoded with surrogateescape (a non-UTF-8 locale: paths, argv) holds lone
            # surrogates, which no reader takes as Unicode: the bytes they stand for, as UTF-8.
            text = json.dumps(_as_unicode(obj), sort_keys=True, default=str)
        encoded = (text + "\n").encode("utf-8")
        data = memoryview(encoded)
        start = self.size
        try:
            while data:
                data = data[os.write(self.fd, data):]
            if sync or time.monotonic() - self.synced >= SYNC_EVERY_S:
                os.fsync(self.fd)
                self.synced = time.monotonic()
        except OSError:
            try:
                os.ftruncate(self.fd, start)  # only this writer's own partial line (the file is locked)
            except OSError:
                pass
            raise
        self.size = os.fstat(self.fd).st_size
        self.mine += encoded

    def file_problem(self) -> str | None:
        """What happened to the results file since this run last wrote to it, or None: the run
        knows its file by device and inode (taken when it opened it) and by the size it left."""
        if self.fd is None or self.identity is None:
            return None
        shown = self.config.getoption("--results")
        try:
            info = os.stat(self.abspath)
        except FileNotFoundError:
            return f"results file {shown} was deleted during the run"
        except OSError as exc:
            return f"results file {shown} cannot be found during the run: {exc.strerror or exc}"
        if (info.st_dev, info.st_ino) != self.identity:
            return f"results file {shown} was replaced during the run (another file has its name now)"
        try:
            size = os.fstat(self.fd).st_size
        except OSError as exc:
            return f"results file {shown} cannot be checked: {exc.strerror or exc}"
        if size < self.size:
            return (f"results file {shown} was truncated during the run ({size} bytes; this run had written "
                    f"up to byte {self.size})")
        if size > self.size:
            return (f"results file {shown} was written to by another program during the run "
                    f"({size - self.size} bytes this run did not write)")
        return None

    def _check_file(self) -> bool:
        """Is the results file still this run's own? Otherwise the run stops (see :meth:`_lose`)."""
        if self.lost is None:
            problem = self.file_problem()
            if problem is not None:
                self._lose(problem)
        return self.lost is None

    def _lose(self, problem: str) -> None:
        """The file is no longer this run's: write nothing more to it, save this run's lines in a
        file of their own beside it, and stop the run (it ends non-zero, and builds no matrix)."""
        self.lost = problem
        saved = self._rescue()
        rows = f"{len(self.written)} row{'s' if len(self.written) != 1 else ''}"
        self.write_error = problem + (f"; this run's {rows} (and its run record) went to {saved}" if saved else
                                      f"; this run's {rows} could not be saved elsewhere") + "; no matrix is built"
        if self.session is not None:
            self.session.shouldstop = self.write_error

    def _rescue(self) -> Path | None:
        """This run's lines (from memory) in a new file beside the results file, or None."""
        target = self.abspath.with_name(f"{self.abspath.stem}.rescued-{self.run_id}.jsonl")
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)
        except OSError:
            return None
        try:
            data = memoryview(bytes(self.mine))
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        return target

    def set_planned(self, nodeids: list[str]) -> None:
        """The conformance cases collected (after -k, --lf, node ids), known once collection
        is done and before any test runs: the run record is rewritten to list them."""
        cases = [c for c in (_case_for_nodeid(self.config, n) for n in nodeids) if c is not None]
        fields = _planned_fields(cases)
        if ((len(cases) == self.planned and fields["planned_cases"] == self.run_record.get("planned_cases"))
                or self.fd is None or self.written):
            return
        self.planned = len(cases)
        if not self._check_file():
            return  # someone else changed the file: leave it as it is
        self.run_record.update(planned=len(cases), **fields)
        try:
            os.ftruncate(self.fd, self.run_offset)  # this run's own record, just written
            self.size = self.run_offset
            self.mine.clear()
            self._append(self.run_record, sync=True)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.write_error = f"cannot write results file {self.path}: {exc.strerror or exc}"
        if self.session is not None:
            self.session.shouldstop = self.write_error

    def add(self, nodeid: str, row: dict) -> None:
        if nodeid in self.written or self.fd is None or self.write_error or not self._check_file():
            return
        row = dict(row, run_id=self.run_id)
        try:
            self._append(row)
        except OSError as exc:
            self._failed(exc)
            return
        self.written.add(nodeid)
        self.counts[row["verdict"]] = self.counts.get(row["verdict"], 0) + 1

    def missing(self) -> int:
        return max(0, self.planned - len(self.written))

    # -- hooks
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        if not (self.config.getoption("--no-report-build") or self.config.option.collectonly):
            self.standby = Standby.start()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.set_planned([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        # Every worker collects the same cases; scheduling waits for all of them, so no test has run yet.
        self.set_planned(list(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = _plain_nodeid(report.nodeid)
        rows = [value for key, value in report.user_properties if key == ROW_KEY]
        if rows:
            self.add(nodeid, rows[-1])
            return
        if report.failed and nodeid not in self.written:
            # A test that failed without a row: an exception outside the harness,
            # or a worker that crashed (xdist reports the test it was running).
            case = _case_for_nodeid(self.config, nodeid)
            if case is not None:
                from conformance.harness import crashed_row

                text = str(report.longrepr).strip().splitlines()
                row = crashed_row(case, text[-1] if text else "failed without a result row")
                self.add(nodeid, dict(row, nodeid=nodeid))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.fd is None or self.ended:
            return
        self.ended = True
        if not self.write_error:
            self._check_file()
        empty = not self.planned and not self.written
        if empty and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED  # nothing was tested: not green
        if (self.missing() or self.write_error) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # rows are missing: not a clean run
        if self.write_error:
            return
        try:
            self._append({"record": "end", "schema": SCHEMA_VERSION, "run_id": self.run_id, "ended": _now(),
                          "exitstatus": int(session.exitstatus), "planned": self.planned,
                          "written": len(self.written), "missing": self.missing(),
                          "outcome": "empty" if empty else "complete" if not self.missing() else "incomplete"},
                         sync=True)
        except OSError as exc:
            self._failed(exc)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.standby is not None:
            self.standby.stop()
            self.standby = None
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None

    # -- the end of the run
    def _runs_in_file(self) -> int:
        """The number of runs the results file holds (its run records)."""
        runs = 0
        with open(self.path, "rb") as f:
            for line in f:
                if b'"record": "run"' in line:
                    try:
                        record = json.loads(line)
                    except (ValueError, RecursionError):
                        continue
                    runs += isinstance(record, dict) and record.get("record") == "run"
        return runs

    def _empty_plan_reason(self) -> str:
        """Why a run planned no conformance case, in words."""
        from detconf.vocabulary import DEFAULT_SOURCES

        config = self.config
        whole = getattr(config, "_detconf_plan_unsharded", None)
        planned = len(getattr(config, "_detconf_plan", None) or ())
        shard = getattr(config, "_detconf_shard", None)
        if planned and not self.planned:
            return f"the selection (-k, -m, --lf or node ids) left none of the {planned} planned cases"
        if shard is not None and whole:
            return f"--shard {shard[0]}/{shard[1]} holds none of the plan's {whole} cases"
        sources = list(dict.fromkeys(config.getoption("--source") or DEFAULT_SOURCES))
        devices = [b.name for b in getattr(config, "_detconf_backends", ())]
        modes = list(dict.fromkeys(config.getoption("--mode") or DEFAULT_MODES))
        reason = (f"source{'s' if len(sources) > 1 else ''} {', '.join(sources)} give{'' if len(sources) > 1 else 's'} "
                  f"no case on device{'s' if len(devices) > 1 else ''} {', '.join(devices) or '(none)'} in "
                  f"mode{'s' if len(modes) > 1 else ''} {', '.join(modes)}")
        if "vendor" in sources:
            try:
                from conformance.catalog import vendor_profiles

                if not vendor_profiles():
                    reason += " (source 'vendor': no installed backend declares a vendor list)"
            except Exception:  # noqa: BLE001 - only a hint
                pass
        return reason

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        from reports.safe import terminal

        tr = terminalreporter
        for line in getattr(config, "_detconf_unknown_findings", ()):
            tr.write_line(terminal(_one_line(line)), yellow=True)
        if not self.written and not self.planned and not self.write_error:
            if self.fd is not None:
                tr.write_line(terminal(_one_line(f"detconf: no conformance case ran: {self._empty_plan_reason()}; "
                                                 "nothing was tested (exit status 5)")), red=True)
            return
        tr.section("detconf conformance")
        if self.lost is None and not self.write_error:
            self._check_file()  # the file the matrix would be built from is still this run's own
        mine = [line + "\n" for line in self.mine.decode("utf-8", errors="replace").splitlines()
                if '"record": "end"' not in line]
        runs = 0
        if self.lost is None:
            try:
                runs = self._runs_in_file()
            except OSError as exc:
                tr.write_line(terminal(f"cannot read back {self.path}: {exc.strerror or exc}"), red=True)
        tr.write_line(terminal(f"results: {self.path} (run {self.run_id}: {len(self.written)} rows"
                               + (f"; the file holds {runs} run{'s' if runs != 1 else ''})" if self.lost is None
                                  else ")")))
        if self.write_error:
            tr.write_line(terminal(f"results incomplete: {self.write_error}"), red=True)
        if self.missing():
            tr.write_line(f"incomplete: {self.missing()} of {self.planned} planned cases have no row", red=True)
        if not self.written:
            return
        out_dir = report_dir(self.path)
        problem = None if config.getoption("--no-report-build") else _report_dir_problem(out_dir, self.path)
        building = not config.getoption("--no-report-build") and problem is None and self.lost is None
        with tempfile.TemporaryDirectory(prefix="detconf-summary-") as tmp:
            this_run = Path(tmp) / self.path.name
            this_run.write_text("".join(mine), encoding="utf-8")
            reply = self._report(this_run, out_dir if building else None)
        if "lines" in reply:
            lines = reply["lines"]
        else:  # the rows are on disk; say why they could not be summarised
            lines = [f"summary unavailable: {reply['summary_error']}",
                     ", ".join(f"{v} {n}" for v, n in sorted(self.counts.items()))]
        for line in lines:
            tr.write_line(terminal(line))
        if problem:
            tr.write_line(terminal(f"matrix not built: {problem}"), yellow=True)
        elif "build_error" in reply:
            tr.write_line(terminal(_one_line(f"matrix build failed: {reply['build_error']}")))
        elif reply.get("built"):
            tr.write_line(terminal(f"matrix: {out_dir / 'matrix.md'} (+ matrix.csv, matrix.html, matrix.png, "
                                   "summary.json; every run in the file, a later row wins)"))

    def _report(self, this_run: Path, out_dir: Path | None) -> dict:
        """The summary lines of ``this_run`` and, given ``out_dir``, the matrix of the whole file
        built there: by the standby builder (warm by now), or here when it is not running or
        does not answer. The reply's fields are those of :func:`reports.standby.handle`."""
        request = {"summary": str(this_run)}
        if out_dir is not None:
            request["build"] = {"paths": [str(self.path)], "out": str(out_dir), "own": True}
        standby, self.standby = self.standby, None
        reply = standby.ask(request) if standby is not None else None
        if reply is not None:
            self.standby_answered = True
            return reply
        from reports.standby import handle

        return handle(request)


class Standby:
    """The end-of-run report builder (:mod:`reports.standby`) in a process of its own, started
    with the session so that its imports overlap the tests; one request, one reply."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    @classmethod
    def start(cls) -> "Standby | None":
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
                "from reports.standby import main\nsys.exit(main())\n")
        try:
            proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, encoding="utf-8")
        except OSError:
            return None  # the build runs in this process instead
        return cls(proc)

    def ask(self, request: dict) -> dict | None:
        """The reply, or None when the builder died or answered nonsense (the caller builds)."""
        try:
            out, _ = self.proc.communicate(json.dumps(request) + "\n")
        except (OSError, ValueError):
            self.stop()
            return None
        lines = out.strip().splitlines()
        try:
            reply = json.loads(lines[-1]) if self.proc.returncode == 0 and lines else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not ({"lines", "summary_error"} & reply.keys()):
            return None
        if "build" in request and not ({"built", "build_error"} & reply.keys()):
            return None
        return reply

    def stop(self) -> None:
        """End it without a request (it has nothing to do): at once, whatever it is loading."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.communicate(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass


def _planned_fields(cases: list) -> dict:
    from conformance.harness import expected_for
    from conformance.planned import planned_fields

    return planned_fields(cases, expected_for)


def _plain_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@GROUP`` that xdist's ``--dist loadgroup`` appends on its workers
    to a test with an ``xdist_group`` mark (compiled cases; with some pytest versions only), so
    that rows, the written set and the planned cases name a test alike."""
    head, bracket, tail = nodeid.rpartition("]")
    return head + bracket if bracket and tail.startswith("@") else nodeid


def _case_for_nodeid(config: pytest.Config, nodeid: str):
    nodeid = _plain_nodeid(nodeid)
    if f"::{CONFORMANCE_TEST}[" not in nodeid:
        return None
    param = nodeid.split(f"::{CONFORMANCE_TEST}[", 1)[1][:-1]
    return config._detconf_case_by_id.get(param)


# ----------------------------------------------------------------------------- several devices
def _worker_memory(value: object) -> int | None:
    """``--worker-memory`` in bytes (None: the backends' own figures), or a usage error."""
    if value is None or isinstance(value, int):
        return value
    try:
        gib = float(str(value).strip())
    except ValueError:
        gib = float("nan")
    if not gib > 0 or gib == float("inf"):
        raise pytest.UsageError(f"--worker-memory must be a positive number of GiB, got {str(value)[:40]!r}")
    if gib > 2**40:  # beyond any machine (and beyond a float's range in bytes)
        raise pytest.UsageError(f"--worker-memory must be at most {2**40} GiB, got {str(value)[:40]!r}")
    return max(1, int(gib * 2**30))


def _use_devices(config: pytest.Config) -> None:
    """Give this process its device of each backend (worker i: device i mod count) and, on the
    controller, lower -n to the number of workers the devices' free memory holds."""
    from engine.fleet import bind, worker_cap

    workerid = config.workerinput.get("workerid") if _is_worker(config) else None
    config._detconf_backends = bind(config._detconf_backends, workerid)
    if _is_worker(config):
        return
    wanted = getattr(config.option, "numprocesses", None)
    cap = worker_cap([b for b in config._detconf_backends if b.describe()["available"]],
                     config.getoption("--worker-memory"))
    config._detconf_worker_cap = None
    if cap is None or not isinstance(wanted, int) or wanted <= cap[0]:
        return
    config._detconf_worker_cap = f"-n {wanted} lowered to {cap[0]} (the per-device worker cap; {cap[1]})"
    config.option.numprocesses = cap[0]
    if isinstance(getattr(config.option, "tx", None), list) and len(config.option.tx) > cap[0]:
        config.option.tx = config.option.tx[:cap[0]]


def _device_lines(config: pytest.Config) -> list[str]:
    lines = []
    for backend in config._detconf_backends:
        count = backend.count() if backend.describe()["available"] else 0
        if count > 1 or backend.origin != "built-in":
            lines.append(f"detconf: device {backend.name}: {count} device(s), from {backend.origin}"
                         + (f"; this process uses {backend.name}:{backend.index}" if backend.index is not None else ""))
    if getattr(config, "_detconf_worker_cap", None):
        lines.append(f"detconf: {config._detconf_worker_cap}")
    return lines


def _installed_version() -> str:
    """The installed detconf's version, for a suite that is not a git checkout."""
    from importlib import metadata

    try:
        return f"detconf {metadata.version('detconf')}"
    except metadata.PackageNotFoundError:
        return "unknown"
