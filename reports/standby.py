"""A report builder that waits for the end of a conformance run.

The plugin starts it when a run that will write the matrix begins. Beside the tests, at a low
CPU priority, it loads what the end-of-run report needs (pandas, pyarrow, matplotlib and its
fonts: about a second, which the run would otherwise spend after its last test), then waits
for one request on its standard input, a JSON line::

    {"summary": "PATH", "build": {"paths": ["RESULTS", ...], "out": "DIR"}}

Both keys are optional. It answers with one JSON line on its standard output and exits::

    {"lines": [...]} or {"summary_error": "..."}       the terminal-summary lines of PATH
    {"built": true} or {"build_error": "Type: ..."}    reports.build.build(paths, out)

An end of input before any request (the run stopped, or had nothing to build) is a quiet exit.
It reads results files and writes the report folder only, as ``reports build`` does.
"""
from __future__ import annotations

import json
import os
import sys
from typing import IO, Any


def warm() -> None:
    """Import what the summary and the build use, and draw one label (the first text drawn
    loads matplotlib's font cache)."""
    import reports.build  # noqa: F401 - pandas, pyarrow, numpy and the writers
    import reports.summary  # noqa: F401
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(1, 1))
    figure.text(0.5, 0.5, "detconf")
    FigureCanvasAgg(figure).draw()


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request (see the module's text); an error in one part is its field."""
    from reports.build import build
    from reports.load import ResultsError
    from reports.summary import summary_lines

    reply: dict[str, Any] = {}
    if request.get("summary"):
        try:
            reply["lines"] = summary_lines(request["summary"])
        except ResultsError as exc:
            reply["summary_error"] = str(exc)
    spec = request.get("build")
    if spec:
        try:
            build(list(spec["paths"]), spec["out"])
        except Exception as exc:  # noqa: BLE001 - the caller says why the matrix was not built
            reply["build_error"] = f"{type(exc).__name__}: {exc}"
        else:
            reply["built"] = True
    return reply


def serve(stdin: IO[str], stdout: IO[str]) -> int:
    try:
        os.nice(10)  # the tests come first while they run
    except (AttributeError, OSError):
        pass
    warm()
    line = stdin.readline()
    if not line.strip():
        return 0
    request = json.loads(line)
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    stdout.write(json.dumps(handle(request)) + "\n")
    stdout.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    return serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
