"""Doc drift across the docstring snapshots (reports.drift)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from detconf.reports.drift import build, drift_events, main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def drift():
    events, history, versions = build()
    return events, history.set_index("key"), versions


def changes_of(events, key):
    rows = events[events.key == key]
    return list(zip(rows.release, rows.change, rows.from_list, rows.to_list))


def test_maxpool3d_backward_moves_to_deterministic_in_2_13(drift):
    events, history, _ = drift
    assert ("2.13.0", "moved", "raises", "deterministic") in changes_of(events, "MaxPool3d.backward[cuda]")
    assert history.at["MaxPool3d.backward[cuda]", "history"] == "raises 1.8.0–2.12.0; deterministic 2.13.0–2.15.0"


def test_cumsum_moves_to_deterministic_in_2_14(drift):
    events, history, _ = drift
    assert changes_of(events, "cumsum[floating|complex,cuda]") == [
        ("1.13.0", "entered", "", "raises"),
        ("2.14.0", "moved", "raises", "deterministic"),
    ]


def test_2_15_adds_mps_entries(drift):
    events, _, _ = drift
    entered = set(events[(events.release == "2.15.0") & (events.change == "entered")].key)
    assert {
        "MaxPool2d.backward[mps]", "MaxPool3d.backward[mps]", "AvgPool3d.backward[mps]", "kthvalue[mps]",
        "Embedding.backward[mps]", "index_reduce(reduce='prod'|'mean')[floating|complex,mps]",
    } <= entered
    # ... and on CUDA the calls of the contradicting scatter_reduce bullet that no deterministic one covers
    assert all("mps" in key for key in entered - {"scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]"})
    assert "scatter_reduce(reduce='prod'|'amax'|'amin')[cuda]" in entered
    assert changes_of(events, "scatter_reduce(reduce='prod')[cuda]")[-1] == ("2.15.0", "left", "raises", "")


def test_cublas_list_leaves_in_2_10(drift):
    events, _, _ = drift
    left = events[(events.release == "2.10.0") & (events.change == "left")]
    assert set(left[left.from_list == "cublas"].key) == {
        "mm[no-cublas-workspace-config,cuda]", "mv[no-cublas-workspace-config,cuda]",
        "bmm[no-cublas-workspace-config,cuda]",
    }


def test_respelled_op_keeps_its_key(drift):
    events, history, _ = drift
    # 1.8 "torch.__getitem__ backward when ..." -> 1.9 "torch.Tensor.__getitem__ when attempting to differentiate"
    assert changes_of(events, "__getitem__.backward[tensor-list-index,cpu]") == [
        ("1.9.0", "reworded", "deterministic", "deterministic"),
    ]
    row = events[events.key == "__getitem__.backward[tensor-list-index,cpu]"].iloc[0]
    assert row.op == "torch.Tensor.__getitem__" and "torch.__getitem__" in row.previous_sentence
    assert history.at["Conv1d[cuda]", "history"] == "deterministic 1.8.0–2.15.0"


def test_events_are_sorted_by_release_then_change_then_key(drift):
    events, _, versions = drift
    order = {"moved": 0, "entered": 1, "left": 2, "reworded": 3}
    keys = [(versions.index(r), order[c], k) for r, c, k in zip(events.release, events.change, events.key)]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_synthetic_presence_table():
    presence = pd.DataFrame(
        [
            ("1", "a", "torch.a", "raises", "s"),
            ("1", "b", "torch.b", "deterministic", "s"),
            ("1", "c", "torch.c", "raises", "old"),
            ("2", "a", "torch.a", "deterministic", "s"),
            ("2", "c", "torch.c", "raises", "new"),
            ("2", "d", "torch.d", "raises", "s"),
        ],
        columns=["release", "key", "op", "list_name", "sentence"],
    )
    events = drift_events(presence, ["1", "2"])
    assert list(zip(events.key, events.change)) == [("a", "moved"), ("d", "entered"), ("b", "left"), ("c", "reworded")]


def test_main_writes_byte_stable_markdown_and_csv(tmp_path):
    assert main(["--out", str(tmp_path / "one")]) == 0
    assert main(["--out", str(tmp_path / "two")]) == 0
    for name in ("drift.md", "drift.csv"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    csv = pd.read_csv(tmp_path / "one" / "drift.csv", dtype=str, keep_default_na=False)
    assert list(csv.columns[:4]) == ["release", "previous_release", "change", "key"]
    assert ((csv.key == "MaxPool3d.backward[cuda]") & (csv.release == "2.13.0") & (csv.change == "moved")).sum() == 1
    md = (tmp_path / "one" / "drift.md").read_text()
    assert md.startswith("# Doc drift of `torch.use_deterministic_algorithms`")
    assert r"cumsum\[floating\|complex,cuda\]" in md  # pipes in keys must not split table cells


def test_published_files_are_current(tmp_path):
    published = ROOT / "reports" / "published" / "drift"
    assert main(["--out", str(tmp_path)]) == 0
    for name in ("drift.md", "drift.csv"):
        assert (published / name).read_bytes() == (tmp_path / name).read_bytes(), (
            f"{name} is stale: run python -m detconf.reports drift"
        )


def test_bad_argument_is_one_line_and_status_2(capsys):
    assert main(["--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bogus" in err


def test_drift_does_not_import_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from detconf.reports.drift import build\n"
        "print(len(build()[0]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert int(out.stdout) > 0


def test_published_spec_history_is_what_the_snapshots_give():
    out = subprocess.run([sys.executable, "-m", "detconf.conformance", "spec-history"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    published = (ROOT / "reports" / "published" / "drift" / "spec-history.jsonl").read_text(encoding="utf-8")
    assert out.stdout == published


@pytest.mark.parametrize("content,needle", [
    ("", "no entries"),
    ("{not json\n", "not JSON"),
    ("[1]\n", "expected an entry object"),
    ('{"doc_version": "2.13.0", "entry_id": "x", "op": "torch.x", "list_name": "raises"}\n', "'sentence'"),
])
def test_a_bad_history_file_is_one_line_and_exit_2(tmp_path, capsys, content, needle):
    history = tmp_path / "history.jsonl"
    history.write_text(content)
    assert main([str(history), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and not (tmp_path / "out").exists()
