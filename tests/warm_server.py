"""A warm interpreter for the harness's inner runs (run by ``tests/warm.py``).

Started once per test process and flavour with the environment the inner runs get, it imports what
every inner run of that flavour imports first and takes longest to import, then waits on a Unix
socket. The flavours:

- ``pytest``: ``python -m pytest ARGS`` runs of the suite: torch, Inductor's configuration,
  Hypothesis, NumPy, pytest (about 3.3 s of the 3.6 s a two-case run takes on a 2-core machine),
  the pytest plugins of installed distributions but xdist's, and the report's libraries (pandas,
  pyarrow, matplotlib: a run whose process holds them builds its report itself, without a
  standby builder); then it asks Inductor for the CPU's vector instruction sets (``_vector_isas``);
- ``reports``: ``python -m detconf.reports ARGS``: NumPy, pandas, pyarrow and the matplotlib
  modules of the matrix's picture, not torch (the reports read results files only);
- ``isolated``: ``python -I SCRIPT ARGS`` for the torch-only scripts of ``detconf.reports
  upstream``: started with ``-I`` itself, it imports the modules its caller names, those every such
  script imports itself (torch, and for a compiling script Dynamo and Inductor's configuration,
  Inductor's compiler too where the backend is Inductor, then the vector instruction sets), without
  the collector paused or anything frozen, as a fresh interpreter imports them.

For each request it forks: the child is a new process that takes the caller's standard streams,
folder, environment and resource limits (file size, address space) and runs the module or script
as a fresh interpreter would, with none of this repository's modules imported (the suite, its
plugin, the reports and the probes a test adds load in the child, as they would in a fresh
process). The server of a
``pytest`` or ``reports`` flavour has compiled the repository's package files (not run them:
``compile_sources``), and its child imports a file unchanged since from that code
(``PrecompiledFinder``), where a fresh interpreter would read its bytecode file or, without one
(``PYTHONDONTWRITEBYTECODE``), compile it again. The parent reports the child's pid, then its
exit status, for several children at once (``_serve``); it leaves when the test process that
started it is gone. A ``pytest`` child whose arguments ask for xdist's workers forks them too
(``_workers_from``, below); its ``detconf.child`` processes come from the server
(``fork_child_processes``, below).

Nothing here imports the repository (it reads and compiles its files): this file runs by path,
and the child's ``sys.path`` is the one the interpreter would give (``-m``: the folder first, then
``PYTHONPATH``; ``-I SCRIPT``: the script's folder before Python 3.11, where ``-I`` implies
``-P``, nothing from 3.11 on; then the interpreter's own).
"""
from __future__ import annotations

import functools
import gc
import json
import os
import signal
import socket
import struct
import sys
import types
import warnings
from importlib.machinery import PathFinder, SourceFileLoader, all_suffixes


def _frame(sock: socket.socket, payload: dict) -> None:
    data = json.dumps(payload).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _report_exit(sock: socket.socket, status: int) -> None:
    """Send a child's exit status as ``subprocess`` gives it (-N: killed by signal N), then close
    ``sock``; a caller that is gone is no error."""
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        _frame(sock, {"returncode": code})
    except OSError:
        pass
    sock.close()


def log_line(**fields) -> None:
    """One JSON line in ``DETCONF_TESTS_WARM_LOG`` (where it is set): how an inner run started and
    why, for ``benchmarks/bench_tests.py``."""
    log = os.environ.get("DETCONF_TESTS_WARM_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")


def current_test() -> str:
    """The node id of the test this process runs now (pytest's ``PYTEST_CURRENT_TEST``, its phase
    left out), or ''."""
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


#: Variables a process writes before it reads them, whatever it was started with: Inductor puts
#: the address of one of its own objects there before it loads each compiled kernel (which reads
#: it as it loads). A test process's first compile leaves its own address in its environment,
#: which the inner runs it starts afterwards inherit: no other environment for that.
WRITTEN_BEFORE_READ = ("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",)


def changed(env: dict, other: dict, prefixes: tuple[str, ...], ignore: tuple[str, ...] = ()) -> list[str]:
    """The variables named by ``prefixes`` (but ``ignore`` and :data:`WRITTEN_BEFORE_READ`) whose
    values differ between ``env`` and ``other``, sorted."""
    return sorted(k for k in set(env) | set(other) if env.get(k) != other.get(k) and k.startswith(prefixes)
                  and k not in ignore and k not in WRITTEN_BEFORE_READ)


def _exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class _Stash:
    """The repository's modules the server imported (:data:`PROJECT`), out of a child's
    ``sys.modules`` until its code first imports ``detconf``, as a fresh interpreter would then
    import them. First in ``sys.meta_path``: if the finders after it (the path the child has then,
    pytest's rewriting hook, ...) would find the server's ``detconf`` package, loaded as a plain
    source file, and no file of those modules changed since, the import takes them all back as
    they are; else they are dropped and the import goes on as in a fresh interpreter."""

    modules: dict = {}  # name -> module
    stamps: dict = {}  # file -> (mtime in ns, size) when the server imported it
    origin: str | None = None  # the file of the server's detconf package

    @classmethod
    def hold(cls) -> None:
        """In a new child: the modules out of ``sys.modules``, this finder first."""
        for name in cls.modules:
            sys.modules.pop(name, None)
        if cls.modules and cls not in sys.meta_path:
            sys.meta_path.insert(0, cls)

    @classmethod
    def _same(cls) -> bool:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find("detconf", None, None) if find is not None else None
            if spec is not None:
                break
        else:
            return False
        if spec.origin != cls.origin or type(spec.loader) not in (SourceFileLoader, PrecompiledLoader):
            return False
        try:
            return all(_stamp(path) == stamp for path, stamp in cls.stamps.items())
        except OSError:
            return False

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != "detconf":
            return None
        sys.meta_path.remove(cls)
        modules, cls.modules = cls.modules, {}
        if not cls._same():
            return None  # imported afresh, from wherever this process finds it
        _Effects.redo(modules)
        package = modules.pop("detconf")
        sys.modules.update(modules)
        for waiting in [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name in modules]:
            sys.meta_path.remove(waiting)  # a module this child patches once imported: taken back, so now
            waiting.then(modules[waiting.name])
        spec = package.__spec__
        spec.loader = _Held(package, spec.loader)
        return spec


class _Effects:
    """What the imports of :data:`PROJECT` do to other libraries, undone in the server (a child's
    code sees those libraries as a fresh interpreter has them until it imports ``detconf``) and
    done again as a child takes the modules back (:class:`_Stash`): ``detconf.conformance.profiles``
    registers the suite's Hypothesis profiles and turns off Hypothesis's local constants.
    Registering a profile under the name of the one in force (``ci``, which Hypothesis loads at
    import where a CI service's variable is set) puts it in force at once: the settings in force
    and the profile's name are put back too, else the child's registration would find settings
    in force that differ from their profile's, and Hypothesis would warn.
    ``_preload_project`` refuses a server whose imports rebound anything else in a module loaded
    before them."""

    def __init__(self):
        self.profiles = self.constants = self.state = None
        if "hypothesis" in sys.modules:
            from hypothesis import settings

            self.profiles = dict(settings._profiles)
            variable = self._in_force()
            self.state = (settings._current_profile, variable, getattr(variable, "value", None))
        providers = sys.modules.get("hypothesis.internal.conjecture.providers")
        if providers is not None:
            self.constants = getattr(providers, "_get_local_constants", None)

    @staticmethod
    def _in_force():
        """Hypothesis's variable holding the settings in force (None where it has none)."""
        return getattr(sys.modules.get("hypothesis._settings"), "default_variable", None)

    def undo(self) -> None:
        if self.profiles is not None:
            from hypothesis import settings

            settings._profiles.clear()
            settings._profiles.update(self.profiles)
            settings._current_profile, variable, value = self.state
            if variable is not None:
                variable.value = value
        providers = sys.modules.get("hypothesis.internal.conjecture.providers")
        if providers is not None and self.constants is not None:
            providers._get_local_constants = self.constants

    @staticmethod
    def redo(modules: dict) -> None:
        profiles = modules.get("detconf.conformance.profiles")
        if profiles is not None:
            profiles.register()
            profiles.without_local_constants()


class _Held:
    """The loader that gives the import system the server's ``detconf`` module as it is."""

    def __init__(self, module, loader):
        self.module, self.loader = module, loader

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        module.__spec__.loader = self.loader  # the package's own loader again, as it was


class _Sought:
    """A finder that finds nothing and notes every top-level name an import looked for, found or
    not (torch tries optional modules): a folder on a command's ``PYTHONPATH`` holding one of those
    names could have changed what these imports did, so such a command runs cold."""

    names: set[str] = set()

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        cls.names.add(fullname.split(".")[0])
        return None


#: Whether this interpreter keeps the script's folder off ``sys.path`` (``-P``; ``-I`` implies it
#: from Python 3.11 on).
SAFE_PATH = bool(getattr(sys.flags, "safe_path", False))

#: What ``python -m pytest`` imports as it starts, beyond ``pytest`` itself: its built-in
#: plugins (the names of one pytest release or another), the reader of ``pyproject.toml`` and the
#: debugger its ``--pdb`` plugin imports (about 10 ms of each forked run on the 2-core sandbox).
PYTEST_START = ("_pytest.faulthandler", "_pytest.helpconfig", "_pytest.pastebin", "_pytest.setuponly",
                "_pytest.setupplan", "_pytest.skipping", "_pytest.threadexception", "_pytest.tracemalloc",
                "_pytest.unittest", "_pytest.unraisableexception", "_pytest.warnings", "tomllib", "pdb")

#: What each flavour imports before it listens.
PRELOAD = {
    # pandas and pyarrow: a run that summarises its rows in its own process (no standby builder,
    # --no-report-build) imports them for its terminal summary, about 0.3 s of a two-case run
    # matplotlib too, and the modules of the report's picture: with pandas and pyarrow they are the
    # report's libraries, and a run whose process holds them builds its report itself
    # (plugin/standby.py) instead of starting a builder that would import them again.
    # The pytest plugins of installed distributions (Hypothesis's, ...; not xdist's: NOT_PRELOADED)
    # follow, as pytest loads them at its start (_plugin_modules).
    # jsonschema: the suite checks its data files against their schemas at every start (33 ms
    # of import on the 2-core sandbox); jinja2 and tabulate: the report's HTML page and its
    # Markdown table (35 ms).
    "pytest": ("numpy", "torch", "torch._inductor.config", "hypothesis", "pytest", "pandas", "pyarrow",
               "pyarrow.compute", "pyarrow.json", "matplotlib", "matplotlib.figure", "matplotlib.colors",
               "matplotlib.lines", "matplotlib.patches", "matplotlib.backends.backend_agg", "jsonschema",
               "jsonschema.exceptions", "jinja2", "markupsafe", "tabulate", *PYTEST_START),
    # The reports: and the matplotlib modules reports.picture imports when it draws a matrix
    # (about 0.6 s of CPU a build on the 2-core sandbox).
    "reports": ("numpy", "pandas", "pyarrow", "pyarrow.compute", "pyarrow.json", "matplotlib", "matplotlib.figure",
                "matplotlib.colors", "matplotlib.lines", "matplotlib.patches", "matplotlib.backends.backend_agg",
                "jinja2", "markupsafe", "tabulate"),
    "isolated": (),  # the caller's list, after the flavour on the command line
}


#: The repository's modules every run of a flavour imports at its start (the plugin's, the
#: harness's, the terminal summary's; the reports' commands'), by the modules that import the rest:
#: imported here from the checkout, then held back from each child until its own code imports
#: ``detconf`` and would find this very package, unchanged (:class:`_Stash`). A one-case run took
#: 47 ms less of CPU so on the 2-core sandbox (272 -> 225 ms).
PROJECT = {
    "pytest": ("detconf.plugin.configure", "detconf.plugin.fixtures", "detconf.plugin.freeze",
               "detconf.plugin.header", "detconf.plugin.options", "detconf.plugin.plan",
               "detconf.plugin.validation", "detconf.plugin.results", "detconf.conformance.harness",
               "detconf.conformance.registry", "detconf.conformance.catalog", "detconf.conformance.findings",
               "detconf.conformance.datafiles", "detconf.reports.standby", "detconf.reports.summary"),
    "reports": ("detconf.cli", "detconf.reports.safe", "detconf.reports.output", "detconf.reports.build",
                "detconf.reports.planned", "detconf.reports.summary", "detconf.reports.records",
                "detconf.reports.diff"),
    "isolated": (),
}


#: Of those, the ones a run may lack (``requirements-base.txt`` names them, a GPU machine's image
#: may not have them yet): left out of the preload when they cannot be imported.
OPTIONAL = ("jsonschema", "jsonschema.exceptions", "jinja2", "markupsafe", "tabulate", *PYTEST_START)

#: Plugin packages left to the child: ``xdist.plugin`` copies ``sys.path`` when it is imported and
#: gives that copy to the workers it starts, who would then lack the child's ``PYTHONPATH``.
NOT_PRELOADED = ("xdist",)


def _plugin_modules() -> tuple[tuple[str, ...], set[str]]:
    """The modules of the installed distributions' pytest plugins (entry points ``pytest11``), which
    ``python -m pytest`` imports at its start, and the top-level names pytest marks for assertion
    rewriting in those distributions (their files')."""
    from importlib.metadata import entry_points

    modules, tops = [], set()
    for point in entry_points(group="pytest11"):
        if point.module.split(".")[0] in NOT_PRELOADED:
            continue
        modules.append(point.module)
        tops.add(point.module.split(".")[0])
        for file in (point.dist.files or []) if point.dist is not None else []:
            parts = file.parts
            if parts and parts[-1].endswith(".py") and not parts[0].endswith((".dist-info", ".egg-info")):
                tops.add(parts[0][:-3] if len(parts) == 1 else parts[0])
    return tuple(modules), tops


def _vector_isas() -> None:
    """Ask Inductor for the CPU's vector instruction sets, as a process's first C++ compile does:
    it builds and loads a probe per instruction set (a fresh ``python -c`` importing torch for
    each) and keeps the answer for the process's life (``functools.cache``). In a cache folder
    without the probes (the suite gives each run one of its own) that took 8.5-10.6 s on the
    2-core sandbox, 1.3-1.9 s with them; asked here once, in torch's cache folder for this
    environment, a forked child that compiles has the answer a fresh process would work out
    itself on this machine, and its first compile takes 2.3 s instead of 11 s."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    valid_vec_isa_list()


#: The repository's root: the packages of the suite, its plugin and the reports are in folders here.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stamp(path: str) -> tuple[int, int]:
    """What a bytecode file's check compares: the source's modification time and size."""
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


def compile_sources(folders: list[str]) -> dict[str, tuple[int, int, object]]:
    """Every Python file under ``folders``, compiled as the import system compiles a source file
    (``compile(bytes, path, "exec", dont_inherit=True)``): {path: (mtime in ns, size, code)}.
    Nothing is imported or run; a file that does not compile is left out (its import fails in the
    child as it would anywhere)."""
    compiled = {}
    for folder in folders:
        for where, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(where, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                    compiled[path] = (*_stamp(path), compile(data, path, "exec", dont_inherit=True))
                except (OSError, SyntaxError, ValueError):
                    continue
    return compiled


def repository_packages() -> list[str]:
    """The repository's package folders (a folder with ``__init__.py``) but the harness tests'."""
    return [os.path.join(ROOT, d) for d in sorted(os.listdir(ROOT))
            if d != "tests" and not d.startswith(".") and os.path.isfile(os.path.join(ROOT, d, "__init__.py"))]


class PrecompiledLoader(SourceFileLoader):
    """A source file's loader whose code, while the file is unchanged since the server compiled
    it, is the server's compiled code; else the file is read and compiled as usual."""

    def __init__(self, fullname: str, path: str, compiled: dict[str, tuple[int, int, object]]):
        super().__init__(fullname, path)
        self.compiled = compiled

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        known = self.compiled.get(path)
        try:
            if known is not None and _stamp(path) == known[:2]:
                return known[2]
        except OSError:
            pass
        return super().get_code(fullname)


class PrecompiledFinder:
    """Finds modules as the path finder does, and gives a file the server compiled a
    :class:`PrecompiledLoader`. A child without bytecode files (``PYTHONDONTWRITEBYTECODE``: none
    are written) then does not compile the suite's modules again from their sources in every run;
    the code is the same that a fresh interpreter would read or compile."""

    def __init__(self, compiled: dict[str, tuple[int, int, object]]):
        self.compiled = compiled

    def find_spec(self, fullname, path=None, target=None):
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and type(spec.loader) is SourceFileLoader and spec.origin in self.compiled:
            spec.loader = PrecompiledLoader(spec.loader.name, spec.loader.path, self.compiled)
        return spec

    def install(self) -> None:
        """Before the path finder in ``sys.meta_path`` (pytest's assertion rewriter, inserted first
        later, still comes before it)."""
        where = sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else len(sys.meta_path)
        sys.meta_path.insert(where, self)


def _preload(flavour: str, names: tuple[str, ...] = (), finder: "PrecompiledFinder | None" = None) -> tuple[list, list[str]]:
    """Import what every inner run of ``flavour`` imports; return the warning filters a fresh
    interpreter has where the child's own code starts, and the interpreter's ``sys.path``. The
    ``pytest`` flavour imports as the plugin does (the collector paused, what the imports made
    frozen); the others as a fresh interpreter does."""
    import importlib
    import importlib.util

    filters = list(warnings.filters)
    _Sought.names.update(name.split(".")[0] for name in sys.modules)
    sys.meta_path.insert(0, _Sought)
    pausing = flavour == "pytest"
    if pausing:
        gc.collect(1)
        gc.disable()
    plugins, marked = _plugin_modules() if flavour == "pytest" else ((), set())
    try:
        for name in PRELOAD[flavour] + plugins + names:
            # use_deterministic_algorithms imports Inductor's configuration, which imports Triton
            # where it is installed (CUDA builds): not here then, for Triton's nanobind modules
            # report every object still alive at exit as leaked (hundreds of lines on stderr), and
            # frozen objects stay alive; a fresh run that stops before torch is imported (a usage
            # error) prints none of that.
            if flavour == "pytest" and name == "torch._inductor.config" and importlib.util.find_spec("triton"):
                continue
            try:
                importlib.import_module(name)
            except ImportError:
                if name not in OPTIONAL:
                    raise
        if "torch._inductor.config" in sys.modules and (flavour == "pytest" or "torch._inductor.compile_fx" in names):
            path = list(sys.path)
            _vector_isas()
            sys.path[:] = path  # the compiler's imports add setuptools' vendored folder; a child starts without
        _preload_project(flavour, finder)
    finally:
        if pausing:
            gc.freeze()
            gc.enable()
        sys.meta_path.remove(_Sought)
    _detach_finalizers()
    _Sought.names.update(name.split(".")[0] for name in sys.modules)
    if _Stash.modules:  # found where each child's own import finds it (_Stash): no name whose folder makes a run cold
        _Sought.names.discard("detconf")
    early = sorted(name for name in sys.modules if name.split(".")[0] in NOT_PRELOADED)
    if early:
        raise SystemExit(f"tests/warm_server.py: the preload imported {', '.join(early)}, which must load in the child")
    # pytest marks the modules of plugin distributions (Hypothesis's, ...) for assertion
    # rewriting and warns about those already imported; in a fresh interpreter they are not
    # imported yet. The marker pytest reads keeps a child's warnings summary the fresh one's.
    for name in sorted(marked):
        module = sys.modules.get(name)
        if module is not None:
            module.__doc__ = (module.__doc__ or "") + "\n(PYTEST_DONT_REWRITE: imported by tests/warm_server.py)"
    if not pausing:
        # A script or a reports command imports these at its top and keeps the warning filters
        # their imports add (torch adds six): its child starts from the filters after them. A
        # suite run's child starts from the interpreter's own, as before (tests/test_warm.py
        # compares its warnings summary with a fresh run's).
        filters = list(warnings.filters)
    own = [] if sys.flags.ignore_environment else os.environ.get("PYTHONPATH", "").split(os.pathsep)
    # this file's folder comes first, unless -I kept it off (Python 3.11 on: -I implies -P)
    base = [p for p in sys.path[0 if SAFE_PATH else 1:] if p not in own]
    return filters, base


def _preload_project(flavour: str, finder: "PrecompiledFinder | None", root: str | None = None,
                     roots: tuple[str, ...] | None = None) -> None:
    """Import the repository's modules of :data:`PROJECT` from the checkout (``root``), with the
    code ``finder`` compiled (as a child would), for :class:`_Stash`. Not where ``detconf`` is
    already imported (an installed plugin's), nor where ``DETCONF_TESTS_PROJECT=0``; a server whose
    imports of them warn refuses to start."""
    roots = PROJECT[flavour] if roots is None else roots
    if not roots or "detconf" in sys.modules or os.environ.get("DETCONF_TESTS_PROJECT") == "0":
        return
    import importlib

    root = root or ROOT
    before = {name: dict(module.__dict__) for name, module in list(sys.modules.items())
              if isinstance(getattr(module, "__dict__", None), dict)}
    filters = list(warnings.filters)
    effects = _Effects()
    had_torch = "torch" in sys.modules
    sys.path.insert(0, root)
    if finder is not None:
        finder.install()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for name in roots:
                importlib.import_module(name)
    finally:
        sys.path.remove(root)
        if finder is not None:
            sys.meta_path.remove(finder)
    if caught:
        raise SystemExit(f"tests/warm_server.py: importing the repository's modules warned: {caught[0].message}")
    if not had_torch and "torch" in sys.modules:
        raise SystemExit(f"tests/warm_server.py: the {flavour} server's imports of the repository's modules imported torch")
    modules = {name: module for name, module in sys.modules.items()
               if name not in before and (name == "detconf" or name.startswith("detconf."))}
    effects.undo()
    changed = [f"{name}.{key}" for name, old in before.items()
               for key, value in getattr(sys.modules.get(name), "__dict__", {}).items()
               if key in old and _rebound(old[key], value)]
    if changed or warnings.filters != filters:
        raise SystemExit("tests/warm_server.py: importing the repository's modules changed "
                         f"{', '.join(changed[:3]) or 'the warning filters'}, which a child would see before it "
                         "imports them: undo it in _Effects")
    files = [getattr(module, "__file__", None) for module in modules.values()] + _checked_data(modules)
    _Stash.modules = modules
    _Stash.stamps = {path: _stamp(path) for path in files if path}
    _Stash.origin = modules["detconf"].__file__


#: Values a module may be given again, equal, without anyone seeing a difference (``time.tzset()``
#: makes ``time.tzname`` a new tuple of the same names).
_PLAIN = (str, bytes, int, float, bool, type(None), tuple, frozenset)


def _rebound(old, new) -> bool:
    """Whether a module's attribute now holds something else: another object, but a module (a
    submodule imported since) or an equal plain value."""
    if old is new or isinstance(new, types.ModuleType):
        return False
    if type(old) is type(new) and isinstance(new, _PLAIN):
        try:
            return bool(old != new)
        except Exception:  # noqa: BLE001 - a tuple of things that do not compare: another value
            return True
    return True


def _checked_data(modules: dict) -> list[str]:
    """The repository's catalog files and known findings, read as every suite run's start reads
    them, which checks each text against its schema once a process (``conformance.datafiles``:
    about 25 ms of a run's CPU on the 2-core sandbox); the files a child's taking the checked
    texts back depends on: those read, and the schemas (:class:`_Stash`)."""
    datafiles = modules.get("detconf.conformance.datafiles")
    catalog = modules.get("detconf.conformance.catalog")
    findings = modules.get("detconf.conformance.findings")
    if datafiles is None or catalog is None or findings is None:
        return []
    files = [str(path) for path in sorted(datafiles.SCHEMAS.glob("*.json"))]
    reads = [(catalog.data_file(source), lambda path, source=source: catalog.read_entries_file(path, source=source))
             for source in catalog.DATA_FILES]
    for path, read in reads + [(findings.FINDINGS_FILE, findings.load_findings)]:
        try:
            read(path)
        except Exception:  # noqa: BLE001 - a file that does not pass: each run says so, as it would
            continue
        files.append(str(path))
    return files


def _detach_finalizers() -> None:
    """The ``weakref.finalize`` callbacks the preload's imports registered no longer run at exit.

    torch registers one per operator library it defines (174 with torch 2.13: each takes the
    library's kernels out of the dispatcher); a fresh interpreter runs them at its exit, and every
    forked child did too, 30 ms of its CPU on the 2-core sandbox, though they undo nothing but the
    server's own state on the way out, as the module teardown that a child skips (:func:`_exit`)
    would. A callback that a child's own code registers still runs at its exit."""
    import weakref

    for finalizer in list(weakref.finalize._registry):
        finalizer.atexit = False
        _DETACHED.append(finalizer)


#: The finalizers :func:`_detach_finalizers` took from the exit: the server's own end runs them.
_DETACHED: list = []


def _leave_server() -> None:
    """The server's own end: the finalizers its preload registered run, as at a fresh
    interpreter's exit (torch's script instantiator of ``torch.distributed.nn`` makes a temporary
    folder at import, which its finalizer removes: each server whose preload imports it, ending
    without them, left that folder in the system's temporary folder), then it leaves as a forked child does, without
    tearing its modules down (:func:`_exit`)."""
    for finalizer in _DETACHED:
        finalizer.atexit = True
    _exit(0)


def apply_limits(limits: dict[str, int]) -> None:
    """Set this process's resource limits, by the name of their ``resource.RLIMIT_*`` (``FSIZE``,
    ``AS``: tests/warm.py ``_limits``), soft and hard alike: in a forked child here, and before
    the exec of a cold one (tests/warm.py ``_cold``)."""
    if limits:
        import resource

        for name, value in limits.items():
            resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))


def _fresh(request: dict, fds: list[int], filters: list, finder: PrecompiledFinder | None) -> None:
    """What a fresh interpreter would have: the caller's standard streams, folder, environment and
    resource limits (file size, address space), its own temporary folder, Hypothesis folder and
    NumPy stream, the warning filters and signal handlers of an interpreter's start."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    apply_limits(request.get("limits") or {})
    import tempfile

    tempfile.tempdir = None  # TMPDIR is read again, from this environment
    if "hypothesis" in sys.modules:
        import hypothesis.configuration as hc

        default = "__hypothesis_home_directory_default"  # read once, at import, from the folder then
        if not hasattr(hc, default):
            raise SystemExit(f"tests/warm_server.py: this Hypothesis has no {default}: run with DETCONF_TESTS_COLD=1")
        setattr(hc, default, type(getattr(hc, default))(os.path.join(os.getcwd(), ".hypothesis")))
    if "numpy" in sys.modules:
        import numpy

        numpy.random.seed()  # a fresh interpreter's global NumPy stream is its own, not the parent's
    warnings.filters[:] = filters
    # A new version of the filters: every module's __warningregistry__ (the server's imports
    # filled some) is stale from here and emptied where a warning next consults it, as the
    # interpreter does after any change of the filters. (Emptying each here walked every module:
    # 18 ms of each child's CPU on the 2-core sandbox.)
    warnings._filters_mutated()
    if finder is not None and finder not in sys.meta_path:
        finder.install()
    _Stash.hold()
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _run_code(code: str, argv: list[str], orig_argv: list[str], env: dict, base: list[str]) -> None:
    """Run ``code`` as ``python -c`` runs it (the folder, as '', first on ``sys.path``, then
    ``env``'s ``PYTHONPATH``; a new ``__main__``), then exit as the interpreter does after it."""
    sys.path[:] = ["", *_pythonpath(env), *base]
    sys.argv, sys.orig_argv = argv, orig_argv
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    exec(compile(code, "<string>", "exec"), main.__dict__)
    sys.exit(0)


def _pythonpath(env: dict) -> list[str]:
    """The folders ``env``'s ``PYTHONPATH`` puts on ``sys.path``, as the interpreter puts them."""
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _child(request: dict, fds: list[int], filters: list, base: list[str],
           finder: PrecompiledFinder | None = None) -> None:
    """Become ``python -m MODULE ARGS`` (or ``python -I SCRIPT ARGS``) in the caller's folder,
    environment and streams."""
    _fresh(request, fds, filters, finder)
    if request.get("session"):  # a session of its own (start_new_session)
        os.setsid()
    elif request.get("group"):  # a process group of its own (gpu-run's steps: detconf.gpurun._child_setup)
        os.setpgrp()
    if "import_time" in request and SERVED.get("flavour") == "pytest":
        _fork_children(request)
        if request.get("module") == "detconf":
            _route_python_starts(request)
    code = request.get("code")
    if code is not None:  # python -c CODE ARGS (a fresh process of detconf.child, gpu-run's probe)
        _run_code(code, ["-c", *request["args"]], [sys.executable, "-c", code, *request["args"]], request["env"], base)
    script = request.get("script")
    if script is not None:  # -I: no PYTHONPATH; the script's folder first only before Python 3.11 (-P)
        first = [] if SAFE_PATH else [os.path.dirname(os.path.abspath(script))]
        sys.path[:] = [*first, *base]
    else:
        sys.path[:] = [os.getcwd(), *_pythonpath(request["env"]), *base]
    import runpy

    if script is not None:
        sys.argv = [script, *request["args"]]
        sys.orig_argv = [sys.executable, "-I", script, *request["args"]]
        runpy.run_path(script, run_name="__main__")
        sys.exit(0)  # the end of the script: the interpreter's own exit, status 0
    module = request["module"]
    if module == "pytest" and "import_time" in request and starts_workers(request["args"]):
        _workers_from(_zygote(filters, base, finder), request)
    sys.argv = ["-m", *request["args"]]  # as the interpreter has it until runpy names the module's file
    sys.orig_argv = [sys.executable, "-m", module, *request["args"]]
    try:  # a module not found here: the one line and exit status 1 of the interpreter's -m
        runpy._get_module_details(module, runpy._Error)
    except runpy._Error as exc:
        sys.exit(f"{sys.executable}: {exc}")
    runpy.run_module(module, run_name="__main__", alter_sys=True)  # SystemExit ends the process
    sys.exit(0)


# ----------------------------------------------------------------------------- xdist's workers
#
# A run with ``-n N`` starts its workers as xdist does, through execnet: ``python -u -c "import
# sys;exec(eval(sys.stdin.readline()))"`` with pipes for its standard input and output, then
# execnet's bootstrap sent down the pipe. Each such interpreter imports torch again (3-4 s of CPU
# on the 2-core sandbox, and Inductor's answer about the CPU's vector instruction sets, which a
# compiling worker works out in its run's own cache). A child whose arguments ask for workers
# forks a *zygote* before pytest starts: a process in the state the child had then (the server's
# imports, the caller's folder and environment; no pytest session, no plugin, nothing of the
# repository imported). The child's execnet asks it for each worker; the worker it forks takes
# the pipes, the caller's standard error, folder and environment of that moment and runs the
# ``-c`` line as a fresh ``python -u -c`` does. A worker whose environment differs from the
# zygote's in a variable read at import (``import_time``, the caller's list, but those read when
# used: ``READ_WHEN_USED``), or whose folder or ``PYTHONPATH`` changed,
# starts as execnet starts it. ``sys.flags`` stay the server's (``-u`` and ``-B`` act on the
# standard streams and ``sys.dont_write_bytecode``, where a worker's code sees them).

#: Variables read when they are used, not at import, which the plugin sets before its workers
#: start: the compile cache folders (a run's own), read when a kernel is compiled, and cuBLAS's
#: workspace setting, read when CUDA initialises (the zygote has not).
READ_WHEN_USED = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUBLAS_WORKSPACE_CONFIG")


def starts_workers(args: list[str]) -> bool:
    """Whether pytest ``args`` ask xdist for workers (``-n N``, ``-nN``, ``--numprocesses[=]N``,
    N not 0). Anything else (``PYTEST_ADDOPTS``, an ini file's ``addopts``) starts them as
    execnet does."""
    for k, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("-n", "--numprocesses"):
            value = args[k + 1] if k + 1 < len(args) else "0"
        elif arg.startswith("--numprocesses="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-n") and not arg.startswith("--"):
            value = arg[2:].lstrip("=")
        else:
            continue
        if value not in ("0", ""):
            return True
    return False


def _read_frame(sock: socket.socket, want_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One length-prefixed JSON frame (None at the end of the stream) and the descriptors that
    came with its first bytes."""
    # No byte past this frame is read: the next one (a worker's exit status after its pid) stays
    # in the socket for the next call.
    if want_fds:
        data, fds, _, _ = socket.recv_fds(sock, 4, want_fds)
    else:
        data, fds = sock.recv(4), []
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    data += _exact(sock, 4 - len(data))
    return json.loads(_exact(sock, struct.unpack("!I", data)[0])), fds


def _zygote(filters: list, base: list[str], finder: PrecompiledFinder | None) -> tuple[socket.socket, dict, str]:
    """Fork the zygote; return the socket to ask it for workers, the environment and the folder it
    has."""
    mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        its.close()
        return mine, dict(os.environ), os.getcwd()
    mine.close()
    try:
        null = os.open(os.devnull, os.O_RDWR)  # the run's streams are its own: a worker gets them per request
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        _serve_workers(its, filters, base, finder)
    finally:
        os._exit(0)


def _child_signals() -> tuple[int, int]:
    """A pipe that becomes readable when a child ends (``SIGCHLD`` wakes the select): its ends."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return wake_r, wake_w


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _leave_loop(sel, fds: tuple[int, ...], socks) -> None:
    """In a child just forked by a serving loop: none of the loop's wake-up pipe, selector and
    sockets."""
    signal.set_wakeup_fd(-1)
    sel.close()
    for fd in fds:
        os.close(fd)
    for sock in socks:
        sock.close()


def _reap(waiting: dict[int, socket.socket]) -> None:
    """Send the exit status of each ended child of ``waiting`` (pid: its caller's socket) and drop it."""
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        conn = waiting.pop(pid, None)
        if conn is not None:
            _report_exit(conn, status)


def _serve_workers(control: socket.socket, filters: list, base: list[str], finder: PrecompiledFinder | None) -> None:
    """The zygote: fork a worker per request, report its pid and then its exit status on the
    socket that came with the request; leave once the run closed ``control`` and every worker
    has ended. Signals meant for the run (Ctrl-C, ``kill`` of its process group) are not its."""
    import selectors

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    wake_r, wake_w = _child_signals()
    reporters: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    listening = True
    while listening or reporters:
        for key, _ in sel.select():
            if key.fileobj is control:
                try:
                    request, fds = _read_frame(control, 4)
                except (EOFError, OSError):
                    request, fds = None, []
                if request is None:
                    listening = False
                    sel.unregister(control)
                    control.close()
                    continue
                reporter = socket.socket(fileno=fds[3])
                pid = os.fork()
                if pid == 0:
                    _leave_loop(sel, (wake_r, wake_w), (control, reporter, *reporters.values()))
                    _worker(request, fds[:3], filters, base, finder)  # never returns
                for fd in fds[:3]:
                    os.close(fd)
                reporters[pid] = reporter
                try:
                    _frame(reporter, {"pid": pid})
                except OSError:
                    pass
            else:
                _drain(wake_r)
        _reap(reporters)


def _worker(request: dict, fds: list[int], filters: list, base: list[str], finder: PrecompiledFinder | None) -> None:
    """Become ``python -u [-B] -c LINE`` (execnet's bootstrap line) with the request's streams,
    folder and environment; never return."""
    try:
        try:
            _fresh(request, fds, filters, finder)
            flags, code = request["args"][:-2], request["args"][-1]
            if "-B" in flags:
                sys.dont_write_bytecode = True
            for stream in (sys.stdout, sys.stderr):  # -u
                stream.reconfigure(write_through=True)
            _run_code(code, ["-c"], [sys.executable, *request["args"]], request["env"], base)
        except SystemExit as exc:
            _exit(exc.code)
    except BaseException:  # noqa: BLE001 - as an interpreter ends on an uncaught exception
        import traceback

        traceback.print_exc()
        try:
            sys.stderr.flush()
        finally:
            os._exit(1)


def _exit_status(sock: socket.socket, timeout: float | None) -> int | None:
    """The exit status a server or zygote sends on ``sock`` within ``timeout`` seconds (None: none
    yet), as ``subprocess`` gives it; ``sock`` is closed once it came. A stream that ends without
    one (the sender ended before its child: only when the test process is gone) counts as a kill."""
    sock.settimeout(timeout)
    try:
        frame, _ = _read_frame(sock)
    except (socket.timeout, BlockingIOError):  # no status yet
        return None
    except (EOFError, OSError):
        frame = None
    sock.close()
    return frame["returncode"] if frame and "returncode" in frame else -signal.SIGKILL


class ForkedWorker:
    """What execnet keeps of a worker's process (``Popen2IOMaster.popen``): its pipes, pid, and
    ``wait``, ``poll``, ``kill``, as ``subprocess.Popen`` has them; the exit status comes from the
    zygote, whose child the worker is."""

    def __init__(self, args: list[str], zygote: socket.socket):
        self.args = args
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        self._status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = json.dumps({"args": args[1:], "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        try:
            socket.send_fds(zygote, [struct.pack("!I", len(request)) + request], [stdin_r, stdout_w, 2, theirs.fileno()])
        finally:
            for fd in (stdin_r, stdout_w):
                os.close(fd)
            theirs.close()
        self.stdin = os.fdopen(stdin_w, "wb")
        self.stdout = os.fdopen(stdout_r, "rb")
        self.stderr = None
        self.returncode: int | None = None
        try:
            first, _ = _read_frame(self._status)
        except EOFError:
            first = None
        if first is None:
            raise OSError("the zygote of xdist's workers is gone")
        self.pid = first["pid"]

    def _status_frame(self, timeout: float | None) -> None:
        self.returncode = _exit_status(self._status, timeout)

    def poll(self) -> int | None:
        if self.returncode is None:
            self._status_frame(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._status_frame(timeout)
            if self.returncode is None:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _workers_from(zygote: tuple[socket.socket, dict, str], request: dict) -> None:
    """Have this process's execnet, once imported, ask ``zygote`` for each popen worker it starts
    with this interpreter, unless the worker's environment or folder could make its imports
    differ (then as execnet does). Each decision is a line in ``DETCONF_TESTS_WARM_LOG``."""
    sock, env, cwd = zygote
    prefixes = tuple(request["import_time"])
    test = request.get("test", "")

    def why_cold(args) -> str | None:
        from execnet.gateway_io import popen_bootstrapline

        if not (isinstance(args, list) and args[:1] == [sys.executable] and args[-2:] == ["-c", popen_bootstrapline]
                and set(args[1:-2]) <= {"-u", "-B"} and "-u" in args):
            return "not execnet's popen line with this interpreter"
        differ = changed(dict(os.environ), env, prefixes, READ_WHEN_USED)
        if differ:
            return "environment: " + ", ".join(differ)
        if os.getcwd() != cwd:
            return "another folder"
        return None

    def patch(module) -> None:
        original = module.Popen2IOMaster.__init__

        def __init__(self, args, execmodel):
            why = why_cold(args)
            popen = None
            if why is None:
                try:
                    popen = ForkedWorker(list(args), sock)
                except OSError as exc:
                    why = f"the zygote: {exc}"
            log_line(test=test, warm=popen is not None, why=why, flavour="xdist-worker", seconds=0.0,
                     command=list(args[1:]), cwd=os.getcwd())
            if popen is None:
                original(self, args, execmodel)
                return
            self.popen = popen
            module.Popen2IO.__init__(self, popen.stdin, popen.stdout, execmodel=execmodel)

        module.Popen2IOMaster.__init__ = __init__

    sys.meta_path.insert(0, _AfterImport("execnet.gateway_io", patch))


# ----------------------------------------------------------------------------- detconf.child's processes
#
# The suite starts a fresh process through ``detconf.child.start_child`` (``python -c BOOT TARGET
# PAYLOAD``) for a case run alone (``--isolate``), the plan a certification compares, a check that
# needs a process of its own; each such interpreter imports torch again (1.5-2 s of CPU on the
# 2-core sandbox). In a forked child of a ``pytest`` server (and in the harness's test processes,
# ``tests/warm.py``), ``start_child`` asks the server for the process instead: forked from the
# server, it takes the caller's pipes, folder and environment and runs the ``-c`` line as a fresh
# ``python -c`` does (``_child``). It runs as ``detconf.child`` starts it when its environment
# differs from the server's in a variable read at import, when a folder first on its path could
# have changed the server's imports, for the reports' processes (the server imported torch, they
# do not), and for the targets that compare processes with each other (:data:`FRESH_ONLY`: a fork
# shares its parent's address space layout, which two fresh processes need not).

#: ``detconf.child`` targets always started as ``detconf.child`` starts them: those whose result is
#: a comparison between processes (seeded runs in two processes; the perturbation's server of
#: processes), and the reports' (prefix ``detconf.reports.``).
FRESH_ONLY = ("detconf.conformance.children:seeded_ops", "detconf.conformance.perturbed:serve", "detconf.reports.")


#: Entry-point groups that only the repository's own code reads, when a command runs
#: (``engine/backends.py``), never an import the server made: torch reads ``torch.backends`` as it
#: imports, Hypothesis ``hypothesis``, pytest ``pytest11`` as it starts.
READ_WHEN_RUN = ("detconf.backends",)


def _normal(name: str) -> str:
    return "".join("_" if c in "-." else c for c in name).lower()


def _neutral_distribution(info: str, sought: set[str]) -> bool:
    """Whether the installed distribution whose ``*.dist-info`` folder is ``info`` changes nothing
    the server's imports did (looked for the top-level names ``sought``): its entry points are
    all of groups in :data:`READ_WHEN_RUN`, and its name is neither sought nor that of a
    distribution this interpreter has (whose version or metadata an import may have read). Its
    modules are the folder's, which :func:`neutral` looks at. Unreadable, or nameless: not
    neutral."""
    from importlib import metadata

    try:
        with open(os.path.join(info, "METADATA"), encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("Name:")), "")
        try:
            with open(os.path.join(info, "entry_points.txt"), encoding="utf-8") as f:
                groups = {line.strip()[1:-1] for line in f if line.strip().startswith("[")}
        except FileNotFoundError:
            groups = set()
    except (OSError, UnicodeDecodeError):
        return False
    if not name or not groups <= set(READ_WHEN_RUN) or _normal(name) in {_normal(n) for n in sought}:
        return False
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return True
    return False


def neutral(folder: str, sought: set[str]) -> bool:
    """Whether nothing in ``folder`` could have changed imports that looked for the top-level names
    ``sought``: no ``.pth`` file, no distribution but neutral ones (:func:`_neutral_distribution`;
    any ``*.egg-info`` or egg is not), no module or package of a sought name. A folder that cannot
    be read holds nothing to import."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return True
    for entry in entries:
        if entry.name.endswith(".dist-info") and entry.is_dir():
            if not _neutral_distribution(entry.path, sought):
                return False
            continue
        if entry.name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth", ".egg")):
            return False
        # a package or namespace folder, or a module file (``pytest.ini`` is neither)
        importable = entry.is_dir() or entry.name.endswith(tuple(all_suffixes()))
        if importable and entry.name.split(".")[0] in sought:
            return False
    return True


def why_not_forked(target: str, env: dict, folders: list[str], prefixes: tuple[str, ...], server_env: dict,
                   sought: set[str]) -> str | None:
    """Why ``detconf.child``'s process for ``target`` (with ``env``, ``folders`` first on its path)
    is not forked from a server started with ``server_env`` whose imports looked for ``sought``
    (None: it is)."""
    if target.startswith(FRESH_ONLY):
        return "a process compared with other processes, or a report's"
    differ = changed(env, server_env, prefixes, ("PYTHONPATH", *READ_WHEN_USED))
    if differ:
        return "environment: " + ", ".join(differ)
    if not all(neutral(folder, sought) for folder in folders):
        return "a folder first on sys.path"
    return None


@functools.cache
def _popen_class():
    """``ForkedPopen``: a ``subprocess.Popen`` whose process a warm server forks (made once, where
    ``subprocess`` is imported anyway)."""
    import subprocess

    class ForkedPopen(subprocess.Popen):
        """``python -c CODE ARGS``, ``python -m pytest ARGS`` or ``python -m detconf ARGS`` as
        ``subprocess.Popen`` starts it, but forked by the server at ``server`` (None: started as
        ``subprocess`` starts it): the same pipes, folder, environment and ``Popen`` methods; its
        pid is real (a signal reaches it), its exit status comes from the server, whose child it
        is. ``request``: fields the server's child reads too (``group``: a process group of its
        own, the one ``preexec_fn`` taken; ``session``: a session of its own, which the caller asks
        here rather than with ``start_new_session``; ``import_time``, ``test``). No other
        ``preexec_fn``, no ``pass_fds`` or ``shell``."""

        def __init__(self, args, server: str | None, *popen_args, request: dict | None = None, **kwargs):
            self._server, self._status, self._forked, self._request = server, None, False, dict(request or {})
            super().__init__(args, *popen_args, **kwargs)

        def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                           creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, *rest):
            if self._server is None:  # started as subprocess starts it
                return super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                                              startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                                              c2pwrite, errread, errwrite, *rest)
            try:
                args = list(args)
                if args[1:3] in (["-m", "pytest"], ["-m", "detconf"]):
                    form = {"module": args[2], "args": [str(a) for a in args[3:]]}
                elif args[1:2] == ["-c"]:
                    form = {"code": args[2], "args": [str(a) for a in args[3:]]}
                else:
                    form = None
                own_start = preexec_fn is not None and not self._request.get("group")
                if own_start or pass_fds or shell or args[0] != sys.executable or form is None:
                    raise OSError("not a python -c or -m pytest line the server forks")
                request = json.dumps({**self._request, **form,
                                      "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
                                      "env": dict(os.environ if env is None else env)}).encode()
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    conn.connect(self._server)
                    socket.send_fds(conn, [struct.pack("!I", len(request)) + request],
                                    [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                                     errwrite if errwrite != -1 else 2])
                    first, _ = _read_frame(conn)
                except BaseException:
                    conn.close()
                    raise
                if not first or "pid" not in first:
                    conn.close()
                    raise OSError("the warm server forked no child")
                self.pid, self._status, self._child_created, self._forked = first["pid"], conn, True, True
            finally:
                self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

        def _read_status(self, timeout: float | None) -> None:
            self.returncode = _exit_status(self._status, timeout)
            if self.returncode is not None:
                self._status = None

        def _internal_poll(self, _deadstate=None, **kwargs):
            if not self._forked:
                return super()._internal_poll(_deadstate, **kwargs)
            if self.returncode is None and self._status is not None:
                self._read_status(0.0)
            return self.returncode

        def _wait(self, timeout):
            if not self._forked:
                return super()._wait(timeout)
            if self.returncode is None and self._status is not None:
                self._read_status(timeout)
                if self.returncode is None:
                    raise subprocess.TimeoutExpired(self.args, timeout)
            return self.returncode

    return ForkedPopen


def fork_child_processes(module, server_for, prefixes: tuple[str, ...], test: str = "") -> None:
    """Have ``detconf.child`` (``module``) start its processes as forks from a warm server where
    :func:`why_not_forked` allows, as its ``start_child`` starts them elsewhere; a line for each in
    ``DETCONF_TESTS_WARM_LOG`` (flavour ``child``). ``server_for(env)``: the server for a child
    with that environment, as (socket path, the server's environment, the names its imports
    looked for), or why there is none."""
    original = module.start_child
    if getattr(original, "forks", False):
        return

    def start_child(target, payload=None, *, env=None, cwd=module.ROOT, stdin=False, path=()):
        env = dict(env) if env is not None else module.child_env()
        first = [os.fspath(folder) for folder in path] + [str(module.ROOT)]
        server = server_for(env)
        why, proc = (server if isinstance(server, str) else None), None
        if why is None:
            socket_path, server_env, sought = server
            folders = [os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd()), *first, *_pythonpath(env)]
            why = why_not_forked(target, env, folders, prefixes, server_env, sought)
        if why is None:
            import subprocess

            try:
                proc = _popen_class()([sys.executable, "-c", module._BOOT.format(path=first), target,
                                       json.dumps(payload)], socket_path, cwd=cwd,
                                      stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, encoding="utf-8", env=env)
            except OSError as exc:
                why = f"the server: {exc}"
        log_line(test=test or current_test(), warm=proc is not None,
                 why=why, flavour="child", seconds=0.0, command=[target], cwd=os.fspath(cwd or os.getcwd()))
        return proc if proc is not None else original(target, payload, env=env, cwd=cwd, stdin=stdin, path=path)

    start_child.forks = True
    module.start_child = start_child


def _route_python_starts(request: dict) -> None:
    """In a forked ``python -m detconf`` child (``gpu-run``): every ``subprocess.Popen`` (and so
    ``subprocess.run``) of ``python -c CODE`` or ``python -m pytest ARGS`` with this interpreter,
    the caller's streams, folder and environment and nothing else asked of the start (no
    ``preexec_fn`` but ``gpu-run``'s own for its steps, ``detconf.gpurun._child_setup``: the child
    then takes a process group of its own; no new session, passed descriptors or shell) is forked
    from this child's server where :func:`why_not_forked` allows (``gpu-run``'s description of the
    machine and its steps); anything else starts as ``subprocess`` starts it. A line for each in
    ``DETCONF_TESTS_WARM_LOG`` (flavour ``python-c`` or ``python-m-pytest``)."""
    import subprocess

    socket_path, server_env, sought = SERVED["socket"], dict(SERVED["env"]), set(_Sought.names)
    prefixes, test = tuple(request["import_time"]), request.get("test", "")
    forked_popen = _popen_class()

    class RoutedPopen(forked_popen):
        def __init__(self, args, *popen_args, **kwargs):
            env = kwargs.get("env")
            env = dict(os.environ if env is None else env)
            cwd = kwargs.get("cwd")
            folder = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
            python = isinstance(args, list) and len(args) >= 3 and all(isinstance(a, str) for a in args) \
                and args[0] == sys.executable
            kind = "python-c" if python and args[1] == "-c" else \
                "python-m-pytest" if python and args[1:3] == ["-m", "pytest"] else None
            preexec = kwargs.get("preexec_fn")
            # gpu-run's steps: a process group of their own, SIGINT as a fresh interpreter has it
            group = preexec is not None and (getattr(preexec, "__module__", None),
                                             getattr(preexec, "__qualname__", None)) == ("detconf.gpurun", "_child_setup")
            if kind is None:
                why = "not a python -c or -m pytest line"
            elif popen_args or (preexec is not None and not group) \
                    or any(kwargs.get(k) for k in ("pass_fds", "shell", "start_new_session")) \
                    or kwargs.get("process_group") not in (None, -1) or kwargs.get("executable") is not None:
                why = "a start of its own (preexec_fn, session, descriptors, shell)"
            else:
                why = why_not_forked("", env, [folder, *_pythonpath(env)], prefixes, server_env, sought)
            if kind is not None:
                log_line(test=test, warm=why is None, why=why, flavour=kind, seconds=0.0,
                         command=[str(a)[:200] for a in args[1:]], cwd=folder)
            super().__init__(args, socket_path if why is None else None, *popen_args,
                             request={"group": group, "import_time": list(prefixes), "test": test}, **kwargs)

    subprocess.Popen = RoutedPopen


def _fork_children(request: dict) -> None:
    """In a forked child: ``detconf.child``, once imported, starts its processes forked from this
    child's server (:func:`fork_child_processes`)."""
    served = (SERVED["socket"], dict(SERVED["env"]), set(_Sought.names))

    def patch(module) -> None:
        fork_child_processes(module, lambda env: served, tuple(request["import_time"]), request.get("test", ""))

    sys.meta_path.insert(0, _AfterImport("detconf.child", patch))


class _AfterImport:
    """A finder that finds ``name`` as the finders after it do, and calls ``then(module)`` once
    the module has run."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then

        class Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                then(module)

        spec.loader = Loader()
        return spec


def _exit(code) -> None:
    """Leave as the interpreter leaves after ``SystemExit(code)``, without its finalization.

    The interpreter's exit waits for the threads that are not daemons, runs the ``atexit``
    functions (pytest's, the suite's, ``weakref.finalize``'s, logging's) and flushes the standard
    streams; then it tears down every module, torch's too: about 0.3 s of a forked child's life
    on the 2-core sandbox, which a child spends in nothing a test judges. This child does the first
    three and ends there with the status the interpreter gives (None: 0, a number: that number,
    anything else: printed to standard error, 1). Where a standard stream cannot be flushed, the
    interpreter's own exit goes on, as a fresh one does (it reports the failure, status 120)."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - the interpreter reports it and exits 120, as in a fresh run
        raise SystemExit(code)
    os._exit(status & 0xFF)


#: Set where the server is shared by the xdist workers of one run (``tests/warm.py``): the pid of
#: the process whose end ends the server (the run's controller), in place of the test process
#: that started it, which may finish its tests before another worker does. Read and removed from
#: the environment before anything is imported.
WATCH = "DETCONF_WARM_WATCH"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` is there (``detconf.child.pid_alive``'s rule: the server imports
    nothing of the repository, whose modules a child must import itself)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(path: str, flavour: str, names: tuple[str, ...] = ()) -> None:
    watch = os.environ.pop(WATCH, None)
    # The suite's runs and the reports commands import the repository's modules: from code
    # compiled here once (the plugin's 61 modules took 0.40-0.65 s to import from source, 0.19-0.24
    # s from bytecode, after torch, on the 2-core sandbox), those of PROJECT here (held for each
    # child: _Stash), the rest in the child. Not for -I scripts, which import none.
    finder = PrecompiledFinder(compile_sources(repository_packages())) if flavour != "isolated" else None
    filters, base = _preload(flavour, names, finder)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with open(path + ".names", "w", encoding="utf-8") as f:
        json.dump(sorted(_Sought.names), f)
    listener.bind(path + ".tmp")
    SERVED.update(socket=path, env=dict(os.environ), flavour=flavour)
    os.rename(path + ".tmp", path)  # the caller connects only once everything is imported
    listener.listen(16)
    _serve(listener, filters, base, finder, int(watch) if watch else None)
    if watch:  # a shared server's folder is nobody else's to remove
        import shutil

        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    _leave_server()


#: What a forked child knows of the server it came from: its socket, the environment it started
#: with, its flavour (``main`` fills it in).
SERVED: dict = {}


def _serve(listener: socket.socket, filters: list, base: list[str], finder: PrecompiledFinder | None,
           watch: int | None = None) -> None:
    """Fork a child per request, report its pid and then its exit status on the request's
    connection; several at once (a forked child may ask for children of its own: the fresh
    processes ``detconf.child`` starts, ``_fork_children``; the xdist workers of one run share a
    server). Leave on a ``stop`` request, or once the test process that started the server (the
    process ``watch`` where given) is gone and no child is running."""
    import selectors

    wake_r, wake_w = _child_signals()
    waiting: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    parent = os.getppid()
    while True:
        events = sel.select(5.0 if watch is None else 1.0)
        gone = os.getppid() != parent if watch is None else not _alive(watch)
        if gone and not waiting:  # the test process (the run) is gone: so is its server
            return
        for key, _ in events:
            if key.fileobj is not listener:
                _drain(wake_r)
                continue
            conn, _ = listener.accept()
            conn.settimeout(None)
            try:
                request, fds = _read_frame(conn, 3)  # the streams come with the first bytes
            except (EOFError, OSError):
                request, fds = None, []
            if request is None:
                conn.close()
                continue
            if request.get("stop"):
                conn.close()
                return
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _leave_loop(sel, (wake_r, wake_w), (conn, listener, *waiting.values()))
                try:
                    _child(request, fds, filters, base, finder)
                except SystemExit as exc:
                    _exit(exc.code)
                # not reached: an exception (KeyboardInterrupt too) unwinds to the interpreter's own exit
            for fd in fds:
                os.close(fd)
            try:
                _frame(conn, {"pid": pid})
            except OSError:
                pass
            waiting[pid] = conn
        _reap(waiting)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "pytest", tuple(sys.argv[3:]))
