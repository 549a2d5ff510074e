"""The docstring parser, on every snapshot from 1.8.0 to 2.15.0."""
from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from detconf.conformance.catalog import TORCH_DOCS as SNAPSHOT_DIR
from detconf.conformance.catalog import doc_versions as known_doc_versions
from detconf.conformance.catalog import snapshot_entries, snapshot_text
from detconf.engine.docspec import UnknownDocVersion, parse_docstring
from detconf.engine.entry import CatalogError

ROOT = Path(__file__).resolve().parent.parent

# Bullets per list, counted by reading each snapshot (deterministic, raises, cublas).
BULLETS = {
    "1.8.0": (9, 25, 3),
    "1.9.0": (16, 25, 3),
    "1.10.0": (17, 26, 3),
    "1.11.0": (17, 26, 3),
    "1.12.0": (17, 26, 3),
    "1.13.0": (17, 28, 3),
    "2.0.0": (17, 28, 3),
    "2.1.0": (21, 30, 3),
    "2.2.0": (20, 29, 3),
    "2.3.0": (20, 29, 3),
    "2.4.0": (20, 29, 3),
    "2.5.0": (20, 29, 3),
    "2.6.0": (20, 29, 3),
    "2.7.0": (20, 29, 3),
    "2.8.0": (22, 27, 3),
    "2.9.0": (22, 27, 3),
    "2.10.0": (22, 26, 0),
    "2.11.0": (22, 26, 0),
    "2.12.0": (22, 26, 0),
    "2.13.0": (23, 25, 0),
    "2.14.0": (25, 24, 0),
    "2.15.0": (25, 32, 0),
}
# Bullets that name several ops become one entry per op:
# 2.1.0 deterministic: "torch.empty, torch.empty_like, torch.empty_strided, and torch.empty_permuted" (+3);
# 2.15.0 raises: "torch.nn.MaxPool2d, torch.nn.MaxPool3d, and torch.nn.AvgPool3d" (+2), and the
# scatter_reduce bullet that contradicts a deterministic one, two entries once resolved (+1,
# tests/test_contradictions.py).
EXTRA_ENTRIES = {("2.1.0", "deterministic"): 3, ("2.15.0", "raises"): 3}


def by_id(entries):
    return {e.id: e for e in entries}


def test_known_doc_versions_are_all_snapshots_in_release_order():
    assert known_doc_versions() == list(BULLETS)


@pytest.mark.parametrize("version", list(BULLETS))
def test_entries_per_list(version):
    entries = snapshot_entries(version)
    det, raises, cublas = BULLETS[version]
    expected = {
        "deterministic": det + EXTRA_ENTRIES.get((version, "deterministic"), 0),
        "raises": raises + EXTRA_ENTRIES.get((version, "raises"), 0),
    }
    if cublas:
        expected["cublas"] = cublas
    assert dict(Counter(e.list_name for e in entries)) == expected
    bullets = {name: len({e.position for e in entries if e.list_name == name}) for name in expected}
    assert bullets == {k: v for k, v in zip(("deterministic", "raises", "cublas"), BULLETS[version]) if v}


@pytest.mark.parametrize("version", list(BULLETS))
def test_every_entry_is_well_formed(version):
    text = snapshot_text(version)
    # lines joined by single spaces; spacing inside a line is kept (2.1.0 has "value.  Floating")
    flat_text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    for e in snapshot_entries(version):
        assert e.doc_version == version and e.source == "torch-docs"
        assert e.op.startswith("torch.") and f"`{e.op}`" in e.sentence
        assert "\n" not in e.sentence and e.sentence == e.sentence.strip()
        # verbatim: the sentence (minus interpolate's joined sub-list) is a run of the text
        main = e.sentence.split(" used: ")[0] + (" used:" if " used: " in e.sentence else "")
        assert main in flat_text
        assert e.promise == ("deterministic" if e.list_name == "deterministic" else "raises")
        assert list(e.devices) == sorted(e.devices)


def test_2_13_counts():
    entries = snapshot_entries("2.13.0")
    assert sum(e.promise == "deterministic" for e in entries) == 23
    assert sum(e.promise == "raises" for e in entries) == 25


def test_installed_docstring_is_its_release_snapshot():
    torch = pytest.importorskip("torch")
    from detconf.conformance.catalog import resolve_contradictions, snapshot_of_release
    from detconf.engine.docspec import installed_entries

    release = snapshot_of_release(torch.__version__)
    if release is None:
        pytest.skip(f"no docstring snapshot of the release line of torch {torch.__version__}")
    installed = installed_entries()
    assert all(e.doc_version is None for e in installed)
    # A snapshot's entries have the docstring's contradictions resolved (2.15's scatter_reduce), as
    # the catalog resolves the installed docstring's.
    assert resolve_contradictions([dataclasses.replace(e, doc_version=release) for e in installed]) == \
        snapshot_entries(release)
    assert inspect.cleandoc(torch.use_deterministic_algorithms.__doc__).strip() == snapshot_text(release).strip()


@pytest.mark.parametrize("version,release", [
    ("2.14.1+cu130", "2.14.0"), ("2.5.1", "2.5.0"), ("2.13.0+cpu", "2.13.0"), ("1.8.2", "1.8.0"),
    ("2.16.0a0+git1", None), ("3.0.0", None), ("nonsense", None),
])
def test_a_release_maps_to_the_snapshot_of_its_line(version, release):
    from detconf.conformance.catalog import snapshot_of_release

    assert snapshot_of_release(version) == release


def test_indented_docstring_parses_like_the_snapshot():
    text = snapshot_text("2.13.0")
    lines = text.splitlines()
    raw = lines[0] + "\n" + textwrap.indent("\n".join(lines[1:]), "    ") + "\n    "
    assert parse_docstring(raw, doc_version="2.13.0") == snapshot_entries("2.13.0")


def test_put_accumulate_false():
    e = by_id(snapshot_entries("2.13.0"))["put_(accumulate=False)"]
    assert e.op == "torch.Tensor.put_"
    assert e.promise == "raises" and e.list_name == "raises"
    assert e.devices == ()
    assert e.cases == ((("accumulate", False),),)
    assert e.sentence == ":func:`torch.Tensor.put_` when ``accumulate=False``"
    assert not e.backward


def test_interpolate_has_four_mode_cases():
    [e] = [e for e in snapshot_entries("2.13.0") if e.short_op == "interpolate"]
    assert e.op == "torch.nn.functional.interpolate"
    assert e.cases == tuple((("mode", m),) for m in ("linear", "bilinear", "bicubic", "trilinear"))
    assert e.backward and e.devices == ("cuda",) and e.promise == "raises"
    assert e.sentence.endswith("one of the following modes is used: ``linear``, ``bilinear``, ``bicubic``, ``trilinear``")
    assert e.id == "interpolate(mode='linear'|'bilinear'|'bicubic'|'trilinear').backward[cuda]"


def test_condition_flags():
    entries = by_id(snapshot_entries("2.13.0"))
    assert entries["cumsum[floating|complex,cuda]"].dtypes == ("floating", "complex")
    assert entries["bincount[weights,cuda]"].weights_given
    assert entries["median[indices,cuda]"].indices_output
    assert entries["resize_[quantized]"].quantized and entries["resize_[quantized]"].op == "torch.Tensor.resize_"
    bmm = entries["bmm[sparse-dense,cuda]"]
    assert bmm.sparse_dense and bmm.promise == "deterministic"
    getitem = entries["__getitem__.backward[tensor-list-index,cpu]"]
    assert getitem.op == "torch.Tensor.__getitem__" and getitem.backward and getitem.devices == ("cpu",)
    assert getitem.qualifiers == ("tensor-list-index",)
    assert entries["scatter[src-tensor,cuda]"].qualifiers == ("src-tensor",)
    assert entries["index_copy[cpu|cuda]"].devices == ("cpu", "cuda")
    assert entries["EmbeddingBag(mode='max').backward[cuda]"].cases == ((("mode", "max"),),)
    assert entries["NLLLoss[cuda]"].backward is False
    assert entries["MaxUnpool1d"].devices == () and entries["MaxUnpool1d"].promise == "raises"
    scatter_reduce = entries["scatter_reduce(reduce='sum'|'mean')[cuda]"]
    assert scatter_reduce.cases == ((("reduce", "sum"),), (("reduce", "mean"),))
    assert scatter_reduce.promise == "deterministic"
    assert entries["scatter_reduce(reduce='prod')[cuda]"].promise == "raises"


def test_2_15_multi_op_bullet_is_one_entry_per_op():
    entries = snapshot_entries("2.15.0")
    multi = [e for e in entries if e.sentence.startswith(":func:`torch.nn.MaxPool2d`")]
    assert [e.op for e in multi] == ["torch.nn.MaxPool2d", "torch.nn.MaxPool3d", "torch.nn.AvgPool3d"]
    assert len({e.sentence for e in multi}) == 1 and len({e.position for e in multi}) == 1
    assert all(e.devices == ("mps",) and e.backward and e.promise == "raises" for e in multi)
    assert [e.id for e in multi] == ["MaxPool2d.backward[mps]", "MaxPool3d.backward[mps]", "AvgPool3d.backward[mps]"]


def test_2_15_mps_wording():
    entries = by_id(snapshot_entries("2.15.0"))
    index_reduce = entries["index_reduce(reduce='prod'|'mean')[floating|complex,mps]"]
    assert index_reduce.cases == ((("reduce", "prod"),), (("reduce", "mean"),))
    assert entries["scatter_reduce[mps]"].devices == ("mps",)  # and on CUDA all but sum/mean (a contradiction)
    assert entries["scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]"].devices == ("cuda",)
    assert entries["index_put(accumulate=True)[floating|complex,mps]"].promise == "raises"
    assert entries["interpolate.backward[some-cases,mps]"].cases == ((),)
    assert entries["cumsum[floating|complex,cuda]"].promise == "deterministic"


def test_1_8_old_spellings_and_cublas_list():
    entries = snapshot_entries("1.8.0")
    ids = by_id(entries)
    getitem = ids["__getitem__.backward[tensor-list-index,cpu]"]
    assert getitem.op == "torch.__getitem__" and getitem.backward
    for op in ("torch.index_put", "torch.index_copy", "torch.index_add_", "torch.scatter_add_"):
        assert op in {e.op for e in entries}
    assert ids["AvgPool3d.backward[cuda]"].backward  # "that requires grad"
    cublas = [e for e in entries if e.list_name == "cublas"]
    assert [e.op for e in cublas] == ["torch.mm", "torch.mv", "torch.bmm"]
    for e in cublas:
        assert e.promise == "raises" and e.devices == ("cuda",)
        assert e.qualifiers == ("no-cublas-workspace-config",)
    assert "bmm[no-cublas-workspace-config,cuda]" in ids and "bmm[sparse-dense,cuda]" in ids


def test_cublas_list_ends_in_2_10():
    assert any(e.list_name == "cublas" for e in snapshot_entries("2.9.0"))
    assert not any(e.list_name == "cublas" for e in snapshot_entries("2.10.0"))


def test_input_dimension_qualifiers_1_10():
    ids = by_id(snapshot_entries("1.10.0"))
    assert ids["scatter_add_[1d-input,cuda]"].promise == "deterministic"
    assert ids["scatter_add_[nd-input,cuda]"].promise == "raises"
    assert ids["gather.backward[nd-input,cuda]"].promise == "raises"


def test_2_1_fill_bullets():
    entries = snapshot_entries("2.1.0")
    ids = by_id(entries)
    resize = ids["resize_[not-quantized,fills-uninitialized]"]
    assert not resize.quantized and resize.dtypes == () and resize.promise == "deterministic"
    assert ids["resize_[quantized]"].promise == "raises"
    empties = [e.op for e in entries if "fills-uninitialized" in e.qualifiers and e.short_op.startswith("empty")]
    assert empties == ["torch.empty", "torch.empty_like", "torch.empty_strided", "torch.empty_permuted"]


# --- errors --------------------------------------------------------------------

def doc(det_bullets: str, raises_bullets: str = "    * :class:`torch.nn.MaxUnpool1d`") -> str:
    return (
        "Sets whether PyTorch operations must use deterministic algorithms.\n\n"
        "The following normally-nondeterministic operations will act\n"
        "deterministically when ``mode=True``:\n\n"
        f"{det_bullets}\n\n"
        "The following normally-nondeterministic operations will throw a\n"
        ":class:`RuntimeError` when ``mode=True``:\n\n"
        f"{raises_bullets}\n\n"
        "Note that deterministic operations tend to have worse performance.\n"
    )


def test_small_docstring_parses():
    entries = parse_docstring(doc("    * :func:`torch.Tensor.put_` when ``accumulate=False``"), doc_version="x")
    assert [(e.id, e.promise, e.position) for e in entries] == [
        ("put_(accumulate=False)", "deterministic", 0),
        ("MaxUnpool1d", "raises", 0),
    ]


def test_duplicate_ids_are_rejected():
    bullets = "    * :func:`torch.Tensor.put_` when ``accumulate=False``\n" * 2
    with pytest.raises(CatalogError, match=r"duplicate entry id 'put_\(accumulate=False\)'"):
        parse_docstring(doc(bullets))


def test_duplicate_ids_across_lists_are_rejected():
    bullet = "    * :class:`torch.nn.MaxUnpool1d`"
    with pytest.raises(CatalogError, match="duplicate entry id 'MaxUnpool1d'"):
        parse_docstring(doc(bullet, bullet))


def test_bullet_without_op_raises_naming_it():
    bullets = "    * :class:`torch.nn.Conv1d` when called on CUDA tensor\n    * Some convolution kernels on CUDA"
    with pytest.raises(CatalogError, match="deterministic bullet 1 names no op: 'Some convolution kernels on CUDA'"):
        parse_docstring(doc(bullets), doc_version="9.9")


def test_unknown_wording_keeps_the_entry_with_what_was_understood():
    bullets = "    * :func:`torch.frobnicate` when the moon is full and called on a CUDA tensor"
    [e, _] = parse_docstring(doc(bullets))
    assert e.op == "torch.frobnicate" and e.id == "frobnicate[cuda]"
    assert e.sentence == ":func:`torch.frobnicate` when the moon is full and called on a CUDA tensor"
    assert e.cases == ((),) and e.qualifiers == () and not e.backward


def test_missing_list_raises():
    text = "Sets whether...\n\nThe following normally-nondeterministic operations will act\ndeterministically:\n\n    * :func:`torch.bmm`\n"
    with pytest.raises(CatalogError, match="no raises list"):
        parse_docstring(text)


def test_empty_list_raises():
    with pytest.raises(CatalogError, match="'raises' list has no bullets"):
        parse_docstring(doc("    * :func:`torch.bmm`", "    "))


def test_unknown_doc_version_lists_known_versions():
    with pytest.raises(UnknownDocVersion) as info:
        snapshot_entries("3.0.0")
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "\n" not in message and "'3.0.0'" in message
    assert message.endswith("known versions: " + ", ".join(BULLETS))


# --- data and imports ----------------------------------------------------------

def test_project_snapshots_carry_the_licence():
    licence = (SNAPSHOT_DIR / "LICENSE").read_text()
    assert "From PyTorch:" in licence and "Redistribution and use in source and binary forms" in licence
    assert (SNAPSHOT_DIR / "README.md").read_text().count("\n") == 1


def test_docspec_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from detconf.conformance.catalog import snapshot_entries\n"
        "print(len(snapshot_entries('2.13.0')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "48"
