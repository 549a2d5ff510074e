"""Offline reports built from conformance results files (JSON lines, docs/results-schema.md).

Nothing in this package imports torch or the test machinery: it reads results files only.

- ``detconf.reports.build.build(paths, out_dir)`` writes the compatibility matrix (CSV, Markdown,
  HTML, PNG) and ``summary.json``.
- ``detconf.reports.summary.summary_lines(path)`` gives the lines pytest prints at the end of a run.
- ``detconf.reports.readfile`` is how every command opens and reads a file.
- ``python -m detconf.reports {build,diff,drift,sensitivity,overview,certify,verify,fingerprints}`` is the
  command line (``detconf report ...``).
"""
