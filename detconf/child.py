"""The one way detconf runs something in a fresh Python process.

A *target* is ``"package.module:function"``: a module-level function that takes
one JSON-safe payload and returns a JSON-safe result. The child is
``python -m detconf.child TARGET PAYLOAD`` with the payload as a JSON argument;
it imports the target, calls it, and prints one line starting with
:data:`RESULT_MARKER` followed by ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": ..., "reason": ..., "os_error": ..., "traceback": ...}``.
Whatever else the target prints comes first (:attr:`Child.printed`).

Every fresh process of the project starts here: isolated cases (backends whose
determinism flag sticks per thread, ``--isolate``, old cuBLAS entries that need
``CUBLAS_WORKSPACE_CONFIG`` unset), the checks that need a process of their own
(seeds across processes, the default of ``fill_uninitialized_memory``,
``CUBLAS_WORKSPACE_CONFIG``), the end-of-run report builder the plugin starts
beside the tests (``detconf.reports.standby:main``, which answers on its standard output
and reads its request from its standard input) and the report build's helpers
(``detconf.reports.picture:main``, ``detconf.reports.spans:main``).

Torch-free and standard library only: the reports use it too.

Run a target by hand:
``python -m detconf.child conformance.children:default_fill '{"numel": 4}'``.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

__all__ = ["Child", "ChildFailed", "RESULT_MARKER", "ROOT", "child_env", "finish_child", "reported", "resolve_target",
           "run_in_child", "start_child"]

#: The folder that holds detconf's packages (a checkout, or site-packages when installed).
ROOT = Path(__file__).resolve().parents[1]
#: The child prints exactly one line starting with this marker, then a JSON object.
RESULT_MARKER = "@@detconf-child@@ "
#: How a parent starts the child: ``python -m detconf.child`` with this folder first on the
#: child's path, ahead of its working folder (which ``-m`` would put first: a folder of the
#: same name there must not stand in for the project's packages).
_BOOT = "import sys; sys.path[:0] = {path!r}\nfrom detconf.child import main\nsys.exit(main())\n"
#: ``cwd=INHERIT``: the child starts in this process's working folder (its arguments may be
#: relative paths), not in :data:`ROOT`.
INHERIT = None


class ChildFailed(RuntimeError):
    """A child process failed to report: it crashed, timed out, or its target raised.

    ``reason`` is one line: the target's exception as Python's traceback ends with it (for an
    ``OSError``, its ``strerror``), or the last line the child wrote to standard error;
    ``os_error`` says whether the target raised an ``OSError``."""

    def __init__(self, message: str, *, reason: str = "", os_error: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.os_error = os_error


def pid_alive(pid: int) -> bool:
    """Is process ``pid`` (on this host) still there? One that exists but is not ours counts."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def resolve_target(target: str) -> Callable[[Any], Any]:
    module_name, sep, function_name = target.partition(":")
    if not sep or not module_name or not function_name.isidentifier():
        raise ValueError(f"child target must be 'package.module:function', got {target!r}")
    function = getattr(importlib.import_module(module_name), function_name, None)
    if not callable(function):
        raise ValueError(f"child target {target!r}: {module_name} has no function {function_name!r}")
    return function


def child_env(set_vars: Mapping[str, str] | None = None, unset: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment, with ``set_vars`` set and ``unset`` removed, and the
    project on ``PYTHONPATH`` so the child imports the same code from any folder."""
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(set_vars or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def start_child(target: str, payload: Any = None, *, env: Mapping[str, str] | None = None,
                cwd: str | os.PathLike | None = ROOT, stdin: bool = False,
                path: tuple[str | os.PathLike, ...] = ()) -> subprocess.Popen:
    """Start ``target(payload)`` in a fresh process; :func:`finish_child` collects its result
    (so several can run at once). ``cwd``: the child's working folder (:data:`INHERIT`: this
    process's); ``stdin``: give it a pipe to write to (otherwise it reads nothing); ``path``:
    folders the child looks in first for the target's module, ahead of :data:`ROOT`."""
    first = [os.fspath(folder) for folder in path] + [str(ROOT)]
    return subprocess.Popen([sys.executable, "-c", _BOOT.format(path=first), target, json.dumps(payload)],
                            cwd=cwd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                            env=dict(env) if env is not None else child_env())


def _split(out: str) -> tuple[str, dict | None]:
    """What the child printed, and its result line's report (None: it printed none)."""
    printed, report = [], None
    for line in out.splitlines(keepends=True):
        if line.startswith(RESULT_MARKER):
            report = json.loads(line[len(RESULT_MARKER):])
        else:
            printed.append(line)
    return "".join(printed), report


def reported(out: str) -> dict | None:
    """The report of a child's result line in its output ``out`` (None: it printed none)."""
    return _split(out)[1]


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return " ".join(lines[-1].split()) if lines else ""


def _judge(proc: subprocess.Popen, out: str, err: str, what: str) -> tuple[Any, str]:
    """The target's result and what it printed, or :class:`ChildFailed`."""
    printed, report = _split(out)
    if report is None:
        tail = (err or out).strip().splitlines()
        raise ChildFailed(f"{what}: child process exited with {proc.returncode} and printed no result"
                          + (f": {tail[-1]}" if tail else ""),
                          reason=_last_line(err) or f"exit status {proc.returncode}")
    if not report.get("ok"):
        raise ChildFailed(f"{what}: child process failed: {report.get('error')}\n{report.get('traceback', '')}",
                          reason=str(report.get("reason") or report.get("error")), os_error=bool(report.get("os_error")))
    return report["result"], printed


def finish_child(proc: subprocess.Popen, *, timeout: float | None, what: str) -> Any:
    """Wait for ``proc`` and return its target's result; raise :class:`ChildFailed` with
    the child's own error when it failed, timed out or printed no result."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise ChildFailed(f"{what}: child process timed out after {timeout:g}s; stderr: {err[-400:]!r}",
                          reason=f"timed out after {timeout:g}s") from None
    return _judge(proc, out, err, what)[0]


def run_in_child(target: str, payload: Any, *, env: Mapping[str, str] | None = None, timeout: float = 600,
                 what: str = "") -> Any:
    """Run ``target(payload)`` in a fresh process and return its result."""
    return finish_child(start_child(target, payload, env=env), timeout=timeout, what=what or target)


class Child:
    """A started child kept as an object: for a process that runs beside the caller's own work
    and is asked, waited for or stopped later (the report builder and its helpers)."""

    def __init__(self, target: str, payload: Any = None, *, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike | None = INHERIT, stdin: bool = False,
                 path: tuple[str | os.PathLike, ...] = ()) -> None:
        self.target = target
        self.proc = start_child(target, payload, env=env, cwd=cwd, stdin=stdin, path=path)
        #: What the target printed on its standard output, known once :meth:`result` returned.
        self.printed = ""

    def communicate(self, text: str | None = None, timeout: float | None = None) -> tuple[str, str]:
        """Write ``text`` to the child's standard input (a pipe: ``stdin=True``), wait for it
        to end and return its standard output and error as they are."""
        return self.proc.communicate(text, timeout=timeout)

    def result(self, *, timeout: float | None = None, what: str = "") -> Any:
        """Wait for the target's result (:func:`finish_child`); what else it printed is
        :attr:`printed`."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise ChildFailed(f"{what or self.target}: child process timed out after {timeout:g}s",
                              reason=f"timed out after {timeout:g}s") from None
        result, self.printed = _judge(self.proc, out, err, what or self.target)
        return result

    def stop(self) -> None:
        """End it at once, whatever it is doing (a no-op when it has ended)."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.communicate(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass


def _report(obj: dict[str, Any]) -> None:
    sys.stdout.write(RESULT_MARKER + json.dumps(obj, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m detconf.child package.module:function PAYLOAD_JSON", file=sys.stderr)
        return 2
    try:
        payload = json.loads(argv[1])
        result = resolve_target(argv[0])(payload)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as evidence
        os_error = isinstance(exc, OSError)
        reason = (exc.strerror or str(exc)) if os_error else traceback.format_exception_only(type(exc), exc)[-1]
        _report({"ok": False, "error": f"{type(exc).__name__}: {exc}", "reason": " ".join(str(reason).split()),
                 "os_error": os_error, "traceback": traceback.format_exc()})
        return 1
    _report({"ok": True, "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
