"""Build every report file from results files into one output directory.

Inputs are read and validated completely before anything is written. The files are written
into a temporary directory and then moved into place, so the output directory never holds a
half-written file: a new output directory is created by one rename of a temporary directory
made next to it; in an existing one (``reports/out`` also holds the run's own
``results.jsonl``) the temporary directory is made inside it and each report file replaces its
namesake by an atomic ``os.replace``. Other files in it are left alone, and a report file name
taken by a folder, or by one of the input files, stops the build before anything is written.
The temporary folder carries a marker: one left by a killed build is removed by the next build
(:func:`reports.manifest.remove_abandoned`).

The report folder of a conformance run (``own_folder=True``) is stricter: it holds only what the
builder wrote there, named in its manifest with the results file it was built from
(:mod:`reports.manifest`); anything else stops the build.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pickle
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from detconf.child import Child, ChildFailed
from detconf.gc_pause import gc_paused
from detconf.vocabulary import REPORT_FILES

from detconf.reports import manifest
from detconf.reports.load import load
from detconf.reports.answer import answer_for
from detconf.reports.matrix import Matrix, png_spec, write_markdown, write_matrix_csv, write_png, write_results_csv
from detconf.reports.output import OutputError, check_out_dir, check_targets
from detconf.reports.page import write_html
from detconf.reports.records import ROW_FIELDS
from detconf.reports.safe import unicode_text
from detconf.reports.summary import summary_data

OUTPUT_FILES = REPORT_FILES


@dataclass
class BuildResult:
    out_dir: Path
    files: tuple[Path, ...]
    summary: dict
    timings: dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    cpu_timings: dict[str, float] = field(default_factory=dict)  # stage -> CPU seconds


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish(tmp: Path, out: Path, paths, own_folder: bool) -> None:
    """Move the files of ``tmp`` into ``out`` (with the manifest that names them, into a run's
    own folder: while they replace their namesakes one by one, the manifest accepts the old and
    the new files alike, so a build killed halfway leaves a folder the next build may still
    write into)."""
    new = {name: manifest.identity(tmp / name) for name in OUTPUT_FILES}
    if tmp.parent != out:
        (tmp / manifest.TMP_MARKER).unlink()
        if own_folder:
            manifest.write(tmp, new, paths)
        os.chmod(tmp, 0o777 & ~_umask())
        os.rename(tmp, out)
        return
    if not own_folder:
        for name in OUTPUT_FILES:
            os.replace(tmp / name, out / name)
        return
    old = manifest.read(out)
    both = {}
    for name in OUTPUT_FILES:
        before = (old or {}).get("files", {}).get(name) if old else None
        before = [] if not isinstance(before, list) else (before if before and isinstance(before[0], list) else [before])
        current = manifest.identity(out / name)
        both[name] = ([current] if current in before else []) + [new[name]]
    manifest.write(out, both, paths)
    for name in OUTPUT_FILES:
        os.replace(tmp / name, out / name)
    manifest.write(out, new, paths)


def _check_inputs_are_not_outputs(paths, out: Path) -> None:
    if not out.is_dir():
        return
    for name in OUTPUT_FILES:
        target = out / name
        for path in paths:
            try:
                same = target.exists() and os.path.samefile(path, target)
            except OSError:
                same = False
            if same:
                raise OutputError(f"{os.fspath(path)}: is an input; the build would replace it with its {name}")


def build(paths: Iterable[str | os.PathLike] | str | os.PathLike, out_dir: str | os.PathLike, *,
          own_folder: bool = False) -> BuildResult:
    """Merge results files and write the matrix (CSV, Markdown, HTML, PNG) and summary.json.

    Raises :class:`reports.records.ResultsError` for bad input, before touching ``out_dir``.
    ``own_folder``: ``out_dir`` is a run's report folder, which must hold only what the builder
    wrote there from the same results files (:func:`reports.manifest.folder_problem`).
    """
    with gc_paused():
        return _build(paths, out_dir, own_folder)


def _build(paths, out_dir, own_folder: bool = False) -> BuildResult:
    timings: dict[str, float] = {}
    cpu_timings: dict[str, float] = {}
    clock, cpu_clock = time.perf_counter(), time.process_time()

    def lap(stage: str) -> None:
        nonlocal clock, cpu_clock
        now, cpu_now = time.perf_counter(), time.process_time()
        timings[stage], cpu_timings[stage] = now - clock, cpu_now - cpu_clock
        clock, cpu_clock = now, cpu_now

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out = check_out_dir(out_dir)
    check_targets(out, OUTPUT_FILES)
    _check_inputs_are_not_outputs(paths, out)
    if own_folder:
        problem = manifest.folder_problem(out, paths, OUTPUT_FILES)
        if problem:
            raise OutputError(problem)
    results = load(paths, columns=ROW_FIELDS)
    lap("load")
    matrix = Matrix.from_results(results)
    lap("pivot")

    try:
        if out.is_dir():
            manifest.remove_abandoned(out, (manifest.TMP_PREFIX,))
            tmp = Path(tempfile.mkdtemp(prefix=manifest.TMP_PREFIX, dir=out))
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            manifest.remove_abandoned(out.parent, (f".{out.name}.tmp-",))
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"{os.fspath(out_dir)}: cannot create the output folder "
                          f"({exc.strerror or exc})") from None
    try:
        manifest.mark(tmp)
        summary = _write(matrix, results, tmp, lap)
        _publish(tmp, out, paths, own_folder)
    except OSError as exc:
        raise OutputError(f"{os.fspath(out_dir)}: cannot write the reports ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return BuildResult(
        out_dir=out,
        files=tuple(out / name for name in OUTPUT_FILES),
        summary=summary,
        timings=timings,
        cpu_timings=cpu_timings,
    )


#: The picture (from this many cells drawn on) and the digest (from this many rows on) are made
#: by helper processes while this one writes the rest: both are Python-bound, so threads would
#: take turns, and each costs seconds there.
HELPER_CELLS = 5_000
HELPER_ROWS = 200_000
#: The helpers' modules, and folders put first on their path (none: ``detconf.reports`` is
#: this package, whatever the working folder holds). Tests plant stand-ins through these.
PICTURE_HELPER = "detconf.reports.picture"
SPANS_HELPER = "detconf.reports.spans"
_HELPER_PATH: tuple[str, ...] = ()


class _Helper:
    """``MODULE.main(ARGS)`` in a Python process of its own (:mod:`detconf.child`), running beside
    the build;
    ``result()`` is what it printed. An ``OSError`` there (a file it cannot read or write) is
    raised here as an ``OSError`` with its reason."""

    def __init__(self, module: str, *args: str):
        self.module = module
        self.child = Child(f"{module}:main", list(args), path=_HELPER_PATH)

    def result(self) -> str:
        try:
            self.child.result()
        except ChildFailed as exc:
            if exc.os_error:
                raise OSError(exc.reason) from None
            raise RuntimeError(f"{self.module}: {exc.reason}") from None
        return self.child.printed.strip()

    def stop(self) -> None:
        self.child.stop()


def _start_helpers(matrix: Matrix, results, tmp: Path, answer) -> tuple[_Helper | None, _Helper | None]:
    """The picture and the digest in processes of their own where they are big, on more than
    one CPU. Their inputs go through files in the build's private temporary folder."""
    if (os.cpu_count() or 1) < 2:
        return None, None
    picture = digest = None
    spec = png_spec(matrix, answer=answer)
    if spec["codes"].size >= HELPER_CELLS or len(results) >= HELPER_ROWS:
        with open(tmp / ".picture.pickle", "wb") as f:
            pickle.dump(spec, f)
        picture = _Helper(PICTURE_HELPER, str(tmp / ".picture.pickle"), str(tmp / "matrix.png"))
    if len(results) >= HELPER_ROWS:
        paths, files, starts, ends, newline = results.spans()
        np.savez(tmp / ".spans.npz", paths=np.array([os.path.abspath(p) for p in paths]), files=files,
                 starts=starts, ends=ends, newline_after=newline)
        digest = _Helper(SPANS_HELPER, str(tmp / ".spans.npz"))
    return picture, digest


def _write(matrix: Matrix, results, tmp: Path, lap) -> dict:
    """Every report file into ``tmp``; returns the summary. ``results.csv`` is written by a
    second thread meanwhile: it is pyarrow's work, which lets go of the interpreter."""
    answer = answer_for(matrix, results)  # the picture's title says it too
    picture, digest = _start_helpers(matrix, results, tmp, answer)
    try:
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="reports-csv") as pool:
            long_form = pool.submit(write_results_csv, results, tmp / "results.csv")
            try:
                write_matrix_csv(matrix, tmp)
                lap("matrix.csv")
                write_markdown(matrix, results, tmp, answer)
                lap("markdown")
                write_html(matrix, results, tmp, answer)
                lap("html")
                if picture is None:
                    write_png(matrix, tmp, answer=answer)
                else:
                    picture.result()
                lap("png")
                summary = summary_data(matrix, results, digest.result() if digest is not None else None, answer)
                text = unicode_text(json.dumps(summary, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
                (tmp / "summary.json").write_text(text, encoding="utf-8")
                lap("summary")
            except BaseException:
                long_form.exception()  # wait for it; the first failure is the one reported
                raise
            long_form.result()
            lap("results.csv")
    finally:
        for helper in (picture, digest):
            if helper is not None:
                helper.stop()
    for name in (".picture.pickle", ".spans.npz"):
        (tmp / name).unlink(missing_ok=True)
    return summary
