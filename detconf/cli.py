"""The ``detconf`` command.

``detconf run [pytest args]`` runs the conformance suite (the installed one, or the checkout this
module belongs to) from any folder; ``detconf report SUB [args]`` is ``python -m detconf.reports SUB``
(build, diff, drift, sensitivity, overview, certify, verify, fingerprints, upstream: ``REPORT_COMMANDS``,
which the reports CLI's parser lists; its own parser answers for the subcommand);
``detconf gpu-run [options] [-- pytest args]`` checks and installs the requirements from a wheel
folder, runs every step of the suite on a GPU machine and archives what they wrote (:mod:`detconf.gpurun`); ``detconf gpu-pack`` packs the suite, the wheels a
lent GPU lacks and the revision into one folder for a device call (:mod:`detconf.gpupack`). Bad input: one line on standard error, exit
status 2.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from detconf.suite import suite_root

#: Every subcommand of ``python -m detconf.reports`` (its parser takes its list from here).
REPORT_COMMANDS = ("build", "diff", "drift", "sensitivity", "overview", "certify", "verify", "fingerprints", "upstream")

USAGE = ("usage: detconf {run,options,report,gpu-run,gpu-pack} [args]   (detconf --help: what each does)")

HELP = """usage: detconf COMMAND [args]

The conformance suite for PyTorch's deterministic mode, from any folder.

commands:
  run [pytest args]     run the conformance suite (pytest with detconf's plugin): e.g.
                        detconf run --device cuda --mode error --hypothesis-profile ci -n auto;
                        detconf run --help shows detconf's options first
  options               detconf's options, grouped, and the Hypothesis profiles with what each costs
  report SUB [args]     python -m detconf.reports SUB: build (the matrix of results files), diff (two runs
                        cell by cell), drift (the documented promises across releases),
                        sensitivity, overview, certify, verify, fingerprints (two GPUs' bytes),
                        upstream (a failing cell as a torch-only script and an issue text)
  gpu-run [options]     everything on a GPU machine offline, inside a --budget, into one archive
                        (detconf gpu-run --help)
  gpu-pack [options]    pack the suite, its revision and the wheels a lent GPU lacks into one
                        folder for a device call (detconf gpu-pack --help)

Bad input: one line on standard error, exit status 2. docs: README.md and docs/ of the checkout.
"""

#: Run from the suite's root: prints the Hypothesis profiles (conformance/profiles.py's own text).
_PROFILES = ("from detconf.conformance import profiles; "
             "print(profiles.__doc__.split(chr(10) + chr(10), 1)[1].replace('``', '`'))")


def _error(message: str) -> int:
    print(f"detconf: error: {message}", file=sys.stderr)
    return 2


def run_command(args: list[str], root: Path) -> list[str]:
    """The pytest command line ``detconf run args`` stands for."""
    command = [sys.executable, "-m", "pytest", str(root / "conformance"), "--rootdir", str(root)]
    if not (root / "pytest.ini").is_file() and "no:cacheprovider" not in args:
        # An installed suite: pytest's cache goes to the folder the command runs in, not site-packages.
        command += ["-o", f"cache_dir={Path.cwd() / '.pytest_cache'}"]
    return command + list(args)


def _options(root: Path, env: dict, *, then_pytest: bool) -> int:
    """detconf's own options (pytest's help, the detconf group), then the Hypothesis profiles;
    for ``run --help``, then where pytest's own options are."""
    out = subprocess.run(run_command(["--help"], root), env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return _error(f"pytest --help failed (exit status {out.returncode}): {' '.join(out.stderr.split())[-300:]}")
    lines = out.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("detconf conformance suite")), None)
    if start is None:
        return _error("pytest did not load detconf's plugin (no 'detconf conformance suite' options in its help)")
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    print("usage: detconf run [detconf options] [pytest options]   (= python -m pytest conformance ...)\n")
    print("\n".join(lines[start:end]).rstrip() + "\n")
    profiles = subprocess.run([sys.executable, "-c", _PROFILES], cwd=root, env=env, capture_output=True, text=True)
    if profiles.returncode == 0:
        print("--hypothesis-profile NAME (Hypothesis's option; the suite registers these):")
        print("\n".join("  " + line for line in profiles.stdout.strip().splitlines()).rstrip())
        print()
    if then_pytest:
        print("pytest's own options (-n N from pytest-xdist, -k, -x, --hypothesis-seed, ...): python -m pytest --help")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away (detconf options | head): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(HELP, end="")
        return 0
    command, rest = argv[0], argv[1:]
    if command in ("run", "options"):
        root = suite_root()
        if root is None:
            return _error("cannot find the conformance suite (the 'conformance' package): reinstall detconf")
        env = dict(os.environ)
        if env.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            return _error("PYTEST_DISABLE_PLUGIN_AUTOLOAD is set: pytest would not load detconf's plugin; unset it")
        if command == "options" or any(a in ("-h", "--help") for a in rest):
            if command == "options" and rest:
                return _error(f"detconf options takes no arguments (got {rest[0][:40]!r})")
            return _options(root, env, then_pytest=command == "run")
        return subprocess.call(run_command(rest, root), env=env)
    if command == "report":
        if not rest:
            return _error(f"detconf report needs a subcommand: {', '.join(REPORT_COMMANDS[:-1])} or "
                          f"{REPORT_COMMANDS[-1]}")
        if importlib.util.find_spec("detconf.reports") is None:
            return _error("cannot find the reports package: reinstall detconf")
        return subprocess.call([sys.executable, "-m", "detconf.reports", *rest])
    if command == "gpu-run":
        from detconf import gpurun

        return gpurun.main(rest)
    if command == "gpu-pack":
        from detconf import gpupack

        return gpupack.main(rest)
    return _error(f"unknown command {command[:40]!r}; {USAGE}")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
