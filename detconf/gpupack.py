"""``detconf gpu-pack``: everything a lent GPU needs for one session, in one folder, made here.

A lent GPU has minutes, no network and its own interpreter; the working tree that travels to it
has no ``.git`` and no ignored folders. The pack (default ``.gpu-pack/``, git-ignored: name it in
the device call's ``carry``) holds

- ``tree.tar.gz``: the suite's files as they are here (tracked ones and untracked ones git does
  not ignore), with :data:`detconf.revision.REVISION_FILE` at the root: the commit, ``git
  describe``, the files that differ from the commit, and a digest of every packed file, so the
  rows, ``machine.json`` and ``COMMAND.md`` of the run name the revision (and an edit made there
  shows as dirty);
- ``wheels/``: wheels for the target interpreter (default CPython 3.12, manylinux x86_64) of what
  the suite needs that the target image lacks (``detconf/lent_gpu_image.txt``, or ``--have
  FILE``), fetched with every platform tag of the target (pip matches each tag exactly);
- ``alert-tests/test_torch.py`` (with ``--alert-tests FILE``): PyTorch's own tests for the speed
  step, at the target's torch release;
- ``run``: the session, a POSIX shell script: ``sh .gpu-pack/run OUT [gpu-run options]`` unpacks
  the tree into a fresh folder, then runs ``detconf gpu-run --wheels ... --device cuda`` from it
  (the wheels installed into the interpreter, offline) with the archive written to
  ``OUT/gpu-run-<UTC time>.tar.gz`` (a second call into the same OUT adds its own, ``-2``, ``-3``
  after the time when one of that second is there; nothing else of OUT is touched). gpu-run
  (``--scratch``) removes the unpacked folder when it ends, once the archive holds every file of
  the run (a vendor's machine running packs keeps nothing behind; kept, with a line, when the
  archive could not be written). OUT is
  resolved against the caller's folder before anything else; one that exists and is not a
  folder is one line and exit status 2; its name may hold any character (it is never shell code);
- ``PACK.json``: what was packed, with digests, and the device command.

Exit status 0 packed; 1 the wheels could not be fetched; 2 bad input (one line on stderr).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import NoReturn, Sequence

from detconf import revision as _revision
from detconf.gpurun import SCRATCH_MARK
from detconf.wheels import (
    BadInput, canonicalize_name, download_command, manylinux_tags, read_requirements, read_small, regular_file,
)

PROG = "detconf gpu-pack"
IMAGE = Path(__file__).with_name("lent_gpu_image.txt")
#: The budget the session's gpu-run gets unless told: 15 device-minutes a session, 1-2 of them
#: the machine's start, and room left for one short rerun (a machine starts only with 4 left).
DEFAULT_BUDGET = 480
#: What may travel with a device call, the working tree included.
CARRY_LIMIT = 64 << 20

RUN = r'''#!/bin/sh
# The GPU session of a detconf pack: sh PACK/run OUT [detconf gpu-run options]
# (default: --budget @BUDGET@). Unpacks the suite into a fresh folder, installs the packed
# wheels into this interpreter (offline), runs every step on the GPU inside the budget, and
# writes one archive, OUT/gpu-run-<UTC time>.tar.gz, rewritten after every step. gpu-run
# (--scratch) removes the unpacked folder when it ends, once the archive holds the run.
set -u
# (paths are read with "pwd; echo x" and the x cut off: a name ending in a newline stays whole)
pack=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd && echo x) || exit 2
pack=${pack%??}
if [ $# -lt 1 ] || [ -z "$1" ]; then
    printf 'usage: sh %s OUT [detconf gpu-run options]\n' "$0" >&2
    exit 2
fi
out=$1
shift
# OUT is the caller's (relative to the caller's folder), made if new; only this call's archive is
# written into it, under a name no earlier call has used.
case $out in /*) ;; *) out=./$out ;; esac
if [ -e "$out" ] && [ ! -d "$out" ]; then
    printf 'run: %s exists and is not a folder\n' "$out" >&2
    exit 2
fi
mkdir -p -- "$out" 2>/dev/null || { printf 'run: cannot create the folder %s\n' "$out" >&2; exit 2; }
out=$(CDPATH= cd -- "$out" 2>/dev/null && pwd && echo x) || { printf 'run: cannot enter the folder %s\n' "$out" >&2; exit 2; }
out=${out%??}
python=${DETCONF_PYTHON:-python3}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
name=gpu-run-$stamp
n=1
while [ -e "$out/$name.tar.gz" ] || [ -L "$out/$name.tar.gz" ]; do
    n=$((n + 1))
    name=gpu-run-$stamp-$n
done
work=$(mktemp -d "${TMPDIR:-/tmp}/detconf-gpu.XXXXXX") || exit 2
: > "$work/@MARK@" && mkdir -- "$work/tree" && tar -xzf "$pack/tree.tar.gz" -C "$work/tree" || {
    printf 'run: cannot unpack %s\n' "$pack/tree.tar.gz" >&2
    rm -rf -- "$work"
    exit 2
}
budget=--budget
for arg in "$@"; do
    case $arg in --budget|--budget=*) budget= ;; esac
done
set -- --wheels "$pack/wheels" --device cuda --out "$work/$name" \
    --archive "$out/$name.tar.gz" --scratch "$work" --quiet "$@"
[ -n "$budget" ] && set -- --budget @BUDGET@ "$@"
[ -f "$pack/alert-tests/test_torch.py" ] && set -- --alert-tests "$pack/alert-tests/test_torch.py" "$@"
cd -- "$work/tree" || exit 2
printf 'run: suite unpacked in %s (removed at the end once the archive holds the run); archive: %s\n' "$work/tree" "$out/$name.tar.gz"
exec "$python" -m detconf gpu-run "$@"
'''


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadInput(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Pack the suite, the wheels a lent GPU lacks and the revision into one folder "
                                       "for a device call to carry.")
    p.add_argument("--out", metavar="DIR", default=".gpu-pack", help="the pack folder (default .gpu-pack, replaced whole)")
    p.add_argument("--python", metavar="X.Y", default="3.12", help="the target interpreter's version (default 3.12)")
    p.add_argument("--glibc", metavar="X.Y", default="2.28",
                   help="the target's glibc: wheels for manylinux up to it (default 2.28)")
    p.add_argument("--arch", default="x86_64", help="the target's machine (default x86_64)")
    p.add_argument("--have", metavar="FILE", help="the distributions the target has, one name a line "
                   "(default: the lent GPU image, detconf/lent_gpu_image.txt)")
    p.add_argument("--wheels-from", metavar="DIR", help="take the wheels from DIR instead of downloading them")
    p.add_argument("--alert-tests", metavar="FILE", help="PyTorch's test_torch.py for the speed step")
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET,
                   help=f"the session's budget in seconds unless its command says (default {DEFAULT_BUDGET})")
    return p


def say(message: str) -> None:
    print(f"gpu-pack: {message}", flush=True)


def _git(root: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BadInput(f"git is needed to pack the suite ({exc})") from None
    if out.returncode != 0:
        raise BadInput(f"{root}: not a git checkout (gpu-pack packs a checkout: {out.stderr.decode(errors='replace').strip()[:120]})")
    return out.stdout.decode("utf-8", "surrogateescape")


def tree_files(root: Path, out: Path) -> list[str]:
    """The files of the checkout that travel: tracked and untracked-not-ignored, present, not in the pack."""
    names = [n for n in _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0") if n]
    inside = out.resolve()
    files = []
    for name in dict.fromkeys(names):
        path = root / name
        if path.is_symlink() or not path.is_file():
            continue
        if path.resolve().is_relative_to(inside):
            continue
        files.append(name)
    return sorted(files)


def write_tree(root: Path, files: list[str], target: Path) -> dict:
    record = _revision.record(root, files)
    data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    with tarfile.open(target, "w:gz", compresslevel=6) as tar:
        for name in files:
            tar.add(root / name, arcname=name, recursive=False)
        info = tarfile.TarInfo(_revision.REVISION_FILE)
        info.size, info.mode, info.mtime = len(data), 0o644, int(_dt.datetime.now().timestamp())
        tar.addfile(info, io.BytesIO(data))
    return record


#: The most an --alert-tests file may hold (PyTorch's test_torch.py: about 0.5 MiB).
MAX_ALERT_TESTS = 16 << 20


def image_names(path: Path) -> set[str]:
    lines = read_small(path, "--have").splitlines()  # a regular file, not a FIFO or a device
    names = set()
    for line in lines:
        word = line.split("#", 1)[0].strip().split("==")[0].strip()
        if word:
            names.add(canonicalize_name(word))
    return names


def fetch_wheels(root: Path, dest: Path, have: set[str], args) -> list[str]:
    """Wheels for the target of every suite requirement it lacks, with their dependencies; those
    the target has are dropped. Returns the requirements fetched for."""
    requirements = [r for r in read_requirements(root / "requirements-base.txt") if canonicalize_name(r.name) != "torch"]
    wanted = [str(r) for r in requirements if canonicalize_name(r.name) not in have]
    dest.mkdir(parents=True)
    if not wanted:
        return []
    if args.wheels_from:
        source = Path(args.wheels_from)
        for wheel in sorted(source.glob("*.whl")):
            regular_file(wheel, "--wheels-from")  # a FIFO would hang the copy
            shutil.copy2(wheel, dest / wheel.name)
    else:
        python = args.python.replace(".", "")
        command = download_command(wanted, python_version=args.python, implementation="cp", abi=f"cp{python}",
                                   platforms=manylinux_tags(args.glibc, args.arch), dest=str(dest))
        command[0] = sys.executable
        say(f"fetching wheels for CPython {args.python} (glibc {args.glibc}, {args.arch}): {' '.join(wanted)}")
        run = subprocess.run(command + ["--disable-pip-version-check", "--quiet"], capture_output=True, text=True)
        if run.returncode != 0:
            tail = " ".join(run.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"pip download failed (exit status {run.returncode}): {tail[-500:]}")
    for wheel in list(dest.glob("*.whl")):
        if canonicalize_name(wheel.name.split("-")[0]) in have:
            wheel.unlink()  # the target has it
    return wanted


def main(argv: Sequence[str] | None = None, *, root: Path | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv, root)
    except BadInput as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"{PROG}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1


def _main(argv: list[str], root: Path | None) -> int:
    args = parser().parse_args(argv)
    if root is None:
        root = Path(__file__).resolve().parent.parent
    if not (root / "conformance" / "test_documented.py").is_file():
        raise BadInput(f"{root}: not the suite's checkout")
    if not all(part.isdigit() for part in args.python.split(".")) or args.python.count(".") != 1:
        raise BadInput(f"--python {args.python[:20]!r}: a version like 3.12")
    if not all(part.isdigit() for part in args.glibc.split(".")) or args.glibc.count(".") != 1:
        raise BadInput(f"--glibc {args.glibc[:20]!r}: a version like 2.28")
    if not 20 <= args.budget <= 3600:
        raise BadInput(f"--budget {args.budget}: between 20 and 3600 seconds")
    have = image_names(Path(args.have) if args.have else IMAGE)
    if args.wheels_from and not Path(args.wheels_from).is_dir():
        raise BadInput(f"--wheels-from {args.wheels_from}: no such folder")
    alert = Path(args.alert_tests) if args.alert_tests else None
    if alert is not None:
        text = read_small(alert, "--alert-tests", MAX_ALERT_TESTS)  # a regular file, not a FIFO or a device
        if "def test_nondeterministic_alert_" not in text:
            raise BadInput(f"--alert-tests {args.alert_tests}: not PyTorch's test_torch.py (no alert tests)")
    out = Path(args.out)
    if not out.is_absolute():
        out = Path.cwd() / out
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "PACK.json").is_file())):
        raise BadInput(f"--out {args.out}: exists and is not a pack (gpu-pack replaces only a pack of its own)")

    staging = Path(tempfile.mkdtemp(prefix=".gpu-pack-", dir=out.parent if out.parent.is_dir() else None))
    try:
        files = tree_files(root, out)
        record = write_tree(root, files, staging / "tree.tar.gz")
        wanted = fetch_wheels(root, staging / "wheels", have, args)
        if alert is not None:
            (staging / "alert-tests").mkdir()
            shutil.copy2(alert, staging / "alert-tests" / "test_torch.py")
        run = staging / "run"
        run.write_text(RUN.replace("@BUDGET@", str(args.budget)).replace("@MARK@", SCRATCH_MARK), encoding="utf-8")
        run.chmod(0o755)
        wheels = sorted(p.name for p in (staging / "wheels").glob("*.whl"))
        name = out.name
        device_command = f"sh {shlex.quote(name)}/run \"$OUT\" --budget {args.budget}"
        manifest = {
            "made": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "revision": {k: record[k] for k in ("commit", "describe", "changed")},
            "files": len(files),
            "target": {"python": args.python, "glibc": args.glibc, "arch": args.arch,
                       "have": str(Path(args.have) if args.have else IMAGE.name)},
            "requirements_fetched": wanted,
            "wheels": {w: _revision.file_digest(staging / "wheels" / w) for w in wheels},
            "alert_tests": _revision.file_digest(staging / "alert-tests" / "test_torch.py") if alert is not None else None,
            "device_command": device_command,
            "carry": [name],
        }
        (staging / "PACK.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    dirty = f", with changes in {len(record['changed'])} file(s)" if record["changed"] else ""
    say(f"packed {len(files)} files at {record['describe'] or record['commit'] or 'an unknown revision'}{dirty}, "
        f"{len(wheels)} wheel(s) ({', '.join(wheels) or 'none needed'})"
        + (", PyTorch's alert tests" if alert is not None else "") + f": {out} ({size / 2**20:.1f} MiB)")
    if size > CARRY_LIMIT // 4:
        say(f"note: the pack is {size / 2**20:.1f} MiB; a device call carries 64 MiB with the working tree")
    say(f"on the device (carry {name}): {device_command}")
    return 0
