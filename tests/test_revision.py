"""The suite's revision as a run records it (detconf/revision.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from detconf.revision import from_git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_looking_up_the_revision_writes_nothing_into_the_checkout(tmp_path):
    """``git status`` and ``git describe --dirty`` refresh the index where a file's times changed,
    under ``.git/index.lock``: a run killed meanwhile would leave the lock behind and fail the
    user's next commit. The lookup reads only: the index keeps its bytes and its time."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "one")
    index = tmp_path / ".git" / "index"
    os.utime(index, (1_000_000_000, 1_000_000_000))
    os.utime(tmp_path / "a.txt", None)  # the same bytes, a newer time: the index's record is stale
    (tmp_path / "b.txt").write_text("untracked\n")
    before = index.read_bytes(), index.stat().st_mtime_ns
    rev = from_git(tmp_path)
    assert rev is not None and rev.dirty is True and rev.changed == ("b.txt",)
    assert rev.describe is not None and rev.describe.endswith("-dirty")
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
