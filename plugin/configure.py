"""Configuring a session (``pytest_configure``): the devices, the plan, the compile cache, the
xdist workers' share of the CPU, and the results file, opened and given its run record before
collection."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from detconf.plugin.devices import use_devices
from detconf.plugin.options import compilers, is_worker
from detconf.plugin.plan import case_plan, plan_options, unknown_findings
from detconf.plugin.results import ResultsWriter
from detconf.plugin.validation import check_options, one_line, writes_results


#: The filter (pytest's ``filterwarnings`` syntax) for the deprecation torch's own modules raise.
TORCH_JIT_DEPRECATION = r"ignore:`torch\.jit\.script_method` is deprecated:DeprecationWarning"


@pytest.hookimpl(trylast=True)  # after Hypothesis' plugin has loaded --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "help", False):
        return
    check_options(config)  # already done unless this conftest was not an initial one
    from hypothesis import settings

    from detconf.conformance import profiles
    from detconf.gc_pause import gc_paused

    with gc_paused(freeze=True):  # imports torch: its objects live as long as the run
        profiles.load(settings._current_profile)
    # The reproducibility notes' setting for deterministic cuBLAS; it must be in
    # place before CUDA initialises. A value the user set is kept (and recorded).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    config.addinivalue_line("markers", "conformance: a generated conformance test")
    # torch's own modules, imported by the first torch.compile, warn that torch.jit.script_method
    # is deprecated (14 lines in every run's summary, none of them the suite's or the user's).
    config.addinivalue_line("filterwarnings", TORCH_JIT_DEPRECATION)
    from detconf.conformance.catalog import UnknownSource
    from detconf.engine.devices import UnknownDevice, resolve_devices, unavailable_reason
    from detconf.engine.entry import CatalogError

    requested = config.getoption("--device")
    try:
        config._detconf_backends = resolve_devices(requested)
    except UnknownDevice as exc:
        raise pytest.UsageError(str(exc)) from None
    if requested:  # asked for by name: it must be here (the default is every available device)
        for backend in config._detconf_backends:
            info = backend.describe()
            if not info["available"]:
                raise pytest.UsageError(one_line(
                    f"device {backend.name} is not available here: {unavailable_reason(backend, info)}; "
                    "leave out --device to test every available device"))
    use_devices(config)
    try:
        case_plan(config)
    except (UnknownSource, CatalogError) as exc:
        raise pytest.UsageError(one_line(exc)) from None
    except ValueError as exc:  # unknown doc version and other catalog input errors
        raise pytest.UsageError(str(exc).splitlines()[0]) from None
    if not is_worker(config):
        config._detconf_unknown_findings = unknown_findings(config)
    if (any(c != "eager" for c in compilers(config)) and getattr(config.option, "dist", "no") == "load"
            and getattr(config.option, "numprocesses", None)):
        config.option.dist = "loadgroup"  # see plugin.plan._compile_group: plain "load" would split an entry's modes
    if not is_worker(config) and any(c != "eager" for c in compilers(config)):
        # Compiled artefacts go to a folder of this run's own (xdist workers inherit it), so a
        # run neither reuses another run's kernels nor leaves its own behind.
        from detconf.engine.compiled import private_cache

        config._detconf_cache = private_cache()
        config._detconf_cache.__enter__()
    if is_worker(config):
        _share_cpu_between_workers(config)
        if config.workerinput.get("detconf_loadgroup"):
            config.option.loadgroup = True  # workers parse "-n N" as plain "load"; the controller chose loadgroup
    elif writes_results(config):
        writer = ResultsWriter(Path(config.getoption("--results")), config)
        writer.open(planned=config._detconf_plan)  # a usage error when the file cannot be written
        writer.start_suite_plan(plan_options(config), config.getoption("--device"))
        config.pluginmanager.register(writer, "detconf-results")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: tell each worker that compiled entries are grouped (see plugin.plan._compile_group)."""
    if getattr(node.config.option, "dist", None) == "loadgroup":
        node.workerinput["detconf_loadgroup"] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = getattr(config, "_detconf_cache", None)
    if cache is not None:
        config._detconf_cache = None
        cache.__exit__(None, None, None)


def _share_cpu_between_workers(config: pytest.Config) -> None:
    import torch

    workers = int(config.workerinput.get("workercount", 1) or 1)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
