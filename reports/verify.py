"""``python -m reports verify PKG``: check a certification package (docs/certification.md).

Exit 0 only when: the suite revision is recorded, clean and (where this checkout is a git
repository) one of its commits; every must-pass case has exactly one row and every row is a
must-pass case; only allowed verdicts appear; every file matches ``SHA256SUMS``; every run's
environment is complete and matches ``environment.json``; every waiver matches a recorded
known finding and a row; and the statement agrees with the results. Each problem is one line;
any problem is exit status 1. A PKG that is not a folder is exit status 2.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

from detconf.findings_rule import torch_in, torch_range
from detconf.vocabulary import FAILING
from reports.certify import (
    ALLOWED, ENV_REQUIRED, ENVIRONMENT, FINDINGS_FILE, FINDINGS_IN_REPO, GIVEN, MUST_PASS, ROOT, STATEMENT, SUMS,
    WAIVERS, CertifyError, _finding_matches, cell_name, cell_of, environment_of, facts, must_pass_of, package_files,
    read_runs, sha256_file,
)
from reports.load import ResultsError, load

_SUM_LINE = re.compile(r"([0-9a-f]{64})  (\S(?:.*\S)?)")


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def _repository() -> bool:
    out = _git("rev-parse", "--git-dir")
    return out is not None and out.returncode == 0


def _short(value, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


class _Check:
    def __init__(self, pkg: Path):
        self.pkg = pkg
        self.problems: list[str] = []
        self.notes: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(" ".join(text.split()))

    def json(self, name: str):
        path = self.pkg / name
        if not path.is_file():
            self.problem(f"{name} is missing")
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.problem(f"{name}: not JSON ({exc})")
            return None

    # -- digests
    def digests(self) -> None:
        sums = self.pkg / SUMS
        if not sums.is_file():
            self.problem(f"{SUMS} is missing: the files cannot be checked")
            return
        listed: dict[str, str] = {}
        for number, line in enumerate(sums.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            match = _SUM_LINE.fullmatch(line)
            if not match:
                self.problem(f"{SUMS}:{number}: not a 'SHA256  NAME' line")
                continue
            listed[match.group(2)] = match.group(1)
        present = set(package_files(self.pkg))
        for name, digest in sorted(listed.items()):
            path = self.pkg / name
            if name not in present or path.is_symlink() or not path.is_file():
                self.problem(f"{name}: listed in {SUMS} but not a file of the package")
            elif sha256_file(path) != digest:
                self.problem(f"{name}: digest does not match {SUMS} (the file changed)")
        for name in sorted(present - set(listed)):
            self.problem(f"{name}: not listed in {SUMS}")

    # -- the revision
    def revision(self, runs: list[dict]) -> None:
        commits = []
        for run in runs:
            env = run.get("env") or {}
            if not env.get("suite_commit"):
                self.problem(f"run {run['run_id']}: the suite revision is unknown (no git commit recorded)")
            else:
                commits.append(env["suite_commit"])
            if env.get("suite_dirty") is not False:
                state = "had local changes" if env.get("suite_dirty") else "is not recorded as clean"
                self.problem(f"run {run['run_id']}: the suite checkout {state} (suite_dirty: "
                             f"{_short(env.get('suite_dirty'))}); certify a clean revision")
        for commit in sorted(set(commits)):
            if not _repository():
                self.notes.append(f"note: {ROOT} is not a git repository: revision {commit} was not looked up")
                continue
            found = _git("cat-file", "-e", f"{commit}^{{commit}}")
            if found is None or found.returncode != 0:
                self.problem(f"suite revision {commit} is not a commit of the repository at {ROOT}")

    # -- cases and verdicts
    def cases(self, runs: list[dict], rows: list[dict], ends: dict, waivers: list) -> None:
        listed = []
        path = self.pkg / MUST_PASS
        if not path.is_file():
            self.problem(f"{MUST_PASS} is missing")
        else:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    listed.append(cell_of(json.loads(line)))
                except (ValueError, AttributeError, TypeError):
                    self.problem(f"{MUST_PASS}:{number}: not a case")
        planned = [cell_of(c) for c in must_pass_of(runs)]
        if set(listed) != set(planned) or len(listed) != len(set(listed)):
            self.problem(f"{MUST_PASS} does not list the planned cases of the runs ({len(listed)} listed, "
                         f"{len(set(planned))} planned)")
        self.shards(runs)
        for run in runs:
            if run["run_id"] not in ends:
                self.problem(f"run {run['run_id']} has no end record (the run did not finish)")
        per_cell = Counter(cell_of(r) for r in rows)
        must = set(listed) | set(planned)
        for cell in dict.fromkeys(listed + planned):
            n = per_cell.get(cell, 0)
            if n != 1:
                self.problem(f"must-pass case {cell_name(cell)} has {'no row' if n == 0 else f'{n} rows'}")
        for cell in sorted(set(per_cell) - must, key=str):
            self.problem(f"row for {cell_name(cell)} is not a must-pass case")
        waived = {(cell_of(w.get("case") or {}), w.get("verdict")) for w in waivers if isinstance(w, dict)}
        judged = {run["run_id"]: _torch_under_test(run) for run in runs}
        for row in rows:
            verdict, cell = row["verdict"], cell_of(row)
            if verdict in ALLOWED:
                continue
            if verdict == "unsupported":
                detail = row.get("detail") or {}
                if not any(isinstance(detail.get(k), str) and detail[k].strip() for k in ("unsupported", "reason")):
                    self.problem(f"{cell_name(cell)}: unsupported without a reason")
            elif verdict == "skipped" and _not_applicable(row, judged.get(row.get("run_id"))):
                continue
            elif verdict in FAILING and verdict != "missing" and (cell, verdict) in waived:
                continue
            elif verdict in FAILING and verdict != "missing":
                self.problem(f"{cell_name(cell)}: verdict {verdict} is not allowed (failing, not waived by a "
                             "recorded finding)")
            else:
                self.problem(f"{cell_name(cell)}: verdict {verdict} is not allowed")

    def shards(self, runs: list[dict]) -> None:
        """Shards of one plan: all N parts, each once; never mixed with whole-plan runs."""
        shards = [(run.get("env") or {}).get("shard") for run in runs]
        if not any(shards):
            return
        parts = []
        for shard in shards:
            match = re.fullmatch(r"([0-9]+)/([0-9]+)", shard or "")
            if not match:
                self.problem(f"the runs mix shards with a run of {_short(shard or 'the whole plan')}")
                return
            parts.append((int(match.group(1)), int(match.group(2))))
        totals = sorted({n for _, n in parts})
        if len(totals) > 1:
            self.problem(f"the runs are shards of different splits (of {', '.join(map(str, totals))} parts)")
            return
        total = totals[0]
        have = Counter(i for i, _ in parts)
        lacking = [i for i in range(1, total + 1) if not have[i]]
        if lacking:
            self.problem(f"the runs cover {len(have)} of {total} shards: part(s) {', '.join(map(str, lacking))} "
                         "missing")
        twice = sorted(i for i, n in have.items() if n > 1)
        if twice:
            self.problem(f"shard part(s) {', '.join(map(str, twice))} of {total} appear in more than one run")

    # -- environment
    def environment(self, runs: list[dict], ends: dict) -> None:
        recorded = self.json(ENVIRONMENT)
        if recorded is not None and recorded != environment_of(runs, ends):
            self.problem(f"{ENVIRONMENT} does not match the run records of the results")
        for run in runs:
            env = run.get("env") or {}
            lacking = [k for k in ENV_REQUIRED if env.get(k) is None or env.get(k) in ("", [], "unknown")]
            if lacking:
                self.problem(f"run {run['run_id']}: the environment lacks {', '.join(lacking)}")
            for d in env.get("devices") or []:
                if not isinstance(d, dict) or not d.get("device_name"):
                    self.problem(f"run {run['run_id']}: a device of the environment has no device_name")
                elif d.get("device") == "cuda" and d.get("available") and not (env.get("cuda") and env.get("driver")):
                    self.problem(f"run {run['run_id']}: a CUDA device without the CUDA runtime and driver versions")

    # -- waivers
    def recorded_findings(self, runs: list[dict]) -> list[dict] | None:
        commit = next((r["env"].get("suite_commit") for r in runs if r.get("env", {}).get("suite_commit")), None)
        if commit and _repository():
            shown = _git("show", f"{commit}:{FINDINGS_IN_REPO}")
            if shown is not None and shown.returncode == 0:
                try:
                    return json.loads(shown.stdout)
                except ValueError:
                    pass
        if FINDINGS_FILE.is_file():
            self.notes.append(f"note: waivers checked against {FINDINGS_FILE} (the findings of revision "
                              f"{commit or '?'} could not be read from a repository)")
            try:
                return json.loads(FINDINGS_FILE.read_text(encoding="utf-8"))
            except ValueError:
                pass
        self.problem("no recorded known findings to check the waivers against")
        return None

    def waivers(self, waivers, runs: list[dict], rows: list[dict]) -> list:
        if not isinstance(waivers, list):
            if waivers is not None:
                self.problem(f"{WAIVERS} must be a list")
            return []
        if not waivers:
            return waivers
        findings = self.recorded_findings(runs) or []
        verdicts = {(cell_of(r), r["verdict"]) for r in rows}
        for w in waivers:
            if not isinstance(w, dict) or not isinstance(w.get("case"), dict) or not isinstance(w.get("finding"), dict):
                self.problem(f"{WAIVERS}: a waiver must name its case and finding")
                continue
            cell = cell_of(w["case"])
            row = dict(w["case"], verdict=w.get("verdict"))
            if w["finding"] not in findings or not _finding_matches(w["finding"], row):
                self.problem(f"waiver for {cell_name(cell)} ({w.get('verdict')}) matches no recorded known finding")
            elif w.get("why") != w["finding"].get("why"):
                self.problem(f"waiver for {cell_name(cell)}: its reason is not the finding's")
            if (cell, w.get("verdict")) not in verdicts:
                self.problem(f"waiver for {cell_name(cell)}: no row of that case has verdict {w.get('verdict')}")
        return waivers

    # -- the statement
    def statement(self, statement, runs, rows, waivers, digest: str) -> None:
        if not isinstance(statement, dict):
            if statement is not None:
                self.problem(f"{STATEMENT} must be an object")
            return
        for name in GIVEN:
            if not isinstance(statement.get(name), str) or not statement[name].strip():
                self.problem(f"{STATEMENT}: '{name}' is missing or empty")
        try:
            expected = facts(runs, rows, must_pass_of(runs), waivers, digest)
        except CertifyError as exc:
            self.problem(str(exc))
            return
        for name, value in expected.items():
            if statement.get(name) != value:
                self.problem(f"{STATEMENT}: '{name}' says {_short(statement.get(name))}, the results say {_short(value)}")


def verify(pkg_path: str) -> tuple[int, list[str]]:
    """``(exit status, lines)`` for the package at ``pkg_path``."""
    pkg = Path(pkg_path)
    if not pkg.is_dir():
        raise CertifyError(f"{pkg_path}: not a package folder")
    check = _Check(pkg)
    check.digests()
    statement = check.json(STATEMENT)
    names = statement.get("results") if isinstance(statement, dict) else None
    results_dir = pkg / "results"
    present = sorted(p.relative_to(pkg).as_posix() for p in results_dir.iterdir()) if results_dir.is_dir() else []
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        if statement is not None:
            check.problem(f"{STATEMENT}: 'results' must list the package's results files")
        names = present
    elif sorted(names) != present:
        check.problem(f"{STATEMENT}: 'results' lists {_short(sorted(names))}, the package holds {_short(present)}")
    paths = [pkg / n for n in names if (pkg / n).is_file() and n in present]
    rows: list[dict] = []
    if not paths:
        check.problem("the package holds no results files")
    else:
        try:
            merged = load(paths)
        except ResultsError as exc:
            check.problem(f"results: {exc}")
        else:
            runs, rows, ends = read_runs(paths)
            check.revision(runs)
            waivers = check.waivers(check.json(WAIVERS), runs, rows)
            check.cases(runs, rows, ends, waivers)
            check.environment(runs, ends)
            check.statement(statement, runs, rows, waivers, merged.digest())
    lines = list(check.notes) + list(dict.fromkeys(check.problems))
    if check.problems:
        lines.append(f"REFUSED: {pkg_path}: {len(set(check.problems))} problem(s)")
        return 1, lines
    lines.append(f"verified: {pkg_path}: {statement.get('cases')} must-pass cases, one row each; "
                 f"{statement.get('waived')} waived by recorded findings; revision {statement['suite']['commit']}")
    return 0, lines


def _torch_under_test(run: dict) -> str:
    """The release whose promises a run judged: its ``--doc-version``, else its torch."""
    env = run.get("env") or {}
    return str(env.get("doc_version") or env.get("torch_version") or "")


def _not_applicable(row: dict, torch_under_test: str | None = None) -> bool:
    """A ``skipped`` row whose promise does not apply here: it is about another device type
    (``detail.needs_device``: a cuBLAS note on a non-CUDA device, a torch_npu API off the NPU),
    or about other torch releases (``detail.needs_torch``, the entry's range, which leaves out
    ``torch_under_test``: the cuBLAS workspace sentence of the docs of torch < 2.10 on 2.11). A
    skip on the device it needs (the device was absent), or a range that holds the torch under
    test, stays refused."""
    detail = row.get("detail") or {}
    needs = detail.get("needs_device")
    device = str(row.get("device") or "").split(":")[0]
    if isinstance(needs, str) and bool(needs) and bool(device) and needs != device:
        return True
    needs_torch = detail.get("needs_torch")
    if not isinstance(needs_torch, str) or not torch_under_test:
        return False
    from packaging.version import Version

    try:
        Version(torch_under_test)  # InvalidVersion (a ValueError): torch_in would call it outside
        return not torch_in(torch_under_test, torch_range(needs_torch))
    except ValueError:  # not a version, not a specifier
        return False
