"""The one way detconf runs something in a fresh Python process.

A *target* is ``"package.module:function"``: a module-level function that takes
one JSON-safe payload and returns a JSON-safe result. The child is
``python -m engine.child TARGET PAYLOAD`` with the payload as a JSON argument;
it imports the target, calls it, and prints one line starting with
:data:`RESULT_MARKER` followed by ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": ..., "traceback": ...}``.

Used for isolated cases (backends whose determinism flag sticks per thread,
``--isolate``, old cuBLAS entries that need ``CUBLAS_WORKSPACE_CONFIG`` unset)
and for checks that need a process of their own (seeds across processes, the
default of ``fill_uninitialized_memory``, ``CUBLAS_WORKSPACE_CONFIG``).

Run a target by hand:
``python -m engine.child conformance.checks.uninitialized_memory:default_fill_child '{"numel": 4}'``.
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

__all__ = ["ChildFailed", "RESULT_MARKER", "child_env", "finish_child", "resolve_target", "run_in_child",
           "start_child"]

ROOT = Path(__file__).resolve().parents[1]
# The child prints exactly one line starting with this marker, then a JSON object.
RESULT_MARKER = "@@detconf-child@@ "


class ChildFailed(RuntimeError):
    """A child process failed to report: it crashed, timed out, or its target raised."""


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


def start_child(target: str, payload: Any, *, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start the child; :func:`finish_child` collects its result (so several can run at once)."""
    return subprocess.Popen([sys.executable, "-m", "engine.child", target, json.dumps(payload)], cwd=ROOT,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env) if env is not None else child_env())


def finish_child(proc: subprocess.Popen, *, timeout: float, what: str) -> Any:
    """Wait for ``proc`` and return its target's result; raise :class:`ChildFailed` with
    the child's own error when it failed, timed out or printed no result."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise ChildFailed(f"{what}: child process timed out after {timeout:g}s; stderr: {err[-400:]!r}") from None
    report = None
    for line in out.splitlines():
        if line.startswith(RESULT_MARKER):
            report = json.loads(line[len(RESULT_MARKER):])
    if report is None:
        tail = (err or out).strip().splitlines()
        raise ChildFailed(f"{what}: child process exited with {proc.returncode} and printed no result"
                          + (f": {tail[-1]}" if tail else ""))
    if not report.get("ok"):
        raise ChildFailed(f"{what}: child process failed: {report.get('error')}\n{report.get('traceback', '')}")
    return report["result"]


def run_in_child(target: str, payload: Any, *, env: Mapping[str, str] | None = None, timeout: float = 600,
                 what: str = "") -> Any:
    """Run ``target(payload)`` in a fresh process and return its result."""
    return finish_child(start_child(target, payload, env=env), timeout=timeout, what=what or target)


def _report(obj: dict[str, Any]) -> None:
    sys.stdout.write(RESULT_MARKER + json.dumps(obj, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m engine.child package.module:function PAYLOAD_JSON", file=sys.stderr)
        return 2
    try:
        payload = json.loads(argv[1])
        result = resolve_target(argv[0])(payload)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as evidence
        _report({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        return 1
    _report({"ok": True, "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
