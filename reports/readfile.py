"""The one way the reports open and read a file: every command's reader goes through here.

- :func:`open_regular` opens a file for reading and refuses what is not a regular file -- a
  folder, a pipe (FIFO), a device such as ``/dev/zero``, a socket -- before a byte is read: a
  reader would wait on a pipe for ever and read a device until memory runs out. The file is
  opened without waiting (``O_NONBLOCK``) and then looked at (``fstat`` of what was opened, so a
  file swapped for a pipe in between is still refused).
- :func:`json_line` is the check of one line of JSON text: at most :data:`MAX_LINE_BYTES`
  bytes, no NUL byte, UTF-8 (no other encoding; a byte-order mark is not JSON), nested at most
  :data:`MAX_DEPTH` levels, JSON, no lone surrogate escape.
- :func:`json_lines` reads a file's lines through both, never holding more than one line of at
  most :data:`MAX_LINE_BYTES` bytes (a longer one is refused as soon as it is seen).

``reports.load`` opens every results file with :func:`open_regular` and reads it in chunks
(:mod:`reports.lines`, :mod:`reports.parse`: the same limits and checks, the same words);
``reports.fingerprints`` and ``reports.drift`` read with :func:`json_lines`. Problems are
:class:`Unreadable` (the file) and :class:`BadLine` (a line), whose words the caller puts after
the file name (and line).

The limits themselves (and the nesting check) are :mod:`reports.lines`' (the chunked reading).
"""
from __future__ import annotations

import errno
import json
import os
import stat
from typing import IO, Any, Iterator

# The limits and the nesting check that the chunked reading of reports.load holds lines to.
from detconf.reports.lines import MAX_DEPTH, MAX_LINE_BYTES, SURROGATE_ESCAPE, too_deep

__all__ = ["MAX_DEPTH", "MAX_LINE_BYTES", "SURROGATE_ESCAPE", "BadLine", "Unreadable", "json_line", "json_lines",
           "open_regular", "too_deep"]

#: How a caller words a line that is not JSON, by default: ``{}`` is the decoder's message.
CORRUPT_JSON = "corrupt JSON line ({})"


class Unreadable(Exception):
    """A file that cannot be read (or must not be): ``problem`` is a few words, no file name."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


class BadLine(ValueError):
    """A line that fails :func:`json_line`: ``problem`` in a few words; ``line`` its number
    (1-based) where :func:`json_lines` read it."""

    def __init__(self, problem: str, line: int | None = None):
        super().__init__(problem)
        self.problem = problem
        self.line = line


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike, what: str = "a results file") -> IO[bytes]:
    """``path`` opened for reading in binary, or :class:`Unreadable`: it does not open, it is a
    folder (``Is a directory``), or it is not a regular file (``what`` names what it should be)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise Unreadable(os.strerror(errno.EISDIR))
        if not stat.S_ISREG(mode):
            raise Unreadable(f"{_kind(mode)}, which a reader would wait on; {what} is a regular file")
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except OSError as exc:
        os.close(fd)
        raise Unreadable(exc.strerror or str(exc)) from None
    except BaseException:
        os.close(fd)
        raise


def json_line(line: bytes, not_json: str = CORRUPT_JSON) -> Any:
    """The JSON value of one line (surrounding whitespace stripped, not blank), or
    :class:`BadLine`. ``not_json``: how text that does not parse is worded (``{}``: the
    decoder's message)."""
    if len(line) > MAX_LINE_BYTES:
        raise BadLine(f"line longer than {MAX_LINE_BYTES >> 20} MiB")
    if b"\x00" in line:
        raise BadLine("NUL byte in the line (not JSON text)")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise BadLine("not UTF-8 text") from None
    if too_deep(line):
        raise BadLine(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text)
    except RecursionError:  # pragma: no cover - too_deep catches it first
        raise BadLine(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise BadLine(not_json.format(getattr(exc, "msg", exc))) from None
    if SURROGATE_ESCAPE.search(line):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadLine("a string holds a lone surrogate escape (not Unicode text)") from None
    return value


def json_lines(f: IO[bytes], not_json: str = CORRUPT_JSON) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of ``f`` (opened by :func:`open_regular`),
    each through :func:`json_line`; a bad line is :class:`BadLine` with its number. A line longer
    than :data:`MAX_LINE_BYTES` is refused without reading the rest of it."""
    number = 0
    while True:
        limit = MAX_LINE_BYTES
        raw = f.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) > limit and not (len(raw) == limit + 1 and raw.endswith(b"\n")):
            raise BadLine(f"line longer than {limit >> 20} MiB", number)
        stripped = raw.strip()
        if not stripped:
            continue
        try:
            value = json_line(stripped, not_json)
        except BadLine as exc:
            exc.line = number
            raise
        yield number, value
