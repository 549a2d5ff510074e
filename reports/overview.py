"""Across torch versions and devices at a glance: one bar per matrix column (torch version,
device and its model, mode, compile setting) of the merged results files, split by verdict.

    python -m detconf.reports overview RESULTS.jsonl [MORE ...] --out DIR

writes ``overview.png`` (the bars) and ``overview.md``: first one answer per torch version and
device (:func:`reports.answer.part_answers`, releases in release order: 2.5.1 before 2.11.0),
then the same counts as the bars as a table, with the share of passing cells. Files are merged as ``build`` merges them (a later file wins for the
same cell), so a CPU and a GPU run of one release sit side by side.
"""
from __future__ import annotations

import sys

from detconf.reports.answer import ANSWER_WORDS, answer_for, part_answers
from detconf.reports.load import load
from detconf.reports.matrix import COLOURS, Matrix
from detconf.reports.output import ArgumentParser, check_out_dir, emit, write_files, write_picture
from detconf.reports.records import PASSING, ROW_FIELDS, VERDICTS, ResultsError
from detconf.reports.safe import markdown_table, md_cell, terminal


def overview_rows(matrix: Matrix) -> list[dict]:
    """Per matrix column: its label (with the device's model where the rows name one), the
    counts per verdict, passing and total."""
    out = []
    for count in matrix.column_counts():
        model = count["device_name"]
        label = f"torch {count['torch_version']} · {count['device']}"
        if model and model != count["device"]:
            label += f" ({model})"
        label += f" · {count['mode']}" + (f" · {count['compile']}" if matrix.shows_compile else "")
        out.append({"label": label, "counts": count["counts"], "passing": count["passing"], "total": count["total"]})
    return out


def bars_spec(rows: list[dict], title: str) -> dict:
    """:func:`reports.picture.draw_bars` data: a bar per column, a segment per verdict present."""
    present = [v for v in VERDICTS if any(r["counts"][v] for r in rows)]
    return {
        "rows": [r["label"] for r in rows],
        "segments": [(v, COLOURS[v], [r["counts"][v] for r in rows]) for v in present],
        "notes": [f"{r['passing']}/{r['total']} passing" for r in rows],
        "title": title,
        "xlabel": "share of the column's cells",
        "share": True,
    }


def overview_markdown(rows: list[dict], paths: list[str], parts: list[dict] | None = None, word: str = "") -> str:
    """``parts``: the answers per torch version and device, shown first; ``word``: the answer
    over every file."""
    answers = []
    if parts:
        answers = [f"**{word}** over all {len(paths)} results files; per torch version and device:", "",
                   markdown_table([[md_cell(p["torch_version"]), md_cell(p["device"]), f"**{p['word']}**",
                                    str(p["judged"]), str(p["failing"]), str(p["waived"]), str(p["cells"])]
                                   for p in parts],
                                  ["torch", "device", "answer", "judged", "failing", "waived", "cells"]), "",
                   " ".join(f"**{w}**: {md_cell(m)}." for w, m in ANSWER_WORDS.items()), ""]
    present = [v for v in VERDICTS if any(r["counts"][v] for r in rows)]
    table = markdown_table([[md_cell(r["label"]), f"{r['passing']}/{r['total']}"] + [str(r["counts"][v]) for v in present]
                            for r in rows], ["column", "passing"] + present)
    failing = [v for v in present if v not in PASSING]
    return "\n".join([
        "# detconf overview", "",
        *answers,
        "![overview](overview.png)", "",
        f"{len(rows)} columns from {len(paths)} results files; failing verdicts: "
        + (", ".join(f"`{v}`" for v in failing) if failing else "none") + ".", "",
        table, "",
        "Made from: " + ", ".join(f"`{md_cell(p)}`" for p in paths), "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m detconf.reports overview", description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--out", required=True, help="write overview.png and overview.md here")
    try:
        args = parser.parse_args(argv)
        check_out_dir(args.out)
        results = load(args.results, columns=ROW_FIELDS)
        matrix = Matrix.from_results(results)
        answer = answer_for(matrix, results)
        rows = overview_rows(matrix)
        markdown = overview_markdown(rows, list(args.results), part_answers(answer, matrix), answer.word)
        out = write_files(args.out, {"overview.md": markdown})
        from detconf.reports.picture import draw_bars

        write_picture(out, "overview.png", draw_bars, bars_spec(rows, f"detconf {answer.word}: verdicts per column ({len(rows)} columns)"))
        emit(terminal(f"wrote overview.md, overview.png to {out}"))
        return 0
    except ResultsError as exc:
        print(f"reports: error: {terminal(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
