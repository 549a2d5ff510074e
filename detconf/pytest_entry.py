"""The installed pytest plugin (entry point ``pytest11``: ``detconf``).

detconf's plugin is the :mod:`detconf.plugin` package, which the suite root's ``conftest.py``
hands to pytest. Run from a checkout, pytest loads that file itself; installed (``pip install .``),
the packages go to ``site-packages/detconf/`` and this module loads the installed copy of it
(``detconf/_suite/conftest.py``) instead. Either way
it loads once: this module steps aside when pytest has already loaded a ``conftest.py`` that is
detconf's plugin (it says so with ``DETCONF_SUITE_PLUGIN``), e.g. ``python -m pytest conformance``
in a checkout with detconf also installed.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

#: The name the installed suite's plugin module gets in ``sys.modules``.
MODULE = "detconf._suite.conftest"
PLUGIN_NAME = "detconf-suite"


def suite_conftest() -> Path | None:
    """The suite's ``conftest.py``: beside the ``conformance`` folder (a checkout, an editable
    install) or in the installed ``detconf/_suite`` folder."""
    for package, up in (("detconf.conformance", 2), ("detconf._suite", 1)):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec else []:
            path = Path(location)
            candidate = (path.parent if up == 2 else path) / "conftest.py"
            if candidate.is_file():
                return candidate
    return None


def _loaded(pluginmanager) -> bool:
    return any(getattr(plugin, "DETCONF_SUITE_PLUGIN", False) for plugin in pluginmanager.get_plugins())


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser, args):
    result = yield
    manager = early_config.pluginmanager
    if _loaded(manager):
        return result
    path = suite_conftest()
    if path is None:
        raise pytest.UsageError("detconf is installed without its suite (no conftest.py beside the conformance "
                                "package): reinstall it with pip install")
    module = sys.modules.get(MODULE)
    if module is None:
        spec = importlib.util.spec_from_file_location(MODULE, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[MODULE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[MODULE]
            raise
    manager.register(module, PLUGIN_NAME)
    return result
