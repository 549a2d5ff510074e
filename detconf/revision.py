"""The suite's revision: from its git checkout, or from the revision file a pack wrote.

A GPU pack (:mod:`detconf.gpupack`) carries a copy of the tree without ``.git``; without this the
rows, ``machine.json`` and ``COMMAND.md`` of a run on the lent machine say revision ``unknown``.
The pack writes :data:`REVISION_FILE` at the tree's root: the commit, ``git describe``, whether
the checkout had changes (tracked or untracked files), and a digest of every file it packed. On
reading, a file that differs from its packed digest (or is missing) makes the tree dirty, so an
edit on the lent machine does not pass as the packed revision.

Torch-free, imports nothing of the project: the plugin and the GPU runner both read it.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REVISION_FILE = ".detconf-revision.json"
#: Files of the tree the digests do not cover (written after the digests, or by runs).
_UNCOVERED = (REVISION_FILE,)


@dataclass(frozen=True)
class Revision:
    commit: str | None  # 40 hex digits, or None where unknown
    describe: str | None  # ``git describe --always``, ``-dirty`` added where anything changed (a pack: as packed)
    dirty: bool | None  # None where unknown
    source: str  # "git", "pack" or "unknown"
    changed: tuple[str, ...] = field(default=())  # files that differ from the commit / the pack

    @property
    def label(self) -> str:
        return self.describe or (self.commit[:12] if self.commit else "unknown")


def _git(root: Path, *args: str, timeout: float = 30) -> str | None:
    # --no-optional-locks: ``status`` would otherwise take the index's lock to refresh it, and a
    # run killed meanwhile (a signal to its process group) leaves ``.git/index.lock`` behind,
    # failing the user's next commit.
    try:
        out = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def from_git(root: Path) -> Revision | None:
    """The checkout's own revision; untracked files that git does not ignore count as changes."""
    if not (root / ".git").exists():
        return None
    head = (_git(root, "rev-parse", "--verify", "HEAD^{commit}") or "").strip()
    if not re.fullmatch(r"[0-9a-f]{40}", head):
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=all")
    changed = tuple(line[3:] for line in status.splitlines() if line.strip()) if status is not None else ()
    # Not ``describe --dirty``: it rewrites the index whatever the options (git 2.39); the status
    # above names every change, tracked files' and untracked ones.
    describe = (_git(root, "describe", "--always") or "").strip() or None
    if describe and changed:
        describe += "-dirty"
    return Revision(head, describe, None if status is None else bool(changed), "git", changed)


def from_pack(root: Path) -> Revision | None:
    """The revision a pack recorded, checked against the files now in the tree."""
    path = root / REVISION_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        return None
    commit = data.get("commit") if isinstance(data.get("commit"), str) and re.fullmatch(r"[0-9a-f]{40}", data["commit"]) else None
    changed = [str(f) for f in data.get("changed") or []]
    for name, digest in data["files"].items():
        target = root / name
        try:
            if file_digest(target) != digest:
                changed.append(name)
        except OSError:
            changed.append(name)
    describe = data.get("describe") if isinstance(data.get("describe"), str) else None
    if changed and describe and not describe.endswith("-dirty"):
        describe += "-dirty"
    return Revision(commit, describe, bool(changed), "pack", tuple(dict.fromkeys(changed)))


def revision(root: Path) -> Revision:
    """The suite's revision at ``root``: its checkout, else its pack's record, else unknown."""
    return from_git(root) or from_pack(root) or Revision(None, None, None, "unknown")


def record(root: Path, files: list[str]) -> dict:
    """What a pack writes into :data:`REVISION_FILE` for ``files`` (paths relative to ``root``)."""
    rev = from_git(root)
    return {
        "commit": rev.commit if rev else None,
        "describe": rev.describe if rev else None,
        "changed": list(rev.changed) if rev else [],
        "files": {name: file_digest(root / name) for name in files if name not in _UNCOVERED},
    }


def plan_digest(fields: dict) -> str:
    """SHA-256 of a plan's ``planned_entries`` and ``planned_cases`` (as a run record lists them),
    over their canonical JSON: the run writes it from the plan it ran, a fresh process from the
    suite's own plan for the same options, and a certification compares the two."""
    chosen = {"planned_entries": fields.get("planned_entries"), "planned_cases": fields.get("planned_cases")}
    text = json.dumps(chosen, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
