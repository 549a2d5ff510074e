"""The environments the harness's tests make for themselves (throwaway venvs, builds without
build isolation) and what this interpreter lacks for them: the tests hold in any environment the
README or scripts/version-matrix.sh makes (the base interpreter, a virtualenv), or skip naming
what is missing."""
from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sysconfig
from pathlib import Path


def clean_env(**extra: str) -> dict:
    """This process's environment without an enclosing pytest's variables or PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def see_this_interpreters_packages(python: Path | str) -> None:
    """``--system-site-packages`` gives a venv the *base* interpreter's packages; when the tests
    run in a virtualenv (the README's path), torch and the requirements are in that one. A
    ``.pth`` file puts this interpreter's site folders on the new venv's path, ahead of the base's."""
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            capture_output=True, text=True, timeout=60, env=clean_env())
    if target.returncode != 0:
        raise RuntimeError(f"{python}: cannot ask its site folder: {target.stderr.strip()[-300:]}")
    folders = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()])
    Path(target.stdout.strip(), "_detconf_test_host.pth").write_text("".join(f"{f}\n" for f in folders))


def wheel_building_missing() -> str | None:
    """Why pip cannot build a wheel here without build isolation (offline), or None: it needs
    setuptools, and setuptools' ``bdist_wheel`` (built in from setuptools 70.1, else the ``wheel``
    distribution; a fresh Python 3.11 venv has setuptools 65 and no ``wheel``)."""
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools is not installed (pip builds without build isolation, offline)"
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None and importlib.util.find_spec("wheel") is None:
        return ("setuptools has no bdist_wheel (setuptools < 70.1 without the wheel distribution): "
                "pip cannot build a wheel without build isolation, offline")
    return None


def allow_this_machines_plugins(run: dict) -> list[str]:
    """``certify --allow-plugin DIST`` for every pytest plugin distribution a run record shows
    besides the known ones (a machine with pytest-benchmark installed, say): the tests certify
    runs of this machine as a vendor allows its own backend's plugin."""
    from detconf.vocabulary import KNOWN_PLUGIN_DISTRIBUTIONS

    foreign = sorted({p["distribution"] for p in run["env"]["plugins"] if p["distribution"]
                      and p["distribution"] not in KNOWN_PLUGIN_DISTRIBUTIONS and not p["module"].startswith("detconf.")})
    return [arg for dist in foreign for arg in ("--allow-plugin", dist)]
