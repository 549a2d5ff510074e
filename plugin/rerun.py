"""The ``rerun:`` command a failure carries: it runs the case again from any folder."""
from __future__ import annotations

import os
import shlex
import sys

import pytest

from detconf.vocabulary import DEFAULT_MODES, base_profile
from detconf.plugin.options import ROOT, compilers


def rerun_command(config: pytest.Config, node: pytest.Item) -> str:
    """A command that runs ``node`` again from any folder: the test file's absolute path, the
    suite's root (so this plugin loads) and every option that shaped the plan or the run."""
    from hypothesis import settings

    from detconf.vocabulary import DEFAULT_SOURCES

    option = config.option
    args = [sys.executable, "-m", "pytest", f"{node.path}::{node.name}", "--rootdir", str(ROOT)]
    for source in option.source or DEFAULT_SOURCES:
        args += ["--source", source]
    if option.doc_version:
        args += ["--doc-version", option.doc_version]
    if option.no_complements:
        args.append("--no-complements")
    for backend in config._detconf_backends:
        args += ["--device", backend.name]
    for mode in dict.fromkeys(option.mode or DEFAULT_MODES):
        args += ["--mode", mode]
    for setting in compilers(config):
        if setting != "eager" or len(compilers(config)) > 1:
            args += ["--compile", setting]
    args += ["--runs", str(option.runs), "--hypothesis-profile", base_profile(settings._current_profile)]
    if getattr(option, "hypothesis_seed", None) is not None:
        args += ["--hypothesis-seed", str(option.hypothesis_seed)]
    if option.isolate:
        args.append("--isolate")
    if getattr(option, "perturb", False):
        args.append("--perturb")
    shard = getattr(config, "_detconf_shard", None)
    if shard is not None:
        args += ["--shard", "{}/{}".format(*shard)]
    args += ["--results", os.path.abspath(option.results)]
    return shlex.join(args)
