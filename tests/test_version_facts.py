"""Version-ranged facts (conformance/data/version-facts.json): their docstring listings agree
with every snapshot the project keeps, their cells change what a cell says on the releases
they cover and on no other, and what the installed torch can show is checked on it."""
import json

import pytest
import torch

from detconf.conformance.catalog import doc_versions, snapshot_entries
from detconf.conformance.findings import (FACTS_FILE, Listing, known_finding, listing_problems, load_facts,
                                          load_findings)
from detconf.engine.entry import CatalogError
from detconf.engine.verdict import expected_outcome
from detconf.findings_rule import torch_in

FACTS = {f.id: f for f in load_facts()}
SNAPSHOTS = {v: {e.id: e.promise for e in snapshot_entries(v)} for v in doc_versions()}


def row(entry_id, *, docs, torch_version, device="cuda", mode="error", verdict="stale-doc", source="torch-docs",
        compile="eager"):
    return {"source": source, "entry_id": entry_id, "doc_version": docs, "torch_version": torch_version,
            "device": device, "mode": mode, "compile": compile, "phase": "program", "verdict": verdict}


def test_the_facts_named_by_the_issue_are_all_there_with_a_range():
    assert set(FACTS) == {"embedding-backward-cuda-listed-deterministic", "max-pool3d-backward-cuda-moved",
                          "kthvalue-cuda-deterministic-unlisted", "histc-cuda-alerts-for-floating-input-only",
                          "cumsum-cuda-deterministic-before-its-docstring", "debug-mode-leaves-inductor-deterministic-off"}
    assert FACTS["embedding-backward-cuda-listed-deterministic"].thread.endswith("/187682")
    assert FACTS["kthvalue-cuda-deterministic-unlisted"].thread.endswith("/165762")
    assert FACTS["histc-cuda-alerts-for-floating-input-only"].thread.endswith("/151701")
    assert FACTS["cumsum-cuda-deterministic-before-its-docstring"].thread.endswith("/190975")


@pytest.mark.parametrize("fact_id", sorted(FACTS))
def test_every_listing_agrees_with_every_docstring_snapshot(fact_id):
    assert listing_problems(FACTS[fact_id], SNAPSHOTS) == []


def test_a_listing_the_snapshots_contradict_is_caught():
    fact = FACTS["cumsum-cuda-deterministic-before-its-docstring"]
    wrong = fact.__class__(**{**fact.__dict__, "listed": (Listing(fact.listed[2].docs.__class__(">=2.13"),
                                                                  "cumsum[floating|complex,cuda]", "deterministic"),)})
    assert listing_problems(wrong, SNAPSHOTS) == [
        "cumsum-cuda-deterministic-before-its-docstring: the 2.13.0 docstring lists 'cumsum[floating|complex,cuda]' "
        "as 'raises', the fact says 'deterministic'"]


# (fact, entry id, a docstring inside the cell's range, one outside, a torch inside the fact's range, one outside)
DRIFT = [
    ("cumsum-cuda-deterministic-before-its-docstring", "cumsum[floating|complex,cuda]", "2.13.0", "2.14.0",
     "2.14.1+cu130", "2.5.1+cu124"),
    ("kthvalue-cuda-deterministic-unlisted", "kthvalue[cuda]", "2.9.0", "2.10.0", "2.10.0", "2.9.1"),
    ("max-pool3d-backward-cuda-moved", "MaxPool3d.backward[cuda]", "2.12.0", "2.13.0", "2.13.0+cpu", "2.12.1"),
]


@pytest.mark.parametrize("fact_id, entry_id, docs_in, docs_out, torch_in_range, torch_out", DRIFT)
@pytest.mark.parametrize("mode, verdict", [("error", "stale-doc"), ("warn_only", "missing-warning")])
def test_a_fact_changes_the_cell_on_the_releases_it_covers_only(fact_id, entry_id, docs_in, docs_out, torch_in_range,
                                                                torch_out, mode, verdict):
    findings = load_findings()
    fact = FACTS[fact_id]
    # the older docstring documents a raise there: the cell expects one, the newer one does not
    assert SNAPSHOTS[docs_in][entry_id] == "raises"
    assert expected_outcome(next(e for e in snapshot_entries(docs_in) if e.id == entry_id), "cuda", mode) in ("raises", "warns")
    assert SNAPSHOTS[docs_out].get(entry_id) != "raises"
    covered = known_finding(row(entry_id, docs=docs_in, torch_version=torch_in_range, mode=mode, verdict=verdict), findings)
    assert covered is not None and covered.verdict == verdict and covered.why == fact.why()
    # another docstring, another torch, another device: the cell says what it said without the fact
    assert known_finding(row(entry_id, docs=docs_out, torch_version=torch_in_range, mode=mode, verdict=verdict), findings) is None
    assert known_finding(row(entry_id, docs=docs_in, torch_version=torch_out, mode=mode, verdict=verdict), findings) is None
    assert known_finding(row(entry_id, docs=docs_in, torch_version=torch_in_range, mode=mode, verdict=verdict,
                             device="cpu"), findings) is None


def test_a_row_without_a_doc_version_is_judged_against_its_own_torch_docs():
    findings = load_findings()
    kth = dict(docs=None, device="cuda", verdict="stale-doc")
    assert known_finding(row("kthvalue[cuda]", torch_version="2.9.0", **kth), findings) is None  # 2.9's own docs, 2.9's torch
    cumsum = row("cumsum[floating|complex,cuda]", docs=None, torch_version="2.13.0+cu130")
    assert known_finding(cumsum, findings).why == FACTS["cumsum-cuda-deterministic-before-its-docstring"].why()
    assert known_finding({**cumsum, "torch_version": "2.14.1+cu130"}, findings) is None


def test_the_debug_mode_fact_is_the_reason_its_cell_gives():
    cell = row("set_deterministic_debug_mode->inductor.config.deterministic", docs=None, torch_version="2.14.1+cu130",
               device="cpu", verdict="violated", source="repro-notes")
    fact = FACTS["debug-mode-leaves-inductor-deterministic-off"]
    assert known_finding(cell, load_findings()).why == fact.why()
    assert "2.14.1" in fact.checked


def test_the_installed_torch_agrees_with_the_debug_mode_fact():
    import torch._inductor.config as inductor_config

    from detconf.engine.determinism import preserved_global_state

    fact = FACTS["debug-mode-leaves-inductor-deterministic-off"]
    if not torch_in(str(torch.__version__), fact.torch):
        pytest.skip(f"torch {torch.__version__} is outside the fact's range {fact.torch}")
    before = inductor_config.deterministic
    with preserved_global_state():
        torch.set_deterministic_debug_mode("error")
        assert torch.are_deterministic_algorithms_enabled()
        assert inductor_config.deterministic is False
    assert inductor_config.deterministic == before


def test_the_installed_docstring_agrees_with_every_listing():
    from detconf.engine.docspec import installed_entries

    release = ".".join(str(torch.__version__).split("+")[0].split(".")[:2]) + ".0"
    installed = {release: {e.id: e.promise for e in installed_entries()}}
    assert [p for fact in FACTS.values() for p in listing_problems(fact, installed)] == []


@pytest.mark.parametrize("mutate, message", [
    (lambda f: f[0].update(extra=1), "unknown field 'extra'"),
    (lambda f: f[0].update(torch="2.14"), "torch is '2.14'"),
    (lambda f: f[1]["cells"][0].update(verdict="conforms"), "not a failing verdict"),
    (lambda f: f[0].update(thread="https://example.com/x"), "not a pytorch GitHub thread"),
    (lambda f: f[0]["listed"][0].update(promise="maybe"), "listing promise 'maybe'"),
    (lambda f: f.append(dict(f[0])), "appears 2 times"),
    (lambda f: f[2]["adds"][0].update(promise="behaves"), "added promise 'behaves'"),
    (lambda f: f[1]["cells"][0].update(devices="cuda"), "cell devices must be a list of device types"),
    (lambda f: f[1]["cells"][0].update(modes=["strict"]), "cell modes must be a list of error, warn_only, off"),
    (lambda f: f[2]["adds"][0].update(docs="2.10"), "added docs is '2.10'"),
])
def test_a_malformed_facts_file_is_one_line(tmp_path, mutate, message):
    facts = json.loads(FACTS_FILE.read_text())
    mutate(facts)
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    with pytest.raises(CatalogError, match=message) as info:
        load_facts(path)
    assert "\n" not in str(info.value)


# --- facts that add a promise where the docstring says nothing ----------------------------------------

def added(doc_version, torch_version):
    from detconf.conformance.findings import fact_entries

    return {e.id: e for e in fact_entries(doc_version, torch_version=torch_version)}


def test_kthvalue_on_cuda_is_promised_deterministic_once_the_docstring_drops_it():
    # 2.9's docstring: kthvalue on CUDA raises; no fact entry (the cell is the docstring's)
    assert SNAPSHOTS["2.9.0"]["kthvalue[cuda]"] == "raises" and "kthvalue[cuda]" not in added("2.9.0", "2.13.0")
    # 2.10's says nothing: the fact adds the promise, so the CUDA cell expects determinism, not the general contract
    assert "kthvalue[cuda]" not in SNAPSHOTS["2.10.0"]
    entry = added("2.10.0", "2.10.0")["kthvalue[cuda]"]
    assert (entry.promise, entry.torch, entry.list_name, entry.source) == ("deterministic", ">=2.10", "fact", "torch-docs")
    assert "165762" in entry.sentence
    assert expected_outcome(entry, "cuda", "error") == "deterministic"
    assert expected_outcome(entry, "cuda", "warn_only") == "deterministic"
    assert "kthvalue[cuda]" not in added("2.10.0", "2.9.1")  # a torch outside the fact's range


def test_histc_on_integer_cuda_input_is_promised_deterministic_from_2_11():
    for docs in ("2.10.0", "2.15.0"):
        entry = added(docs, "2.11.0+cu130")["histc[integer,cuda]"]
        assert entry.dtypes == ("integer",) and entry.promise == "deterministic" and "151701" in entry.sentence
        assert SNAPSHOTS[docs]["histc[cuda]"] == "raises"  # the docstring's sentence stays, for floating input
    assert "histc[integer,cuda]" not in added("2.15.0", "2.10.0")


def test_embedding_backward_is_added_to_older_docs_judged_on_2_14_only():
    assert "Embedding.backward[cuda]" in added("2.13.0", "2.14.1+cu130")
    assert "Embedding.backward[cuda]" not in added("2.13.0", "2.13.0+cpu")
    assert "Embedding.backward[cuda]" not in added("2.14.0", "2.14.1+cu130")  # its own docstring lists it


def test_the_installed_catalog_holds_the_fact_entries():
    from detconf.conformance.catalog import load_catalog

    catalog = {e.id: e for e in load_catalog(["torch-docs"]) if e.list_name == "fact"}
    assert set(catalog) == set(added(None, str(torch.__version__)))


def test_a_fact_that_adds_what_the_docstring_lists_is_a_duplicate():
    from detconf.conformance.findings import fact_entries
    from detconf.engine.entry import check_unique

    fact = FACTS["embedding-backward-cuda-listed-deterministic"]
    overlapping = fact.__class__(**{**fact.__dict__, "adds": ({**fact.adds[0], "docs": ">=2.13"},)})
    with pytest.raises(CatalogError, match="duplicate entry id 'Embedding.backward\\[cuda\\]'"):
        check_unique(snapshot_entries("2.14.0") + fact_entries("2.14.0", torch_version="2.14.1", facts=[overlapping]))
