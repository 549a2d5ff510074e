"""`python -m detconf.reports sensitivity`: fraction of examples that differed with determinism off."""
from tests.test_reports import header, row, run_cli, write

from detconf.reports.sensitivity import headline, sensitivity_table


def off_row(entry_id, seen, quiet, devices=("cuda",), device="cuda", promise="deterministic", **detail):
    verdict = "nondeterminism-seen" if seen else "no-difference-seen"
    per = {k: v for k, v in (("nondeterminism-seen", seen), ("no-difference-seen", quiet)) if v}
    return row(entry_id, device=device, mode="off", verdict=verdict, devices=list(devices), promise=promise,
               detail={"verdicts_per_example": per, **detail})


def test_fractions_and_headline(tmp_path):
    path = write(tmp_path / "r.jsonl", [header(), off_row("a", 3, 1, promise="raises", max_numel=1 << 22),
                                        off_row("b", 0, 4, promise="raises"), off_row("c", 2, 2, devices=()),
                                        row("a", device="cuda", mode="error")])
    table = sensitivity_table([path])
    assert list(table["entry_id"]) == ["a", "c", "b"]
    assert list(table["fraction_differing"]) == [0.75, 0.5, 0.0]
    assert table["largest_input"].iloc[0] == 1 << 22 and table["largest_input"].isna().sum() == 2
    assert headline(table) == ["cuda: 2/3 entries documented for cuda showed run-to-run differences with "
                               "determinism off (1/2 of those documented to throw); 2/3 overall"]


def test_a_bad_size_is_refused(tmp_path):
    path = write(tmp_path / "r.jsonl", [header(), off_row("a", 1, 1, max_numel="big")])
    out = run_cli("sensitivity", str(path))
    assert out.returncode == 2 and "detail.max_numel" in out.stderr


def test_cli_writes_files_and_rejects_runs_without_off_rows(tmp_path):
    good = write(tmp_path / "r.jsonl", [header(), off_row("a", 1, 1)])
    out = run_cli("sensitivity", str(good), "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    assert "| a " in (tmp_path / "o" / "sensitivity.md").read_text()
    assert (tmp_path / "o" / "sensitivity.csv").read_text().startswith("source,entry_id")
    bad = write(tmp_path / "e.jsonl", [header(), row("a")])
    out = run_cli("sensitivity", str(bad))
    assert out.returncode == 2 and "no --mode off rows" in out.stderr and "Traceback" not in out.stderr
