"""The environment a run records in its run record: torch, the devices, the suite's revision,
the options and the process settings."""
from __future__ import annotations

import os
import platform
import subprocess
import types

import pytest

from detconf.revision import revision
from detconf.vocabulary import DEFAULT_MODES
from detconf.plugin.options import ROOT, compilers


def environment(config: pytest.Config) -> dict:
    import torch
    from hypothesis import settings

    from detconf.engine import mathmode

    # Only the suite's own checkout counts (an installed copy inside some other repository, a venv
    # in a project folder, must not report that repository's commit); a pack's copy of the tree
    # carries its revision in a file (detconf.revision).
    rev = revision(ROOT)
    shard = getattr(config, "_detconf_shard", None)

    devices = [b.describe() for b in config._detconf_backends]
    cuda = next((d for d in devices if d["device"] == "cuda" and d["available"]), None)
    versions = cuda["versions"] if cuda else {}
    return {
        "torch_version": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "cudnn": versions.get("cudnn"),
        "driver": versions.get("driver"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "suite_revision": rev.label if rev.source != "unknown" else _installed_version(),
        "suite_commit": rev.commit,
        "suite_dirty": rev.dirty,
        # What differs from the commit (untracked files included): the first few, and how many.
        "suite_changed": list(rev.changed[:10]),
        "suite_changed_count": len(rev.changed),
        "suite_revision_source": rev.source,
        "shard": None if shard is None else "{}/{}".format(*shard),
        "hypothesis_profile": settings._current_profile,
        "hypothesis_seed": config.getoption("hypothesis_seed", None),
        "hypothesis_settings": hypothesis_settings(settings()),
        "doc_version": config.getoption("--doc-version"),
        "complements": not config.getoption("--no-complements"),
        "sources": config.getoption("--source") or "all",
        "modes": config.getoption("--mode") or list(DEFAULT_MODES),
        "compile": compilers(config),
        "compiler": _compiler_versions() if any(c != "eager" for c in compilers(config)) else None,
        "runs": config.getoption("--runs"),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "argv": list(config.invocation_params.args),
        # What the run loaded besides the suite: every pytest plugin and every conftest.py file.
        "plugins": loaded_plugins(config),
        "conftest_files": conftest_files(config),
        "devices": devices,
        # The float32 math mode of each device at the start (TF32, fp32_precision, ...): what a
        # comparison with another device must allow for. A backend's own answer wins.
        "math_mode": {b.name: mathmode.describe(b.name, precision=getattr(b, "math_precision", None))
                      for b in config._detconf_backends},
    }


def hypothesis_settings(current) -> dict:
    """The Hypothesis settings in effect (JSON-safe), field by field as the suite's profiles
    (:data:`detconf.vocabulary.HYPOTHESIS_PROFILES`) name them: a profile re-registered under the
    same name shows here, not in its name."""
    deadline = current.deadline
    return {"max_examples": current.max_examples, "derandomize": current.derandomize,
            "database": None if current.database is None else type(current.database).__name__,
            "deadline": None if deadline is None else deadline.total_seconds() * 1000,
            "print_blob": current.print_blob}


def _distribution_of(module_name: str, owners: dict) -> tuple[str | None, str | None]:
    """The distribution providing ``module_name`` (``owners``: importlib.metadata's
    ``packages_distributions()``, read once per run) and its version."""
    from importlib import metadata

    names = owners.get(module_name.split(".")[0]) or []
    try:
        return (names[0], metadata.version(names[0])) if names else (None, None)
    except Exception:  # noqa: BLE001 - broken metadata: the module is still named
        return None, None


def loaded_plugins(config: pytest.Config) -> list[dict]:
    """Every pytest plugin this process registered that is not pytest's own nor a conftest file
    (:func:`conftest_files`): entry points, ``-p NAME`` (``PYTEST_ADDOPTS`` included) and
    ``pytest_plugins`` modules, with the distribution that provides each and its version."""
    from importlib import metadata

    manager = config.pluginmanager
    # A module under an entry point's top-level package is named with the distribution that
    # declared the entry point (pytest keeps both); other modules with the distribution that owns
    # their top-level name, from a scan of every installed distribution's file list (a quarter of
    # a second) made only when such a module is loaded.
    declared = {plugin.__name__.split(".")[0]: (dist.metadata["name"], dist.version)
                for plugin, dist in manager.list_plugin_distinfo() if isinstance(plugin, types.ModuleType)}
    scanned: list[dict] = []

    def owners() -> dict:
        if not scanned:
            try:
                scanned.append(metadata.packages_distributions())
            except Exception:  # noqa: BLE001 - broken metadata: the modules are still named
                scanned.append({})
        return scanned[0]

    found: dict[str, dict] = {}
    for name, plugin in manager.list_name_plugin():
        if plugin is None:  # blocked (-p no:NAME)
            continue
        # A module, or a class or object a plugin registered (xdist's session, pytest's own).
        module = plugin.__name__ if isinstance(plugin, types.ModuleType) else getattr(plugin, "__module__", None)
        if not isinstance(module, str) or module.startswith("_pytest.") or module in ("pytest", "__main__"):
            continue
        if (getattr(plugin, "__file__", "") or "").endswith("conftest.py") and module != "detconf._suite.conftest":
            continue
        if module not in found:
            top = module.split(".")[0]
            dist, version = declared[top] if top in declared else _distribution_of(module, owners())
            found[module] = {"module": module, "name": str(name), "distribution": dist, "version": version}
    return [found[k] for k in sorted(found)]


def conftest_files(config: pytest.Config) -> list[dict]:
    """The ``conftest.py`` files pytest loads for the suite: the suite root's, every one under the
    suite's test folder (pytest loads them as it collects, after this record is written), and,
    where no ``pytest.ini`` stops pytest at the suite root, those of the folders above it. Each
    with its path (relative to the suite root where inside it) and SHA-256."""
    from pathlib import Path

    from detconf.revision import file_digest

    paths = [ROOT / "conftest.py", ROOT / "_suite" / "conftest.py", *sorted((ROOT / "conformance").rglob("conftest.py"))]
    if not (ROOT / "pytest.ini").is_file():
        paths += [parent / "conftest.py" for parent in Path(ROOT).resolve().parents]
    found = []
    for path in dict.fromkeys(paths):
        if path.is_file():
            try:
                where = path.relative_to(ROOT).as_posix()
            except ValueError:
                where = str(path)
            found.append({"path": where, "sha256": file_digest(path)})
    return found


def _compiler_versions() -> dict:
    """What the compiled axis ran with: the C++ compiler Inductor uses on CPU, Triton's version."""
    import shutil

    out: dict = {}
    cxx = os.environ.get("CXX") or next((c for c in ("g++", "c++", "clang++") if shutil.which(c)), None)
    if cxx:
        try:
            first = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()
            out["cxx"] = first[0] if first else cxx
        except (OSError, subprocess.SubprocessError):
            out["cxx"] = cxx
    try:
        import triton  # noqa: F401

        out["triton"] = getattr(triton, "__version__", "?")
    except Exception:  # noqa: BLE001 - absent on CPU-only machines
        pass
    return out


def _installed_version() -> str:
    """The installed detconf's version, for a suite that is not a git checkout."""
    from importlib import metadata

    try:
        return f"detconf {metadata.version('detconf')}"
    except metadata.PackageNotFoundError:
        return "unknown"
