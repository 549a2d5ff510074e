"""detconf's pytest plugin: options, Hypothesis profiles, report header and
result collection.

Rows travel on ``report.user_properties`` (so they survive xdist: workers
send reports to the controller) and the controller appends each one to the
results file the moment its report arrives, so a crash loses at most the test
in flight. Nothing is kept in module globals across processes.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import secrets
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

from conformance import profiles
from detconf.vocabulary import DEFAULT_COMPILE, DEFAULT_MODES, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parent
DEFAULT_RESULTS = ROOT / "reports" / "out" / "results.jsonl"
ROW_KEY = "detconf_row"
CONFORMANCE_TEST = "test_documented"

profiles.load(os.environ.get("DETCONF_HYPOTHESIS_PROFILE", "dev"))


# ----------------------------------------------------------------------------- options
def pytest_addoption(parser: pytest.Parser) -> None:
    from detconf.vocabulary import COMPILERS, MODES

    group = parser.getgroup("detconf", "detconf conformance suite")
    group.addoption("--device", action="append", default=None, metavar="NAME",
                    help="device type to test (repeatable): cpu, cuda, mps, npu or a PrivateUse1 name; "
                         "default: every available one")
    group.addoption("--mode", action="append", default=None, choices=MODES, metavar="MODE",
                    help="error | warn_only | off (repeatable; default: error and warn_only)")
    group.addoption("--compile", action="append", default=None, choices=COMPILERS, metavar="SETTING",
                    dest="detconf_compile",
                    help="eager | aot_eager | inductor (repeatable; default: eager): run each case's program as "
                         "written or through torch.compile with that backend")
    group.addoption("--source", action="append", default=None, metavar="NAME",
                    help="catalog source (repeatable): torch-docs, ascend, flag-api, repro-notes, sweep; "
                         "default: all but sweep")
    group.addoption("--doc-version", default=None, metavar="X.Y.Z",
                    help="judge the installed torch against this release's documented promises")
    group.addoption("--no-complements", action="store_true",
                    help="leave out the condition complements of torch-docs entries (list 'complement')")
    group.addoption("--results", default=str(DEFAULT_RESULTS), metavar="PATH",
                    help="JSON-lines results file (default: reports/out/results.jsonl)")
    group.addoption("--runs", type=int, default=2, metavar="N", help="runs per example (>= 2; default 2)")
    group.addoption("--isolate", action="store_true",
                    help="judge every case in a fresh process (always on for backends that need it, e.g. npu)")
    group.addoption("--no-report-build", action="store_true",
                    help="do not build the matrix under the results file's folder at the end")


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
    devices = [b.name for b in config._detconf_backends]
    compilers = _compilers(config)
    compiles = None
    if any(c != "eager" for c in compilers):
        import conformance.registry  # noqa: F401  (the checks say which of them compile what they observe)
        from engine.checks import compiles as check_compiles

        def compiles(entry):
            return check_compiles(entry.source, entry.id)
    cases = plan(catalog, devices, list(dict.fromkeys(modes)), compilers, compiles=compiles)
    config._detconf_plan = cases
    config._detconf_case_by_id = {c.id: c for c in cases}
    return cases


@pytest.hookimpl(trylast=True)  # after Hypothesis' plugin has loaded --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    profiles.load(settings._current_profile)
    # The reproducibility notes' setting for deterministic cuBLAS; it must be in
    # place before CUDA initialises. A value the user set is kept (and recorded).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    config.addinivalue_line("markers", "conformance: a generated conformance test")
    from conformance.catalog import SOURCES, UnknownSource
    from engine.devices import UnknownDevice, resolve_devices
    from engine.entry import CatalogError

    runs = config.getoption("--runs")
    if runs < 2:
        raise pytest.UsageError(f"--runs must be at least 2 (got {runs}): the suite compares runs")
    for source in config.getoption("--source") or []:
        if source not in SOURCES:
            raise pytest.UsageError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    try:
        config._detconf_backends = resolve_devices(config.getoption("--device"))
    except UnknownDevice as exc:
        raise pytest.UsageError(str(exc)) from None
    try:
        _plan(config)
    except (UnknownSource, CatalogError) as exc:
        raise pytest.UsageError(str(exc)) from None
    except ValueError as exc:  # unknown doc version and other catalog input errors
        raise pytest.UsageError(str(exc).splitlines()[0]) from None
    from conformance.findings import load_findings

    try:
        config._detconf_findings = load_findings()
    except CatalogError as exc:
        raise pytest.UsageError(str(exc)) from None
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
    if not _is_worker(config):
        config.pluginmanager.register(ResultsWriter(Path(config.getoption("--results")), config), "detconf-results")


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
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_case" in metafunc.fixturenames:
        cases = _plan(metafunc.config)
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
    }


@pytest.fixture
def record_row(request: pytest.FixtureRequest):
    """Attach a result row to this test's report (the only channel out of a worker)."""

    def record(row: dict) -> None:
        worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
        row = dict(row, nodeid=request.node.nodeid, worker=worker)
        # Plain JSON builtins only: xdist's wire format rejects str subclasses
        # such as torch.__version__ (TorchVersion).
        request.node.user_properties.append((ROW_KEY, json.loads(json.dumps(row, default=str))))

    return record


# ----------------------------------------------------------------------------- header
def pytest_report_header(config: pytest.Config) -> list[str]:
    import torch

    from engine.determinism import current_state

    lines = [f"detconf: torch {torch.__version__} (git {getattr(torch.version, 'git_version', '?')[:10]}), "
             f"python {platform.python_version()}, {platform.platform()}"]
    for backend in config._detconf_backends:
        info = backend.describe()
        state = "available" if info["available"] else "absent"
        versions = ", ".join(f"{k} {v}" for k, v in info.get("versions", {}).items())
        lines.append(f"detconf: device {backend.name} ({state}): {info.get('device_name', '')}"
                     + (f" [{versions}]" if versions else ""))
    lines.append(f"detconf: flags at start: {current_state().summary()}")
    lines.append(f"detconf: hypothesis profile {settings._current_profile}; sources "
                 f"{config.getoption('--source') or 'all'}; modes {config.getoption('--mode') or list(DEFAULT_MODES)}; "
                 f"compile {_compilers(config)}; "
                 f"doc version {config.getoption('--doc-version') or 'installed'}; results {config.getoption('--results')}")
    return lines


# ----------------------------------------------------------------------------- collection of results
def _environment(config: pytest.Config) -> dict:
    import torch

    def git_revision() -> str:
        try:
            out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                 capture_output=True, text=True, timeout=10)
            return out.stdout.strip() or "unknown"
        except (OSError, subprocess.SubprocessError):
            return "unknown"

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
        "argv": list(config.invocation_params.args),
        "devices": devices,
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


class ResultsWriter:
    """Controller-side plugin: appends rows to the results file as reports
    arrive; the first row of the session truncates it and writes the run record.
    Workers never write: their rows reach the controller on the reports."""

    def __init__(self, path: Path, config: pytest.Config) -> None:
        self.path = path
        self.config = config
        self.run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        self.written: set[str] = set()
        self.handle = None
        self.counts: dict[str, int] = {}

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "w", encoding="utf-8")
        started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._write({"record": "run", "schema": SCHEMA_VERSION, "run_id": self.run_id, "started": started,
                     "env": _environment(self.config)})

    def _write(self, obj: dict) -> None:
        self.handle.write(json.dumps(obj, sort_keys=True, default=str) + "\n")
        self.handle.flush()
        os.fsync(self.handle.fileno())

    def add(self, nodeid: str, row: dict) -> None:
        if nodeid in self.written:
            return
        if self.handle is None:
            self._open()
        self.written.add(nodeid)
        row = dict(row, run_id=self.run_id)
        self._write(row)
        self.counts[row["verdict"]] = self.counts.get(row["verdict"], 0) + 1

    # -- hooks
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        rows = [value for key, value in report.user_properties if key == ROW_KEY]
        if rows:
            self.add(report.nodeid, rows[-1])
            return
        if report.failed and report.nodeid not in self.written:
            # A test that failed without a row: an exception outside the harness,
            # or a worker that crashed (xdist reports the test it was running).
            case = _case_for_nodeid(self.config, report.nodeid)
            if case is not None:
                from conformance.harness import crashed_row

                text = str(report.longrepr).strip().splitlines()
                row = crashed_row(case, text[-1] if text else "failed without a result row")
                self.add(report.nodeid, dict(row, nodeid=report.nodeid))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.handle is not None:
            self.handle.close()

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if not self.written:
            return
        tr = terminalreporter
        tr.section("detconf conformance")
        tr.write_line(f"results: {self.path} ({len(self.written)} rows)")
        from reports.load import ResultsError
        from reports.summary import summary_lines

        try:
            lines = summary_lines(self.path)
        except ResultsError as exc:  # the rows are on disk; say why they could not be summarised
            lines = [f"summary unavailable: {exc}", ", ".join(f"{v} {n}" for v, n in sorted(self.counts.items()))]
        from reports.safe import terminal

        for line in lines:
            tr.write_line(terminal(line))
        if config.getoption("--no-report-build"):
            return
        from reports.build import build

        out_dir = self.path.parent
        try:
            build([self.path], out_dir)
        except Exception as exc:  # noqa: BLE001 - the results file is complete; say why the matrix is not
            tr.write_line(f"matrix build failed: {type(exc).__name__}: {exc}")
        else:
            tr.write_line(f"matrix: {out_dir / 'matrix.md'} (+ matrix.csv, matrix.html, matrix.png, summary.json)")


def _case_for_nodeid(config: pytest.Config, nodeid: str):
    if f"::{CONFORMANCE_TEST}[" not in nodeid:
        return None
    param = nodeid.split(f"::{CONFORMANCE_TEST}[", 1)[1][:-1]
    return config._detconf_case_by_id.get(param)
