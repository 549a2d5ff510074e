"""One generated test per (documented entry, device, mode).

The parameters come from the plugin (:mod:`plugin.plan`): the installed torch's
docstring (or ``--doc-version``) and the other selected sources, times the
selected devices and modes. Each test judges its case with Hypothesis,
attaches the result row to its report, and fails when the verdict does.
"""
import warnings

import pytest

from detconf.conformance.findings import known_finding
from detconf.conformance.harness import d2d_message, failure_message, judge, skipped_row
from detconf.conformance.isolated import judge_in_subprocess
from detconf.conformance.perturbed import judge_perturbed
from detconf.vocabulary import is_passing


def test_documented(conformance_case, detconf_settings, record_row, request):
    case = conformance_case
    if case.not_applicable:
        # The entry's torch range leaves out the torch under test (conformance.plan.not_applicable):
        # nothing to run, and the row says which releases the promise is about.
        row = skipped_row(case, case.not_applicable)
        row["detail"]["needs_torch"] = case.entry.torch
        record_row(row)
        pytest.skip(case.not_applicable)
    backend = detconf_settings["backends"][case.device]
    if not backend.describe()["available"]:
        record_row(skipped_row(case, f"device {case.device!r} is not available on this machine"))
        pytest.skip(f"device {case.device!r} is not available")
    # An entry that needs a variable unset which the device's runtime reads once per process
    # (old docs' cuBLAS list: a raise *without* CUBLAS_WORKSPACE_CONFIG, which the plugin sets
    # for everything else) runs in a fresh process without it (Backend.unset_for_qualifier).
    unset = backend.env_to_unset(case.entry.qualifiers)
    if detconf_settings.get("perturb") and not unset:
        row = judge_perturbed(case, profile=detconf_settings["profile"], runs=detconf_settings["runs"],
                              device_index=backend.index)
    elif backend.isolate_modes or detconf_settings["isolate"] or unset:
        row = judge_in_subprocess(case, profile=detconf_settings["profile"], runs=detconf_settings["runs"],
                                  unset_env=unset, device_index=backend.index)
    else:
        row = judge(case, backend, runs=detconf_settings["runs"])
    finding = known_finding(row, detconf_settings["findings"])
    if finding is not None and finding.verdict == row["verdict"]:
        row["detail"]["known_finding"] = finding.why
    record_row(row)
    if row["verdict"] == "skipped":
        pytest.skip(row["detail"].get("reason", "skipped"))
    if finding is not None and finding.verdict == row["verdict"]:
        pytest.xfail(f"known finding ({row['verdict']}): {finding.why}")
    if finding is not None:
        warnings.warn(pytest.PytestWarning(
            f"known finding for {row['entry_id']} expected {finding.verdict!r}, observed {row['verdict']!r}: "
            "update conformance/data/known-findings.json"))
    assert is_passing(row["verdict"]), failure_message(row, request.node.nodeid,
                                                      rerun=detconf_settings["rerun"](request.node))
    d2d = row.get("d2d") or {}
    assert d2d.get("result") != "differs", d2d_message(row, rerun=detconf_settings["rerun"](request.node))
