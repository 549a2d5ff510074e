"""The fixtures a generated test uses (the run's settings, and the channel its row leaves by:
``report.user_properties``), and the row of a generated test that failed without one, made where
the test ran, from the case its item carries."""
from __future__ import annotations

import json

import pytest

from detconf.plugin.plan import case_of, plain_nodeid
from detconf.plugin.rerun import rerun_command

ROW_KEY = "detconf_row"
#: The attribute a generated test's reports carry: its case id and node id as collected, so that
#: the controller knows the case of a test whose worker crashed (it reports the node id only).
CASE_ATTRIBUTE = "detconf_case"


@pytest.fixture
def detconf_settings(request: pytest.FixtureRequest) -> dict:
    from hypothesis import settings

    config = request.config
    from detconf.vocabulary import DEFAULT_SOURCES

    return {
        "backends": {b.name: b for b in config._detconf_backends},
        "runs": config.getoption("--runs"),
        "isolate": config.getoption("--isolate"),
        "perturb": config.getoption("--perturb"),
        "sources": config.getoption("--source") or list(DEFAULT_SOURCES),
        "doc_version": config.getoption("--doc-version"),
        "profile": settings._current_profile,
        "findings": config._detconf_findings,
        "rerun": lambda node: rerun_command(config, node),
    }


@pytest.fixture
def record_row(request: pytest.FixtureRequest):
    """Attach a result row to this test's report (the only channel out of a worker)."""

    def record(row: dict) -> None:
        worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
        row = dict(row, nodeid=plain_nodeid(request.node), worker=worker)
        # Plain JSON builtins only: xdist's wire format rejects str subclasses
        # such as torch.__version__ (TorchVersion).
        request.node.user_properties.append((ROW_KEY, json.loads(json.dumps(row, default=str))))

    return record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A generated test's report names its case; a failed one without a row (an exception
    outside the harness) gets the row of a crashed case, with the failure's last line."""
    report = yield
    case = case_of(item)
    if case is None:
        return report
    nodeid = plain_nodeid(item)
    setattr(report, CASE_ATTRIBUTE, {"case": case.id, "nodeid": nodeid})
    if report.failed and not any(key == ROW_KEY for key, _ in report.user_properties):
        report.user_properties.append((ROW_KEY, crashed_row(case, report, nodeid)))
    return report


def crashed_row(case, report: pytest.TestReport, nodeid: str) -> dict:
    """The row of ``case``, whose test failed or whose worker died without a row of its own."""
    from detconf.conformance import harness

    text = str(report.longrepr).strip().splitlines()
    row = harness.crashed_row(case, text[-1] if text else "failed without a result row")
    return json.loads(json.dumps(dict(row, nodeid=nodeid), default=str))
