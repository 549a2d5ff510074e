"""``pip install .`` and ``pip install -e .``: the plugin, the ``detconf`` command, the README's commands.

Each install goes into a throwaway virtual environment that sees the packages of the interpreter
running these tests (``--system-site-packages`` and a ``.pth`` file for a virtualenv's own), so
torch and the requirements come from that interpreter and pip installs
detconf alone (``--no-build-isolation``: the build uses the setuptools already there). The
source is a copy of the suite's files, so a build never writes into the checkout.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from detconf import cli
from tests.environments import clean_env, see_this_interpreters_packages, wheel_building_missing

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PARTS = ("pyproject.toml", "README.md", "conftest.py", "pytest.ini", "detconf", "engine", "conformance", "reports",
                "plugin")
SMALL_RUN = ("--device", "cpu", "--source", "torch-docs", "-k", "put_ and error",
             "--hypothesis-profile", "ci", "-p", "no:cacheprovider")


def _copy_source(into: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "out", "published", "*.egg-info", "build")
    into.mkdir(parents=True)
    for part in SOURCE_PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, into / part, ignore=ignore)
        else:
            shutil.copy2(src, into / part)
    return into


def _torch_of(python: Path | str) -> str:
    """The version and file of the torch ``python`` imports (found as its import finds it; the
    suite runs in these tests import it)."""
    code = ("import importlib.metadata as m, importlib.util as u; "
            "print(m.version('torch'), u.find_spec('torch').origin)")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, env=clean_env(), cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def _install(tmp: Path, *, editable: bool) -> Path:
    """A venv with detconf installed; returns its bin folder."""
    try:
        import venv  # noqa: F401
    except ImportError:
        pytest.skip("the venv module is not available")
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not available to this Python")
    missing = wheel_building_missing()
    if missing:
        pytest.skip(missing)
    source = _copy_source(tmp / "src")
    env_dir = tmp / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                          capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        pytest.skip(f"cannot make a virtual environment: {made.stderr.strip()[-300:]}")
    python = env_dir / "bin" / "python"
    see_this_interpreters_packages(python)
    command = [str(python), "-m", "pip", "install", "--no-build-isolation", "--no-index"]
    command += ["-e", str(source)] if editable else [str(source)]
    # A pip configuration that caps torch below the one installed (a constraint file, as the
    # machine that makes the torch 2.15 environment has) would make pip replace that torch: the
    # install here is about detconf, so the machine's constraint file is left out.
    out = subprocess.run(command, capture_output=True, text=True, timeout=600,
                         env=clean_env(PIP_CONSTRAINT=os.devnull), cwd=tmp)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    installed = [line for line in out.stdout.splitlines() if line.startswith("Successfully installed")]
    assert installed == ["Successfully installed detconf-0.1.0"], out.stdout[-2000:]  # nothing else
    return env_dir / "bin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    return _install(tmp_path_factory.mktemp("install"), editable=False)


def _results(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("record") == "result"]


def test_pip_install_keeps_the_installed_torch(installed):
    assert _torch_of(installed / "python") == _torch_of(sys.executable)
    site = subprocess.run([str(installed / "python"), "-c", "import detconf.conformance as c, detconf.pytest_entry; "
                           "print(c.__file__)"], capture_output=True, text=True, env=clean_env(), cwd="/")
    assert site.returncode == 0 and "site-packages" in site.stdout, site.stdout + site.stderr


def test_nothing_but_detconf_goes_to_the_top_level_of_site_packages(installed):
    """The design's packages install as detconf.engine, detconf.conformance, detconf.plugin and
    detconf.reports: no generic name at the top level for another distribution to overwrite."""
    code = ("import importlib.metadata as m, json\n"
            "print(json.dumps(sorted({str(f).split('/')[0] for f in m.files('detconf') if not str(f).startswith('..')})))")
    out = subprocess.run([str(installed / "python"), "-c", code], capture_output=True, text=True, env=clean_env(), cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == ["detconf", "detconf-0.1.0.dist-info"]


def _decoy_packages(folder: Path) -> Path:
    """A project folder holding packages named like detconf's own, each failing loudly on import."""
    for name in ("engine", "reports", "plugin", "conformance"):
        package = folder / name
        package.mkdir(parents=True)
        for module in ("__init__.py", "__main__.py"):
            (package / module).write_text(f"raise ImportError('the project folder\\'s own {name} was imported')\n")
    return folder


def _wheel_named_reports(folder: Path) -> Path:
    """A distribution named ``reports`` (one exists in the package index) with a top-level
    ``reports`` package, as a wheel built by hand."""
    import base64
    import hashlib
    import zipfile

    files = {"reports/__init__.py": "OWNER = 'the reports distribution'\n",
             "reports-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: reports\nVersion: 1.0\n",
             "reports-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             "reports-1.0.dist-info/top_level.txt": "reports\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("reports-1.0.dist-info/RECORD,,")
    wheel = folder / "reports-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("reports-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_detconf_runs_the_installed_suite_from_a_folder_of_generic_packages_beside_a_distribution_named_reports(
        installed, tmp_path):
    """``detconf run`` from a folder that is not the suite's (one holding packages named like
    detconf's own, beside an installed distribution named ``reports``): the installed suite runs,
    its results go to the default place under that folder and its report is built; ``detconf
    report`` forwards to ``python -m detconf.reports``."""
    python = str(installed / "python")
    wheel = _wheel_named_reports(tmp_path)
    added = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)],
                           capture_output=True, text=True, timeout=300, env=clean_env(), cwd="/")
    assert added.returncode == 0, added.stdout[-2000:] + added.stderr[-2000:]
    work = _decoy_packages(tmp_path / "project")
    out = subprocess.run([str(installed / "detconf"), "run", *SMALL_RUN], cwd=work, env=clean_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert [r["verdict"] for r in _results(work / "reports" / "out" / "results.jsonl")] == ["conforms"] * 3
    assert "site-packages" in out.stdout  # the suite that ran is the installed one
    assert (work / "reports" / "out" / "results-report" / "matrix.md").is_file()
    built = subprocess.run([str(installed / "detconf"), "report", "build", "reports/out/results.jsonl", "--out", "m"],
                           cwd=work, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert built.returncode == 0 and (work / "m" / "matrix.csv").is_file(), built.stdout[-2000:] + built.stderr[-2000:]
    # The other distribution's package is its own, untouched; detconf's reports is detconf.reports.
    owner = subprocess.run([python, "-c", "import reports, detconf.reports as ours; print(reports.OWNER); "
                            "print(ours.__file__)"], capture_output=True, text=True, env=clean_env(), cwd="/")
    assert owner.returncode == 0, owner.stderr[-2000:]
    assert owner.stdout.splitlines()[0] == "the reports distribution"
    assert owner.stdout.splitlines()[1].endswith("site-packages/detconf/reports/__init__.py")
    # The planted folder is what an old layout would have imported: a proof that it is in the way.
    planted = subprocess.run([python, "-c", "import engine"], capture_output=True, text=True, env=clean_env(), cwd=work)
    assert planted.returncode != 0 and "the project folder's own engine was imported" in planted.stderr


def test_the_readme_commands_load_the_plugin_once_with_detconf_installed(installed, tmp_path):
    python = str(installed / "python")
    results = tmp_path / "r.jsonl"
    out = subprocess.run([python, "-m", "pytest", "conformance", *SMALL_RUN, "--results", str(results),
                          "--no-report-build"], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("detconf: torch ") == 1  # one plugin, one header
    assert [r["verdict"] for r in _results(results)] == ["conforms"] * 3
    harness = subprocess.run([python, "-m", "pytest", "tests/test_architecture.py", "-q", "-p", "no:cacheprovider",
                              "-k", "vocabulary or one_way"], cwd=ROOT, env=clean_env(), capture_output=True,
                             text=True, timeout=600)
    assert harness.returncode == 0, harness.stdout[-3000:] + harness.stderr[-3000:]


def test_editable_install_runs_from_any_folder(tmp_path):
    bin_dir = _install(tmp_path, editable=True)
    assert _torch_of(bin_dir / "python") == _torch_of(sys.executable)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([str(bin_dir / "detconf"), "run", *SMALL_RUN, "--results", "r.jsonl"], cwd=elsewhere,
                         env=clean_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert [r["verdict"] for r in _results(elsewhere / "r.jsonl")] == ["conforms"] * 3
    assert str(tmp_path / "src") in out.stdout  # the editable source is the suite


@pytest.mark.parametrize("argv, message", [
    ([], "usage: detconf {run,options,report,gpu-run,gpu-pack}"),
    (["frobnicate"], "detconf: error: unknown command 'frobnicate'"),
    (["report"], "detconf: error: detconf report needs a subcommand"),
    (["options", "extra"], "detconf: error: detconf options takes no arguments (got 'extra')"),
])
def test_bad_detconf_input_is_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err


def test_detconf_report_lets_the_reports_parser_answer(tmp_path):
    out = subprocess.run([sys.executable, "-m", "detconf", "report", "no-such-report"], cwd=ROOT,
                         env=clean_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reports: error:") and "no-such-report" in lines[0], lines


def test_detconf_run_points_pytest_at_the_suite():
    command = cli.run_command(["-k", "put_"], ROOT)
    assert command[1:] == ["-m", "pytest", str(ROOT / "conformance"), "--rootdir", str(ROOT), "-k", "put_"]
    assert cli.suite_root() == ROOT


def test_the_help_describes_every_command_and_run_help_shows_detconfs_options_first(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for command in ("run", "options", "report", "gpu-run", "gpu-pack"):
        assert f"\n  {command} " in text, command
    out = subprocess.run([sys.executable, "-m", "detconf", "run", "--help"], cwd=ROOT, env=clean_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("usage: detconf run") and lines[2] == "detconf conformance suite:"
    for option in ("--device", "--mode", "--compile", "--source", "--results", "--shard"):
        assert any(line.startswith(f"  {option}") for line in lines[:60]), option
    profiles = "\n".join(lines)
    for name in ("dev", "ci", "thorough", "stress"):
        assert f"- `{name}`:" in profiles, name
    assert len(lines) < 80  # not pytest's 500 lines
