"""detconf's pytest plugin, one module per hook family; the suite root's ``conftest.py`` hands
pytest its hooks and fixtures.

- :mod:`plugin.options` -- the command-line options (``pytest_addoption``) and their defaults.
- :mod:`plugin.validation` -- every option and data file checked before anything runs
  (``pytest_cmdline_main``): each problem is one ``ERROR:`` line, pytest's usage error (exit 4).
- :mod:`plugin.resultsfile` -- whether the run may use the results file ``--results`` names.
- :mod:`plugin.configure` -- the session's devices, plan, compile cache and results file
  (``pytest_configure``, ``pytest_configure_node``, ``pytest_unconfigure``).
- :mod:`plugin.devices` -- why a device is absent, which device each process uses, the worker cap.
- :mod:`plugin.plan` -- the plan of cases and one generated test per case
  (``pytest_generate_tests``); each test item carries its case.
- :mod:`plugin.fixtures` -- ``detconf_settings``, ``record_row``, and the row of a test that
  failed without one (``pytest_runtest_makereport``).
- :mod:`plugin.rerun` -- the ``rerun:`` command of a failure.
- :mod:`plugin.header` -- the report header (``pytest_report_header``).
- :mod:`plugin.environment` -- the environment a run records.
- :mod:`plugin.results` -- the results file (run record, rows, end record), the end-of-run
  summary and matrix (``ResultsWriter``, registered on the controller).
- :mod:`plugin.standby` -- the end-of-run report builder's process.
- :mod:`plugin.freeze` -- ``gc.freeze`` of what a run loads for good.

Bad input never gets as far as a test: every option and data file is checked when pytest has
parsed the command line (before torch is imported, before Hypothesis loads a profile), and the
results file is opened, locked (``fcntl.flock``: one run per file) and given its run record while
the plugin configures, before collection. A run appends to the results file
(``--fresh-results`` empties it first) and ends with an end record saying how many of the planned
cases got a row; a run that planned none exits 5 (nothing was tested).
"""
