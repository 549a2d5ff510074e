"""Inner runs for the harness's tests: forked from a warm interpreter.

About 200 of the harness's tests run the suite in a new process (``python -m pytest conformance
...``) and judge what that process did: its exit status, its output, its results file, what it left
behind when killed. A fresh interpreter spends about 3.3 s of a two-case run's 3.6 s (2-core
machine) importing torch, Inductor's configuration, Hypothesis and NumPy before the suite's own
code runs. :func:`run` gives such a command the same process, minus that wait: a server
(``tests/warm_server.py``) started once per test process, or once per run for all its xdist
workers (:func:`_shared_folder`; ``DETCONF_TESTS_SHARED=0``: one per worker), has imported them (and the report's libraries,
the installed pytest plugins but xdist, and Inductor's answer about the CPU's vector instruction
sets, which a first C++ compile works out), and forks a child that takes the command's folder,
environment, standard streams and resource limits (file size, address space) and runs ``python -m
pytest ARGS`` there. The repository's modules every run imports (the plugin's, the harness's, the
summary's: ``warm_server.PROJECT``) the server has imported too, and checked the repository's
catalog files against their schemas; a child starts without them and takes them back when its
code first imports ``detconf``, only if that import would find the same package with none of
those files changed (else it imports them afresh: ``warm_server._Stash``), and what their import
does to Hypothesis is done then, not before (``warm_server._Effects``). Every other module of
the suite and every probe plugin a test adds are imported in the child, as in a fresh process
(from code the server compiled from their unchanged files: no compiling them again in each child
where no bytecode files are written); the child exits, is killed and writes files as its own
process. It leaves as the interpreter does after ``SystemExit`` (threads waited for, ``atexit`` run, streams
flushed) but skips the teardown of every module after that (0.3 s of each run on a 2-core machine):
``warm_server._exit``.

A forked run that asks for xdist's workers (``-n N``) gets them forked too, from a process it
forks before pytest starts (``warm_server._workers_from``): each worker is the ``python -u -c``
line execnet starts, in the run's folder and environment of that moment, unless the run changed a
variable read at import (:data:`IMPORT_TIME`) before starting it (then execnet starts it).

The fresh processes the suite starts through ``detconf.child`` (a case run alone with
``--isolate``, the plan a certification compares, a check's process of its own), from a forked
run or from a test in this process (:func:`fork_children`, installed by ``tests/conftest.py``),
are forked by the ``pytest`` server as well, which serves several at once
(``warm_server.fork_child_processes``), but those that compare processes with each other and the
reports' processes; ``tests/test_child.py`` judges ``detconf.child``'s own start
(:func:`children_cold`).

``python -m detconf ARGS`` (``gpu-run``, ``run``, ...) is forked by the ``pytest`` server too; in
such a child a plain ``python -c`` start (``gpu-run``'s description of the machine) and
``gpu-run``'s steps (``python -m pytest``, each in a process group of its own) are forked as well,
any other start of its own (another ``preexec_fn``, a new session, another interpreter) is not
(``warm_server._route_python_starts``).

Two more kinds of command are forked the same way, each from a server of its own flavour:
``python -m detconf.reports ARGS`` (a server that imported NumPy, pandas, pyarrow and matplotlib, not torch)
and ``python -I SCRIPT ARGS`` (a server started with ``-I`` that imported the modules the caller
names in ``imports``: those the script imports itself whatever it does, torch and its compiler's
modules for the ``detconf.reports upstream`` scripts; a server per list; without ``imports`` a
script runs cold).

A command runs cold (``subprocess.run``, exactly as given) when:
- ``DETCONF_TESTS_COLD=1`` is set (the whole harness then runs as it did before: a way to check
  that nothing here changes an answer);
- it is none of those three forms, or the caller passes ``cold=True``: tests that judge what
  happens while torch or Dynamo is imported, or the interpreter's start;
- its environment differs from the server's in a variable read while those modules are imported
  or the interpreter starts (:data:`IMPORT_TIME`), e.g. ``OMP_NUM_THREADS`` or ``PYTHONHASHSEED``
  (not in one a process writes before it reads it, ``warm_server.WRITTEN_BEFORE_READ``, nor in an
  Inductor cache folder that is the one Inductor takes unnamed)
  (``-I`` servers start with their scripts' environment: one per environment and list of imports,
  at most :data:`ISOLATED_SERVERS`);
- a folder that comes first on its ``sys.path`` (the command's folder for ``-m``; for ``-I`` the
  script's, which Python puts first before 3.11 and is checked on every version) or on its
  ``PYTHONPATH`` could have changed those imports: one holding installed
  distributions (``*.egg-info``, or a ``*.dist-info`` but one that declares only entry points the
  suite reads when it runs, under a name no import looked for and no installed distribution
  bears: torch loads its backends' entry points on import; ``warm_server.neutral``), ``.pth``
  files, or a module or package of a name those imports looked for (found or not), as the
  server recorded them;
- the server could not start (said once on standard error).
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.machinery
import json
import locale
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests import warm_server

ROOT = Path(__file__).resolve().parent.parent
SERVER = Path(__file__).with_name("warm_server.py")

#: Prefixes of variables that torch, NumPy, Hypothesis, matplotlib, OpenMP, the allocator or the interpreter read
#: at import or start: a command whose value differs from the server's runs cold.
#: ``PYTHONPATH`` is the exception: the child puts its entries on ``sys.path`` as the interpreter would.
#: Hypothesis loads its ``ci`` profile at import where one of the variables of a CI service is set
#: (``hypothesis._settings._CI_VARS``: ``CI``, ``GITHUB_ACTIONS``, ``TF_BUILD``, ...).
IMPORT_TIME = ("PYTHON", "TORCH", "_TORCH", "PYTORCH", "CUDA", "CUBLAS", "CUDNN", "NCCL", "NVIDIA", "OMP_", "KMP_",
               "MKL", "GOMP", "OPENBLAS", "TRITON", "HYPOTHESIS", "_HYPOTHESIS", "NUMPY", "NPY_", "LD_", "MALLOC",
               "KINETO", "TMP", "TEMP", "HOME", "XDG_", "LANG", "LC_", "COVERAGE", "MPL",
               "CI", "__TOX_ENVIRONMENT_VARIABLE_ORIGINAL_CI", "TF_BUILD", "bamboo.", "BUILDKITE", "CODEBUILD_",
               "GITHUB_ACTIONS", "GITLAB_CI", "HEROKU_TEST_RUN_ID", "TEAMCITY_VERSION")

_lock = threading.Lock()
_servers: dict[tuple, "_Server"] = {}
_refused: dict[tuple, str] = {}
stats = {"warm": 0, "cold": 0}


def _fingerprint(env: dict) -> tuple:
    default = _inductor_default_cache(env)
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME) and k != "PYTHONPATH"
                        and k not in warm_server.WRITTEN_BEFORE_READ
                        and not (k == "TORCHINDUCTOR_CACHE_DIR" and v == default)))


def _inductor_default_cache(env: dict) -> str | None:
    """The folder Inductor takes for its cache where ``TORCHINDUCTOR_CACHE_DIR`` is not set, for
    a process with ``env`` (torch's ``default_cache_dir``: the temporary folder, then
    ``torchinductor_`` and the user's name as ``getpass`` finds it, with ``\\/:*?"<>|`` made
    ``_``). Inductor names that folder in its process's environment when it first asks for it
    (importing its code cache does): the inner runs a test process starts afterwards have it
    named, the same folder as unnamed, and no other server. None where ``env``'s temporary
    folder is not this process's (not worked out here)."""
    if any(env.get(k) != os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP")):
        return None
    user = next((env[k] for k in ("LOGNAME", "USER", "LNAME", "USERNAME") if env.get(k)), None)
    if user is None:
        try:
            import pwd

            user = pwd.getpwuid(os.getuid()).pw_name
        except (ImportError, KeyError, OSError):
            return None
    return os.path.abspath(os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)))


def base_env() -> dict:
    """The environment an inner run gets by default: this process's, without pytest's and
    xdist's variables (and the profile variable a worker may carry)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "DETCONF_HYPOTHESIS_PROFILE"}


#: ``python -m`` modules forked from the ``reports`` server.
REPORTS_MODULES = ("detconf.reports",)
#: At most this many ``-I`` servers, one per list of imports and environment their scripts run with.
ISOLATED_SERVERS = 4


def _form(cmd: list) -> tuple[str, dict] | None:
    """The server flavour and request fields of ``cmd``, or None: not a command a server forks."""
    if not all(isinstance(c, str) for c in cmd) or len(cmd) < 3 or cmd[0] != sys.executable:
        return None
    if cmd[1] == "-m" and cmd[2] in ("pytest", "detconf"):
        return "pytest", {"module": cmd[2], "args": list(cmd[3:])}
    if cmd[1] == "-c":
        return "pytest", {"code": cmd[2], "args": list(cmd[3:])}
    if cmd[1] == "-m" and cmd[2] in REPORTS_MODULES:
        return "reports", {"module": cmd[2], "args": list(cmd[3:])}
    if cmd[1] == "-I" and not cmd[2].startswith("-"):
        return "isolated", {"script": os.path.abspath(cmd[2]), "args": list(cmd[3:])}
    return None


def _shared_folder(key: tuple) -> Path | None:
    """Where the xdist workers of one run keep the server of ``key`` they share (None: not a worker,
    or ``DETCONF_TESTS_SHARED=0``). The first worker to ask makes the folder and starts the server;
    the others use it."""
    uid, worker = os.environ.get("PYTEST_XDIST_TESTRUNUID"), os.environ.get("PYTEST_XDIST_WORKER")
    if not uid or not worker or os.environ.get("DETCONF_TESTS_SHARED") == "0":
        return None
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"detconf-warm-{uid[:12]}-{digest}"


class _Server:
    """A warm server: started by this process, or (``shared``) by whichever xdist worker of the run
    asked first (``owner``), which hands it the run's controller to watch: a worker that finishes
    its tests first leaves it to the others, and it leaves (removing its folder) once the run is
    over."""

    def __init__(self, env: dict, flavour: str = "pytest", imports: tuple[str, ...] = (),
                 shared: Path | None = None, watch: int | None = None):
        self.flavour = flavour
        self.env = dict(env)
        self.shared = shared is not None
        owner = True
        if shared is None:
            self.folder = Path(tempfile.mkdtemp(prefix="detconf-warm-"))
        else:
            self.folder = shared
            try:
                self.folder.mkdir(mode=0o700)
            except FileExistsError:
                owner = False
        self.socket = self.folder / "s"
        self.log = self.folder / "log"
        self._sought: set[str] | None = None
        self.proc: subprocess.Popen | None = None
        if not owner:
            return
        extra = {warm_server.WATCH: str(watch or os.getppid())} if self.shared else {}
        with open(self.log, "wb") as log:
            flags = ["-I"] if flavour == "isolated" else []
            self.proc = subprocess.Popen([sys.executable, *flags, str(SERVER), str(self.socket), flavour, *imports],
                                         cwd=ROOT, env={**env, **extra},
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        if self.shared:
            (self.folder / "pid.tmp").write_text(str(self.proc.pid))
            os.rename(self.folder / "pid.tmp", self.folder / "pid")

    @property
    def owner(self) -> bool:
        """Whether this process started the server (and so may stop it)."""
        return self.proc is not None

    def _exited(self) -> str | None:
        """Why the server is gone before it listened (None: it is not)."""
        if self.proc is not None:
            code = self.proc.poll()
            return None if code is None else f"exited {code}"
        try:
            pid = int((self.folder / "pid").read_text())
        except (OSError, ValueError):
            return None if self.folder.is_dir() else "its folder is gone"
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None if warm_server._alive(pid) else "exited"
        return "exited" if state in ("Z", "X") else None

    def ready(self, wait: float = 180.0) -> str | None:
        """None once the server listens, else why it will not."""
        deadline = time.monotonic() + wait
        while not self.socket.exists():
            gone = self._exited()
            if gone is not None:
                log = self.log.read_text(errors="replace")[-500:] if self.log.exists() else ""
                return f"the warm server {gone}: {log}"
            if time.monotonic() > deadline:
                return f"the warm server did not listen within {wait:.0f} s"
            time.sleep(0.02)
        return None

    def sought(self) -> set[str]:
        """The top-level names the server's imports looked for."""
        if self._sought is None:
            self._sought = set(json.loads(Path(str(self.socket) + ".names").read_text(encoding="utf-8")))
        return self._sought

    def stop(self, ending: bool = False) -> None:
        """Stop the server this process started; at this process's end (``ending``) a shared one
        is left to the other workers (it leaves with the run), and one started elsewhere is never
        this process's to stop."""
        if self.proc is None or (ending and self.shared):
            return
        if self.proc.poll() is None:
            if self._ask_to_stop():
                try:
                    self.proc.wait(timeout=10)  # it runs its finalizers (warm_server._leave_server)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _ask_to_stop(self) -> bool:
        """Send the server its ``stop`` request; False where it does not listen (yet)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(5)
                conn.connect(str(self.socket))
                warm_server._frame(conn, {"stop": True})
        except OSError:
            return False
        return True


@atexit.register
def stop_all() -> None:
    for server in list(_servers.values()):
        server.stop(ending=True)
    _servers.clear()


def _server_for(env: dict, flavour: str = "pytest", imports: tuple[str, ...] = ()) -> "_Server | None":
    key = (flavour, imports, _fingerprint(env))
    with _lock:
        server = _servers.get(key)
        if flavour == "isolated":
            allowed = sum(k[0] == flavour for k in _servers) < ISOLATED_SERVERS
        else:
            allowed = key[2] == _fingerprint(base_env())
        if server is None and allowed and key not in _refused:
            server = _servers[key] = _Server(env, flavour, imports, _shared_folder(key))
    if server is None:
        return None
    why = server.ready()
    if why is not None:
        with _lock:
            _servers.pop(key, None)
            if key not in _refused:
                _refused[key] = why
                print(f"tests/warm.py: inner runs go cold: {why}", file=sys.stderr)
        server.stop()
        return None
    return server


def _path_is_neutral(server: _Server, env: dict, first: str) -> bool:
    """Whether no folder of the child's ``sys.path`` before the interpreter's own (``first``, then,
    but for ``-I``, ``env``'s ``PYTHONPATH``) could have changed the server's imports."""
    own = set(base_env().get("PYTHONPATH", "").split(os.pathsep))
    extra = [] if server.flavour == "isolated" else env.get("PYTHONPATH", "").split(os.pathsep)
    return all(warm_server.neutral(folder, server.sought()) for folder in [first, *extra]
               if folder and not (folder in own and folder != first))


def _choose(cmd: list, cwd, env: dict, cold: bool, imports: tuple[str, ...]) -> tuple["_Server | None", str | None, tuple | None]:
    """The server that forks ``cmd`` (None: it runs cold), why not, and ``cmd``'s form (:func:`_form`)."""
    server, why, form = None, "asked" if cold else "DETCONF_TESTS_COLD=1", _form(list(cmd))
    may_fork = not cold and os.environ.get("DETCONF_TESTS_COLD") != "1"
    if may_fork and form is not None and form[0] == "isolated" and not imports:
        why = "a script whose imports were not named"  # a fresh interpreter
    elif may_fork and form is not None:
        server, why = _server_for(env, form[0], tuple(imports) if form[0] == "isolated" else ()), "environment"
        first = os.path.dirname(form[1]["script"]) if "script" in form[1] else os.path.abspath(cwd)
        if server is not None and not _path_is_neutral(server, env, first):
            server, why = None, "a folder first on sys.path"
    elif may_fork:
        why = "not a form a server forks"
    return server, (None if server is not None else why), form


def run(cmd: list, *, cwd=ROOT, env: dict | None = None, timeout: float | None = None, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text: bool = True, fsize: int | None = None, cold: bool = False,
        capture_output: bool = False, imports: tuple[str, ...] = (),
        address_space: int | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=stdout, stderr=stderr,
    text=text)`` (with ``RLIMIT_FSIZE`` set to ``fsize`` and ``RLIMIT_AS`` to ``address_space``
    when given: in a forked child from its start, which holds the server's imports), for ``cmd = [sys.executable,
    "-m", "pytest", *args]`` (or ``"detconf"``), ``[sys.executable, "-m", "detconf.reports", *args]`` or
    ``[sys.executable, "-I", script, *args]`` (with ``imports``, the modules ``script`` imports
    whatever it does): forked from a warm server where the module's rules allow."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    env = dict(os.environ if env is None else env)
    server, why, form = _choose(cmd, cwd, env, cold, imports)
    limits = _limits(fsize, address_space)
    started = time.monotonic()
    try:
        if server is None:
            return _cold(cmd, cwd, env, timeout, stdout, stderr, text, limits)
        return _forked(server, cmd, form[1], cwd, env, timeout, stdout, stderr, text, limits)
    finally:
        stats["cold" if server is None else "warm"] += 1
        warm_server.log_line(test=warm_server.current_test(),
                             warm=server is not None, why=None if server else why, flavour=form[0] if form else None,
                             seconds=round(time.monotonic() - started, 3), command=[str(a) for a in cmd[1:]],
                             cwd=str(cwd))


def popen(cmd: list, *, cwd=ROOT, env: dict | None = None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          text: bool = True, new_session: bool = False) -> subprocess.Popen:
    """``subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=text,
    start_new_session=new_session)`` for ``cmd = [sys.executable, "-m", "detconf", *args]`` (a
    ``gpu-run`` a test signals while it runs), with SIGINT as a fresh interpreter installs it even
    where this process ignores it: forked from the ``pytest`` server where :func:`run`'s rules
    allow (in a session of its own with ``new_session``; its description of the machine and its
    steps forked in turn, as in :func:`run`), else started so. The pid is the process's own:
    signals, ``os.killpg`` and ``communicate`` act as on a started one."""
    env = dict(os.environ if env is None else env)
    server, why, form = _choose(cmd, cwd, env, False, ())
    if server is not None and form[1].get("module") != "detconf":
        server, why = None, "not a python -m detconf line"
    proc = None
    if server is not None:
        try:
            proc = warm_server._popen_class()(
                list(cmd), str(server.socket), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=stderr, text=text, request={"session": new_session, "import_time": list(IMPORT_TIME),
                                                   "test": warm_server.current_test()})
        except OSError as exc:
            why = f"the server: {exc}"
    if proc is None:
        # SIGINT at its default before the interpreter starts: it then installs its own handler,
        # as the forked child has it (a process started in the background may inherit it ignored)
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                text=text, start_new_session=new_session, preexec_fn=_sigint_default)
    stats["cold" if why else "warm"] += 1
    warm_server.log_line(test=warm_server.current_test(), warm=why is None,
                         why=why, flavour="popen", seconds=0.0, command=[str(a) for a in cmd[1:]], cwd=str(cwd))
    return proc


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


#: While set (:func:`children_cold`), ``detconf.child`` starts its processes as it does elsewhere.
_children_cold = threading.Event()


def fork_children() -> None:
    """In this test process, ``detconf.child`` starts its fresh processes forked from this process's
    ``pytest`` server where ``warm_server.why_not_forked`` allows (a forked child of the server
    does so too); not with ``DETCONF_TESTS_COLD=1``, nor inside :func:`children_cold`."""
    if os.environ.get("DETCONF_TESTS_COLD") == "1":
        return
    from detconf import child

    def server_for(env: dict):
        if _children_cold.is_set():
            return "asked"
        server = _server_for(env, "pytest")
        if server is None:
            base = base_env()
            differ = warm_server.changed(env, base, IMPORT_TIME, ("PYTHONPATH",))
            return "environment: " + ", ".join(differ) if differ else "the server could not start"
        return str(server.socket), server.env, server.sought()

    warm_server.fork_child_processes(child, server_for, IMPORT_TIME)


@contextlib.contextmanager
def children_cold():
    """``detconf.child``'s processes started as it starts them (the tests of ``detconf.child``)."""
    _children_cold.set()
    try:
        yield
    finally:
        _children_cold.clear()


def reports(*args, cwd=ROOT, timeout: float | None = None, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    """``python -m detconf.reports ARGS`` (each argument as ``str``) in ``cwd``, its standard output
    (unless ``stdout`` says otherwise) and error captured as text: :func:`run`."""
    return run([sys.executable, "-m", "detconf.reports", *map(str, args)], cwd=cwd, stdout=stdout,
               stderr=subprocess.PIPE, text=True, timeout=timeout)


def _limits(fsize: int | None, address_space: int | None) -> dict[str, int]:
    """The resource limits a command runs with, by the name of their ``resource.RLIMIT_*``."""
    return {name: value for name, value in (("FSIZE", fsize), ("AS", address_space)) if value}


def _cold(cmd, cwd, env, timeout, stdout, stderr, text, limits: dict[str, int]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=stdout, stderr=stderr, text=text,
                          preexec_fn=(lambda: warm_server.apply_limits(limits)) if limits else None)


def _forked(server: _Server, cmd, form: dict, cwd, env, timeout, stdout, stderr, text,
            limits: dict[str, int]) -> subprocess.CompletedProcess:
    opened: list[int] = []  # our ends and the child's, closed before returning
    readers: dict[int, str] = {}

    def target(stream, name: str) -> int:
        if stream is subprocess.PIPE:
            r, w = os.pipe()
            opened.extend((r, w))
            readers[r] = name
            return w
        if stream is subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_WRONLY)
            opened.append(fd)
            return fd
        if stream is None:  # inherited, as subprocess.run leaves it
            return 1 if name == "stdout" else 2
        return stream if isinstance(stream, int) else stream.fileno()

    stdin = os.open(os.devnull, os.O_RDONLY)
    opened.append(stdin)
    out_fd = target(stdout, "stdout")
    err_fd = out_fd if stderr is subprocess.STDOUT else target(stderr, "stderr")
    # import_time: a pytest child that starts xdist's workers forks them too, where their
    # environment leaves these variables as the child had them (warm_server._workers_from)
    request = json.dumps({**form, "cwd": os.fspath(cwd), "env": env, "limits": limits, "import_time": list(IMPORT_TIME),
                          "test": warm_server.current_test()}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    chunks = {name: bytearray() for name in readers.values()}
    try:
        conn.connect(str(server.socket))
        socket.send_fds(conn, [struct.pack("!I", len(request)) + request], [stdin, out_fd, err_fd])
        # The child holds the write ends now: close ours so that its exit ends the reads.
        for fd in list(opened):
            if fd not in readers:
                os.close(fd)
                opened.remove(fd)
        sel = selectors.DefaultSelector()
        for fd in readers:
            sel.register(fd, selectors.EVENT_READ)
        sel.register(conn, selectors.EVENT_READ)
        deadline = None if timeout is None else time.monotonic() + timeout
        buffer, frames, pid, code, killed = b"", [], None, None, False
        while sel.get_map():
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = sel.select(wait)
            if not events and deadline is not None and time.monotonic() >= deadline and pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)  # as subprocess.run does on a timeout
                except ProcessLookupError:
                    pass
                killed, deadline = True, None
                continue
            for key, _ in events:
                if key.fileobj is conn:
                    data = conn.recv(65536)
                    if not data:
                        sel.unregister(conn)
                        continue
                    buffer += data
                    while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack("!I", buffer[:4])[0]:
                        size = struct.unpack("!I", buffer[:4])[0]
                        frames.append(json.loads(buffer[4:4 + size]))
                        buffer = buffer[4 + size:]
                        pid = frames[-1].get("pid", pid)
                        code = frames[-1].get("returncode", code)
                else:
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[readers[key.fd]] += data
                    else:
                        sel.unregister(key.fd)
        sel.close()
    finally:
        conn.close()
        for fd in opened:
            os.close(fd)

    def decoded(name: str):
        if name not in chunks:
            return None
        data = bytes(chunks[name])
        if not text:
            return data
        return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")

    out, err = decoded("stdout"), decoded("stderr")
    if killed:
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
    if code is None:
        raise RuntimeError(f"the warm server ended without the exit status of {cmd}: "
                           f"{server.log.read_text(errors='replace')[-500:]}")
    return subprocess.CompletedProcess(cmd, code, out, err)
