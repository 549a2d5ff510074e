"""The results file of a run (controller side): the run record, a row per test as its report
arrives, the end record, and the end-of-run summary and matrix.

Rows travel on ``report.user_properties`` (so they survive xdist: workers send reports to the
controller) and the controller appends each one to the results file the moment its report
arrives, so a crash loses at most the test in flight. Nothing is kept in module globals across
processes."""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import re
import secrets
import stat
import tempfile
import time
from pathlib import Path

import pytest

from detconf.revision import plan_digest
from detconf.vocabulary import DEFAULT_MODES, REPORT_FILES, SCHEMA_VERSION
from detconf.plugin.environment import environment
from detconf.plugin.fixtures import CASE_ATTRIBUTE, ROW_KEY, crashed_row
from detconf.plugin.plan import CONFORMANCE_TEST, case_of, cases_by_test_name
from detconf.plugin.resultsfile import existing_results_problem, in_use
from detconf.plugin.standby import Standby
from detconf.plugin.validation import one_line

#: Rows are fsynced at most this often (seconds); the run and end records always are.
SYNC_EVERY_S = 2
#: The matrix built at the end of a run goes to ``<results file without suffix>-report/``.
REPORT_SUFFIX = "-report"


_FILE_MODE = stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def report_dir(results: Path) -> Path:
    """Where the end-of-run matrix goes: ``reports/out/results.jsonl`` -> ``reports/out/results-report/``."""
    return results.with_name(results.stem + REPORT_SUFFIX)


def _report_dir_problem(out: Path, results: Path | None = None) -> str | None:
    """Why the matrix must not be written into ``out`` (None: it may). The folder is the
    builder's own: it may be absent or hold only what the builder wrote there -- the files its
    manifest lists as they are (``reports.manifest``), the manifest, and the marked temporary
    folders of builds (a killed build's leftover is removed by the next build) -- and, given
    ``results``, the report of that results file and of no other (``r.jsonl`` and ``r.json``
    would share ``r-report/``)."""
    from detconf.reports import manifest

    return manifest.folder_problem(out, None if results is None else [results], REPORT_FILES)


_LONE_SURROGATE = re.compile(r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}")


def _as_unicode(value):
    """``value`` (JSON data) with every string made :func:`reports.safe.unicode_text`: lone
    surrogates (``surrogateescape``: bytes a non-UTF-8 locale could not decode) read as the
    UTF-8 they stand for."""
    from detconf.reports.safe import unicode_text

    if isinstance(value, str):
        return unicode_text(value)
    if isinstance(value, dict):
        return {_as_unicode(k) if isinstance(k, str) else k: _as_unicode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_unicode(v) for v in value]
    return value


class ResultsWriter:
    """Controller-side plugin: owns the results file for the session.

    :meth:`open` (at configure time, before collection) locks the file, checks that a run
    may append to it and appends the run record; rows are appended as reports arrive; the
    session ends with an end record (planned vs written) and the lock is released at
    unconfigure. Workers never write: their rows reach the controller on the reports.

    The writer knows its file by device and inode (taken when it opened it) and by the size it
    left (:meth:`file_problem`), checked before each row and at the end: a file replaced,
    deleted, truncated or written to by another program stops the run, and the run's own lines
    (kept as written) go to a file beside it; no summary or matrix is made from another file."""

    def __init__(self, path: Path, config: pytest.Config) -> None:
        self.path = path
        self.config = config
        self.run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)
        self.written: set[str] = set()
        self.fd: int | None = None
        self.counts: dict[str, int] = {}
        self.planned = 0
        self.run_record: dict = {}
        self.run_offset = 0  # where this run's run record starts in the file
        self.size = 0  # bytes in the file, as this writer left it
        self.mtime = 0  # its modification time (ns), as this writer left it
        self.synced = 0.0  # time.monotonic() of the last fsync
        self.write_error: str | None = None
        self.session: pytest.Session | None = None
        self.ended = False
        self.standby: Standby | None = None  # the end-of-run report builder, warming up meanwhile
        self.standby_answered = False
        self.identity: tuple[int, int] | None = None  # (device, inode) of the file this run writes
        self.abspath = Path(os.path.abspath(path))  # where it is, whatever a case does to the working folder
        self.mine = bytearray()  # every byte this run appended (its run record, rows and end record)
        self.lost: str | None = None  # what happened to the file during the run (replaced, deleted, ...)
        self.carried: dict[str, dict] = {}  # report node id -> the case its test's reports named
        self.planner = None  # the fresh process planning the run's options again (start_suite_plan)
        self.suite_plan: dict | None = None  # its answer, for the end record
        self.whole_plan_digest = ""  # plan_digest of the run's whole plan, as it planned it

    # -- the file
    def open(self, planned: list) -> None:
        """Create, lock and check the file and append the run record; a usage error otherwise."""
        shown = str(self.config.getoption("--results"))
        fresh = self.config.getoption("--fresh-results")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"cannot create the folder of results file {shown}: {exc.strerror or exc}") from None
        existed = self.path.exists()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, _FILE_MODE)
        except OSError as exc:
            raise pytest.UsageError(f"cannot open results file {shown}: {exc.strerror or exc}") from None
        try:
            problem = self._claim(fd, shown, fresh)
            if problem is None:
                self.fd = fd
                self.planned = len(planned)
                # whole_plan: the cases of the plan (after --shard) before any selection (-k, -m,
                # --lf, --deselect, node ids); ``planned`` is what was collected of it.
                self.run_record = {"record": "run", "schema": SCHEMA_VERSION, "run_id": self.run_id,
                                   "started": _now(), "planned": len(planned), "whole_plan": len(planned),
                                   "env": environment(self.config), **_planned_fields(planned)}
                self.whole_plan_digest = plan_digest(self.run_record)  # before any selection narrows the record
                try:
                    self._append(self.run_record, sync=True)
                    info = os.fstat(fd)
                    self.identity = (info.st_dev, info.st_ino)
                except OSError as exc:
                    problem = f"cannot write results file {shown}: {exc.strerror or exc}"
        except BaseException:
            os.close(fd)
            raise
        if problem is not None:
            self.fd = None
            try:
                if not existed and os.fstat(fd).st_size == 0:
                    os.unlink(self.path)
            finally:
                os.close(fd)
            raise pytest.UsageError(problem)

    def start_suite_plan(self, options: dict, devices: list[str] | None) -> None:
        """Plan the run's options again in a fresh process, where no conftest.py or pytest
        plugin of this run takes part (:func:`detconf.conformance.planned.suite_plan`): the end
        record says its answer (``suite_plan``) and a certification compares it with the plan
        the run record lists. Only for a run a certification could accept (the default
        sources, modes and compile setting at least): it costs a process that imports torch."""
        from detconf.child import start_child
        from detconf.conformance.planned import SUITE_PLAN_TARGET
        from detconf.vocabulary import DEFAULT_COMPILERS, DEFAULT_SOURCES

        if not (set(DEFAULT_SOURCES) <= set(options["sources"]) and set(DEFAULT_MODES) <= set(options["modes"])
                and set(DEFAULT_COMPILERS) <= set(options["compilers"])):
            return
        try:
            self.planner = start_child(SUITE_PLAN_TARGET, {**options, "devices": devices})
        except OSError as exc:
            self.suite_plan = {"error": f"cannot start the process that plans the run again: {exc.strerror or exc}"}

    def _finish_suite_plan(self) -> None:
        from detconf.child import ChildFailed, finish_child

        planner, self.planner = self.planner, None
        if planner is None:
            return
        try:
            found = finish_child(planner, timeout=300, what="the suite's own plan")
        except ChildFailed as exc:
            self.suite_plan = {"error": one_line(exc.reason or str(exc))}
            return
        self.suite_plan = {"cases": found["cases"], "digest": found["digest"],
                           "same": found["digest"] == self.whole_plan_digest}

    def _claim(self, fd: int, shown: str, fresh: bool) -> str | None:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"--results {shown} is not a regular file (a device, pipe or socket); give a file path"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return in_use(shown)
        except OSError as exc:
            return f"cannot lock results file {shown}: {exc.strerror or exc}"
        try:
            problem = existing_results_problem(self.path, shown, fresh=fresh)
        except OSError as exc:
            return f"cannot read results file {shown}: {exc.strerror or exc}"
        if problem is None and fresh:
            os.ftruncate(fd, 0)
        self.size = self.run_offset = os.fstat(fd).st_size
        return problem

    def _append(self, obj: dict, *, sync: bool = False) -> None:
        """Append one line. A failed write leaves no partial line behind.

        Each line goes to the operating system as it is written (no buffer in this process), so
        a crash or kill of the run loses no written row. ``fsync`` (to survive the machine
        going down too) runs for the run and end records, and for rows at most every
        :data:`SYNC_EVERY_S` seconds: it costs about a millisecond, as much as a small case."""
        text = json.dumps(obj, sort_keys=True, default=str)
        if "\\ud" in text and _LONE_SURROGATE.search(text):
            # Text decoded with surrogateescape (a non-UTF-8 locale: paths, argv) holds lone
            # surrogates, which no reader takes as Unicode: the bytes they stand for, as UTF-8.
            text = json.dumps(_as_unicode(obj), sort_keys=True, default=str)
        encoded = (text + "\n").encode("utf-8")
        data = memoryview(encoded)
        start = self.size
        try:
            while data:
                data = data[os.write(self.fd, data):]
            if sync or time.monotonic() - self.synced >= SYNC_EVERY_S:
                os.fsync(self.fd)
                self.synced = time.monotonic()
        except OSError:
            try:
                os.ftruncate(self.fd, start)  # only this writer's own partial line (the file is locked)
            except OSError:
                pass
            raise
        info = os.fstat(self.fd)
        self.size, self.mtime = info.st_size, info.st_mtime_ns
        self.mine += encoded

    def file_problem(self, *, full: bool = False) -> str | None:
        """What happened to the results file since this run last wrote to it, or None: the run
        knows its file by device and inode (taken when it opened it), by the size and modification
        time it left, and (``full``: at the end of the run, before its answer and matrix) by every
        byte it wrote, so that a write that keeps the size is caught too."""
        if self.fd is None or self.identity is None:
            return None
        shown = self.config.getoption("--results")
        try:
            info = os.stat(self.abspath)
        except FileNotFoundError:
            return f"results file {shown} was deleted during the run"
        except OSError as exc:
            return f"results file {shown} cannot be found during the run: {exc.strerror or exc}"
        if (info.st_dev, info.st_ino) != self.identity:
            return f"results file {shown} was replaced during the run (another file has its name now)"
        try:
            now = os.fstat(self.fd)
        except OSError as exc:
            return f"results file {shown} cannot be checked: {exc.strerror or exc}"
        size = now.st_size
        if size < self.size:
            return (f"results file {shown} was truncated during the run ({size} bytes; this run had written "
                    f"up to byte {self.size})")
        if size > self.size:
            return (f"results file {shown} was written to by another program during the run "
                    f"({size - self.size} bytes this run did not write)")
        rewritten = (f"results file {shown} was written to by another program during the run (in place: its size "
                     "did not change, its bytes did)")
        if self.mtime and now.st_mtime_ns != self.mtime:
            return rewritten
        if full and self.mine:
            try:
                with open(self.abspath, "rb") as f:
                    f.seek(self.run_offset)
                    on_disk = f.read(self.size - self.run_offset)
            except OSError as exc:
                return f"results file {shown} cannot be read back: {exc.strerror or exc}"
            if on_disk != bytes(self.mine):
                return rewritten
        return None

    def _check_file(self, *, full: bool = False) -> bool:
        """Is the results file still this run's own? Otherwise the run stops (see :meth:`_lose`)."""
        if self.lost is None:
            problem = self.file_problem(full=full)
            if problem is not None:
                self._lose(problem)
        return self.lost is None

    def _lose(self, problem: str) -> None:
        """The file is no longer this run's: write nothing more to it, save this run's lines in a
        file of their own beside it, and stop the run (it ends non-zero, and builds no matrix)."""
        self.lost = problem
        saved = self._rescue()
        rows = f"{len(self.written)} row{'s' if len(self.written) != 1 else ''}"
        self.write_error = problem + (f"; this run's {rows} (and its run record) went to {saved}" if saved else
                                      f"; this run's {rows} could not be saved elsewhere") + "; no matrix is built"
        if self.session is not None:
            self.session.shouldstop = self.write_error

    def _rescue(self) -> Path | None:
        """This run's lines (from memory) in a new file beside the results file, or None."""
        target = self.abspath.with_name(f"{self.abspath.stem}.rescued-{self.run_id}.jsonl")
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)
        except OSError:
            return None
        try:
            data = memoryview(bytes(self.mine))
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        return target

    def set_planned(self, cases: list) -> None:
        """The conformance cases collected (after -k, --lf, node ids), known once collection
        is done and before any test runs: the run record is rewritten to list them."""
        fields = _planned_fields(cases)
        if ((len(cases) == self.planned and fields["planned_cases"] == self.run_record.get("planned_cases"))
                or self.fd is None or self.written):
            return
        self.planned = len(cases)
        if not self._check_file():
            return  # someone else changed the file: leave it as it is
        self.run_record.update(planned=len(cases), **fields)
        try:
            os.ftruncate(self.fd, self.run_offset)  # this run's own record, just written
            self.size = self.run_offset
            self.mine.clear()
            self._append(self.run_record, sync=True)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.write_error = f"cannot write results file {self.path}: {exc.strerror or exc}"
        if self.session is not None:
            self.session.shouldstop = self.write_error

    def add(self, nodeid: str, row: dict) -> None:
        if nodeid in self.written or self.fd is None or self.write_error or not self._check_file():
            return
        row = dict(row, run_id=self.run_id)
        try:
            self._append(row)
        except OSError as exc:
            self._failed(exc)
            return
        self.written.add(nodeid)
        self.counts[row["verdict"]] = self.counts.get(row["verdict"], 0) + 1

    def missing(self) -> int:
        return max(0, self.planned - len(self.written))

    # -- hooks
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session
        if not (self.config.getoption("--no-report-build") or self.config.option.collectonly):
            self.standby = Standby.start()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.set_planned([case for case in map(case_of, session.items) if case is not None])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        # Every worker collects the same cases; scheduling waits for all of them, so no test has run yet.
        # The workers' items stay with them: what they collected comes here as node ids, each
        # ending in the test name the plan gave its case.
        by_name = cases_by_test_name(self.config)
        self.set_planned([case for case in (by_name.get(_test_name(i)) for i in ids) if case is not None])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        carried = getattr(report, CASE_ATTRIBUTE, None)
        if carried is not None:
            self.carried[report.nodeid] = carried
        rows = [value for key, value in report.user_properties if key == ROW_KEY]
        if rows:  # the test's row, or the row of a test that failed without one (plugin.fixtures)
            self.add(rows[-1].get("nodeid", report.nodeid), rows[-1])
            return
        carried = self.carried.get(report.nodeid)
        if report.failed and carried is not None and carried["nodeid"] not in self.written:
            # A worker that crashed: xdist reports the test it was running, by node id only; the
            # test's earlier reports named its case.
            case = self.config._detconf_case_by_id.get(carried["case"])
            if case is not None:
                self.add(carried["nodeid"], crashed_row(case, report, carried["nodeid"]))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._end(session, finished=True)

    def _end(self, session: pytest.Session | None, *, finished: bool) -> None:
        """The end record. ``finished``: the session ran (pytest's session finish); else it
        stopped while it started (an interrupt, a usage error, ``pytest.exit`` in a hook before
        the first case): the run is said ``incomplete`` with pytest's exit status where the
        session was made, and the plan's cases count as missing."""
        if self.fd is None or self.ended:
            return
        self.ended = True
        if not self.write_error:
            self._check_file(full=True)
        empty = finished and not self.planned and not self.written
        if session is not None:
            if empty and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED  # nothing was tested: not green
            if (self.missing() or self.write_error or not finished) and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED  # rows are missing: not a clean run
        if self.write_error:
            return
        if finished:
            self._finish_suite_plan()
        status = {"exitstatus": int(session.exitstatus)} if session is not None else {}
        try:
            self._append({"record": "end", "schema": SCHEMA_VERSION, "run_id": self.run_id, "ended": _now(),
                          **status, "planned": self.planned, "written": len(self.written), "missing": self.missing(),
                          "outcome": "empty" if empty else "complete" if finished and not self.missing()
                          else "incomplete",
                          **({"suite_plan": self.suite_plan} if self.suite_plan is not None else {})},
                         sync=True)
        except OSError as exc:
            self._failed(exc)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.planner is not None:  # the run ended before its end record (a usage error, an interrupt)
            self.planner.kill()
            self.planner.communicate()
            self.planner = None
        self._end(self.session, finished=False)  # the session stopped while it started: no session finish
        if self.standby is not None:
            self.standby.stop()
            self.standby = None
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None

    # -- the end of the run
    def _runs_in_file(self) -> int:
        """The number of runs the results file holds (its run records)."""
        runs = 0
        with open(self.path, "rb") as f:
            for line in f:
                if b'"record": "run"' in line:
                    try:
                        record = json.loads(line)
                    except (ValueError, RecursionError):
                        continue
                    runs += isinstance(record, dict) and record.get("record") == "run"
        return runs

    def _empty_plan_reason(self) -> str:
        """Why a run planned no conformance case, in words."""
        from detconf.vocabulary import DEFAULT_SOURCES

        config = self.config
        whole = getattr(config, "_detconf_plan_unsharded", None)
        planned = len(getattr(config, "_detconf_plan", None) or ())
        shard = getattr(config, "_detconf_shard", None)
        if planned and not self.planned:
            return f"the selection (-k, -m, --lf or node ids) left none of the {planned} planned cases"
        if shard is not None and whole:
            return f"--shard {shard[0]}/{shard[1]} holds none of the plan's {whole} cases"
        sources = list(dict.fromkeys(config.getoption("--source") or DEFAULT_SOURCES))
        devices = [b.name for b in getattr(config, "_detconf_backends", ())]
        modes = list(dict.fromkeys(config.getoption("--mode") or DEFAULT_MODES))
        reason = (f"source{'s' if len(sources) > 1 else ''} {', '.join(sources)} give{'' if len(sources) > 1 else 's'} "
                  f"no case on device{'s' if len(devices) > 1 else ''} {', '.join(devices) or '(none)'} in "
                  f"mode{'s' if len(modes) > 1 else ''} {', '.join(modes)}")
        if "vendor" in sources:
            try:
                from detconf.conformance.catalog import vendor_profiles

                if not vendor_profiles():
                    reason += " (source 'vendor': no installed backend declares a vendor list)"
            except Exception:  # noqa: BLE001 - only a hint
                pass
        return reason

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        from detconf.reports.safe import terminal

        tr = terminalreporter
        for line in getattr(config, "_detconf_unknown_findings", ()):
            tr.write_line(terminal(one_line(line)), yellow=True)
        plan = self.suite_plan or {}
        if plan.get("same") is False:
            tr.write_line(terminal(one_line(
                f"warning: this run planned {self.run_record.get('whole_plan')} cases; the suite plans "
                f"{plan.get('cases')} for the same options in a fresh process: a conftest.py or pytest plugin "
                "changed the plan (a certification refuses this run)")), red=True)
        elif plan.get("error"):
            tr.write_line(terminal(one_line(f"warning: the suite's own plan could not be computed: {plan['error']} "
                                            "(a certification refuses this run)")), yellow=True)
        if not self.written and not self.planned and not self.write_error:
            if self.fd is not None:
                tr.write_line(terminal(one_line(f"detconf: no conformance case ran: {self._empty_plan_reason()}; "
                                                 "nothing was tested (exit status 5)")), red=True)
            return
        tr.section("detconf conformance")
        if self.lost is None and not self.write_error:
            self._check_file(full=True)  # the file the matrix would be built from is still this run's own
        mine = [line + "\n" for line in self.mine.decode("utf-8", errors="replace").splitlines()
                if '"record": "end"' not in line]
        runs = 0
        if self.lost is None:
            try:
                runs = self._runs_in_file()
            except OSError as exc:
                tr.write_line(terminal(f"cannot read back {self.path}: {exc.strerror or exc}"), red=True)
        tr.write_line(terminal(f"results: {self.path} (run {self.run_id}: {len(self.written)} rows"
                               + (f"; the file holds {runs} run{'s' if runs != 1 else ''})" if self.lost is None
                                  else ")")))
        if self.write_error:
            tr.write_line(terminal(f"results incomplete: {self.write_error}"), red=True)
        if self.missing():
            tr.write_line(f"incomplete: {self.missing()} of {self.planned} planned cases have no row", red=True)
        if not self.written:
            return
        out_dir = report_dir(self.path)
        problem = None if config.getoption("--no-report-build") else _report_dir_problem(out_dir, self.path)
        building = not config.getoption("--no-report-build") and problem is None and self.lost is None
        with tempfile.TemporaryDirectory(prefix="detconf-summary-") as tmp:
            this_run = Path(tmp) / self.path.name
            this_run.write_text("".join(mine), encoding="utf-8")
            reply = self._report(this_run, out_dir if building else None)
        if "lines" in reply:
            lines = reply["lines"]
        else:  # the rows are on disk; say why they could not be summarised
            lines = [f"summary unavailable: {reply['summary_error']}",
                     ", ".join(f"{v} {n}" for v, n in sorted(self.counts.items()))]
        for line in lines:
            tr.write_line(terminal(line))
        if problem:
            tr.write_line(terminal(f"matrix not built: {problem}"), yellow=True)
        elif "build_error" in reply:
            tr.write_line(terminal(one_line(f"matrix build failed: {reply['build_error']}")))
        elif reply.get("built"):
            tr.write_line(terminal(f"matrix: {out_dir / 'matrix.md'} (+ matrix.csv, matrix.html, matrix.png, "
                                   "summary.json; every run in the file, a later row wins)"))

    def _report(self, this_run: Path, out_dir: Path | None) -> dict:
        """The summary lines of ``this_run`` and, given ``out_dir``, the matrix of the whole file
        built there: by the standby builder (warm by now), or here when it is not running or
        does not answer. The reply's fields are those of :func:`reports.standby.handle`."""
        request = {"summary": str(this_run)}
        if out_dir is not None:
            request["build"] = {"paths": [str(self.path)], "out": str(out_dir), "own": True}
        standby, self.standby = self.standby, None
        reply = standby.ask(request) if standby is not None else None
        if reply is not None:
            self.standby_answered = True
            return reply
        from detconf.reports.standby import handle

        return handle(request)


def _planned_fields(cases: list) -> dict:
    from detconf.conformance.planned import planned_fields

    return planned_fields(cases)  # each case carries its expected outcome


def _test_name(nodeid: str) -> str:
    """The test's name in ``nodeid`` (``test_documented[<case id>]``), without the ``@GROUP``
    xdist's ``--dist loadgroup`` appends on its workers to a test with an ``xdist_group`` mark."""
    start = nodeid.find(f"::{CONFORMANCE_TEST}[")
    name = nodeid[start + 2:] if start >= 0 else ""
    head, bracket, tail = name.rpartition("]")
    return head + bracket if bracket and tail.startswith("@") else name
