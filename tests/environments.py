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


def as_a_whole_plan_run(records: list[dict]) -> list[dict]:
    """The records of a small real run, changed into what a certifiable run records: a clean
    checkout of this commit, its whole plan run (no selection), every source, and the end
    record's suite's own plan of that plan (a run of some sources computes none). The fields
    changed are the only ones that differ; certification tests start from these."""
    from detconf.revision import plan_digest

    run, end = records[0], records[-1]
    assert run["record"] == "run" and end["record"] == "end" and "suite_plan" not in end
    assert run["whole_plan"] > run["planned"], "a small run of a selection stands for the whole plan"
    run["env"]["suite_dirty"] = False
    run["whole_plan"] = run["planned"]
    run["env"]["sources"] = "all"
    end["suite_plan"] = {"cases": run["planned"], "digest": plan_digest(run), "same": True}
    return records
