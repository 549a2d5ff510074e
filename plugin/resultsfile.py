"""Can this run use the results file ``--results`` names? Checked before anything runs, without
creating or changing anything (the run takes the file's lock when the plugin configures:
:mod:`plugin.results`)."""
from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from pathlib import Path

import pytest

from detconf.vocabulary import MAX_LINE_BYTES, SCHEMA_VERSION


def in_use(shown: str) -> str:
    return (f"results file {shown} is in use by another run (it holds the file's lock); "
            "wait for it to finish or give another --results")


def _locked(path: Path) -> bool:
    """Does another run hold the results file's lock? (A probe: the lock is taken for the run
    when the plugin configures.)"""
    with open(path, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


#: (device, inode, size, mtime) of existing results files found readable line by line in this
#: process: the check when the run takes the file's lock does not read it all again.
_READABLE: set[tuple[int, int, int, int]] = set()


def _line_problem(line: bytes) -> str | None:
    """What makes one line of a results file unreadable to the reports, or None."""
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    if "\x00" in text:
        return "holds a NUL byte"
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return "corrupt JSON line"
    if not isinstance(record, dict) or record.get("record") not in ("run", "result", "end"):
        return "not a results record"
    return None


def existing_results_problem(path: Path, shown: str, *, fresh: bool) -> str | None:
    """Why a run must not append to (or, with --fresh-results, empty) the existing file ``path``.
    A run appends only to a file every line of which the reports can read: a corrupt line
    anywhere (not only a torn last one) would make the whole file, this run's rows with it,
    unreadable."""
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
        if not first:
            return None
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        try:
            record = json.loads(first)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or record.get("record") != "run":
            return (f"{shown} is not a detconf results file (its first line is not a run record); "
                    "nothing was written to it: give another --results")
        if fresh:
            return None
        if record.get("schema") != SCHEMA_VERSION:
            return (f"{shown} holds schema {record.get('schema')!r} results and this suite writes schema "
                    f"{SCHEMA_VERSION} (one file, one schema): give another --results, or --fresh-results to empty it")
        if last != b"\n":
            return (f"{shown} ends in an incomplete line (a run stopped while writing it?): repair it, give another "
                    "--results, or --fresh-results to empty it")
        info = os.fstat(f.fileno())
        seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if seen in _READABLE:
            return None  # read whole a moment ago (the options' check), unchanged since
        f.seek(0)
        number = 0
        while True:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                _READABLE.add(seen)
                return None
            number += 1
            problem = ("line longer than 16 MiB" if len(line) > MAX_LINE_BYTES else _line_problem(line))
            if problem:
                return (f"{shown}:{number}: {problem}; a run appends only to a file the reports can read: "
                        "repair it, give another --results, or --fresh-results to empty it")


#: Paths that name a standard stream or another file of some process, never a results file.
_STREAM_PATH = re.compile(r"/dev/(stdin|stdout|stderr|fd(/.*)?)|/proc/(self|thread-self|[0-9]+)(/.*)?")


def standard_streams(config: pytest.Config | None) -> dict[tuple[int, int], str]:
    """(device, inode) -> name of this process's standard streams that are files, as the user
    gave them (pytest's capture has fds 1 and 2 point elsewhere by now: its saved copies)."""
    saved = {0: 0, 1: 1, 2: 2}
    capman = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    capturing = getattr(capman, "_global_capturing", None)
    for fd, name in ((0, "in_"), (1, "out"), (2, "err")):
        copy = getattr(getattr(capturing, name, None), "targetfd_save", None)
        if isinstance(copy, int):
            saved[fd] = copy
    streams = {}
    for fd, real in saved.items():
        try:
            info = os.fstat(real)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            streams[(info.st_dev, info.st_ino)] = ("standard input", "standard output", "standard error")[fd]
    return streams


def results_problem(text: str, *, fresh: bool, streams: dict | None = None) -> str | None:
    """What is wrong with ``--results text``, found without creating or changing anything."""
    if not text.strip():
        return "--results needs a file path, got ''"
    if text.endswith(("/", os.sep)) or Path(text).name in ("", ".", ".."):
        return f"--results {text} names a folder; give a file path such as {text.rstrip('/' + os.sep) or '.'}/results.jsonl"
    stream = next((p for p in (os.path.normpath(os.path.abspath(text)), os.path.realpath(text))
                   if _STREAM_PATH.fullmatch(p)), None)
    if stream is not None:
        return (f"--results {text} names a standard stream or a process's file ({stream}), not a results file; "
                "give a file path")
    path = Path(text)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except NotADirectoryError:
        info = None  # a parent is a file: named below
    except OSError as exc:
        return f"cannot use results file {text}: {exc.strerror or exc}"
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            return f"--results {text} is a folder; give a file path such as {text.rstrip('/' + os.sep)}/results.jsonl"
        if not stat.S_ISREG(info.st_mode):
            return f"--results {text} is not a regular file (a device, pipe or socket); give a file path"
        if (info.st_dev, info.st_ino) in (streams or {}):
            return (f"--results {text} is this run's {streams[(info.st_dev, info.st_ino)]}; "
                    "give a file of its own")
        if not os.access(path, os.W_OK):
            return f"results file {text} is not writable"
        try:
            if _locked(path):
                return in_use(text)
            return existing_results_problem(path, text, fresh=fresh)
        except OSError as exc:
            return f"cannot read results file {text}: {exc.strerror or exc}"
    parent = path.absolute().parent
    while True:
        try:
            info = os.stat(parent)
            break
        except (FileNotFoundError, NotADirectoryError):
            parent = parent.parent
        except OSError as exc:
            return f"cannot create results file {text}: {parent}: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return f"cannot create results file {text}: {parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create results file {text}: {parent} is not writable"
    return None
