"""Every option and data file, checked when pytest has parsed the command line (before torch is
imported, before Hypothesis loads a profile): each problem is one ``ERROR:`` line, pytest's usage
error (exit status 4)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from detconf.plugin.options import MAX_RUNS, ROOT, STRESS_MAX_RUNS, is_worker
from detconf.vocabulary import base_profile
from detconf.plugin.resultsfile import results_problem, standard_streams


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def _runs(value: object) -> int:
    """``--runs`` as a number of runs, or a usage error."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[+-]?[0-9]+", text):
        raise pytest.UsageError(f"--runs must be a whole number from 2 to {MAX_RUNS}, got {str(value)[:40]!r}")
    digits = text.lstrip("+-").lstrip("0") or "0"
    shown = text if len(text) <= 40 else text[:39] + "…"
    if text.startswith("-") or (len(digits) == 1 and int(digits) < 2):
        raise pytest.UsageError(f"--runs must be at least 2 (got {shown}): the suite compares runs")
    if len(digits) > len(str(MAX_RUNS)) or int(digits) > MAX_RUNS:
        raise pytest.UsageError(f"--runs must be at most {MAX_RUNS} (got {shown}): each example runs that often")
    return int(digits)


def _known_profiles() -> list[str]:
    from hypothesis import settings

    from detconf.conformance import profiles

    registered = getattr(settings, "_profiles", None)
    return sorted(registered) if isinstance(registered, dict) else sorted({*profiles.PROFILES, "default"})


def _choose_profile(config: pytest.Config) -> None:
    """Check --hypothesis-profile (Hypothesis' plugin loads it next) or, without it, load the
    profile DETCONF_HYPOTHESIS_PROFILE names (default ``dev``); a usage error for an unknown one."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    from detconf.conformance import profiles  # noqa: F401  (registers dev, ci and thorough)

    name = getattr(config.option, "hypothesis_profile", None)
    if name is None:
        name = os.environ.get("DETCONF_HYPOTHESIS_PROFILE", "dev")
        try:
            settings.load_profile(name)
        except InvalidArgument:
            raise pytest.UsageError(f"DETCONF_HYPOTHESIS_PROFILE={name!r} is not a hypothesis profile; "
                                    f"known: {', '.join(_known_profiles())}") from None
        return
    if not name.strip():
        raise pytest.UsageError(f"--hypothesis-profile needs a profile name; known: {', '.join(_known_profiles())}")
    try:
        getattr(settings, "get_profile", lambda n: settings._profiles[n])(name)
    except (InvalidArgument, KeyError):
        raise pytest.UsageError(f"unknown hypothesis profile {name!r}; known: {', '.join(_known_profiles())}") from None


def writes_results(config: pytest.Config) -> bool:
    """Does this session run conformance cases, so that it writes the results file? Not in a
    worker (the controller writes), not for --collect-only, --help and the like, and not for a
    run of the harness's own tests (``pytest tests``), which never touches the results file."""
    if is_worker(config):
        return False
    option = config.option
    if getattr(option, "version", 0) or any(getattr(option, name, False) for name in (
            "help", "collectonly", "setuponly", "setupplan", "showfixtures", "show_fixtures_per_test", "markers")):
        return False
    suite = ROOT / "conformance"
    for arg in config.args:
        path = Path(str(arg).split("::", 1)[0])
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
        path = Path(os.path.abspath(path))
        if path == suite or suite in path.parents or path in suite.parents:
            return True
    return False


def _selection_problem(expression: str | None) -> str | None:
    """Why pytest would refuse a ``-k``/``-m`` expression, or None (pytest's own parser)."""
    if not expression:
        return None
    try:
        from _pytest.mark import expression as parser
    except ImportError:  # a pytest without it checks the expression itself
        return None
    # pytest 8.3 raises ParseError; later releases a SyntaxError located in the expression.
    errors = tuple(e for e in (getattr(parser, "ParseError", None), SyntaxError) if isinstance(e, type))
    try:
        parser.Expression.compile(expression)
    except errors as exc:
        return one_line(getattr(exc, "message", None) or getattr(exc, "msg", None) or exc)
    return None


def check_options(config: pytest.Config) -> None:
    """Every option and data file, checked before anything runs; a problem is a one-line usage
    error. Normalises ``--runs`` to an int. Cheap and torch-free (devices are checked in
    pytest_configure, which needs torch)."""
    if getattr(config, "_detconf_checked", False):
        return
    from detconf.conformance.catalog import DATA_FILES, SOURCES, data_file, doc_versions, read_entries_file
    from detconf.conformance.findings import load_findings
    from detconf.vocabulary import DEFAULT_SOURCES, MODES
    from detconf.engine.entry import CatalogError

    option = config.option
    option.runs = _runs(option.runs)
    profile = getattr(option, "hypothesis_profile", None)
    if isinstance(profile, str) and base_profile(profile) == "stress" and option.runs > STRESS_MAX_RUNS:
        raise pytest.UsageError(f"--runs {option.runs} with the stress profile: each stress example holds up to 4 Mi "
                                f"elements and every run of it costs seconds; at most {STRESS_MAX_RUNS}")
    option.worker_memory = _worker_memory(option.worker_memory)
    if option.shard is not None:
        from detconf.conformance.shard import ShardError, parse_shard

        try:
            config._detconf_shard = parse_shard(option.shard)
        except ShardError as exc:
            raise pytest.UsageError(str(exc)) from None
    for mode in option.mode or []:
        if mode not in MODES:
            raise pytest.UsageError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    for source in option.source or []:
        if source not in SOURCES:
            raise pytest.UsageError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    if option.source:  # a source given twice is that source once, as a mode given twice is
        option.source = list(dict.fromkeys(option.source))
    for device in option.device or []:
        if not device.strip() or device != device.strip():
            raise pytest.UsageError(f"--device needs a device name such as cpu or cuda, got {device!r}")
    for flag, expression in (("-k", option.keyword), ("-m", option.markexpr)):
        problem = _selection_problem(expression)
        if problem:
            # pytest finds it only at collection, where xdist workers crash on it one by one.
            raise pytest.UsageError(f"wrong expression passed to {flag}: {expression}: {problem}")
    doc_version = option.doc_version
    if doc_version is not None:
        known = doc_versions()
        if not doc_version.strip():
            raise pytest.UsageError(f"--doc-version needs a release, got ''; known versions: {', '.join(known)}")
        if doc_version not in known:
            raise pytest.UsageError(f"unknown doc version {doc_version!r}; known versions: {', '.join(known)}")
    try:
        for source in option.source or DEFAULT_SOURCES:
            if source in DATA_FILES:
                read_entries_file(data_file(source), source=source)
        config._detconf_findings = load_findings()
    except CatalogError as exc:
        raise pytest.UsageError(one_line(exc)) from None
    if writes_results(config):
        problem = results_problem(str(option.results), fresh=option.fresh_results,
                                  streams=standard_streams(config))
        if problem:
            raise pytest.UsageError(problem)
    _choose_profile(config)
    config._detconf_checked = True


def _worker_memory(value: object) -> int | None:
    """``--worker-memory`` in bytes (None: the backends' own figures), or a usage error."""
    if value is None or isinstance(value, int):
        return value
    try:
        gib = float(str(value).strip())
    except ValueError:
        gib = float("nan")
    if not gib > 0 or gib == float("inf"):
        raise pytest.UsageError(f"--worker-memory must be a positive number of GiB, got {str(value)[:40]!r}")
    if gib > 2**40:  # beyond any machine (and beyond a float's range in bytes)
        raise pytest.UsageError(f"--worker-memory must be at most {2**40} GiB, got {str(value)[:40]!r}")
    return max(1, int(gib * 2**30))


@pytest.hookimpl(tryfirst=True)  # before Hypothesis' plugin loads --hypothesis-profile
def pytest_cmdline_main(config: pytest.Config) -> None:
    if getattr(config.option, "help", False) or getattr(config.option, "version", 0):
        return
    check_options(config)
