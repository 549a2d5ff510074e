"""Two entries of one docstring that promise opposite things for the same calls: found, named in
the catalog, the spec history and the cell, and judged once against the more specific sentence.

The real one: torch 2.15 lists ``Tensor.scatter_reduce`` "when called on CUDA or MPS tensor" as
raising while ``reduce='sum'`` or ``'mean'`` on CUDA stays deterministic (pytorch/pytorch#195754).
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from detconf.conformance import catalog
from detconf.conformance.complements import KWARG_DOMAINS
from detconf.conformance.plan import Case
from detconf.engine import docspec
from detconf.engine.entry import CatalogError, Entry
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
SCATTER = "torch.Tensor.scatter_reduce"
VENV_215 = ROOT / ".venv-torch-2.15.0" / "bin" / "python"


def _text(version: str) -> str:
    return catalog.snapshot_text(version)


def _with_bullet(text: str, list_heading: str, bullet: str) -> str:
    """``text`` with ``bullet`` added as the first bullet of the list whose heading holds ``list_heading``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if list_heading in line)
    first = next(i for i in range(at, len(lines)) if lines[i].strip().startswith("* "))
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    return "\n".join(lines[:first] + [indent + "* " + bullet] + lines[first:])


@pytest.mark.parametrize("version", catalog.doc_versions())
def test_only_the_215_docstring_contradicts_itself(version):
    pairs = [(c.specific.id, c.general.id) for c in docspec.find_contradictions(docspec.snapshot_entries(version, catalog.TORCH_DOCS))]
    assert pairs == ([("scatter_reduce(reduce='sum'|'mean')[cuda]", "scatter_reduce[cuda|mps]")]
                     if version == "2.15.0" else [])


def _covering(entries: list[Entry], device: str) -> dict[str, list[str]]:
    """Per reduce value, the scatter_reduce entries whose sentence covers that call on ``device``."""
    domain = KWARG_DOMAINS[(SCATTER, "reduce")]
    out: dict[str, list[str]] = {v: [] for v in domain}
    for e in entries:
        if e.op != SCATTER or e.backward or not e.applies_to(device):
            continue
        values = {v for case in e.cases for n, v in case if n == "reduce"} or set(domain)
        for v in values:
            out[v].append(f"{e.id}:{e.promise}")
    return out


def test_the_real_215_contradiction_is_judged_once_against_the_more_specific_sentence():
    entries = catalog.snapshot_entries("2.15.0")
    by_id = {e.id: e for e in entries}
    specific = by_id["scatter_reduce(reduce='sum'|'mean')[cuda]"]
    assert specific.promise == "deterministic"
    assert "'scatter_reduce[cuda|mps]'" in specific.contradicts and "CUDA or MPS tensor" in specific.contradicts
    assert "scatter_reduce[cuda|mps]" not in by_id  # the general sentence no longer judges the shared calls
    cuda = _covering(entries, "cuda")
    assert cuda == {"sum": [f"{specific.id}:deterministic"], "mean": [f"{specific.id}:deterministic"],
                    "prod": ["scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]:raises"],
                    "amax": ["scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]:raises"],
                    "amin": ["scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]:raises"]}
    assert all(calls == ["scatter_reduce[mps]:raises"] for calls in _covering(entries, "mps").values())
    for rest in ("scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]", "scatter_reduce[mps]"):
        assert by_id[rest].sentence == ":func:`torch.Tensor.scatter_reduce` when called on CUDA or MPS tensor"
        assert specific.id in by_id[rest].contradicts


def test_without_the_resolution_a_call_would_be_judged_twice():
    """The planted fault: the raw 2.15 entries judge reduce='sum' on CUDA under both sentences."""
    raw = docspec.snapshot_entries("2.15.0", catalog.TORCH_DOCS)
    assert sorted(_covering(raw, "cuda")["sum"]) == ["scatter_reduce(reduce='sum'|'mean')[cuda]:deterministic",
                                                     "scatter_reduce[cuda|mps]:raises"]


@pytest.mark.skipif(not VENV_215.exists(), reason="no torch 2.15.0 virtualenv in this checkout")
def test_the_snapshot_is_torch_215s_own_docstring():
    proc = subprocess.run([str(VENV_215), "-c", "import torch; print(torch.__version__); "
                           "print(torch.use_deterministic_algorithms.__doc__)"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-500:]
    version, _, doc = proc.stdout.partition("\n")
    assert version.startswith("2.15.0")
    live = {(e.id, e.promise) for e in docspec.parse_docstring(doc)}
    assert ("scatter_reduce[cuda|mps]", "raises") in live and ("scatter_reduce(reduce='sum'|'mean')[cuda]", "deterministic") in live
    assert live == {(e.id, e.promise) for e in docspec.snapshot_entries("2.15.0", catalog.TORCH_DOCS)}


def test_a_planted_device_contradiction_keeps_the_other_devices_under_the_general_sentence():
    text = _with_bullet(_text("2.14.0"), "normally-nondeterministic operations will throw a", ":class:`torch.nn.Conv1d` when called on CPU or CUDA tensor")
    entries = catalog.resolve_contradictions(docspec.parse_docstring(text, doc_version="planted"))
    by_id = {e.id: e for e in entries}
    assert by_id["Conv1d[cuda]"].promise == "deterministic" and "'Conv1d[cpu|cuda]'" in by_id["Conv1d[cuda]"].contradicts
    assert by_id["Conv1d[cpu]"].promise == "raises" and "'Conv1d[cuda]'" in by_id["Conv1d[cpu]"].contradicts
    assert "Conv1d[cpu|cuda]" not in by_id
    untouched = catalog.resolve_contradictions(docspec.parse_docstring(_text("2.14.0")))
    assert not any(e.contradicts for e in untouched)


def test_a_planted_keyword_contradiction_leaves_the_other_values_to_the_general_sentence():
    text = _with_bullet(_text("2.14.0"), "normally-nondeterministic operations will act",
                        ":func:`torch.Tensor.index_put` when ``accumulate=True`` and called on MPS tensor")
    text = _with_bullet(text, "normally-nondeterministic operations will throw a", ":func:`torch.Tensor.index_put` when called on MPS tensor")
    by_id = {e.id: e for e in catalog.resolve_contradictions(docspec.parse_docstring(text))}
    assert "'index_put[mps]'" in by_id["index_put(accumulate=True)[mps]"].contradicts
    rest = by_id["index_put(accumulate=False)[mps]"]
    assert rest.promise == "raises" and rest.cases == ((("accumulate", False),),)
    assert "'index_put(accumulate=True)[mps]'" in rest.contradicts
    assert "index_put[mps]" not in by_id


def test_two_opposite_sentences_of_the_same_scope_are_refused():
    """Two bullets with the same conditions already share an id (``check_unique`` refuses them);
    two such entries under other ids leave no sentence to judge by either."""
    conv = next(e for e in docspec.snapshot_entries("2.14.0", catalog.TORCH_DOCS) if e.id == "Conv1d[cuda]")
    opposite = dataclasses.replace(conv, id="Conv1d[cuda]#planted", promise="raises", list_name="raises")
    with pytest.raises(CatalogError, match="neither is more specific"):
        docspec.find_contradictions([conv, opposite])


def test_a_narrowing_with_no_known_values_is_refused():
    text = _with_bullet(_text("2.14.0"), "normally-nondeterministic operations will act",
                        ":func:`torch.bmm` when ``alpha=2`` and called on CUDA tensor")
    text = _with_bullet(text, "normally-nondeterministic operations will throw a", ":func:`torch.bmm` when called on CUDA tensor")
    with pytest.raises(CatalogError, match="not known"):
        catalog.resolve_contradictions(docspec.parse_docstring(text))


def test_the_note_survives_json_and_is_absent_where_there_is_none():
    entry = next(e for e in catalog.snapshot_entries("2.15.0") if e.contradicts)
    assert Entry.from_json(json.loads(json.dumps(entry.to_json()))) == entry
    plain = catalog.snapshot_entries("2.14.0")[0]
    assert "contradicts" not in plain.to_json()


def test_the_spec_history_says_so():
    proc = subprocess.run([sys.executable, "-m", "detconf.conformance", "spec-history"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    noted = sorted((r["doc_version"], r["entry_id"]) for r in rows if r.get("contradicts"))
    assert noted == [("2.15.0", "scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]"),
                     ("2.15.0", "scatter_reduce(reduce='sum'|'mean')[cuda]"), ("2.15.0", "scatter_reduce[mps]")]


def test_the_cell_names_the_contradiction():
    from detconf.conformance import harness

    entry = next(e for e in catalog.snapshot_entries("2.15.0") if e.id == "scatter_reduce(reduce='sum'|'mean')[cuda]")
    row = harness.skipped_row(Case(entry=entry, device="cuda", mode="error", expected="deterministic"), "no CUDA here")
    assert row["detail"]["contradiction"] == entry.contradicts
    plain = next(e for e in catalog.snapshot_entries("2.15.0") if not e.contradicts)
    row = harness.skipped_row(Case(entry=plain, device="cuda", mode="error", expected="deterministic"), "no CUDA here")
    assert "contradiction" not in row["detail"]


def test_a_judged_cell_names_the_contradiction(tmp_path):
    """The 2.15 promises judged on this machine's CPU (``--doc-version 2.15.0``): every
    scatter_reduce cell says which entry contradicts it."""
    results = tmp_path / "r.jsonl"
    proc = warm.run([sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-k",
                           "scatter_reduce", "--doc-version", "2.15.0", "--device", "cpu", "--mode", "error",
                           "--source", "torch-docs", "--hypothesis-profile", "ci", "--results", str(results),
                           "--fresh-results", "--no-report-build"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    noted = {r["entry_id"]: r["detail"].get("contradiction", "") for r in rows if r.get("record") == "result"}
    assert set(noted) == {"scatter_reduce(reduce='sum'|'mean')[cuda]", "scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]",
                          "scatter_reduce[mps]"}
    assert "'scatter_reduce[cuda|mps]'" in noted["scatter_reduce(reduce='sum'|'mean')[cuda]"]
    assert all("scatter_reduce(reduce='sum'|'mean')[cuda]" in noted[k] for k in noted if "sum" not in k)
