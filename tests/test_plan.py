"""The plan: cases per (entry, device, mode), sorted, and cases as JSON for child processes."""
from __future__ import annotations

import json

import pytest

from detconf.conformance.catalog import doc_versions, load_catalog, snapshot_entries
from detconf.conformance.plan import Case, plan, raise_documented_elsewhere
from detconf.vocabulary import DEFAULT_SOURCES, MODES

CATALOG = load_catalog(DEFAULT_SOURCES)


def test_every_case_of_the_default_sources_travels_as_json():
    cases = plan(CATALOG, ["cpu", "cuda"], MODES)
    for case in cases:
        assert Case.from_json(json.loads(json.dumps(case.to_json()))) == case


@pytest.mark.parametrize("version", doc_versions())
def test_every_documented_entry_of_every_release_travels_as_json(version):
    for case in plan(snapshot_entries(version), ["cuda", "mps"], ["error"]):
        assert Case.from_json(json.loads(json.dumps(case.to_json()))) == case


def test_plan_is_sorted_and_unique():
    cases = plan(CATALOG, ["cuda", "cpu"], ["warn_only", "error"])
    assert [c.id for c in cases] == [c.id for c in plan(list(reversed(CATALOG)), ["cpu", "cuda"], ["error", "warn_only"])]
    backward_ops = [e for e in CATALOG if e.backward and e.promise != "behaves"]
    assert backward_ops
    # every op entry about backward runs in both phases in each deterministic mode
    assert len({c.id for c in cases}) == len(cases) == (len(CATALOG) + len(backward_ops)) * 4


def test_backward_entries_get_a_backward_only_phase_in_deterministic_modes_only():
    entry = next(e for e in CATALOG if e.backward and e.promise != "behaves")
    forward = next(e for e in CATALOG if not e.backward and e.promise != "behaves")
    cases = plan([entry, forward], ["cpu"], MODES)
    phases = {(c.entry.id, c.mode): [] for c in cases}
    for c in cases:
        phases[(c.entry.id, c.mode)].append(c.phase)
    assert phases[(entry.id, "error")] == ["program", "backward-only"]
    assert phases[(entry.id, "warn_only")] == ["program", "backward-only"]
    assert phases[(entry.id, "off")] == ["program"]
    assert all(phases[(forward.id, m)] == ["program"] for m in MODES)
    only = next(c for c in cases if c.phase == "backward-only")
    assert only.id.endswith("-backward-only") and Case.from_json(only.to_json()) == only


def test_a_raise_documented_for_another_device_is_found():
    entries = {e.id: e for e in snapshot_entries("2.13.0")}
    deterministic = entries["put_(accumulate=True)[cpu]"] if "put_(accumulate=True)[cpu]" in entries else None
    if deterministic is None:
        pytest.skip("2.13.0 documents no CPU-only put_(accumulate=True)")
    assert raise_documented_elsewhere(deterministic, "cuda", entries.values()) == "put_(accumulate=True)[cuda]"
    assert raise_documented_elsewhere(deterministic, "cpu", entries.values()) is None


def test_the_sweep_runs_in_the_program_phase_only():
    from detconf.conformance.plan import phases_for
    from detconf.engine.entry import Entry
    sweep_entry = Entry(id="x", op="opinfo:x", sentence="", promise="deterministic", backward=True, source="sweep")
    assert phases_for(sweep_entry, "error") == ("program",)


def test_a_compiled_run_starts_the_heaviest_cases_first_and_keeps_each_group_together():
    from detconf.conformance.plan import heaviest_first

    torch_docs = [e for e in CATALOG if e.source == "torch-docs"]
    cases = plan(torch_docs, ["cpu"], ["error", "warn_only"], ["eager", "inductor"])
    ordered = heaviest_first(cases)
    assert sorted(c.id for c in ordered) == sorted(c.id for c in cases)
    weights = [0 if c.compile != "eager" and c.entry.backward else 1 if c.compile != "eager" else 2 for c in ordered]
    assert weights == sorted(weights) and weights[0] == 0 and weights[-1] == 2 and 1 in weights
    # The plan's order within a weight; the modes of a compiled entry stay adjacent (one xdist group).
    assert [c.id for c in ordered if c.compile == "eager"] == [c.id for c in cases if c.compile == "eager"]
    groups = [(c.entry.id, c.compile) for c in ordered]
    seen, previous = set(), None
    for group in groups:
        assert group == previous or group not in seen, f"{group} is split"
        seen.add(group)
        previous = group


def test_the_stress_tier_starts_its_positive_control_first():
    """control_first: the eager cases of mode off first, then the other eager ones, each in the
    order given; compiled cases keep their places (and each compiled entry's modes together)."""
    from detconf.conformance.plan import control_first, heaviest_first

    torch_docs = [e for e in CATALOG if e.source == "torch-docs"]
    cases = heaviest_first(plan(torch_docs, ["cpu"], ["error", "off", "warn_only"], ["eager", "inductor"]))
    ordered = control_first(cases)
    assert sorted(c.id for c in ordered) == sorted(c.id for c in cases)
    eager = [c for c in ordered if c.compile == "eager"]
    offs = sum(c.mode == "off" for c in eager)
    assert offs and all(c.mode == "off" for c in eager[:offs]) and all(c.mode != "off" for c in eager[offs:])
    assert eager[:offs] == [c for c in cases if c.compile == "eager" and c.mode == "off"]
    assert eager[offs:] == [c for c in cases if c.compile == "eager" and c.mode != "off"]
    assert [c for c in ordered if c.compile != "eager"] == [c for c in cases if c.compile != "eager"]
    assert ordered[:len(ordered) - len(eager)] == [c for c in cases if c.compile != "eager"]  # still first


def test_the_plugin_collects_a_compiled_run_heaviest_first_and_an_eager_run_in_plan_order(tmp_path):
    from tests.test_plugin import pytest_run

    def collected(*args):
        out = pytest_run("--source", "torch-docs", "--device", "cpu", "--mode", "error", *args,
                         "--results", str(tmp_path / "r.jsonl"), "--collect-only")
        assert out.returncode == 0, out.stdout[-2000:]
        return [line for line in out.stdout.splitlines() if "::test_documented[" in line]

    eager = collected()
    compiled = collected("--compile", "eager", "--compile", "inductor")
    assert eager and compiled[0].endswith("-inductor]") and compiled[-1].endswith("-error]")
    first_backward = next(i for i, line in enumerate(compiled) if ".backward" in line)
    first_forward = next(i for i, line in enumerate(compiled) if ".backward" not in line)
    assert first_backward == 0 < first_forward
    assert [line for line in compiled if not line.endswith("-inductor]")] == eager
    # The stress tier: the mode-off cases first, then the others, each part in the plan's order.
    stress = collected("--mode", "off", "--hypothesis-profile", "stress")
    offs = [line for line in stress if line.endswith("-off]")]
    assert offs and stress[:len(offs)] == offs and stress[len(offs):] == eager

    def cell(line):  # the entry and device of a case
        return line.rsplit("-", 1)[0]
    place = {cell(line): i for i, line in enumerate(eager)}
    assert all(cell(line) in place for line in offs)
    assert [place[cell(line)] for line in offs] == sorted(place[cell(line)] for line in offs)
