"""Rebuild every published table under ``reports/published/`` from its results files.

Each table is rebuilt as its ``COMMAND.md`` says (``build``, ``sensitivity``, ``diff``,
``drift``, ``overview``, ``verify``), into a folder of its own, with the ``reports`` package of a chosen
checkout; the inputs are always this checkout's published results files, given by the same
relative paths, so that two checkouts' outputs compare byte for byte.

    # rebuild with this checkout into OUT/<table>/
    python scripts/rebuild_published.py build OUT [--tree DIR]
    # the same tables with two checkouts (e.g. a worktree of the last commit): every file equal?
    python scripts/rebuild_published.py compare OLD_TREE [NEW_TREE]
    # is what is published what this checkout builds? (every file the rebuild makes that is published)
    python scripts/rebuild_published.py check
    # write the rebuilt files over the published ones
    python scripts/rebuild_published.py publish

Exit status: 0 equal (or written), 1 a file differs, 2 a command failed. Each command's
standard output is kept beside the table as ``_stdout/N-COMMAND.txt`` (compared by
``compare``, never published).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = "reports/published"


def _p(path: str) -> str:
    return f"{PUBLISHED}/{path}"


def _matrix_and_sensitivity(table: str) -> list[tuple[str, list[str], str | None]]:
    """A table made of one results file: its matrix and its sensitivity table."""
    return [(kind, [_p(f"{table}/results.jsonl"), "--out", "OUT"], None) for kind in ("build", "sensitivity")]


#: table folder -> commands, each ``(kind, arguments, file its standard output is published as)``.
#: ``OUT`` stands for the table's output folder.
TABLES: dict[str, list[tuple[str, list[str], str | None]]] = {
    "torch-2.13.0/cpu": _matrix_and_sensitivity("torch-2.13.0/cpu"),
    "torch-2.13.0/cpu-sweep": _matrix_and_sensitivity("torch-2.13.0/cpu-sweep"),
    "torch-2.15.0/cpu": _matrix_and_sensitivity("torch-2.15.0/cpu"),
    "torch-2.15.0/cpu-sweep": _matrix_and_sensitivity("torch-2.15.0/cpu-sweep"),
    "torch-2.14.1/cpu": _matrix_and_sensitivity("torch-2.14.1/cpu"),
    "torch-2.11.0/cpu": _matrix_and_sensitivity("torch-2.11.0/cpu"),
    "torch-2.5.1/cpu": _matrix_and_sensitivity("torch-2.5.1/cpu"),
    "torch-2.11.0/opencl-pocl": [
        ("build", [_p("torch-2.11.0/opencl-pocl/results.jsonl"), "--out", "OUT"], None),
        ("verify", [_p("torch-2.11.0/opencl-pocl/certification")], None),
    ],
    "torch-2.11.0/opencl-pocl/vs-cpu": [
        ("build", [_p("torch-2.11.0/cpu/results.jsonl"), _p("torch-2.11.0/opencl-pocl/results.jsonl"),
                   "--out", "OUT"], None),
    ],
    **{f"torch-2.11.0/cuda-h100/{table}": [
        ("build", [_p(f"torch-2.11.0/cuda-h100/{table}/results.jsonl"), "--out", "OUT"], None),
    ] for table in ("documented", "inductor", "sweep", "stress")},
    "torch-2.11.0/opencl-pocl-sweep": [
        ("build", [_p("torch-2.11.0/opencl-pocl-sweep/results.jsonl"), "--out", "OUT"], None),
    ],
    "cross-version": [
        ("build", [_p(f"torch-{v}/cpu/results.jsonl") for v in ("2.5.1", "2.11.0", "2.13.0", "2.14.1", "2.15.0")]
         + ["--out", "OUT"], None),
        ("diff", [_p("torch-2.5.1/cpu/results.jsonl"), _p("torch-2.11.0/cpu/results.jsonl")],
         "diff-2.5.1-to-2.11.0.txt"),
        ("diff", [_p("torch-2.11.0/cpu/results.jsonl"), _p("torch-2.13.0/cpu/results.jsonl")],
         "diff-2.11.0-to-2.13.0.txt"),
        ("diff", [_p("torch-2.13.0/cpu/results.jsonl"), _p("torch-2.14.1/cpu/results.jsonl")],
         "diff-2.13.0-to-2.14.1.txt"),
        ("diff", [_p("torch-2.14.1/cpu/results.jsonl"), _p("torch-2.15.0/cpu/results.jsonl")],
         "diff-2.14.1-to-2.15.0.txt"),
    ],
    "drift": [
        ("drift", [_p("drift/spec-history.jsonl"), "--out", "OUT"], None),
    ],
    "overview": [
        ("overview", [_p(f"torch-{v}/cpu/results.jsonl") for v in ("2.5.1", "2.11.0")]
         + [_p("torch-2.11.0/opencl-pocl/results.jsonl")]
         + [_p(f"torch-{v}/cpu/results.jsonl") for v in ("2.13.0", "2.14.1", "2.15.0")] + ["--out", "OUT"], None),
    ],
}

#: A launcher for TREE's reports (and detconf), run from this checkout's root (``-m`` would put
#: the working folder first on the path; a tree from before the packages became detconf's
#: subpackages imports its reports by their old top-level name). It imports the command modules
#: once, then for each JSON line on its standard input (``{"argv": [...], "out": PATH, "err":
#: PATH}``) forks a child that runs ``main(argv)`` with its standard output and error in those
#: files and exits with the status ``python -m`` would give (threads waited for, ``atexit`` run,
#: streams flushed; not the teardown of pandas, pyarrow and matplotlib that follows, about 0.25 s
#: a command), and answers ``{"code": N}`` (N < 0: killed by signal -N). Each command still runs in a process of its own; only the imports (pandas, pyarrow,
#: and the matplotlib modules ``reports.picture`` imports when it draws: most of a small table's
#: time; tabulate, wcwidth, jinja2 and markupsafe) and the compiling of the page's template are
#: made once. Standard input closed: it exits.
_SERVE = ("import sys, os, json, importlib; sys.path[0] = sys.argv.pop(1); package = sys.argv.pop(1)\n"
          "main = importlib.import_module(package + '.__main__').main\n"
          "for kind in sys.argv[1:]:\n"
          "    importlib.import_module(package + '.' + kind)\n"
          "for name in ('matplotlib', *('matplotlib.' + m for m in ('figure', 'colors', 'lines', 'patches',\n"
          "                                                      'backends.backend_agg'))):\n"
          "    try:\n"
          "        importlib.import_module(name)  # what reports.picture imports when it draws\n"
          "    except ImportError:\n"
          "        break\n"
          "for name in ('tabulate', 'wcwidth', 'jinja2', 'markupsafe'):  # the tables' and the page's\n"
          "    try:\n"
          "        importlib.import_module(name)\n"
          "    except ImportError:\n"
          "        pass\n"
          "try:  # the page's template, compiled once here rather than in every command\n"
          "    importlib.import_module(package + '.page')._page_template()\n"
          "except (ImportError, AttributeError):  # a tree from before it\n"
          "    pass\n"
          "for line in sys.stdin:\n"
          "    request = json.loads(line)\n"
          "    sys.stdout.flush(); sys.stderr.flush()\n"
          "    pid = os.fork()\n"
          "    if pid == 0:\n"
          "        for fd, path in ((1, request['out']), (2, request['err'])):\n"
          "            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
          "            os.dup2(target, fd); os.close(target)\n"
          "        sys.argv = ['-c', *request['argv']]\n"
          "        try:\n"
          "            code = main(request['argv'])\n"
          "        except SystemExit as exc:\n"
          "            code = exc.code\n"
          "        if code is not None and not isinstance(code, int):\n"
          "            print(code, file=sys.stderr); code = 1\n"
          "        import atexit, threading; threading._shutdown(); atexit._run_exitfuncs()\n"
          "        sys.stdout.flush(); sys.stderr.flush()\n"
          "        os._exit((code or 0) & 0xFF)\n"
          "    _, status = os.waitpid(pid, 0)\n"
          "    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)\n"
          "    print(json.dumps({'code': code}), flush=True)\n")


def _reports_package(tree: Path) -> str:
    """How TREE's reports package is imported: ``detconf.reports``, or ``reports`` in a tree from
    before the rename (its detconf/__init__.py does not name the subpackages)."""
    init = tree / "detconf" / "__init__.py"
    return "detconf.reports" if init.is_file() and "SUBPACKAGES" in init.read_text(encoding="utf-8") else "reports"


def rebuild(tree: Path, out: Path, python: str = sys.executable) -> dict[str, float]:
    """Every table into ``out/<table>/`` with the reports of ``tree``; returns seconds per table."""
    seconds = {}
    kinds = sorted({kind for commands in TABLES.values() for kind, _, _ in commands
                    if (tree / "reports" / f"{kind}.py").is_file()})
    launcher = subprocess.Popen([python, "-c", _SERVE, str(tree), _reports_package(tree), *kinds], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with tempfile.TemporaryDirectory(prefix="rebuild-streams-") as streams:
            for table, commands in TABLES.items():
                folder = out / table
                (folder / "_stdout").mkdir(parents=True, exist_ok=True)
                start = time.perf_counter()
                for n, (kind, args, published_as) in enumerate(commands):
                    if kind not in kinds:  # a checkout from before the command
                        print(f"{table}: {kind}: not in {tree}, skipped")
                        continue
                    argv = [kind, *[str(folder) if a == "OUT" else a for a in args]]
                    code, stdout, stderr = _launch(launcher, argv, Path(streams))
                    if code not in (0, 1) or (code == 1 and kind not in ("diff", "verify")):
                        sys.exit(f"rebuild_published: {table}: {kind} exited {code}: "
                                 f"{stderr.strip().splitlines()[-1:] or ''}")
                    shown = stdout.replace(str(folder), "OUT")  # the folder's own name differs per rebuild
                    (folder / "_stdout" / f"{n}-{kind}.txt").write_text(shown, encoding="utf-8")
                    if published_as:
                        (folder / published_as).write_text(stdout, encoding="utf-8")
                seconds[table] = time.perf_counter() - start
    finally:
        launcher.stdin.close()
        launcher.wait()
    return seconds


def _launch(launcher: subprocess.Popen, argv: list[str], streams: Path) -> tuple[int, str, str]:
    """Run ``python -m detconf.reports ARGV`` as a child of ``launcher``: (exit status, stdout, stderr)."""
    out, err = streams / "out", streams / "err"
    launcher.stdin.write(json.dumps({"argv": argv, "out": str(out), "err": str(err)}) + "\n")
    launcher.stdin.flush()
    reply = launcher.stdout.readline()
    if not reply:
        sys.exit(f"rebuild_published: the launcher of {argv[0]} ended (exit status {launcher.wait()})")
    return json.loads(reply)["code"], out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")


def _files(folder: Path) -> set[str]:
    """Files under ``folder``, as paths relative to it."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def compare(a: Path, b: Path, names: set[str] | None = None) -> list[str]:
    """Files that differ between the folders ``a`` and ``b`` (``names``: only these relative paths)."""
    problems = []
    for rel in sorted(_files(a) | _files(b) if names is None else names):
        left, right = a / rel, b / rel
        if not left.is_file() or not right.is_file():
            problems.append(f"{rel}: only in {a if left.is_file() else b}")
        elif not filecmp.cmp(left, right, shallow=False):
            problems.append(f"{rel}: differs")
    return problems


def _report(seconds: dict[str, float], label: str) -> None:
    total = sum(seconds.values())
    print(f"{label}: {len(seconds)} tables in {total:.1f} s ("
          + ", ".join(f"{t} {s:.1f} s" for t, s in seconds.items()) + ")")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/rebuild_published.py",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="rebuild every table into OUT")
    p_build.add_argument("out")
    p_build.add_argument("--tree", default=str(ROOT), help="checkout whose reports build (default: this one)")
    p_compare = sub.add_parser("compare", help="rebuild with two checkouts and compare every file")
    p_compare.add_argument("old")
    p_compare.add_argument("new", nargs="?", default=str(ROOT))
    sub.add_parser("check", help="rebuild with this checkout and compare with what is published")
    sub.add_parser("publish", help="rebuild with this checkout and write over the published files")
    args = parser.parse_args(argv)

    if args.command == "build":
        _report(rebuild(Path(args.tree).resolve(), Path(args.out).resolve()), args.tree)
        return 0
    with tempfile.TemporaryDirectory(prefix="rebuild-published-") as tmp:
        tmp = Path(tmp)
        if args.command == "compare":
            old, new = Path(args.old).resolve(), Path(args.new).resolve()
            _report(rebuild(old, tmp / "old"), f"old ({old})")
            _report(rebuild(new, tmp / "new"), f"new ({new})")
            problems = compare(tmp / "old", tmp / "new")
            count = len(_files(tmp / "new"))
            for line in problems:
                print(line)
            print(f"{count} files compared: " + ("all byte-identical" if not problems else f"{len(problems)} differ"))
            return 1 if problems else 0
        _report(rebuild(ROOT, tmp / "new"), f"this checkout ({ROOT})")
        published = ROOT / PUBLISHED
        made = {rel for rel in _files(tmp / "new") if "_stdout/" not in rel}
        if args.command == "publish":
            for rel in sorted(made):
                target = published / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(tmp / "new" / rel, target)
            print(f"wrote {len(made)} files under {PUBLISHED}")
            return 0
        names = {rel for rel in made if (published / rel).is_file()}
        problems = compare(tmp / "new", published, names)
        for line in problems:
            print(line)
        print(f"{len(names)} published files compared: "
              + ("all as this checkout builds them" if not problems else f"{len(problems)} differ"))
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
