"""A warm interpreter for the harness's inner ``python -m pytest`` runs (run by ``tests/warm.py``).

Started once per test process with the environment the inner runs get, it imports what every
inner run imports first and takes longest to import (torch, Inductor's configuration, Hypothesis,
NumPy, pytest: about 3.3 s of the 3.6 s a two-case run takes on a 2-core machine), then waits on a
Unix socket. For each request it forks: the child is a new process that takes the caller's standard
streams, folder, environment and file-size limit and runs ``python -m pytest ARGS`` as a fresh
interpreter would, with none of this repository's modules imported (the suite, its plugin and the
probes a test adds load in the child, as they would in a fresh process). The parent reports the
child's pid, then its exit status; it leaves when the test process that started it is gone.

Nothing here imports the repository: this file runs by path, and the child's ``sys.path`` is the
one ``python -m`` would give (the folder first, then ``PYTHONPATH``, then the interpreter's own).
"""
from __future__ import annotations

import gc
import json
import os
import signal
import socket
import struct
import sys
import warnings


def _frame(sock: socket.socket, payload: dict) -> None:
    data = json.dumps(payload).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class _Sought:
    """A finder that finds nothing and notes every top-level name an import looked for, found or
    not (torch tries optional modules): a folder on a command's ``PYTHONPATH`` holding one of those
    names could have changed what these imports did, so such a command runs cold."""

    names: set[str] = set()

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        cls.names.add(fullname.split(".")[0])
        return None


def _preload() -> tuple[list, list[str]]:
    """Import what every inner run imports, as the plugin does (the collector paused, what the
    imports made frozen), keeping the warning filters as a fresh interpreter has them."""
    filters = list(warnings.filters)
    _Sought.names.update(sys.modules)
    sys.meta_path.insert(0, _Sought)
    gc.collect(1)
    gc.disable()
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        import importlib.util

        # use_deterministic_algorithms imports Inductor's configuration, which imports Triton
        # where it is installed (CUDA builds): not here then, for Triton's nanobind modules report
        # every object still alive at exit as leaked (hundreds of lines on stderr), and frozen
        # objects stay alive; a fresh run that stops before torch is imported (a usage error)
        # prints none of that.
        if importlib.util.find_spec("triton") is None:
            import torch._inductor.config  # noqa: F401
        import hypothesis  # noqa: F401
        import pytest  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()
        sys.meta_path.remove(_Sought)
    _Sought.names.update(name.split(".")[0] for name in sys.modules)
    own = os.environ.get("PYTHONPATH", "")
    base = [p for p in sys.path[1:] if p not in own.split(os.pathsep)]
    return filters, base


def _child(request: dict, fds: list[int], filters: list, base: list[str]) -> None:
    """Become ``python -m pytest ARGS`` in the caller's folder, environment and streams."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.getcwd(), *(os.path.abspath(p) for p in extra), *base]
    if request.get("fsize"):
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (request["fsize"], request["fsize"]))
    import tempfile

    tempfile.tempdir = None  # TMPDIR is read again, from this environment
    import hypothesis.configuration as hc

    default = "__hypothesis_home_directory_default"  # read once, at import, from the folder then
    if not hasattr(hc, default):
        raise SystemExit(f"tests/warm_server.py: this Hypothesis has no {default}: run with DETCONF_TESTS_COLD=1")
    setattr(hc, default, type(getattr(hc, default))(os.path.join(os.getcwd(), ".hypothesis")))
    # pytest marks the modules of plugin distributions (Hypothesis is one) for assertion rewriting
    # and warns about those already imported; in a fresh interpreter they are not imported yet.
    # The marker pytest reads keeps this child's warnings summary the fresh interpreter's.
    for name in ("hypothesis", "_hypothesis_globals"):
        module = sys.modules.get(name)
        if module is not None:
            module.__doc__ = (module.__doc__ or "") + "\n(PYTEST_DONT_REWRITE: imported by tests/warm_server.py)"
    import numpy

    numpy.random.seed()  # a fresh interpreter's global NumPy stream is its own, not the parent's
    warnings.filters[:] = filters
    warnings._filters_mutated()
    for module in list(sys.modules.values()):
        registry = getattr(module, "__warningregistry__", None)
        if isinstance(registry, dict):
            registry.clear()
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import pytest

    sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *request["args"]]
    sys.orig_argv = [sys.executable, "-m", "pytest", *request["args"]]
    import runpy

    runpy.run_module("pytest", run_name="__main__", alter_sys=True)  # SystemExit ends the process


def main(path: str) -> None:
    filters, base = _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with open(path + ".names", "w", encoding="utf-8") as f:
        json.dump(sorted(_Sought.names), f)
    listener.bind(path + ".tmp")
    os.rename(path + ".tmp", path)  # the caller connects only once everything is imported
    listener.listen(1)
    listener.settimeout(5.0)
    parent = os.getppid()
    while True:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            if os.getppid() != parent:  # the test process is gone (killed): so is its server
                break
            continue
        conn.settimeout(None)
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)  # the streams come with the first bytes
            while len(data) < 4:
                data += _exact(conn, 4 - len(data))
            size = struct.unpack("!I", data[:4])[0]
            message = data[4:] + _exact(conn, 4 + size - len(data))
        except (EOFError, OSError):
            conn.close()
            continue
        request = json.loads(message)
        if request.get("stop"):
            conn.close()
            break
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            conn.close()
            listener.close()
            _child(request, fds, filters, base)
            os._exit(0)  # not reached: pytest's SystemExit unwinds to the interpreter's exit
        for fd in fds:
            os.close(fd)
        _frame(conn, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        try:
            _frame(conn, {"returncode": code})
        except OSError:
            pass
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
