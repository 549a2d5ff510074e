"""Command line: ``python -m detconf.conformance <command> ...``.

Commands:

- ``entries [--doc-version X] [--source NAME ...]``: print the catalog as JSON
  lines (one ``Entry.to_json()`` per line, sorted keys). Without ``--doc-version``
  the docstring of the installed torch is parsed.
- ``spec-history``: the entries of every docstring snapshot the project keeps,
  oldest release first, as JSON lines (the input of ``python -m detconf.reports drift``).

Usage errors, catalog errors and a standard output that cannot take the output (closed, a
full disk) print one line on stderr and exit with status 2.
To add a command, write ``_add_<name>(subparsers)`` registering a parser whose
``run`` default is ``fn(args) -> int``, and call it in :func:`build_parser`.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Sequence

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad argument or an unknown input; the message is one line."""


class OutputError(Exception):
    """Standard output cannot take the output (closed, full disk); the message is one line."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, for scripts that read stderr."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _entries(args: argparse.Namespace) -> int:
    from detconf.conformance.catalog import UnknownSource, load_catalog
    from detconf.engine.entry import entries_to_jsonl

    try:
        entries = load_catalog(args.source or ["torch-docs"], doc_version=args.doc_version)
    except UnknownSource as exc:
        raise UsageError(str(exc)) from None
    _write(entries_to_jsonl(entries))
    return 0


def _write(text: str) -> None:
    """``text`` to standard output; a closed or full one is a one-line error (an OutputError)."""
    if sys.stdout is None:
        raise OutputError("cannot write to standard output (it is closed)")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        try:  # what is left in the buffer goes nowhere at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        raise OutputError(f"cannot write to standard output ({exc.strerror or exc})") from None


def _add_entries(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("entries", help="print the catalog of documented entries as JSON lines")
    p.add_argument("--doc-version", metavar="X",
                   help="parse the docstring snapshot of release X (default: the installed torch)")
    p.add_argument("--source", action="append", default=None, metavar="NAME",
                   help="where the entries come from (repeatable): torch-docs (default), ascend, flag-api, "
                        "repro-notes, sdpa, flex-attention, batch-invariance, sweep")
    p.set_defaults(run=_entries)


def _spec_history(args: argparse.Namespace) -> int:
    from detconf.conformance.catalog import doc_versions, snapshot_entries
    from detconf.engine.entry import entries_to_jsonl

    for version in doc_versions():
        _write(entries_to_jsonl(snapshot_entries(version)))
    return 0


def _add_spec_history(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("spec-history", help="print the entries of every docstring snapshot as JSON lines")
    p.set_defaults(run=_spec_history)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m detconf.conformance", description="detconf conformance suite tools")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_entries(subparsers)
    _add_spec_history(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from detconf.engine.docspec import UnknownDocVersion
    from detconf.engine.entry import CatalogError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"{parser.prog}: a command is required (one of: entries, spec-history)")
        return args.run(args)
    except (UsageError, CatalogError, UnknownDocVersion, OutputError) as exc:
        if sys.stderr is not None:
            print(" ".join(str(exc).split()), file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
