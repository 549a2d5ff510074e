"""Known findings turn a recorded non-conforming verdict into xfail, nothing else."""
import json
import re

import pytest
from packaging.specifiers import SpecifierSet

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


@pytest.mark.parametrize("torch_range,problem", [
    (["2.13"], "must be a string, got an array"), (2.13, "must be a string, got a number"),
    # a bare version is not a specifier: write ">=2.13" or "==2.13.*"
    ("2.13", "is '2.13'"), ("", "is ''"), (">=two", "is '>=two'"), (">=2.13,", "empty clause"),
])
def test_a_torch_range_that_is_not_a_specifier_is_refused(tmp_path, torch_range, problem):
    path = write(tmp_path, [{"source": "repro-notes", "entry_id": "e", "verdict": "violated", "torch": torch_range,
                             "why": "w"}])
    with pytest.raises(CatalogError, match="field 'torch'") as info:
        load_findings(path)
    assert problem in str(info.value) and str(path) in str(info.value) and "finding #0 ('e')" in str(info.value)
    if isinstance(torch_range, str):
        assert "version specifier" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("torch_range", [">=2.13", "==2.13.*", ">=2.5,<2.14", "~=2.13.0", ">= 2.13 , < 3"])
def test_version_specifiers_are_taken(tmp_path, torch_range):
    findings = load_findings(write(tmp_path, [{"source": "repro-notes", "entry_id": "e", "verdict": "violated",
                                               "torch": torch_range, "why": "w"}]))
    assert findings[0].torch == SpecifierSet(torch_range)


def test_an_unknown_verdict_is_refused(tmp_path):
    with pytest.raises(CatalogError, match="field 'verdict' is 'broken', expected one of 'nondeterministic'"):
        load_findings(write(tmp_path, [{"source": "repro-notes", "entry_id": "e", "verdict": "broken", "torch": ">=2",
                                        "why": "w"}]))


def test_a_passing_verdict_is_no_finding(tmp_path):
    with pytest.raises(CatalogError, match="field 'verdict' is 'conforms'"):
        load_findings(write(tmp_path, [{"source": "repro-notes", "entry_id": "e", "verdict": "conforms", "torch": ">=2",
                                        "why": "w"}]))


@pytest.mark.parametrize("change,problem", [
    ({"devices": "cuda"}, "field 'devices' must be an array, got a string ('cuda')"),
    ({"modes": ["sometimes"]}, "field 'modes[0]' is 'sometimes', expected one of 'error', 'warn_only', 'off'"),
    ({"source": "repro_notes"}, "field 'source' is 'repro_notes', expected one of"),
    ({"colour": "red"}, "unknown field 'colour'"),
    ({"why": " "}, "field 'why' is ' ', expected non-blank text"),
])
def test_findings_fields_are_checked_by_the_schema(tmp_path, change, problem):
    good = {"source": "repro-notes", "entry_id": "e", "verdict": "violated", "torch": ">=2.13", "why": "w"}
    with pytest.raises(CatalogError) as info:
        load_findings(write(tmp_path, [good, dict(good, entry_id="e2", **change)]))
    assert str(info.value).startswith(f"{tmp_path / 'f.json'}: malformed known finding #1 ('e2'): {problem}")


def test_device_and_mode_restrictions(tmp_path):
    findings = load_findings(write(tmp_path, [{"source": "repro-notes", "entry_id": "e", "verdict": "violated",
                                               "torch": ">=2.13", "why": "w", "devices": ["cuda"], "modes": ["error"]}]))
    assert known_finding(ROW, findings) is None
    assert known_finding(dict(ROW, device="cuda"), findings) is not None
    assert known_finding(dict(ROW, device="cuda", mode="warn_only"), findings) is None


def test_malformed_findings_are_one_line_errors(tmp_path):
    with pytest.raises(CatalogError, match="malformed known finding #0: missing fields 'entry_id', 'verdict', 'torch', 'why'"):
        load_findings(write(tmp_path, [{"source": "repro-notes"}]))
    bad = tmp_path / "bad.json"
    for text, problem in [("[{", "bad.json:1: malformed JSON"), ('{"a": 1}', "expected a JSON list of known finding objects, got an object"),
                          ('[{"why": "a", "why": "b"}]', "key 'why' appears twice"), ("[NaN]", "NaN is not a JSON value")]:
        bad.write_text(text)
        with pytest.raises(CatalogError, match=problem) as info:
            load_findings(bad)
        assert "\n" not in str(info.value)


def test_shipped_findings_are_valid():
    for finding in load_findings(FINDINGS_FILE):
        assert finding.verdict in VERDICTS and finding.why and str(finding.torch)


def test_catalog_files_malformed_entries_are_one_line_errors(tmp_path):
    from conformance.catalog import read_entries_file

    cases = {
        "[{": "malformed JSON",
        '{"a": 1}': "expected a JSON list",
        '[{"entry_id": "x"}]': "catalog entry #0 ('x'): missing fields 'op', 'sentence', 'promise', 'source'",
        '[{"entry_id": "x", "op": "torch.x", "sentence": "s", "promise": "sometimes", "source": "ascend"}]': "promise",
        '[{"entry_id": "x", "op": "torch.x", "sentence": "s", "promise": "raises", "source": "flag-api"}]': "expected 'ascend'",
        '[{"entry_id": "x", "op": "torch.x", "sentence": "s", "promise": "raises", "source": "ascend", "devices": "cuda"}]':
            "field 'devices' must be an array, got a string ('cuda')",
    }
    for text, needle in cases.items():
        path = tmp_path / "c.json"
        path.write_text(text)
        with pytest.raises(CatalogError, match=re.escape(needle)) as info:
            read_entries_file(path, source="ascend")
        assert "\n" not in str(info.value) and str(path) in str(info.value)
    dup = '[{"entry_id": "x", "op": "torch.x", "sentence": "s", "promise": "raises", "source": "ascend"}]'
    path.write_text(dup[:-1] + "," + dup[1:])
    with pytest.raises(CatalogError, match="duplicate entry id 'x'"):
        read_entries_file(path, source="ascend")


def test_schemas_speak_the_vocabulary():
    """The schema files list the vocabulary's words (a new verdict or mode must reach them)."""
    from conformance.datafiles import SCHEMAS
    from detconf.vocabulary import FAILING, MODES, PROMISES, REPORT_ONLY, SOURCE_NAMES

    entries = json.loads((SCHEMAS / "catalog-entries.schema.json").read_text())["$defs"]["entry"]["properties"]
    findings = json.loads((SCHEMAS / "known-findings.schema.json").read_text())["items"]["properties"]
    assert entries["promise"]["enum"] == list(PROMISES)
    assert entries["source"]["enum"] == findings["source"]["enum"] == list(SOURCE_NAMES)
    assert findings["verdict"]["enum"] == [v for v in FAILING if v not in REPORT_ONLY]  # a run never writes "missing"
    assert findings["modes"]["items"]["enum"] == list(MODES)
