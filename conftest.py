"""detconf's pytest plugin, as pytest finds it: the suite root's ``conftest.py``.

The plugin itself is the :mod:`detconf.plugin` package, one module per hook family (as pytest's own
``_pytest`` is laid out); this file only hands pytest its hooks and fixtures, so that they
register as one plugin, this file. Installed (``pip install .``), ``detconf.pytest_entry`` loads this
file from the installed suite.
"""
from detconf.plugin.configure import pytest_configure, pytest_configure_node, pytest_unconfigure  # noqa: F401
from detconf.plugin.fixtures import detconf_settings, pytest_runtest_makereport, record_row  # noqa: F401
from detconf.plugin.freeze import pytest_collection_finish, pytest_runtest_teardown  # noqa: F401
from detconf.plugin.header import pytest_report_header  # noqa: F401
from detconf.plugin.options import pytest_addoption  # noqa: F401
from detconf.plugin.plan import pytest_generate_tests, pytest_itemcollected  # noqa: F401
from detconf.plugin.validation import pytest_cmdline_main  # noqa: F401

#: Marks this module as detconf's pytest plugin: ``detconf.pytest_entry`` (the installed entry point)
#: loads it only when pytest has not loaded a checkout's ``conftest.py`` already.
DETCONF_SUITE_PLUGIN = True
