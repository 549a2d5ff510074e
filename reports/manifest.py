"""The report folder of a run: what the report builder wrote there, and its temporary folders.

A conformance run builds its matrix into a folder of its own beside its results file
(``r.jsonl`` -> ``r-report/``). The builder writes there only what it wrote itself: each such
build leaves a manifest, ``.detconf-report.json``, naming every file it wrote with its size and
modification time (nanoseconds) and the results files it read. The folder is not written when
it holds anything else (:func:`folder_problem`): a file under one of the builder's names that
the manifest does not list as it is now (a user's own ``results.csv``, a file edited since, a
folder made before manifests existed), any other file, or the report of another results file
(``r.jsonl`` and ``r.json`` would share ``r-report/``).

Every build (``reports build --out`` too) writes into a temporary folder first
(``.reports.tmp-*`` inside an existing output folder, ``.NAME.tmp-*`` beside a new one) that
holds a marker, ``.detconf-build-tmp``, naming the process and host that made it. A build killed
before it could clean up (``SIGKILL``) leaves it behind; the next build removes such a folder
when its marker names a process of this host that no longer runs, and a marked folder never
counts as a file the builder did not write. Torch-free and pandas-free: the plugin reads it at
the end of a run.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Iterable

from detconf.child import pid_alive

MANIFEST = ".detconf-report.json"
FORMAT = "detconf-report/1"
TMP_MARKER = ".detconf-build-tmp"
TMP_PREFIX = ".reports.tmp-"


def identity(path: str | os.PathLike) -> list[int] | None:
    """``[size, mtime_ns]`` of a plain file (a link is never one), None otherwise."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return [info.st_size, info.st_mtime_ns]


def read(out: str | os.PathLike) -> dict | None:
    """The manifest of folder ``out``, or None where there is none that reads as one."""
    path = Path(out) / MANIFEST
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return None
    return data


def written_by_builder(out: str | os.PathLike, name: str, manifest: dict | None) -> bool:
    """Is ``out/name`` a plain file the builder wrote, unchanged since (its manifest says so)?"""
    if manifest is None:
        return False
    known = manifest["files"].get(name)
    if not isinstance(known, list):
        return False
    now = identity(Path(out) / name)
    # One identity, or several while a build replaced the files (the old and the new ones).
    accepted = known if known and isinstance(known[0], list) else [known]
    return now is not None and now in accepted


def inputs(manifest: dict | None) -> list[str]:
    """The results files (absolute, links resolved) the manifest's report was built from."""
    found = (manifest or {}).get("inputs")
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


def input_paths(paths: Iterable[str | os.PathLike]) -> list[str]:
    """Each path absolute with its links resolved, as text (bytes a non-UTF-8 locale could not
    decode are read as UTF-8; what is not UTF-8 becomes U+FFFD)."""
    return [os.fsencode(os.path.realpath(os.fspath(p))).decode("utf-8", "replace") for p in paths]


def write(folder: str | os.PathLike, files: dict[str, list], paths: Iterable[str | os.PathLike]) -> None:
    """Write the manifest into ``folder`` at once (a temporary file, then ``os.replace``)."""
    folder = Path(folder)
    text = json.dumps({"format": FORMAT, "files": files, "inputs": input_paths(paths)}, indent=1, sort_keys=True)
    fd, temp = tempfile.mkstemp(prefix=f"{MANIFEST}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(temp, folder / MANIFEST)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def folder_problem(out: str | os.PathLike, results: Iterable[str | os.PathLike] | None = None,
                   names: Iterable[str] = ()) -> str | None:
    """Why the report of a run must not be written into the folder ``out`` (None: it may). It may
    be absent, or hold only what the builder wrote there: the files of ``names`` that its
    manifest lists as they are, the manifest, marked temporary folders of builds -- and, given
    ``results``, only the report of those results files."""
    out = Path(out)
    try:
        info = os.lstat(out)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot use {out}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{out} is a symbolic link; the matrix goes only into a folder of its own"
    if not stat.S_ISDIR(info.st_mode):
        return f"{out} exists and is not a folder"
    own = read(out)
    names = set(names)
    foreign = []
    try:
        listing = sorted(os.listdir(out))
    except OSError as exc:
        return f"cannot use {out}: {exc.strerror or exc}"
    for name in listing:
        if name == MANIFEST and own is not None:
            continue
        if name.startswith(TMP_PREFIX) and is_build_tmp(out / name):
            continue
        if name in names and written_by_builder(out, name, own):
            continue
        foreign.append(name)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        return f"{out} holds files the report builder did not write ({shown}); move them or give another --results"
    made_from = inputs(own)
    if results is not None and made_from and made_from != input_paths(results):
        return (f"{out} holds the report of {', '.join(made_from)}, which this run's "
                f"{', '.join(map(os.fspath, results))} would replace; give another --results or remove the folder")
    return None


# ----------------------------------------------------------------------------- temporary folders

def mark(tmp: str | os.PathLike) -> None:
    """Mark ``tmp`` as a build's temporary folder of this process."""
    with open(Path(tmp) / TMP_MARKER, "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "host": socket.gethostname()}, f)


def _marker(folder: Path) -> dict | None:
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
        marker = folder / TMP_MARKER
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_size > 4096:  # a pipe would block, a device never end
            return None
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def is_build_tmp(folder: str | os.PathLike) -> bool:
    """A temporary folder of some build (it holds the builder's marker)."""
    return _marker(Path(folder)) is not None


def abandoned(folder: str | os.PathLike) -> bool:
    """A build's temporary folder whose process (on this host) is gone: nothing will finish it."""
    marker = _marker(Path(folder))
    return (marker is not None and marker.get("host") == socket.gethostname()
            and marker["pid"] != os.getpid() and not pid_alive(marker["pid"]))


def remove_abandoned(folder: str | os.PathLike, prefixes: Iterable[str]) -> list[str]:
    """Remove the abandoned temporary folders (see :func:`abandoned`) directly in ``folder``
    whose names start with one of ``prefixes``; returns their names."""
    prefixes = tuple(prefixes)
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if name.startswith(prefixes) and abandoned(Path(folder) / name):
            shutil.rmtree(Path(folder) / name, ignore_errors=True)
            removed.append(name)
    return removed
