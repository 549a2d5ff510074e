"""Known findings turn a recorded non-conforming verdict into xfail, nothing else."""
import json

import pytest

from conformance.findings import FINDINGS_FILE, known_finding, load_findings
from engine.entry import CatalogError
from detconf.vocabulary import VERDICTS

ROW = {"source": "repro-notes", "entry_id": "e", "torch_version": "2.13.0+cpu", "device": "cpu", "mode": "error"}


def write(tmp_path, items):
    path = tmp_path / "f.json"
    path.write_text(json.dumps(items))
    return path


def test_match_by_source_entry_and_torch_range(tmp_path):
    findings = load_findings(write(tmp_path, [
        {"source": "repro-notes", "entry_id": "e", "verdict": "violated", "torch": "==2.13.*", "why": "w"}]))
    assert known_finding(ROW, findings).why == "w"
    assert known_finding(dict(ROW, torch_version="2.14.0"), findings) is None
    assert known_finding(dict(ROW, torch_version="2.130.0"), findings) is None
    assert known_finding(dict(ROW, entry_id="other"), findings) is None


@pytest.mark.parametrize("version,inside", [
    ("2.13.0+cpu", True), ("2.14.1+cu128", True), ("2.16.0a0+git1234abc", True), ("2.12.1", False),
    ("2.5.1", False), ("not-a-version", False),
])
def test_an_open_range_follows_the_finding_into_later_releases(tmp_path, version, inside):
    findings = load_findings(write(tmp_path, [
        {"source": "repro-notes", "entry_id": "e", "verdict": "violated", "torch": ">=2.13", "why": "w"}]))
    assert (known_finding(dict(ROW, torch_version=version), findings) is not None) is inside


@pytest.mark.parametrize("torch_range", [["2.13"], "2.13", "", ">=two", 2.13])
def test_a_torch_range_that_is_not_a_specifier_is_refused(tmp_path, torch_range):
    path = write(tmp_path, [{"source": "repro-notes", "entry_id": "e", "verdict": "violated", "torch": torch_range,
                             "why": "w"}])
    with pytest.raises(CatalogError, match="version specifier") as info:
        load_findings(path)
    assert "\n" not in str(info.value)


def test_an_unknown_verdict_is_refused(tmp_path):
    with pytest.raises(CatalogError, match="unknown verdict 'broken'"):
        load_findings(write(tmp_path, [{"source": "s", "entry_id": "e", "verdict": "broken", "torch": ">=2",
                                        "why": "w"}]))


def test_device_and_mode_restrictions(tmp_path):
    findings = load_findings(write(tmp_path, [{"source": "repro-notes", "entry_id": "e", "verdict": "violated",
                                               "torch": ">=2.13", "why": "w", "devices": ["cuda"], "modes": ["error"]}]))
    assert known_finding(ROW, findings) is None
    assert known_finding(dict(ROW, device="cuda"), findings) is not None
    assert known_finding(dict(ROW, device="cuda", mode="warn_only"), findings) is None


def test_malformed_findings_are_one_line_errors(tmp_path):
    with pytest.raises(CatalogError, match="needs the fields"):
        load_findings(write(tmp_path, [{"source": "x"}]))
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(CatalogError, match="malformed JSON"):
        load_findings(bad)


def test_shipped_findings_are_valid():
    for finding in load_findings(FINDINGS_FILE):
        assert finding.verdict in VERDICTS and finding.why and str(finding.torch)


def test_catalog_files_malformed_entries_are_one_line_errors(tmp_path):
    from engine.entry import load_entries_file

    cases = {
        "[{": "malformed JSON",
        '{"a": 1}': "expected a JSON list",
        '[{"entry_id": "x"}]': "entry #0",
        '[{"entry_id": "x", "op": "torch.x", "sentence": "s", "promise": "sometimes", "source": "ascend"}]': "promise",
        '[{"entry_id": "x", "op": "torch.x", "sentence": "s", "promise": "raises", "source": "other"}]': "expected 'ascend'",
    }
    for text, needle in cases.items():
        path = tmp_path / "c.json"
        path.write_text(text)
        with pytest.raises(CatalogError, match=needle) as info:
            load_entries_file(path, source="ascend")
        assert "\n" not in str(info.value) and str(path) in str(info.value)
    dup = '[{"entry_id": "x", "op": "torch.x", "sentence": "s", "promise": "raises", "source": "ascend"}]'
    path.write_text(dup[:-1] + "," + dup[1:])
    with pytest.raises(CatalogError, match="duplicate entry id 'x'"):
        load_entries_file(path, source="ascend")
