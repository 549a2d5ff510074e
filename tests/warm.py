"""Inner ``python -m pytest`` runs for the harness's tests: forked from a warm interpreter.

About 200 of the harness's tests run the suite in a new process (``python -m pytest conformance
...``) and judge what that process did: its exit status, its output, its results file, what it left
behind when killed. A fresh interpreter spends about 3.3 s of a two-case run's 3.6 s (2-core
machine) importing torch, Inductor's configuration, Hypothesis and NumPy before the suite's own
code runs. :func:`run` gives such a command the same process, minus that wait: a server started
once per test process (``tests/warm_server.py``) has imported them, and forks a child that takes
the command's folder, environment, standard streams and file-size limit and runs ``python -m
pytest ARGS`` there. The suite, its plugin and every probe plugin a test adds are imported in the
child, as in a fresh process; the child exits, is killed and writes files as its own process.

A command runs cold (``subprocess.run``, exactly as given) when:
- ``DETCONF_TESTS_COLD=1`` is set (the whole harness then runs as it did before: a way to check
  that nothing here changes an answer);
- it is not ``sys.executable -m pytest ...``, or the caller passes ``cold=True``: tests that judge
  what happens while torch or Dynamo is imported, or the interpreter's start;
- its environment differs from the server's in a variable read while those modules are imported
  or the interpreter starts (:data:`IMPORT_TIME`), e.g. ``OMP_NUM_THREADS`` or ``PYTHONHASHSEED``;
- its ``PYTHONPATH`` names a folder that could have changed those imports: one holding installed
  distributions (``*.dist-info``, ``*.egg-info``: torch loads its backends' entry points on
  import), ``.pth`` files, or a module or package of a name those imports looked for (found or
  not), as the server recorded them;
- the server could not start (said once on standard error).
"""
from __future__ import annotations

import atexit
import json
import locale
import os
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

ROOT = Path(__file__).resolve().parent.parent
SERVER = Path(__file__).with_name("warm_server.py")

#: Prefixes of variables that torch, NumPy, Hypothesis, OpenMP, the allocator or the interpreter read
#: at import or start: a command whose value differs from the server's runs cold.
#: ``PYTHONPATH`` is the exception: the child puts its entries on ``sys.path`` as the interpreter would.
IMPORT_TIME = ("PYTHON", "TORCH", "_TORCH", "PYTORCH", "CUDA", "CUBLAS", "CUDNN", "NCCL", "NVIDIA", "OMP_", "KMP_",
               "MKL", "GOMP", "OPENBLAS", "TRITON", "HYPOTHESIS", "_HYPOTHESIS", "NUMPY", "NPY_", "LD_", "MALLOC",
               "KINETO", "TMP", "TEMP", "HOME", "XDG_", "LANG", "LC_", "COVERAGE")

_lock = threading.Lock()
_servers: dict[tuple, "_Server"] = {}
_refused: dict[tuple, str] = {}
stats = {"warm": 0, "cold": 0}


def _fingerprint(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME) and k != "PYTHONPATH"))


def base_env() -> dict:
    """The environment an inner run gets by default: this process's, without pytest's and
    xdist's variables (and the profile variable a worker may carry)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "DETCONF_HYPOTHESIS_PROFILE"}


class _Server:
    def __init__(self, env: dict):
        self.folder = Path(tempfile.mkdtemp(prefix="detconf-warm-"))
        self.socket = self.folder / "s"
        self.log = self.folder / "log"
        self._sought: set[str] | None = None
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, str(SERVER), str(self.socket)], cwd=ROOT, env=env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)

    def ready(self, wait: float = 180.0) -> str | None:
        """None once the server listens, else why it will not."""
        deadline = time.monotonic() + wait
        while not self.socket.exists():
            if self.proc.poll() is not None:
                return f"the warm server exited {self.proc.returncode}: {self.log.read_text(errors='replace')[-500:]}"
            if time.monotonic() > deadline:
                return f"the warm server did not listen within {wait:.0f} s"
            time.sleep(0.02)
        return None

    def sought(self) -> set[str]:
        """The top-level names the server's imports looked for."""
        if self._sought is None:
            self._sought = set(json.loads(Path(str(self.socket) + ".names").read_text(encoding="utf-8")))
        return self._sought

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


@atexit.register
def stop_all() -> None:
    for server in list(_servers.values()):
        server.stop()
    _servers.clear()


def _server_for(env: dict) -> "_Server | None":
    key = _fingerprint(env)
    with _lock:
        server = _servers.get(key)
        if server is None and key == _fingerprint(base_env()) and key not in _refused:
            server = _servers[key] = _Server(env)
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


def _path_is_neutral(server: _Server, env: dict) -> bool:
    """Whether no folder of ``env``'s ``PYTHONPATH`` could have changed the server's imports."""
    own = set(base_env().get("PYTHONPATH", "").split(os.pathsep))
    for folder in env.get("PYTHONPATH", "").split(os.pathsep):
        if not folder or folder in own:
            continue
        try:
            names = os.listdir(folder)
        except OSError:
            continue  # nothing to import there
        for name in names:
            if name.endswith((".dist-info", ".egg-info", ".egg-link", ".pth", ".egg")):
                return False
            if name.split(".")[0] in server.sought():
                return False
    return True


def run(cmd: list, *, cwd=ROOT, env: dict | None = None, timeout: float | None = None, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text: bool = True, fsize: int | None = None, cold: bool = False,
        capture_output: bool = False) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=stdout, stderr=stderr,
    text=text)`` (with ``RLIMIT_FSIZE`` set to ``fsize`` when given), for ``cmd = [sys.executable,
    "-m", "pytest", *args]``: forked from the warm server where the module's rules allow."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    env = dict(os.environ if env is None else env)
    server, why = None, "asked" if cold else "DETCONF_TESTS_COLD=1"
    if (not cold and os.environ.get("DETCONF_TESTS_COLD") != "1" and list(cmd[:3]) == [sys.executable, "-m", "pytest"]
            and all(isinstance(c, str) for c in cmd)):
        server, why = _server_for(env), "environment"
        if server is not None and not _path_is_neutral(server, env):
            server, why = None, "PYTHONPATH"
    elif not cold and os.environ.get("DETCONF_TESTS_COLD") != "1":
        why = "not python -m pytest"
    started = time.monotonic()
    try:
        if server is None:
            return _cold(cmd, cwd, env, timeout, stdout, stderr, text, fsize)
        return _forked(server, cmd, cwd, env, timeout, stdout, stderr, text, fsize)
    finally:
        stats["cold" if server is None else "warm"] += 1
        log = os.environ.get("DETCONF_TESTS_WARM_LOG")
        if log:  # one line per command: how it ran and why, for benchmarks/bench_tests.py
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
                                    "warm": server is not None, "why": None if server else why,
                                    "seconds": round(time.monotonic() - started, 3)}) + "\n")


def _cold(cmd, cwd, env, timeout, stdout, stderr, text, fsize) -> subprocess.CompletedProcess:
    limit = None
    if fsize:
        import resource

        limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))  # noqa: E731
    return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, stdout=stdout, stderr=stderr, text=text,
                          preexec_fn=limit)


def _forked(server: _Server, cmd, cwd, env, timeout, stdout, stderr, text, fsize) -> subprocess.CompletedProcess:
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
    request = json.dumps({"args": cmd[3:], "cwd": os.fspath(cwd), "env": env, "fsize": fsize}).encode()
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
