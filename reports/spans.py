"""The text of result rows read back from their files by byte span: for ``Results.texts``,
``Results.records`` and the digest of ``summary.json``. The files are memory-mapped, not read,
and their pages let go of as it goes (they stay in the page cache, not in this process).

Imports numpy only, so that a build over many rows can take the digest in a process of its own.
"""
from __future__ import annotations

import hashlib
import mmap
from typing import Iterator

import numpy as np


class Mapped:
    """Read-only memory maps of files; ``release`` drops their pages from this process."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        self.maps: dict[int, mmap.mmap] = {}
        self.files = []

    def __enter__(self) -> "Mapped":
        return self

    def __getitem__(self, index: int) -> mmap.mmap:
        if index not in self.maps:
            f = open(self.paths[index], "rb")
            self.files.append(f)
            self.maps[index] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self.maps[index]

    def release(self) -> None:
        if hasattr(mmap, "MADV_DONTNEED"):
            for m in self.maps.values():
                m.madvise(mmap.MADV_DONTNEED)

    def __exit__(self, *exc) -> None:
        for m in self.maps.values():
            m.close()
        for f in self.files:
            f.close()


BATCH = 1 << 16


def texts(paths: list[str], files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Iterator[list[bytes]]:
    """The spans' bytes, a batch at a time."""
    used = set(np.unique(files).tolist())
    with Mapped(paths) as maps:
        mapped = [maps[i] if i in used else None for i in range(len(paths))]
        for first in range(0, len(files), BATCH):
            part = slice(first, first + BATCH)
            yield [mapped[f][s:e] for f, s, e in zip(files[part].tolist(), starts[part].tolist(),
                                                    ends[part].tolist())]
            maps.release()


def digest(paths: list[str], files: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           newline_after: np.ndarray) -> str:
    """sha256 of each span followed by a newline, in the order given (the file's own newline
    is hashed along where the span ends right before one)."""
    h = hashlib.sha256()
    update = h.update
    used = set(np.unique(files).tolist())
    with Mapped(paths) as maps:
        views = [memoryview(maps[f]) if f in used else None for f in range(len(paths))]
        try:
            for first in range(0, len(files), BATCH):
                part = slice(first, first + BATCH)
                f, s, e = files[part].tolist(), starts[part].tolist(), ends[part]
                if newline_after[part].all():  # the usual case: each line with its newline
                    for fi, si, ei in zip(f, s, (e + 1).tolist()):
                        update(views[fi][si:ei])
                else:
                    for fi, si, ei, nl in zip(f, s, e.tolist(), newline_after[part].tolist()):
                        update(views[fi][si:ei + 1] if nl else bytes(views[fi][si:ei]) + b"\n")
                maps.release()
        finally:
            for view in views:
                if view is not None:
                    view.release()
    return h.hexdigest()


def main(argv: list[str]) -> None:
    """``main([SPANS])``: print the digest of the spans saved in SPANS (an ``.npz`` with
    ``paths``, ``files``, ``starts``, ``ends``, ``newline_after``); run by the build in a helper
    process (``reports.build._Helper``)."""
    data = np.load(argv[0])
    print(digest([str(p) for p in data["paths"]], data["files"], data["starts"], data["ends"],
                 data["newline_after"]))
