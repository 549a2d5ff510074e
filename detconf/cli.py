"""The ``detconf`` command.

``detconf run [pytest args]`` runs the conformance suite (the installed one, or the checkout this
module belongs to) from any folder; ``detconf report SUB [args]`` is ``python -m reports SUB``
(build, diff, drift, sensitivity, certify, verify and whatever else the reports CLI knows: its
own parser answers for the subcommand); ``detconf gpu-run [options] [-- pytest args]`` checks and
installs the requirements from a wheel folder, runs every step of the suite on a GPU machine and
archives what they wrote (:mod:`detconf.gpurun`); ``detconf gpu-pack`` packs the suite, the wheels a
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

USAGE = ("usage: detconf run [pytest args] | detconf report {build,diff,drift,sensitivity,certify,verify,fingerprints} "
         "[args] | detconf gpu-run [--wheels DIR] [--steps LIST] [--device NAME] [--budget S] [--out DIR] [-n N] "
         "[-- pytest args] | detconf gpu-pack [--out DIR] [--alert-tests FILE]")


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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        root = suite_root()
        if root is None:
            return _error("cannot find the conformance suite (the 'conformance' package): reinstall detconf")
        env = dict(os.environ)
        if env.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
            return _error("PYTEST_DISABLE_PLUGIN_AUTOLOAD is set: pytest would not load detconf's plugin; unset it")
        return subprocess.call(run_command(rest, root), env=env)
    if command == "report":
        if not rest:
            return _error("detconf report needs a subcommand: build, diff, drift, sensitivity, certify, verify "
                          "or fingerprints")
        if importlib.util.find_spec("reports") is None:
            return _error("cannot find the reports package: reinstall detconf")
        return subprocess.call([sys.executable, "-m", "reports", *rest])
    if command == "gpu-run":
        from detconf import gpurun

        return gpurun.main(rest)
    if command == "gpu-pack":
        from detconf import gpupack

        return gpupack.main(rest)
    return _error(f"unknown command {command[:40]!r}; {USAGE}")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
