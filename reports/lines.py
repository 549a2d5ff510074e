"""The lines of a results file: read in chunks of whole lines into reusable buffers, split
into line spans (numpy over the bytes), with the limits every line is held to (length, depth).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from detconf.vocabulary import MAX_LINE_BYTES

#: Bytes of a file read (and parsed) at a time.
CHUNK_BYTES = 32 << 20
#: A line nested deeper is rejected (result rows nest five levels or so).
MAX_DEPTH = 100

_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
#: A ``\uD800``-``\uDFFF`` escape: a line holding one may spell a lone surrogate (not Unicode text).
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _depth(line: bytes) -> int:
    """How deep a JSON line nests (brackets inside strings do not count)."""
    depth = deepest = 0
    for token in _STRING_OR_BRACKET.finditer(line):
        c = line[token.start()]
        if c in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in b"]}":
            depth -= 1
    return deepest


def too_deep(line: bytes) -> bool:
    return line.count(b"[") + line.count(b"{") > MAX_DEPTH and _depth(line) > MAX_DEPTH


class Chunk:
    """Whole lines of a file in the first ``size`` bytes of a reusable buffer."""

    __slots__ = ("buf", "size")

    def __init__(self, buf: bytearray, size: int):
        self.buf, self.size = buf, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        """A byte (an int) or the bytes of a slice (a copy)."""
        if isinstance(index, slice):
            start, stop, _ = index.indices(self.size)
            return bytes(self.buf[start:stop])
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError(index)
        return self.buf[index]

    def array(self) -> np.ndarray:
        return np.frombuffer(self.buf, dtype=np.uint8, count=self.size)

    def view(self) -> memoryview:
        return memoryview(self.buf)[:self.size]

    def find(self, sub: bytes) -> int:
        return self.buf.find(sub, 0, self.size)

    def count(self, sub: bytes) -> int:
        return self.buf.count(sub, 0, self.size)

    def isascii(self) -> bool:
        return not self.size or int(self.array().max()) < 0x80

    def valid_utf8(self) -> bool:
        """UTF-8 throughout, checked by Arrow on the buffer in place."""
        offsets = pa.py_buffer(np.array([0, self.size], dtype=np.int32))
        try:
            pa.StringArray.from_buffers(1, offsets, pa.py_buffer(self.view())).validate(full=True)
        except pa.ArrowInvalid:
            return False
        return True


@dataclass
class Lines:
    """The lines of a chunk: spans of their text with surrounding whitespace stripped."""

    starts: np.ndarray  # per line, offset in the chunk of its stripped text
    ends: np.ndarray  # per line, end offset of the stripped text (== start: blank)
    longest: int  # bytes of the longest line

    @property
    def count(self) -> int:
        return len(self.starts)


def split_lines(data: Chunk) -> Lines:
    """Line spans of a chunk (vectorised; lines not shaped ``{...}`` are measured one by one)."""
    arr = data.array()
    newlines = np.flatnonzero(arr == 10)
    if len(data) and data[-1] != 10:
        ends = np.append(newlines, len(data))
    else:
        ends = newlines
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    if not len(ends):
        return Lines(starts, ends, 0)
    lengths = ends - starts
    longest = int(lengths.max())
    first = arr[np.minimum(starts, len(data) - 1)]
    last = arr[np.maximum(ends - 1, 0)]
    irregular = (first != ord("{")) | (last != ord("}")) | (lengths == 0)
    if irregular.any():
        starts, ends = starts.copy(), ends.copy()
        for i in np.flatnonzero(irregular).tolist():
            s, e = int(starts[i]), int(ends[i])
            line = data[s:e]
            stripped = line.strip()
            if not stripped:
                starts[i] = ends[i] = s
                continue
            starts[i] = s + len(line) - len(line.lstrip())
            ends[i] = starts[i] + len(stripped)
    return Lines(starts, ends, longest)


def deep_lines(data: Chunk, lines: Lines) -> bool:
    """True when some line nests deeper than MAX_DEPTH. Opening brackets are counted per line
    (numpy: ``[`` and ``{`` are the bytes that ``| 0x20`` makes 0x7b); a line with more than
    MAX_DEPTH of them is scanned."""
    arr = data.array()
    opening = np.flatnonzero((arr | 0x20) == 0x7B)
    if len(opening) <= MAX_DEPTH:
        return False
    counts = np.bincount(np.searchsorted(lines.ends, opening), minlength=lines.count + 1)
    for i in np.flatnonzero(counts > MAX_DEPTH).tolist():
        if i < lines.count and _depth(data[lines.starts[i]:lines.ends[i]]) > MAX_DEPTH:
            return True
    return False


def newline_after(data: Chunk, ends: np.ndarray) -> np.ndarray:
    """Per line end: whether a newline follows it in the chunk."""
    arr = data.array()
    out = np.zeros(len(ends), dtype=bool)
    inside = ends < len(data)
    out[inside] = arr[ends[inside]] == 10
    return out


def _size(f) -> int | None:
    """The size of the open file ``f`` now (None: it has none to tell)."""
    try:
        return os.fstat(f.fileno()).st_size
    except (OSError, AttributeError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


def read_chunks(f, buffer) -> Iterator[tuple[Chunk | None, int]]:
    """``(chunk, offset)`` for consecutive chunks of whole lines of a file, each read straight
    into a buffer from ``buffer(size)``; the chunk is None where a line longer than
    MAX_LINE_BYTES starts."""
    carry = b""
    offset = 0
    known = _size(f)  # the file's size as last seen; a read never asks for much more than is left
    while True:
        taken = offset + len(carry)  # bytes read so far
        if known is not None and taken >= known:
            known = _size(f)  # at the end as last seen: the file may have grown since
        # A step of CHUNK_BYTES, or what is left of the file and a byte more (that byte shows
        # the end, or that it grew): a small file is read into a buffer of its size, not into
        # one of CHUNK_BYTES, which costs as much to make (zeroed) as a small file to parse.
        step = CHUNK_BYTES if known is None else min(CHUNK_BYTES, max(known - taken, 0) + 1)
        buf = buffer(len(carry) + step)
        buf[:len(carry)] = carry
        size = len(carry) + f.readinto(memoryview(buf)[len(carry):len(carry) + step])
        if size == len(carry):  # end of file
            if carry:
                yield Chunk(buf, size), offset
            return
        cut = buf.rfind(b"\n", 0, size) + 1
        if cut == 0:
            if size > MAX_LINE_BYTES:
                yield None, offset
                return
            carry = bytes(buf[:size])
            continue
        carry = bytes(buf[cut:size])
        yield Chunk(buf, cut), offset
        offset += cut
        if len(carry) > MAX_LINE_BYTES:
            yield None, offset
            return
