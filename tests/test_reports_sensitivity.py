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
    assert headline(table) == ["cuda: 2/3 judged entries documented for cuda differed between runs with "
                               "determinism off (1/2 of those documented to throw); 2/3 judged overall"]


def test_the_picture_and_the_text_count_over_the_same_entries(tmp_path):
    """One count, one denominator: an entry documented for another device and an entry none of
    whose examples was compared change the headline and the picture's bar and note alike."""
    from detconf.reports.sensitivity import chart_spec

    path = write(tmp_path / "r.jsonl", [
        header(), off_row("a", 3, 1, promise="raises"), off_row("b", 0, 4, promise="raises"),
        off_row("c", 2, 2, devices=("mps",)), off_row("d", 0, 0), off_row("e", 1, 0, devices=("cpu",), device="cpu")])
    table = sensitivity_table([path])
    lines, chart = headline(table), chart_spec(table)
    assert lines == [
        "cpu: 1/1 judged entries documented for cpu differed between runs with determinism off "
        "(0/0 of those documented to throw); 1/1 judged overall",
        "cuda: 1/2 judged entries documented for cuda differed between runs with determinism off "
        "(1/2 of those documented to throw); 2/3 judged overall; 1 not judged (no example compared)"]
    assert chart["rows"] == ["cpu", "cuda"]
    assert [f"{row}: {note}" for row, note in zip(chart["rows"], chart["notes"])] == lines
    (_, _, differed), (_, _, quiet) = chart["segments"]
    assert differed == [1, 2] and quiet == [0, 1]  # the bars: "2/3 judged overall", the unjudged d in neither


def test_cells_a_cut_run_never_reached_are_not_run_not_unjudged(tmp_path):
    """A run cut short (a time budget, a signal) planned mode-off cells it never reached: their
    ``missing`` rows count in no denominator and are named as not run, apart from a cell that ran
    and compared no example."""
    entries = [{"source": "torch-docs", "doc_version": None, "entry_id": e, "op": f"torch.{e}", "sentence": e,
                "list_name": "deterministic", "position": k, "promise": "raises", "needs_device": None}
               for k, e in enumerate("abcd")]
    cases = [{"id": f"{e}-cuda-off", "entry": k, "phase": "program", "device": "cuda", "mode": "off",
              "compile": "eager", "expected": "observe"} for k, e in enumerate("abcd")]
    run = dict(header(), planned=4, planned_entries=entries, planned_cases=cases)
    path = write(tmp_path / "r.jsonl", [run, off_row("a", 3, 1, promise="raises"), off_row("b", 0, 0, promise="raises")])
    table = sensitivity_table([path])
    assert sorted(table["verdict"]) == ["missing", "missing", "no-difference-seen", "nondeterminism-seen"]
    assert headline(table) == [
        "cuda: 1/1 judged entries documented for cuda differed between runs with determinism off (1/1 of those "
        "documented to throw); 1/1 judged overall; 1 not judged (no example compared); "
        "2 not run (missing: the run ended before them)"]


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


# ----------------------------------------------------------------------------- perturbation tier

def perturb_row(entry_id, mode="error", verdict="conforms", threads=(4, 1), across=None, pool=2, **over):
    """A perturbation-tier row: one-thread probe (compared, differing), and (mode off) the
    comparison across processes (compared, differing)."""
    detail = {"tier": "perturb", "processes": [{"index": i, "threads": pool} for i in range(2)],
              "sensitivity": {"threads": None if threads is None else
                              {"compared": threads[0], "differing": threads[1]}}}
    if across is not None:
        detail["across_processes"] = {"processes": 2, "compared": across[0], "differing": across[1]}
        if mode == "off":
            detail["sensitivity"]["across_processes"] = "differs" if across[1] else "same"
    if mode == "off":
        verdict = "nondeterminism-seen" if verdict == "conforms" else verdict
    return row(entry_id, mode=mode, verdict=verdict, detail=detail, **over)


def test_perturbation_table_reports_threads_and_processes_apart(tmp_path):
    from detconf.reports.sensitivity import perturbation_headline, perturbation_table

    path = write(tmp_path / "r.jsonl", [
        header(), perturb_row("a", threads=(4, 1)), perturb_row("b", threads=(4, 0)),
        perturb_row("a", mode="off", threads=(4, 0), across=(4, 2)),
        perturb_row("b", mode="off", threads=None, across=(3, 0)),
        perturb_row("c", threads=(4, 0), across=(4, 0)),
        row("d", mode="error")])  # a normal-tier row: not in this table
    table = perturbation_table([path])
    by = {(r.entry_id, r.mode): r for r in table.itertuples()}
    assert set(by) == {("a", "error"), ("b", "error"), ("a", "off"), ("b", "off"), ("c", "error")}
    assert by["a", "error"].one_thread == "differs" and by["a", "error"].one_thread_differing == 1
    assert by["b", "error"].one_thread == "same" and by["b", "off"].one_thread == "not measured"
    assert by["a", "off"].across_processes == "differs" and by["a", "off"].across_differing == 2
    assert by["b", "off"].across_processes == "same"
    # In a deterministic mode a difference across processes is a verdict, not sensitivity.
    assert by["c", "error"].across_processes == "" and by["a", "error"].threads == "2"
    assert perturbation_headline(table) == [
        "cpu: 1/4 cells changed bytes on one thread instead of 2; with the mode off, 1/2 cells differed "
        "across fresh processes"]


def test_perturbation_cli_writes_md_and_csv_and_never_fails_on_a_difference(tmp_path):
    path = write(tmp_path / "r.jsonl", [header(), perturb_row("a", threads=(4, 4)),
                                        perturb_row("a", mode="off", across=(4, 4))])
    out = run_cli("sensitivity", str(path), "--out", str(tmp_path / "o"))
    assert out.returncode == 0, out.stderr
    md = (tmp_path / "o" / "perturbation-sensitivity.md").read_text()
    assert "Neither is promised by the docs" in md and "| differs " in md
    csv = (tmp_path / "o" / "perturbation-sensitivity.csv").read_text().splitlines()
    assert csv[0].startswith("source,entry_id,device,compile,mode,torch_version,verdict,threads,one_thread")
    assert len(csv) == 3
    assert (tmp_path / "o" / "sensitivity.md").is_file()  # the mode-off row feeds the positive control too
    only_perturb = write(tmp_path / "p.jsonl", [header(), perturb_row("a", threads=(4, 1))])
    out = run_cli("sensitivity", str(only_perturb))
    assert out.returncode == 0 and "changed bytes on one thread" in out.stdout, out.stderr


def test_perturbation_bad_counts_are_one_line_errors(tmp_path):
    bad = perturb_row("a")
    bad["detail"]["sensitivity"]["threads"]["differing"] = "some"
    path = write(tmp_path / "r.jsonl", [header(), bad])
    out = run_cli("sensitivity", str(path))
    assert out.returncode == 2 and "detail.sensitivity.threads.differing" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
