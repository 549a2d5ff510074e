"""A report builder that waits for the end of a conformance run.

The plugin starts it when a run that will write the matrix begins. Beside the tests, at a low
CPU priority, it loads what the end-of-run report needs (pandas, pyarrow, matplotlib and its
fonts) and builds a small report of its own once in a temporary folder (first-use costs: the HTML
template, fonts, pyarrow's reader), about a second which the run would otherwise spend after its
last test, then waits for one request on its standard input, a JSON line::

    {"summary": "PATH", "build": {"paths": ["RESULTS", ...], "out": "DIR", "own": true}}

Both keys are optional; ``own``: ``DIR`` is the run's own report folder (``reports.build.build``'s
``own_folder``). It answers with one JSON line on its standard output and exits::

    {"lines": [...]} or {"summary_error": "..."}       the terminal-summary lines of PATH
    {"built": true} or {"build_error": "Type: ..."}    reports.build.build(paths, out, own_folder=own)

An end of input before any request (the run stopped, or had nothing to build) is a quiet exit.
Once the reply is written it leaves at once (``os._exit``), without unloading its libraries.
It reads results files and writes the report folder only, as ``reports build`` does.

The plugin makes the warm-up's folder and gives it as the payload (``{"warm": FOLDER}``): a run
that ends before the warm-up does kills the standby, which then cannot remove a folder of its
own; the plugin removes it once the standby has ended. Without a payload it makes one itself.
"""
from __future__ import annotations

import json
import os
import sys
from typing import IO, Any


#: The warm-up's results: one run of three cells (a conforming, a failing and a skipped one).
_WARM_RUN = "standby-warm-up"


def _warm_lines() -> list[str]:
    """A small results file of the current schema, for the warm-up build."""
    from detconf.vocabulary import SCHEMA_VERSION

    common = {"record": "result", "schema": SCHEMA_VERSION, "run_id": _WARM_RUN, "source": "torch-docs",
              "list_name": "deterministic", "op": "torch.Tensor.put_", "sentence": "warm-up", "promise": "deterministic",
              "device": "cpu", "device_name": "cpu", "phase": "program", "compile": "eager", "torch_version": "0.0.0",
              "expected": "deterministic", "examples": 6, "runs": 2, "reach": 1.0, "duration_s": 0.01,
              "detail": {"fingerprints": {"0": "0" * 64}}}
    rows = [dict(common, entry_id=f"warm-up-{i}", position=i, mode=mode, observed=observed, verdict=verdict)
            for i, (mode, observed, verdict) in enumerate((("error", "deterministic", "conforms"),
                                                            ("warn_only", "nondeterministic", "nondeterministic"),
                                                            ("error", "skipped", "skipped")))]
    run = {"record": "run", "schema": SCHEMA_VERSION, "run_id": _WARM_RUN, "started": "2026-01-01T00:00:00Z",
           "planned": len(rows), "env": {"torch_version": "0.0.0"}}
    end = {"record": "end", "schema": SCHEMA_VERSION, "run_id": _WARM_RUN, "ended": "2026-01-01T00:00:01Z",
           "exitstatus": 1, "planned": len(rows), "written": len(rows), "missing": 0, "outcome": "complete"}
    return [json.dumps(record) + "\n" for record in (run, *rows, end)]


def warm(folder: str | None = None) -> None:
    """Import what the summary and the build use, and run both once on a small results file in
    ``folder`` (its caller's, left there), or in a temporary folder of its own, removed: the
    first build also compiles the HTML template, loads matplotlib's fonts and takes pandas' and
    pyarrow's first-use paths."""
    if folder is None:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="detconf-standby-") as tmp:
            warm(tmp)
        return
    results = os.path.join(folder, "warm.jsonl")
    with open(results, "w", encoding="utf-8") as f:
        f.writelines(_warm_lines())
    reply = handle({"summary": results, "build": {"paths": [results], "out": os.path.join(folder, "report")}})
    if "built" not in reply or "lines" not in reply:  # the warm-up is ours: say what broke it
        raise RuntimeError(f"standby warm-up failed: {reply}")


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request (see the module's text); an error in one part is its field."""
    from detconf.reports.records import ResultsError
    from detconf.reports.summary import summary_lines

    reply: dict[str, Any] = {}
    if request.get("summary"):
        try:
            reply["lines"] = summary_lines(request["summary"])
        except ResultsError as exc:
            reply["summary_error"] = str(exc)
    spec = request.get("build")
    if spec:
        from detconf.reports.build import build  # pandas and the rest: only when a matrix is asked for

        try:
            build(list(spec["paths"]), spec["out"], own_folder=bool(spec.get("own")))
        except Exception as exc:  # noqa: BLE001 - the caller says why the matrix was not built
            reply["build_error"] = f"{type(exc).__name__}: {exc}"
        else:
            reply["built"] = True
    return reply


def serve(stdin: IO[str], stdout: IO[str], folder: str | None = None) -> int:
    """Warm up (in ``folder``: :func:`warm`), then answer one request from ``stdin``."""
    try:
        os.nice(10)  # the tests come first while they run
    except (AttributeError, OSError):
        pass
    warm(folder)
    line = stdin.readline()
    if not line.strip():
        return 0
    request = json.loads(line)
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    stdout.write(json.dumps(handle(request)) + "\n")
    stdout.flush()
    return 0


def main(payload: dict | None = None) -> int:
    """The standby as :mod:`detconf.child` runs it: ``payload`` ``{"warm": FOLDER}`` or None."""
    folder = payload.get("warm") if isinstance(payload, dict) else None
    code = serve(sys.stdin, sys.stdout, folder)
    # The reply is out and every file it names is written and closed: leave without tearing
    # down the interpreter (pandas, pyarrow and matplotlib take a quarter of a second to unload,
    # which the run would wait for).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
