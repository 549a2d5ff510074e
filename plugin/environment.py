"""The environment a run records in its run record: torch, the devices, the suite's revision,
the options and the process settings."""
from __future__ import annotations

import os
import platform
import subprocess

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
        "doc_version": config.getoption("--doc-version"),
        "sources": config.getoption("--source") or "all",
        "modes": config.getoption("--mode") or list(DEFAULT_MODES),
        "compile": compilers(config),
        "compiler": _compiler_versions() if any(c != "eager" for c in compilers(config)) else None,
        "runs": config.getoption("--runs"),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "argv": list(config.invocation_params.args),
        "devices": devices,
        # The float32 math mode of each device at the start (TF32, fp32_precision, ...): what a
        # comparison with another device must allow for. A backend's own answer wins.
        "math_mode": {b.name: mathmode.describe(b.name, precision=getattr(b, "math_precision", None))
                      for b in config._detconf_backends},
    }


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
