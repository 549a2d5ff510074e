"""Every call form a sentence covers runs, and every documented condition has its complement."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import detconf.conformance.registry  # noqa: F401
from detconf.conformance.catalog import load_catalog, snapshot_entries
from detconf.conformance.complements import complement_of, complements
from detconf.conformance.harness import expected_for, judge
from detconf.conformance.plan import Case, plan
from detconf.engine.devices import backends
from detconf.engine.program import forms_for, recipe_for
from tests.planted import planted_entry

CPU = backends()["cpu"]
FAST = settings(max_examples=4, derandomize=True, database=None, deadline=None)
DOCS = snapshot_entries("2.13.0")


def _entry(entry_id):
    return next(e for e in DOCS if e.id == entry_id)


def _build(entry, case):
    """One program per (entry, case), drawn by Hypothesis."""
    built = []

    @settings(max_examples=1, derandomize=True, database=None, deadline=None)
    @given(st.data())
    def draw(data):
        built.append(recipe_for(entry.op)(data.draw, entry, case, torch.device("cpu")))

    draw()
    return built[0]


@pytest.mark.parametrize("entry_id,form,spelled", [
    ("put_(accumulate=False)", "Tensor.put_", ".put_(index"),
    ("put_(accumulate=False)", "Tensor.put", "x.put(index"),
    ("put_(accumulate=False)", "torch.put", "torch.put(x"),
    ("cumsum[floating|complex,cuda]", "Tensor.cumsum_", ".cumsum_(dim)"),
    ("scatter_add_[cuda]", "torch.scatter_add", "torch.scatter_add(x"),
    ("MaxPool3d.backward[cuda]", "nn.Module", "getattr(torch.nn, module)"),
    ("MaxPool3d.backward[cuda]", "nn.functional", "F.max_pool3d("),
    ("ReplicationPad2d.backward[cuda]", "nn.Module", "module='ReplicationPad2d'"),
    ("resize_[quantized]", "qint32", "dtype=torch.qint32"),
])
def test_each_form_runs_the_call_it_names(entry_id, form, spelled):
    entry = _entry(entry_id)
    assert form in forms_for(entry)
    case = dict(entry.case_kwargs()[0], form=form)
    prog = _build(entry, case)
    assert spelled in prog.repro, prog.repro
    assert f"form={form!r}" in prog.describe


def test_forms_follow_the_entry():
    assert forms_for(_entry("resize_[quantized]")) == ("quint8", "qint8", "qint32")
    plain = complement_of(_entry("resize_[quantized]"), DOCS)
    assert plain is not None and forms_for(plain) == (None,)
    assert forms_for(_entry("bincount[weights,cuda]")) == (None,)


def test_every_example_runs_every_form_and_a_bad_form_is_caught():
    good = judge(Case(_entry("put_(accumulate=True)[cpu]"), "cpu", "error"), CPU, hypothesis_settings=FAST)
    assert good["verdict"] == "conforms"
    assert sum(good["detail"]["verdicts_per_example"].values()) == good["examples"] * 3
    bad = judge(Case(planted_entry("planted.one_form_misbehaves", "deterministic"), "cpu", "error"), CPU,
                hypothesis_settings=FAST)
    assert bad["verdict"] == "nondeterministic"
    assert "form='bad'" in bad["detail"]["example"] or bad["detail"]["case"]["form"] == "bad"


def test_complements_of_the_2_13_docs():
    ids = {c.id: c for c in complements(DOCS)}
    assert set(ids) == {
        "scatter(value=1.5)[complement,cuda]", "scatter_reduce(reduce='amax'|'amin')[complement,cuda]",
        "interpolate(mode='nearest').backward[complement,cuda]",
        "EmbeddingBag(mode='sum'|'mean').backward[complement,cuda]", "bincount[complement,cuda]",
        "median[complement,cuda]", "cumsum[integer,complement,cuda]", "resize_[complement]"}
    for c in ids.values():
        assert c.promise == "deterministic" and c.list_name == "complement" and c.source == "torch-docs"
        assert c.sentence.startswith("complement of: ")
    assert not ids["bincount[complement,cuda]"].weights_given
    assert not ids["median[complement,cuda]"].indices_output
    assert ids["cumsum[integer,complement,cuda]"].dtypes == ("integer",)


def test_a_complement_documented_elsewhere_is_not_made():
    # put_(accumulate=False) raises; accumulate=True has entries of its own
    assert complement_of(_entry("put_(accumulate=False)"), DOCS) is None
    assert complement_of(_entry("bincount[weights,cuda]"), DOCS + [complement_of(_entry("bincount[weights,cuda]"), DOCS)]) is None


@pytest.mark.parametrize("device,mode,expected", [("cuda", "error", "deterministic"), ("cuda", "warn_only", "deterministic"),
                                                  ("cpu", "error", "deterministic"), ("cuda", "off", "observe")])
def test_a_complement_expects_no_alert_and_determinism(device, mode, expected):
    c = complement_of(_entry("bincount[weights,cuda]"), DOCS)
    case = next(x for x in plan([c], [device], [mode]))
    assert expected_for(case) == expected


def test_complements_run_with_their_recipes_and_reach_their_kernels():
    for c in complements(load_catalog(["torch-docs"])):
        row = judge(Case(c, "cpu", "error"), CPU, hypothesis_settings=FAST)
        assert row["verdict"] == "conforms", (c.id, row["detail"])
        assert row["reach"] == 1.0, c.id
    unweighted = judge(Case(complement_of(_entry("bincount[weights,cuda]"), DOCS), "cpu", "error"), CPU,
                       hypothesis_settings=FAST)
    assert "weights" not in unweighted["detail"]["repro"].split("def ")[1]


@pytest.mark.parametrize("entry_id", ["Conv2d[cuda]", "ConvTranspose1d[cuda]", "NLLLoss[cuda]",
                                      "CTCLoss.backward[cuda]", "EmbeddingBag(mode='max').backward[cuda]",
                                      "AdaptiveAvgPool2d.backward[cuda]"])
def test_module_and_functional_forms_give_the_same_bytes(entry_id):
    """The nn.Module form builds the module and takes its parameters from the example's inputs:
    on the same drawn example it must compute exactly what the functional form computes."""
    from detconf.engine.runner import run_program

    entry = next((e for e in load_catalog(["torch-docs"]) if e.id == entry_id), None)
    if entry is None:
        pytest.skip(f"{entry_id} is not in the installed torch's docs")
    case = entry.case_kwargs()[0]
    module = _build(entry, dict(case, form="nn.Module"))
    functional = _build(entry, dict(case, form="nn.functional"))
    assert "getattr(torch.nn, module)" in module.repro or "torch.nn.NLLLoss" in module.repro
    a = run_program(module, "error")
    b = run_program(functional, "error")
    assert a.observation.identical and b.observation.identical
    assert a.observation.fingerprint == b.observation.fingerprint
