"""reports/ at scale: the column-wise reading agrees with the line-by-line one, whatever the
chunking and threads; the compile axis; several runs per file; the Markdown table agrees with
tabulate; the benchmark runs."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detconf.reports import digests as digests_mod
from detconf.reports import lines as lines_mod
from detconf.reports import load as load_mod
from detconf.reports import parse as parse_mod
from detconf.reports.build import build
from detconf.reports.diff import main as diff_main
from detconf.reports.digests import rows_digest
from detconf.reports.load import load
from detconf.reports.records import ResultsError
from detconf.reports.matrix import Matrix, PNG_MAX_COLUMNS, _md_column
from tests.test_hostile_reports import BAD_FILES, deep, end_record, lines, result, run_record

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = sorted((REPO / "reports" / "published").glob("torch-*/*/results.jsonl"))


# ----------------------------------------------------------------------------- both readings agree

def _snapshot(results) -> dict:
    """Everything load() gives, as plain data."""
    return {
        "rows": results.table.to_pylist(),
        "entries": results.entries.astype(object).where(results.entries.notna(), None).to_dict("records"),
        "columns": results.columns,
        "entry_codes": results.entry_codes.tolist(),
        "column_codes": results.column_codes.tolist(),
        "runs": results.runs,
        "ends": results.ends,
        "inputs": results.inputs,
        "overrides": results.overrides,
        "digest": results.digest(),
    }


def _read(paths, monkeypatch, *, fast: bool, chunk: int | None = None, threads: int = 2, **kwargs):
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(parse_mod, "_read_fast", lambda data, lines: None)
        if chunk is not None:
            m.setattr(lines_mod, "CHUNK_BYTES", chunk)
        m.setattr(load_mod, "READ_THREADS", threads)
        try:
            results = load(paths, **kwargs)
        except ResultsError as exc:
            return ("error", str(exc))
        snap = _snapshot(results)
        if results.fingerprints is not None:
            snap["fingerprints"] = [row.tobytes() for row in results.fingerprints]
        return snap


def _odd_but_valid() -> dict[str, bytes]:
    text = json.dumps(result()).encode()
    escaped_key = text[:-1] + b', "case": {"\\u0066ingerprints": {"0": "x"}}}'
    return {
        "multi-run-schema-mix": lines(run_record("a", schema=2), result(schema=2, run_id="a", verdict="stale-doc"),
                                      end_record("a"), run_record("b"), result(run_id="b", compile="inductor"),
                                      result("index_add_", run_id="b", position=1), end_record("b", exitstatus=1)),
        "crlf-and-padding": b"\r\n" + lines(run_record(), result()).replace(b"\n", b"\r\n") + b"   \n\t\n",
        "key-twice": lines(run_record(), text[:-1] + b', "verdict": "stale-doc"}'),
        "nan-in-the-evidence": lines(run_record(), text[:-1] + b', "extra": [NaN, Infinity, 1e400]}'),
        "unicode": lines(run_record(), result("caf\u00e9 \u2192 \U0001f600", sentence="\u786e\u5b9a\u6027")),
        "deep-but-allowed": lines(run_record(), deep(lines_mod.MAX_DEPTH - 1)),
        "null-fields": lines(run_record(), result(position=None, doc_version=None, reach=None, devices=None,
                                                  targets=None, dispatched=None, detail=None, nodeid=None,
                                                  duration_s=None, phase=None, compile=None, expected=None)),
        "fingerprints-hostile": lines(
            run_record(),
            result("a", detail={"fingerprints": {"0": "a}b", "1": 'q"x'}}),
            result("b", detail={"fingerprints": {"0": {"nested": 1}}}),
            result("c", detail={"case": {"fingerprints": {"0": "decoy"}}, "fingerprints": {"0": "real"}}),
            escaped_key,
            result("e", detail={"fingerprints": {}}),
            result("f", detail={"fingerprints": None}),
            result("g", sentence='says "fingerprints": {"0": "x"}'),
        ),
    }


CORPUS = {**{f"bad:{k}": v for k, (v, _) in BAD_FILES.items()}, **_odd_but_valid()}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_column_wise_and_line_by_line_readings_agree(tmp_path, monkeypatch, case):
    path = tmp_path / "r.jsonl"
    path.write_bytes(CORPUS[case])
    slow = _read([path], monkeypatch, fast=False, fingerprints=True)
    fast = _read([path], monkeypatch, fast=True, fingerprints=True)
    assert fast == slow
    if case.startswith("bad:"):
        assert isinstance(fast, tuple) and fast[0] == "error"
    else:
        assert isinstance(fast, dict) and fast["rows"], fast


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_published_results_read_the_same_both_ways_and_in_small_chunks(monkeypatch, path):
    reference = _read([path], monkeypatch, fast=False)
    assert _read([path], monkeypatch, fast=True) == reference
    assert _read([path], monkeypatch, fast=True, chunk=20_000, threads=2) == reference
    assert _read([path], monkeypatch, fast=True, chunk=20_000, threads=1) == reference


def _chunks(path: Path, grow: bytes = b"") -> tuple[bytes, list[int]]:
    """The bytes ``read_chunks`` gives for ``path``, and the buffer size of each of its reads;
    ``grow`` is appended to the file after the first read (a run still writing it)."""
    sizes: list[int] = []

    def buffer(size: int) -> bytearray:
        sizes.append(size)
        if len(sizes) == 2 and grow:
            with open(path, "ab") as f:
                f.write(grow)
        return bytearray(size)

    with open(path, "rb") as f:
        got = b"".join(bytes(chunk.buf[:chunk.size]) for chunk, _ in lines_mod.read_chunks(f, buffer))
    return got, sizes


def test_a_small_file_is_read_into_a_buffer_of_its_size_and_a_growing_one_to_its_end(tmp_path):
    """A 10 kB results file is read with buffers of its size and a byte more (one of CHUNK_BYTES,
    32 MiB zeroed, cost five times the parse of such a file); lines appended while it is read are
    read too; a file larger than a chunk is still read in chunks of CHUNK_BYTES."""
    path = tmp_path / "r.jsonl"
    data = lines(run_record(), *(result(f"op_{i}", position=i) for i in range(20)))
    path.write_bytes(data)
    got, sizes = _chunks(path)
    assert got == data and 10_000 < len(data) < 20_000
    assert max(sizes) <= len(data) + 1, sizes
    more = lines(result("op_late", position=99))
    got, sizes = _chunks(path, grow=more)
    assert got == data + more and max(sizes) <= len(data) + len(more) + 1, sizes
    path.write_bytes(data[:-1])  # no newline at the end: the last line comes whole all the same
    assert _chunks(path)[0] == data[:-1]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(lines_mod, "CHUNK_BYTES", 4096)
        path.write_bytes(data)
        got, sizes = _chunks(path)
        assert got == data and sizes[0] == 4096 and len(sizes) > 3


def test_small_chunks_name_the_right_line_of_a_late_error(tmp_path, monkeypatch):
    records = [run_record()] + [result(f"op_{i}", position=i) for i in range(300)]
    records[250] = dict(records[250], verdict="great")
    records[280] = dict(records[280], mode=3)  # later, and a problem the slow reading finds
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(*records))
    for fast in (True, False):
        assert _read([path], monkeypatch, fast=fast, chunk=4096) == ("error", f"{path}:251: unknown verdict 'great'")


def test_fingerprint_digests_are_exact_on_hostile_rows(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_odd_but_valid()["fingerprints-hostile"])
    results = load([path], fingerprints=True)
    records = {rec["entry_id"]: rec for rec in results.records}
    digests = dict(zip(results.pylist("entry_id"), (row.tobytes() for row in results.fingerprints)))
    for entry, rec in records.items():
        fingerprints = (rec.get("detail") or {}).get("fingerprints")
        if fingerprints is None:
            assert digests[entry] == bytes(digests_mod.DIGEST_BYTES), entry
        else:  # whichever way it was taken, the digest is of this very object
            raw = json.dumps(fingerprints).encode()
            canonical = json.dumps(fingerprints, sort_keys=True, ensure_ascii=False).encode()
            assert digests[entry] in (digests_mod.text_digest(raw), digests_mod.text_digest(canonical)), entry
    assert len({digests[e] for e in ("a", "c", "e")}) == 3


def _reference_fingerprint_moves(path_a: Path, path_b: Path) -> dict:
    """What changed, example by example, computed from the parsed lines (the diff's old way)."""
    def cells(path):
        out = {}
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["record"] == "result":
                out[(rec["entry_id"], rec["device"], rec["mode"])] = (rec.get("detail") or {}).get("fingerprints")
        return out

    a, b = cells(path_a), cells(path_b)
    moves = {}
    for key in a.keys() & b.keys():
        fa, fb = a[key], b[key]
        if fa and fb:
            moved = [k for k in sorted(set(fa) & set(fb), key=lambda k: (len(k), k)) if fa[k] != fb[k]]
            if moved:
                moves[key[0]] = moved
    return moves


def test_diff_finds_exactly_the_examples_whose_fingerprints_changed(tmp_path):
    rng = random.Random(5)
    records_a, records_b = [run_record()], [run_record()]
    for i in range(400):
        fps = {str(k): f"{rng.getrandbits(64):016x}" for k in range(rng.randint(0, 8))}
        other = dict(fps)
        for k in list(other):
            if rng.random() < 0.05:
                other[k] = other[k][::-1]
        if rng.random() < 0.1:  # written another way: spaces, key order, escapes
            detail_b = json.loads(json.dumps({"fingerprints": dict(reversed(list(other.items())))}))
        else:
            detail_b = {"fingerprints": other}
        records_a.append(result(f"op_{i}", position=i, detail={"fingerprints": fps}))
        records_b.append(result(f"op_{i}", position=i, detail=detail_b))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(lines(*records_a))
    b.write_bytes(lines(*records_b).replace(b'"fingerprints": {"', b'"fingerprints":{ "', 7))
    code, out = diff_main(a, b)
    found = {}
    for line in out:
        if line.startswith("  # "):
            entry = line[4:].split(" (", 1)[0]
            found[entry] = line.split("examples ", 1)[1].split(" of ", 1)[0].split(", ")
    assert found == _reference_fingerprint_moves(a, b)
    assert found  # the data has some


# ----------------------------------------------------------------------------- compile axis

def _compile_file(tmp_path: Path) -> Path:
    path = tmp_path / "compile.jsonl"
    path.write_bytes(lines(
        run_record(),
        *[result("put_", mode=m, compile=c, verdict="conforms" if c != "inductor" else "nondeterministic")
          for c in ("inductor", "aot_eager", "eager") for m in ("warn_only", "error")],
        result("put_", device="cuda", compile="eager"),
    ))
    return path


def test_compile_settings_become_columns_sorted_eager_aot_eager_inductor(tmp_path):
    result_ = build([_compile_file(tmp_path)], tmp_path / "out")
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", dtype=str, keep_default_na=False)
    assert list(wide.columns[8:]) == [
        "cpu/error/eager", "cpu/error/aot_eager", "cpu/error/inductor",
        "cpu/warn_only/eager", "cpu/warn_only/aot_eager", "cpu/warn_only/inductor", "cuda/error/eager"]
    assert list(wide.iloc[0, 8:]) == ["conforms", "conforms", "nondeterministic"] * 2 + ["conforms"]
    assert [c["compile"] for c in result_.summary["columns"]][:3] == ["eager", "aot_eager", "inductor"]
    html = (tmp_path / "out" / "matrix.html").read_text()
    assert '<th colspan="3">error</th>' in html and html.count(">aot_eager</th>") == 2
    long = pd.read_csv(tmp_path / "out" / "results.csv", dtype=str, keep_default_na=False)
    assert list(long.columns).index("compile") == list(long.columns).index("mode") + 1
    assert long["compile"].tolist() == ["eager", "aot_eager", "inductor"] * 2 + ["eager"]


def test_all_eager_tables_keep_their_labels(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record(), result(), result(schema=2, compile=None)))
    build([path], tmp_path / "out")
    wide = pd.read_csv(tmp_path / "out" / "matrix.csv", dtype=str, keep_default_na=False)
    assert list(wide.columns[8:]) == ["cpu/error"]


def test_one_setting_other_than_eager_is_still_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record(), result(compile="inductor")))
    build([path], tmp_path / "out")
    assert list(pd.read_csv(tmp_path / "out" / "matrix.csv").columns[8:]) == ["cpu/error/inductor"]


def test_diff_matches_eager_cells_of_an_eager_only_file(tmp_path):
    old = tmp_path / "old.jsonl"
    old.write_bytes(lines(run_record(schema=2), result(schema=2, verdict="conforms"),
                          result(schema=2, mode="warn_only", verdict="conforms")))
    code, out = diff_main(old, _compile_file(tmp_path))
    text = "\n".join(out)
    assert code == 0, text  # the eager cells still conform
    assert "cells added (5):" in text
    assert "  + put_ (torch-docs) [cpu/error/inductor]: nondeterministic" in text
    assert "[cpu/error/eager]" not in text  # matched, unchanged
    code, out = diff_main(_compile_file(tmp_path), old)
    assert "cells removed (5):" in "\n".join(out)


def test_diff_between_compile_settings_is_by_cell(tmp_path):
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_bytes(lines(run_record(), result(compile="inductor"), result(compile="eager")))
    b.write_bytes(lines(run_record(), result(compile="inductor", verdict="nondeterministic"), result(compile="eager")))
    code, out = diff_main(a, b)
    assert code == 1
    assert "  ~ put_ (torch-docs) [cpu/error/inductor]: conforms → nondeterministic (behaviour)  REGRESSION" in out


# ----------------------------------------------------------------------------- runs

def test_end_records_are_kept_and_a_rerun_in_the_same_file_wins(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(lines(run_record("r1"), result(run_id="r1", verdict="harness-error"), end_record("r1"),
                           run_record("r2"), result(run_id="r2"), end_record("r2", planned=5, written=1)))
    results = load([path])
    assert [e["run_id"] for e in results.ends] == ["r1", "r2"] and results.ends[1]["planned"] == 5
    assert results.pylist("verdict") == ["conforms"] and results.pylist("run_id") == ["r2"]
    assert results.overrides == 1 and results.pylist("line") == [5]
    assert [r["run_id"] for r in results.runs] == ["r1", "r2"]


def test_digest_is_of_the_kept_lines_in_matrix_order(tmp_path):
    path = tmp_path / "r.jsonl"
    rows = [result(f"op_{i}", position=i, mode=m) for i in range(30) for m in ("warn_only", "error")]
    random.Random(1).shuffle(rows)
    path.write_bytes(lines(run_record(), *rows, result("op_3", position=3, verdict="stale-doc")))
    results = load([path])
    assert results.digest() == rows_digest(results.texts)
    assert results.texts[0].startswith('{"record": "result"') and len(results.texts) == 60
    assert '"stale-doc"' in next(t for t in results.texts if '"op_3"' in t and '"error"' in t)


# ----------------------------------------------------------------------------- outputs

@settings(max_examples=200, deadline=None)
@given(header=st.text(max_size=12), cells=st.lists(st.text(max_size=20), min_size=1, max_size=6))
def test_markdown_column_is_what_tabulate_makes(header, cells):
    from tabulate import tabulate

    from detconf.reports.safe import md_cell, narrow_characters

    header, cells = md_cell(header), [md_cell(c) for c in cells]
    head, rule, pieces = _md_column(header, cells)
    with narrow_characters():  # one column per character, wcwidth or not (reports.safe)
        expected = tabulate([[c] for c in cells], headers=[header], tablefmt="github", disable_numparse=True)
    assert "\n".join(["|" + head, "|" + rule] + ["|" + p for p in pieces]) == expected


def test_markdown_matrix_is_what_tabulate_makes(tmp_path):
    """The matrix written column by column is the table tabulate makes of it whole."""
    from tabulate import tabulate

    from detconf.reports.matrix import HEADINGS, ENTRY_COLUMNS, NOT_RUN_MARK, _md_code
    from detconf.reports.safe import md_cell, narrow_characters

    path = tmp_path / "r.jsonl"
    entries = [("a|b", "x × y"), ("`t`", "wide 確定"), ("c", "  pad  ")]
    records = [result(e, position=i, sentence=text, mode=m) for i, (e, text) in enumerate(entries)
               for m in ("error", "off")]
    path.write_bytes(lines(run_record(), *records[:-1]))  # the last cell is not run
    build([path], tmp_path / "out")
    matrix = Matrix.from_results(load([path]))
    cols = [c for c in ENTRY_COLUMNS if c not in ("doc_version", "phase")]
    rows = [[(_md_code if c in ("entry_id", "op") else md_cell)(v) for c, v in zip(cols, attrs)]
            + [NOT_RUN_MARK if v is None else v for v in cells]
            for attrs, cells in zip(matrix.entries[cols].itertuples(index=False, name=None), matrix.cells.tolist())]
    assert rows[-1][-1] == NOT_RUN_MARK
    with narrow_characters():
        expected = tabulate(rows, headers=[md_cell(HEADINGS[c]) for c in cols] + [md_cell(x) for x in matrix.labels],
                            tablefmt="github", disable_numparse=True)
    assert expected in (tmp_path / "out" / "matrix.md").read_text(encoding="utf-8")


def test_picture_of_a_very_wide_matrix_is_bounded(tmp_path):
    from PIL import Image

    def png_width(n_columns: int, name: str) -> int:
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(lines(run_record(), *[result("put_", torch_version=f"2.{v}.0") for v in range(n_columns)]))
        build([path], tmp_path / name)
        with Image.open(tmp_path / name / "matrix.png") as img:
            return img.size[0]

    capped, more = png_width(PNG_MAX_COLUMNS, "capped"), png_width(PNG_MAX_COLUMNS + 30, "more")
    assert capped == more  # the columns beyond PNG_MAX_COLUMNS are not drawn
    assert more < (PNG_MAX_COLUMNS * 0.2 + 10) * 100  # and drawn narrow


def test_benchmark_runs_and_prints_its_table(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/bench_reports.py", "--rows", "3000", "--keep", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.splitlines()[-2:]
    assert table[0].startswith("build ") and table[1].startswith("diff ")
    assert all("3,000" in line and line.count(" s ") == 2 and "MiB" in line for line in table)


def test_helper_processes_make_the_same_files(tmp_path, monkeypatch):
    """Over many rows the picture and the digest come from helper processes: the same bytes."""
    from detconf.reports import build as build_mod

    files = [p for p in PUBLISHED if "sweep" not in str(p)]
    monkeypatch.setattr(build_mod, "HELPER_ROWS", 10 ** 9)
    monkeypatch.setattr(build_mod, "HELPER_CELLS", 10 ** 9)
    build(files, tmp_path / "here")
    monkeypatch.setattr(build_mod, "HELPER_ROWS", 0)
    build(files, tmp_path / "helpers")
    for name in build_mod.OUTPUT_FILES:
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "helpers" / name).read_bytes(), name
    assert sorted(p.name for p in (tmp_path / "helpers").iterdir()) == sorted(build_mod.OUTPUT_FILES)


def test_a_helper_that_cannot_write_is_one_line(tmp_path, capsys, monkeypatch):
    from detconf.reports import __main__ as cli
    from detconf.reports import build as build_mod

    monkeypatch.setattr(build_mod, "HELPER_ROWS", 0)
    fake = tmp_path / "fake" / "standin"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "picture.py").write_text("import errno\ndef main(argv):\n"
                                     "    raise OSError(errno.ENOSPC, 'No space left on device')\n")
    (fake / "spans.py").write_text("def main(argv):\n    print('0' * 64)\n")
    monkeypatch.setattr(build_mod, "_HELPER_PATH", (str(tmp_path / "fake"),))
    monkeypatch.setattr(build_mod, "PICTURE_HELPER", "standin.picture")
    monkeypatch.setattr(build_mod, "SPANS_HELPER", "standin.spans")
    out = tmp_path / "out"
    code = cli.main(["build", str(PUBLISHED[0]), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "No space left on device" in err, err
    assert not out.exists()


def test_a_helper_that_crashes_is_named(tmp_path, monkeypatch):
    """A helper failing for another reason than a file is an error naming the helper, not a
    wrong picture or digest."""
    from detconf.reports import build as build_mod

    monkeypatch.setattr(build_mod, "HELPER_ROWS", 0)
    fake = tmp_path / "fake" / "standin"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "picture.py").write_text("def main(argv):\n    pass\n")
    (fake / "spans.py").write_text("def main(argv):\n    raise ValueError('bad spans file')\n")
    monkeypatch.setattr(build_mod, "_HELPER_PATH", (str(tmp_path / "fake"),))
    monkeypatch.setattr(build_mod, "PICTURE_HELPER", "standin.picture")
    monkeypatch.setattr(build_mod, "SPANS_HELPER", "standin.spans")
    with pytest.raises(RuntimeError, match=r"standin\.spans: ValueError: bad spans file"):
        build([PUBLISHED[0]], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_small_file_benchmark_prints_a_line_per_size_and_refuses_bad_input():
    proc = subprocess.run([sys.executable, "benchmarks/bench_small_loads.py", "--rows", "3", "30", "--repeat", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()[-2:]
    assert [line.split()[0] for line in rows] == ["3", "30"] and all(line.count(" ms") == 2 for line in rows), rows
    for bad in (["--rows", "0"], ["--repeat", "x"]):
        refused = subprocess.run([sys.executable, "benchmarks/bench_small_loads.py", *bad], cwd=REPO,
                                 capture_output=True, text=True, timeout=300)
        assert refused.returncode == 2 and refused.stdout == "", refused
        [line] = refused.stderr.splitlines()
        assert line.startswith("bench_small_loads: error: ")
