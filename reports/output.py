"""Where the reports go: output folders, files written whole or not at all, standard output.

Every problem is an :class:`OutputError`, a one-line message naming the path, which the
command line prints as ``reports: error: ...`` (exit status 2) like bad input.

- :func:`check_out_dir`: the ``--out`` path can be (or already is) a folder: not a file, not
  under a file.
- :func:`write_files`: files written into a folder next to their final names and moved into
  place with ``os.replace`` once all are written; the folder keeps every other file it holds.
- :func:`emit`: text to standard output; a full disk or a closed pipe is an OutputError.
- :class:`ArgumentParser`: a usage error is a one-line :class:`UsageError`, not argparse's
  usage text and exit.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from detconf.reports.records import ResultsError


class OutputError(ResultsError):
    """The reports cannot be written where asked: one line naming the path and the problem."""


class UsageError(ResultsError):
    """A command line the command does not take: one line."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors raised as :class:`UsageError` (``prog: message``)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_out_dir(path: str | os.PathLike) -> Path:
    """``path`` as an absolute output folder that exists or can be made; nothing is created."""
    name = os.fspath(path)
    out = Path(path).absolute()
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise OutputError(f"{name}: output exists and is not a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            raise OutputError(f"{name}: output folder is not writable")
        return out
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{name}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise OutputError(f"{name}: cannot create the output folder in {parent} (not writable)")
            break
    return out


def make_out_dir(path: str | os.PathLike) -> Path:
    """:func:`check_out_dir`, then the folder made (with its parents)."""
    out = check_out_dir(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{os.fspath(path)}: cannot create the output folder ({_reason(exc)})") from None
    return out


def check_targets(out: Path, names) -> None:
    """Each ``out/name`` is absent, a file or a link (a link is replaced, never what it points
    to): never a folder or anything else that ``os.replace`` would fail on halfway."""
    for name in names:
        target = out / name
        if target.is_symlink() or not target.exists():
            continue
        if not target.is_file():
            raise OutputError(f"{target}: exists and is not a file (the report would replace it)")


def write_files(out_dir: str | os.PathLike, files: dict[str, str]) -> Path:
    """Write ``name -> text`` (UTF-8) into ``out_dir`` (made if needed): all files or none. The
    characters no output shows (:mod:`reports.safe`) are ``?`` in every report, whoever made its
    text: Markdown, HTML, text and CSV (which keeps its carriage returns: quoted, they are its
    fields' line breaks); other files (data) are written as given."""
    from detconf.reports.safe import csv_file_text, plain_text

    readable = {".md": plain_text, ".html": plain_text, ".txt": plain_text, ".csv": csv_file_text}
    files = {name: readable.get(Path(name).suffix, str)(text) for name, text in files.items()}
    out = make_out_dir(out_dir)
    check_targets(out, files)
    temps: dict[str, str] = {}
    try:
        for name, text in files.items():
            fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out)
            temps[name] = temp
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        for name, temp in temps.items():
            os.replace(temp, out / name)
    except OSError as exc:
        raise OutputError(f"{os.fspath(out_dir)}: cannot write {', '.join(files)} ({_reason(exc)})") from None
    finally:
        for temp in temps.values():
            if os.path.exists(temp):
                os.unlink(temp)
    return out


def write_picture(out: Path, name: str, draw, spec: dict) -> None:
    """Draw ``spec`` with ``draw(spec, path)`` into ``out/name``: whole or not at all."""
    check_targets(out, (name,))
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out)
    os.close(fd)
    try:
        draw(spec, temp)
        os.replace(temp, out / name)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write {name} ({_reason(exc)})") from None
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def emit(text: str) -> None:
    """Print ``text`` (a newline added) and flush it. A character the output's encoding lacks
    (``PYTHONIOENCODING=ascii``) is shown as ``?``; a closed standard output is an OutputError."""
    if sys.stdout is None:
        raise OutputError("cannot write to standard output (it is closed)")
    try:
        try:
            sys.stdout.write(text + "\n")
        except UnicodeEncodeError:
            encoding = getattr(sys.stdout, "encoding", None) or "ascii"
            sys.stdout.write((text + "\n").encode(encoding, "replace").decode(encoding, "replace"))
        sys.stdout.flush()
    except OSError as exc:
        # Nothing more can reach standard output; what is left in its buffer goes nowhere at exit.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
            pass
        raise OutputError(f"cannot write to standard output ({_reason(exc)})") from None
