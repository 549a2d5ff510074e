"""The suite's requirements on a machine with its own torch and no network: what is installed,
what a wheel folder offers, what must be brought (and the ``pip download`` that fetches it for
another interpreter), and the offline install into the running interpreter.

Used by ``detconf gpu-run`` (which installs) and ``detconf gpu-pack`` (which fetches the wheels for
the lent machine's interpreter). Imports neither torch nor the suite's engine.
"""
from __future__ import annotations

import email.parser
import importlib.metadata as metadata
import json
import os
import platform
import shlex
import stat
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

try:  # the suite requires packaging; pip's own copy answers where it is missing (it may be a wheel to bring)
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - exercised only where packaging is absent
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.tags import sys_tags  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import (  # type: ignore[no-redef]
        InvalidWheelFilename, canonicalize_name, parse_wheel_filename,
    )
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]

#: The distribution the suite tests: it must be installed (the machine's own build); never
#: installed, upgraded or imported here.
TORCH = "torch"


#: The most a requirements file (each ``-r`` include), a ``--have`` list or a wheel's METADATA may
#: hold: more is not a requirements list but a mistake (``-r /dev/zero``).
MAX_LIST_BYTES = 1 << 20
#: How deep ``-r`` includes may nest.
MAX_INCLUDE_DEPTH = 32


class BadInput(Exception):
    """A problem with the command line or its paths: one line, exit status 2."""


def read_small(path: Path, what: str, limit: int = MAX_LIST_BYTES) -> str:
    """The text of a regular file of at most ``limit`` bytes; anything else (a FIFO, a device, a
    folder, a larger file, an unreadable one) is one line of bad input. Opened without blocking,
    so a FIFO is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise BadInput(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(f"{what} {path}: not a regular file ({_kind(info.st_mode)})")
        if info.st_size > limit:
            raise BadInput(f"{what} {path}: {info.st_size} bytes, more than the {limit} a {what.lstrip('-')} may hold")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise BadInput(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise BadInput(f"{what} {path}: more than the {limit} bytes a {what.lstrip('-')} may hold")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def regular_file(path: Path, what: str, shown: str | None = None) -> None:
    """Bad input unless ``path`` (its link followed) is a regular file."""
    shown = shown or str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise BadInput(f"{what} {shown}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{what} {shown}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise BadInput(f"{what} {shown}: not a regular file ({_kind(mode)})")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a plain file"


@dataclass(frozen=True)
class Need:
    """A distribution the suite needs that is absent, or present in a version that does not do."""

    requirement: str  # e.g. "jsonschema>=4.18"
    why: str  # who requires it: "requirements-base.txt", "jsonschema 4.23.0"
    installed: str | None = None  # the version installed, when it is the wrong one

    def line(self) -> str:
        have = f"; {self.installed} is installed" if self.installed else ""
        return f"{self.requirement}  (required by {self.why}{have})"


@dataclass
class Check:
    """What the requirements walk found."""

    needs: list[Need] = field(default_factory=list)  # to bring (not in the wheel folder, or no folder)
    conflicts: list[str] = field(default_factory=list)  # asks for a torch other than this machine's (never installed)
    install: list[tuple[str, str, Path]] = field(default_factory=list)  # (name, version, wheel) from --wheels
    notes: list[str] = field(default_factory=list)  # problems of installed packages that do not block
    torch: str | None = None  # the installed torch's version
    checked: dict[str, str] = field(default_factory=dict)  # name -> installed version, every one walked

    @property
    def satisfied(self) -> bool:
        return not self.needs and not self.conflicts and not self.install and self.torch is not None


def python_tag() -> str:
    """This interpreter's wheel tag, e.g. ``cp312`` (``pp310`` for PyPy)."""
    impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name[:2])
    return f"{impl}{sys.version_info.major}{sys.version_info.minor}"


def interpreter_tag() -> str:
    """The most specific tag this interpreter installs that an index can hold, e.g.
    ``cp312-cp312-manylinux_2_39_x86_64`` (a ``linux_*`` tag, which PyPI refuses, only where
    there is no other)."""
    first = next(iter(sys_tags()))
    if first.platform.startswith("linux_") or first.platform == "any":
        portable = [t for t in platform_tags() if not t.startswith("linux_")]
        if portable:
            return f"{first.interpreter}-{first.abi}-{portable[0]}"
    return str(first)


def read_requirements(path: Path, _seen: frozenset = frozenset()) -> list[Requirement]:
    """The requirements of a pip requirements file (``-r`` includes followed; other options
    skipped). A line that is not a requirement, and a file (or include) that is not a regular
    file of at most :data:`MAX_LIST_BYTES`, are bad input."""
    if path.resolve() in _seen:
        return []
    if len(_seen) >= MAX_INCLUDE_DEPTH:
        raise BadInput(f"{path}: -r includes nest more than {MAX_INCLUDE_DEPTH} deep")
    text = read_small(path, "requirements file" if not _seen else "-r include")
    out: list[Requirement] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = None
        if line.startswith(("-r ", "--requirement ", "-r\t", "--requirement\t")):
            include = line.split(None, 1)[1].strip()
        elif line.startswith("--requirement="):
            include = line.split("=", 1)[1].strip()
        elif line.startswith("-r") and not line.startswith("-r "):
            include = line[2:].strip()
        if include is not None:
            if not include:
                raise BadInput(f"{path}:{number}: -r names no file")
            out += read_requirements(path.parent / include, _seen | {path.resolve()})
            continue
        if line.startswith("-"):
            continue  # an index or other option: nothing to check
        try:
            out.append(Requirement(line))
        except InvalidRequirement as exc:
            raise BadInput(f"{path}:{number}: not a requirement ({exc})") from None
    return out


def suite_requirements(root: Path | None) -> tuple[list[Requirement], str]:
    """The suite's requirements but torch, and where they were read: the checkout's
    ``requirements-base.txt``, else the installed detconf distribution's metadata."""
    if root is not None and (root / "requirements-base.txt").is_file():
        path = root / "requirements-base.txt"
        return [r for r in read_requirements(path) if canonicalize_name(r.name) != TORCH], path.name
    try:
        declared = metadata.requires("detconf") or []
    except metadata.PackageNotFoundError:
        raise BadInput("cannot find the suite's requirements (no requirements-base.txt, detconf not installed): "
                       "pass --requirements FILE") from None
    reqs = [Requirement(text) for text in declared]
    return [r for r in reqs if canonicalize_name(r.name) != TORCH and _applies(r, "")], "detconf's metadata"


def _applies(req: Requirement, extra: str) -> bool:
    if req.marker is None:
        return True
    env = dict(default_environment())
    env["extra"] = extra
    return bool(req.marker.evaluate(env))


def _satisfies(req: Requirement, version: str) -> bool:
    if not req.specifier:
        return True
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _installed() -> dict[str, metadata.Distribution]:
    """Installed distributions by canonical name: the first on ``sys.path`` wins, as for imports."""
    out: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and canonicalize_name(name) not in out:
            out[canonicalize_name(name)] = dist
    return out


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str
    version: str
    compatible: bool

    def requires(self) -> list[str]:
        """``Requires-Dist`` of the wheel's METADATA (the wheel a regular file, its METADATA at
        most :data:`MAX_LIST_BYTES`)."""
        regular_file(self.path, "--wheels")
        try:
            with zipfile.ZipFile(self.path) as z:
                meta = next((i for i in z.infolist() if i.filename.count("/") == 1
                             and i.filename.endswith(".dist-info/METADATA")), None)
                if meta is None:
                    return []
                if meta.file_size > MAX_LIST_BYTES:
                    raise BadInput(f"{self.path}: its METADATA is {meta.file_size} bytes (at most {MAX_LIST_BYTES})")
                with z.open(meta) as fh:
                    data = fh.read(MAX_LIST_BYTES + 1)
                if len(data) > MAX_LIST_BYTES:
                    raise BadInput(f"{self.path}: its METADATA is more than {MAX_LIST_BYTES} bytes")
                message = email.parser.Parser().parsestr(data.decode("utf-8", "replace"))
        except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, NotImplementedError) as exc:
            raise BadInput(f"{self.path}: not a readable wheel ({' '.join(str(exc).split())[:200]})") from None
        return message.get_all("Requires-Dist") or []


def wheels_in(folder: Path) -> dict[str, list[Wheel]]:
    """The wheels of a folder by canonical name, best first (compatible, then newest)."""
    supported = set(sys_tags())
    out: dict[str, list[Wheel]] = {}
    try:
        paths = sorted(folder.glob("*.whl"))
    except OSError as exc:
        raise BadInput(f"--wheels {folder}: cannot list it ({exc.strerror or exc})") from None
    for path in paths:
        try:
            name, version, _, tags = parse_wheel_filename(path.name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        regular_file(path, "--wheels")  # a FIFO named *.whl would hang the reading of its METADATA
        out.setdefault(canonicalize_name(name), []).append(
            Wheel(path, str(name), str(version), compatible=bool(set(tags) & supported)))
    for found in out.values():
        found.sort(key=lambda w: (Version(w.version), w.path.name), reverse=True)  # newest first,
        found.sort(key=lambda w: not w.compatible)  # then (a stable sort) those this interpreter takes
    return out


def check(requirements: Sequence[Requirement], origin: str, wheels: Path | None = None) -> Check:
    """Walk the requirements and what they require in turn (markers evaluated for this
    interpreter): what is installed and does, what the wheel folder provides, what must be
    brought. Installed packages' own dependencies are walked too: one that is absent is needed;
    one whose version is off is only noted (the package works, or pip would have said)."""
    installed = _installed()
    offered = wheels_in(wheels) if wheels is not None else {}
    result = Check()
    torch_dist = installed.get(TORCH)
    result.torch = torch_dist.version if torch_dist is not None else None
    queue: list[tuple[Requirement, str, bool]] = [(r, origin, True) for r in requirements]
    done: set[str] = {TORCH}  # torch's own dependencies are its build's business
    planned: dict[str, str] = {}
    while queue:
        req, why, direct = queue.pop(0)
        name = canonicalize_name(req.name)
        if name == TORCH:  # the machine's own build: it does, or it is a conflict; never a wheel to bring
            if result.torch is not None and _satisfies(req, result.torch):
                result.checked[TORCH] = result.torch
            elif result.torch is not None:
                said = f"{why} requires {req}, but this machine's torch is {result.torch}"
                if direct or why.endswith("(from the wheel folder)"):
                    said += " (gpu-run never installs or changes torch)"
                    if said not in result.conflicts:
                        result.conflicts.append(said)
                else:  # an installed package's own requirement: it is installed, as for any other
                    result.notes.append(said)
            continue
        if name in planned:
            if not _satisfies(req, planned[name]):
                result.needs.append(Need(str(req), why, installed=f"{planned[name]} (from the wheel folder)"))
            continue
        dist = installed.get(name)
        if dist is not None and _satisfies(req, dist.version):
            result.checked[name] = dist.version
            if name not in done:
                done.add(name)
                for text in dist.requires or []:
                    sub = _parse(text, dist)
                    if sub is not None and any(_applies(sub, extra) for extra in ("", *sorted(req.extras))):
                        queue.append((sub, f"{dist.metadata['Name']} {dist.version}", False))
            continue
        if dist is not None and not direct and not why.endswith("(from the wheel folder)"):
            result.notes.append(f"{dist.metadata['Name']} {dist.version} is installed; {why} asks for {req}")
            done.add(name)
            continue
        wheel = next((w for w in offered.get(name, []) if w.compatible and _satisfies(req, w.version)), None)
        if wheel is None:
            result.needs.append(Need(str(req), why, installed=dist.version if dist is not None else None))
            done.add(name)
            continue
        planned[name] = wheel.version
        result.install.append((wheel.name, wheel.version, wheel.path))
        for text in wheel.requires():
            sub = _parse(text, None)
            if sub is not None and any(_applies(sub, extra) for extra in ("", *sorted(req.extras))):
                queue.append((sub, f"{wheel.name} {wheel.version} (from the wheel folder)", False))
    return result


def _parse(text: str, dist) -> Requirement | None:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None  # a malformed dependency of an installed package is not the suite's to judge


def why_not_offered(name: str, wheels: Path) -> str:
    """Why the wheel folder has no usable wheel of ``name`` (for the missing list)."""
    found = wheels_in(wheels).get(canonicalize_name(name), [])
    if not found:
        return "no wheel of it in the folder"
    return "; ".join(f"{w.path.name}: " + ("not for this interpreter" if not w.compatible else "version does not do")
                     for w in found)


def platform_tags() -> list[str]:
    """The platform tags to ask an index for the wheels of this interpreter, most specific first
    (``manylinux_2_36_x86_64`` down to ``manylinux_2_5_x86_64`` and the legacy aliases). A
    ``linux_*`` tag is left out (PyPI holds no such wheels), whatever place the installed
    ``packaging`` gives it; on a glibc Linux the ``manylinux`` tags of its glibc are there even
    where ``sys_tags()`` lists none; ``any`` is left out too (pip takes pure-Python wheels whatever
    the platforms). Only where nothing else is left are the ``linux_*`` tags kept."""
    tags = list(dict.fromkeys(str(t.platform) for t in sys_tags()))
    portable = [t for t in tags if not t.startswith("linux_") and t != "any"]  # pip takes "any" wheels anyway
    libc, version = platform.libc_ver()
    if sys.platform.startswith("linux") and libc == "glibc" and version.count(".") >= 1:
        arches = [t[len("linux_"):] for t in tags if t.startswith("linux_")]
        for arch in arches[:1] or [platform.machine()]:
            if not any(t.startswith("manylinux") for t in portable):
                try:
                    portable += manylinux_tags(version, arch)
                except ValueError:
                    pass
    return list(dict.fromkeys(portable)) or [t for t in tags if t != "any"] or tags


def manylinux_tags(glibc: str, arch: str = "x86_64") -> list[str]:
    """The platform tags of a glibc-``glibc`` Linux on ``arch``, newest first: what ``pip download
    --platform`` must be given, every one, since pip matches each tag exactly (a wheel tagged
    ``manylinux_2_17_x86_64`` is not found under ``--platform manylinux_2_28_x86_64``)."""
    major, minor = (int(x) for x in glibc.split(".")[:2])
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
    aliases = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return tags + [f"{alias}_{arch}" for m, alias in aliases.items() if m <= minor]


def download_command(requirements: Sequence[str], *, python_version: str, implementation: str, abi: str,
                     platforms: Sequence[str], dest: str = "wheels", no_deps: bool = False) -> list[str]:
    """``pip download`` of binary wheels for another interpreter: every platform tag given."""
    args = ["python3", "-m", "pip", "download", "--only-binary=:all:", "--dest", dest,
            "--python-version", python_version, "--implementation", implementation, "--abi", abi]
    for tag in platforms:
        args += ["--platform", tag]
    return args + (["--no-deps"] if no_deps else []) + list(requirements)


def pip_download_hint(needs: Sequence[Need]) -> str:
    """The command that fetches the missing wheels (and their dependencies) on a machine with a
    network, for this interpreter (all of its platform tags)."""
    tag = interpreter_tag().split("-")
    v = sys.version_info
    wanted = [n.requirement for n in needs if not _is_torch(n.requirement)]  # torch is never fetched
    return shlex.join(download_command(wanted, python_version=f"{v.major}.{v.minor}",
                                       implementation=tag[0][:2], abi=tag[1], platforms=platform_tags()))


def _is_torch(requirement: str) -> bool:
    try:
        return canonicalize_name(Requirement(requirement).name) == TORCH
    except InvalidRequirement:
        return False


def externally_managed() -> bool:
    """Does pip refuse to install into this interpreter (PEP 668) unless told otherwise?"""
    if sys.prefix != sys.base_prefix:
        return False
    return (Path(sysconfig.get_path("stdlib")) / "EXTERNALLY-MANAGED").is_file()



def recheck(requirements: Path | None, root: Path | None, env: dict) -> Check | None:
    """The requirements checked again in a fresh interpreter (what pip just installed, e.g. into a
    user site folder that did not exist at our start, is seen there)."""
    code = ("import json, sys; from pathlib import Path; from detconf import wheels as g\n"
            "req = sys.argv[1]; root = Path(sys.argv[2]) if sys.argv[2] else None\n"
            "reqs, origin = (g.read_requirements(Path(req)), Path(req).name) if req else g.suite_requirements(root)\n"
            "c = g.check(reqs, origin)\n"
            "print(json.dumps({'needs': [[n.requirement, n.why, n.installed] for n in c.needs],\n"
            "                  'conflicts': c.conflicts, 'torch': c.torch}))\n")
    package_parent = str(Path(__file__).resolve().parent.parent)
    run = subprocess.run([sys.executable, "-c", code, str(requirements or ""), str(root or "")],
                         capture_output=True, text=True, env={**env, "PYTHONPATH": os.pathsep.join(
                             filter(None, [package_parent, env.get("PYTHONPATH")]))}, cwd=package_parent)
    if run.returncode != 0:
        return None
    try:
        data = json.loads(run.stdout.strip().splitlines()[-1])
        c = Check(torch=data["torch"], conflicts=list(data["conflicts"]))
        c.needs = [Need(requirement, why, installed) for requirement, why, installed in data["needs"]]
    except (ValueError, IndexError, KeyError, TypeError):
        return None
    return c


def install(check_result: Check, wheels: Path, pip_options: list[str], env: dict, *, say) -> int:
    specs = [f"{name}=={version}" for name, version, _ in check_result.install]
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(wheels),
               "--disable-pip-version-check", *pip_options, *specs]
    say(f"installing {len(specs)} from {wheels}: {shlex.join(['python', *command[1:]])}")
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        tail = " ".join(run.stderr.strip().splitlines()[-4:])
        say(f"pip install failed (exit status {run.returncode}): {tail[-600:]}")
        if "externally-managed" in run.stderr or externally_managed():
            say("this interpreter is externally managed (PEP 668): use a venv made with --system-site-packages "
                "(it sees this torch), or add --pip-option=--user or --pip-option=--break-system-packages")
    return run.returncode


def report_requirements(result: Check, wheels: Path | None, *, say, show=print) -> None:
    if result.torch is None:
        say("torch is not installed: install this machine's own torch build first (gpu-run never installs torch)")
    else:
        say(f"torch {result.torch} is installed (kept as it is)")
    for note in result.notes:
        say(f"note: {note}")
    for conflict in result.conflicts:
        say(f"conflict: {conflict}")
    if not result.needs:
        return
    where = f" (not usable in {wheels})" if wheels is not None else ""
    say(f"missing {len(result.needs)}{where}; bring wheels for Python {python_tag()} "
        f"({interpreter_tag()}; pure-Python wheels are py3-none-any):")
    for need in result.needs:
        extra = f"  [{why_not_offered(Requirement(need.requirement).name, wheels)}]" if wheels is not None else ""
        show(f"  {need.line()}{extra}")
    if wheels is None:
        say("their own dependencies are checked once the wheels are here (run again with --wheels DIR)")
    say(f"on a machine with a network: {pip_download_hint(result.needs)}")


def report_recheck(again: Check, installed: Sequence[str], wheels: Path, *, say, show=print) -> None:
    """What a fresh interpreter still misses after the install from ``wheels``: what was
    installed and is not seen (pip put it where this Python does not look), and what is missing
    besides (with the command that fetches it)."""
    unseen, other = split_recheck(again, installed)
    for conflict in again.conflicts:
        say(f"conflict: {conflict}")
    if unseen:
        say(f"installed from {wheels} but not seen by a fresh interpreter ({sys.executable}): pip put "
            f"{'it' if len(unseen) == 1 else 'them'} where this Python does not look (a --pip-option such as "
            "--target or --prefix?):")
        for need in unseen:
            show(f"  {need.line()}")
    if other:
        say(f"missing {len(other)} besides; bring wheels for Python {python_tag()} ({interpreter_tag()}):")
        for need in other:
            show(f"  {need.line()}")
        say(f"on a machine with a network: {pip_download_hint(other)}")


def split_recheck(again: Check, installed: Sequence[str]) -> tuple[list[Need], list[Need]]:
    """The re-check's needs: those just installed (and not seen), and the others."""
    names = {canonicalize_name(name) for name in installed}

    def name(need: Need) -> str:
        try:
            return canonicalize_name(Requirement(need.requirement).name)
        except InvalidRequirement:
            return ""

    unseen = [n for n in again.needs if name(n) in names]
    return unseen, [n for n in again.needs if n not in unseen]
