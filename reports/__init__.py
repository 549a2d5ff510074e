"""Offline reports built from conformance results files (JSON lines, docs/results-schema.md).

Nothing in this package imports torch or the test machinery: it reads results files only.

- ``reports.build.build(paths, out_dir)`` writes the compatibility matrix (CSV, Markdown,
  HTML, PNG) and ``summary.json``.
- ``reports.summary.summary_lines(path)`` gives the lines pytest prints at the end of a run.
- ``python -m detconf.reports {build,diff,drift}`` is the command line.
"""
