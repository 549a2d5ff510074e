"""``python -m detconf.reports verify PKG``: check a certification package (docs/certification.md).

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
from detconf.revision import plan_digest
from detconf.vocabulary import FAILING
from detconf.vocabulary import (DEFAULT_COMPILERS, DEFAULT_MODES, DEFAULT_SOURCES, HYPOTHESIS_PROFILES,
                                KNOWN_PLUGIN_DISTRIBUTIONS, base_profile)
from detconf.reports.certify import (
    ALLOWED, ENV_REQUIRED, ENVIRONMENT, FINDINGS, FINDINGS_FILE, FINDINGS_IN_REPO, FORMAT, FORMATS, GIVEN, MUST_PASS,
    ROOT, STATEMENT, SUMS, WAIVERS, CertifyError, _finding_matches, cell_name, cell_of, environment_of, facts,
    must_pass_of, non_default_math_modes, package_files, read_runs, sha256_file,
)
from detconf.reports.load import load
from detconf.reports.records import ResultsError

_SUM_LINE = re.compile(r"([0-9a-f]{64})  (\S(?:.*\S)?)")
#: The files certify writes besides the results and logs the statement names.
_OWN_FILES = (STATEMENT, MUST_PASS, ENVIRONMENT, WAIVERS, FINDINGS)
#: Options that select part of a plan, as an old run record's argv shows them.
#: The conftest.py files of the suite itself: the root's in a checkout, the installed copy.
_SUITE_CONFTESTS = ("conftest.py", "_suite/conftest.py")
_SELECTING = ("-k", "-m", "--lf", "--last-failed", "--deselect", "--sw", "--stepwise")


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

    # -- which files
    def files(self, statement) -> None:
        """The package holds what certify writes and nothing else: its own files, the results
        files and (format 2 on) the logs the statement names, each of them."""
        if not isinstance(statement, dict):
            return
        named = {*_OWN_FILES, SUMS}
        for field in ("results", "logs"):
            names = statement.get(field)
            if isinstance(names, list):
                named.update(n for n in names if isinstance(n, str))
        present = set(package_files(self.pkg))
        if statement.get("format") == FORMAT:
            logs = statement.get("logs")
            if not isinstance(logs, list) or not all(isinstance(n, str) and n.startswith("logs/") for n in logs):
                self.problem(f"{STATEMENT}: 'logs' must list the package's logs")
            else:
                for name in sorted(set(logs) - present):
                    self.problem(f"{name}: named by {STATEMENT} but not in the package (a log was removed)")
        elif statement.get("format") in FORMATS:
            named.update(n for n in present if n.startswith("logs/"))
            self.notes.append(f"note: a {statement.get('format')} package does not name its logs; they were not "
                              "checked against the statement")
        for name in sorted(present - named):
            self.problem(f"{name}: not a file certify writes (nor a results file or log the statement names)")

    # -- the plan
    def plan(self, runs: list[dict]) -> None:
        """Each run ran its whole plan (no -k, -m, --lf, --deselect or node ids) of the default
        sources, modes and compile setting at least: a certification cannot be cherry-picked."""
        for run in runs:
            env = run.get("env") or {}
            whole, listed = run.get("whole_plan"), run.get("planned_cases")
            if isinstance(whole, int) and isinstance(listed, list):
                if whole != len(listed):
                    self.problem(f"run {run['run_id']}: it ran {len(listed)} of the {whole} cases of its plan (a -k, -m, "
                                 "--lf, --deselect or node-id selection); certify a run of the whole plan (or every "
                                 "--shard part of it)")
            else:  # a run before the record said: what its command line shows
                argv = [a for a in env.get("argv") or [] if isinstance(a, str)]
                picked = [a for a in argv if a in _SELECTING or a.startswith(("-k", "-m", "--deselect=")) or "::" in a]
                if picked:
                    self.problem(f"run {run['run_id']}: its command line selects part of the plan "
                                 f"({_short(' '.join(picked))}); certify a run of the whole plan")
            for field, default, what in (("sources", DEFAULT_SOURCES, "source"), ("modes", DEFAULT_MODES, "mode"),
                                         ("compile", DEFAULT_COMPILERS, "compile setting")):
                value = env.get(field)
                if value in (None, "all"):
                    continue
                chosen = [value] if isinstance(value, str) else value if isinstance(value, list) else []
                left_out = [d for d in default if d not in chosen]
                if left_out:
                    self.problem(f"run {run['run_id']}: it left out the default {what}(s) {', '.join(left_out)} "
                                 f"(it ran {_short(chosen)}); a certification covers at least "
                                 f"{', '.join(default)}")

    def own_plan(self, runs: list[dict], ends: dict) -> None:
        """Each run planned what the suite plans for its options: the end record's ``suite_plan``
        (computed in a fresh process that loads no conftest.py and no pytest plugin) has the
        digest of the planned cases the run record lists. A hook that dropped cases, changed an
        expected outcome or an entry's promise makes them differ."""
        for run in runs:
            rid = run["run_id"]
            suite = (ends.get(rid) or {}).get("suite_plan")
            if rid not in ends:
                continue  # refused as unfinished (cases)
            if not isinstance(suite, dict):
                self.problem(f"run {rid}: its end record does not give the suite's own plan for its options "
                             "(suite_plan; a run before it was recorded, or one that left out default sources, "
                             "modes or compile settings): run the suite again to certify")
            elif suite.get("error"):
                self.problem(f"run {rid}: the suite's own plan could not be computed ({_short(suite.get('error'))}): "
                             "run the suite again to certify")
            elif suite.get("digest") != plan_digest(run):
                listed = run.get("planned_cases")
                self.problem(f"run {rid}: its plan is not the suite's own plan for its options ("
                             f"{len(listed) if isinstance(listed, list) else '?'} cases listed, the suite plans "
                             f"{_short(suite.get('cases'))} in a fresh process): a conftest.py or pytest plugin "
                             "changed the plan")

    # -- who signed it
    def signature(self, allowed_signers: str | None) -> str | None:
        """The principal whose key signed ``SHA256SUMS`` (``allowed_signers`` given), else None;
        a missing or bad signature is a problem only when signers are given."""
        from detconf.reports.signing import SIGNATURE, SigningError, signer

        sig = self.pkg / SIGNATURE
        if allowed_signers is None:
            if sig.exists():
                self.notes.append(f"note: {SIGNATURE} is there but was not checked (verify --allowed-signers FILE "
                                  "says who signed)")
            return None
        if sig.is_symlink() or not sig.is_file():
            self.problem(f"the package is not signed ({SIGNATURE} is missing) and --allowed-signers asks for a "
                         "signature")
            return None
        if not (self.pkg / SUMS).is_file():
            return None  # said by the digests
        try:
            principal, words = signer(self.pkg / SUMS, sig, Path(allowed_signers))
        except (SigningError, OSError, subprocess.SubprocessError) as exc:
            raise CertifyError(f"verify --allowed-signers: {exc}") from None
        if principal is None:
            self.problem(f"{SIGNATURE}: {words}")
            return None
        self.notes.append(f"signed by {principal} ({words})")
        return principal

    # -- what the runs loaded
    def loaded(self, runs: list[dict], rows: list[dict], statement) -> None:
        """Nothing but the certified suite decided the rows: the suite's own derandomized profile
        with its own settings, the docs of the torch under test, the condition complements, no
        conftest.py but the suite's, no pytest plugin but the known ones and those the statement
        allows, torch's default math mode unless declared. (A row after its run's end record is
        refused by the results reader, :func:`detconf.reports.load.load`.)"""
        allowed = set(KNOWN_PLUGIN_DISTRIBUTIONS)
        named = statement.get("allowed_plugins") if isinstance(statement, dict) else None
        if isinstance(named, list):
            allowed |= {a for a in named if isinstance(a, str)}
        for run in runs:
            env, rid = run.get("env") or {}, run["run_id"]
            missing = [k for k in ("plugins", "conftest_files", "hypothesis_settings", "complements") if k not in env]
            if missing:
                self.problem(f"run {rid}: it does not record what it loaded ({', '.join(missing)}; results written "
                             "before the run record said): run the suite again to certify")
                continue
            profile = env.get("hypothesis_profile")
            # --hypothesis-verbosity renames the profile (stress-with-verbose-verbosity): its settings decide
            defined = HYPOTHESIS_PROFILES.get(base_profile(profile)) if isinstance(profile, str) else None
            if defined is None:
                self.problem(f"run {rid}: Hypothesis profile {_short(profile)} is not one of the suite's "
                             f"({', '.join(HYPOTHESIS_PROFILES)})")
            elif not defined.get("derandomize"):
                self.problem(f"run {rid}: Hypothesis profile {profile!r} draws random examples nobody can draw "
                             "again; certify a derandomized profile (ci or stress)")
            else:
                effective = env.get("hypothesis_settings") if isinstance(env.get("hypothesis_settings"), dict) else {}
                differ = [f"{k} {_short(effective.get(k))} (defined {_short(v)})" for k, v in defined.items()
                          if effective.get(k) != v]
                if differ:
                    self.problem(f"run {rid}: the settings in effect are not profile {profile!r}'s: {'; '.join(differ)}")
            doc, torch_version = env.get("doc_version"), str(env.get("torch_version") or "")
            if doc not in (None, "", "installed") and str(doc) != torch_version.split("+")[0]:
                self.problem(f"run {rid}: it judged torch {_short(torch_version)} against the docs of {_short(doc)} "
                             "(--doc-version); certify against the docs of the torch under test")
            if env.get("complements") is not True:
                self.problem(f"run {rid}: it left out the condition complements (--no-complements); a certification "
                             "covers them")
            for item in env.get("conftest_files") or []:
                path = item.get("path") if isinstance(item, dict) else None
                if path not in _SUITE_CONFTESTS:
                    self.problem(f"run {rid}: it loaded a conftest.py that is not the suite's: {_short(path)}")
            for item in env.get("plugins") or []:
                if not isinstance(item, dict):
                    self.problem(f"run {rid}: a plugin of the record is not an object")
                    continue
                module, dist = str(item.get("module") or ""), item.get("distribution")
                if module.startswith("detconf.") or module == "conftest" or dist in allowed:
                    continue
                self.problem(f"run {rid}: it loaded the pytest plugin {_short(module)} "
                             f"({_short(dist or 'no distribution')}"
                             f"{' ' + str(item.get('version')) if item.get('version') else ''}), which the statement "
                             "does not allow (certify --allow-plugin DIST)")
        declared = statement.get("math_modes") if isinstance(statement, dict) else None
        recorded = non_default_math_modes(runs)
        if recorded and declared != recorded:
            shown = "; ".join(f"{d} {f} {v}" for d, fam in recorded.items() for f, v in fam.items())
            self.problem(f"the runs' float32 math mode is not torch's default ({shown}) and the statement does not "
                         "declare it (certify --declare-math-mode)")
        elif not recorded and declared:
            self.problem(f"{STATEMENT}: 'math_modes' declares {_short(declared)}, the runs recorded torch's defaults")

    # -- the known findings of the package
    def findings(self, runs: list[dict]) -> None:
        """``known-findings.json`` is the suite's findings at the certified revision (or, where
        that cannot be read, the checkout's, said in a note)."""
        packaged = self.json(FINDINGS)
        if packaged is None:
            return
        recorded = self.recorded_findings(runs, quiet=True)
        if recorded is None:
            return
        if packaged != recorded:
            changed = sum(1 for f in packaged if f not in recorded) + sum(1 for f in recorded if f not in packaged)
            self.problem(f"{FINDINGS} is not the known findings recorded at the certified revision "
                         f"({changed} finding(s) added, removed or changed)")

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
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                self.problem(f"{MUST_PASS}: cannot read ({'not UTF-8' if isinstance(exc, UnicodeDecodeError) else exc})")
                text = ""
            for number, line in enumerate(text.splitlines(), 1):
                try:
                    listed.append(cell_of(json.loads(line)))
                except (ValueError, AttributeError, TypeError, RecursionError):
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
        entries = {(run["run_id"], e.get("source"), e.get("entry_id"), e.get("doc_version")): e
                   for run in runs for e in run.get("planned_entries") or [] if isinstance(e, dict)}
        for row in rows:
            verdict, cell = row["verdict"], cell_of(row)
            if verdict in ALLOWED:
                continue
            if verdict == "unsupported":
                detail = row.get("detail") or {}
                if not any(isinstance(detail.get(k), str) and detail[k].strip() for k in ("unsupported", "reason")):
                    self.problem(f"{cell_name(cell)}: unsupported without a reason")
            elif verdict == "skipped" and _not_applicable(row, judged.get(row.get("run_id")), entries.get(
                    (row.get("run_id"), row.get("source"), row.get("entry_id"), row.get("doc_version")))):
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
    def recorded_findings(self, runs: list[dict], *, quiet: bool = False) -> list[dict] | None:
        commit = next((r["env"].get("suite_commit") for r in runs if r.get("env", {}).get("suite_commit")), None)
        if commit and _repository():
            shown = _git("show", f"{commit}:{FINDINGS_IN_REPO}")
            if shown is not None and shown.returncode == 0:
                try:
                    return json.loads(shown.stdout)
                except (ValueError, RecursionError):
                    pass
        if FINDINGS_FILE.is_file():
            what = f"{FINDINGS} checked" if quiet else "waivers checked"
            self.notes.append(f"note: {what} against {FINDINGS_FILE} (the findings of revision "
                              f"{commit or '?'} could not be read from a repository)")
            try:
                return json.loads(FINDINGS_FILE.read_text(encoding="utf-8"))
            except (ValueError, RecursionError):
                pass
        if not quiet:
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
    def statement(self, statement, runs, rows, waivers, digest: str, ends: dict | None = None) -> None:
        if not isinstance(statement, dict):
            if statement is not None:
                self.problem(f"{STATEMENT} must be an object")
            return
        for name in GIVEN:
            if not isinstance(statement.get(name), str) or not statement[name].strip():
                self.problem(f"{STATEMENT}: '{name}' is missing or empty")
        if isinstance(statement.get("format"), str) and statement["format"].strip() and \
                statement["format"] not in FORMATS:
            self.problem(f"{STATEMENT}: 'format' is {_short(statement['format'])}, expected {FORMAT}")
        if isinstance(statement.get("date"), str) and statement["date"].strip():
            problem = _date_problem(statement["date"], runs, ends or {})
            if problem:
                self.problem(f"{STATEMENT}: 'date' {problem}")
        try:
            expected = facts(runs, rows, must_pass_of(runs), waivers, digest)
        except CertifyError as exc:
            self.problem(str(exc))
            return
        for name, value in expected.items():
            if statement.get(name) != value:
                self.problem(f"{STATEMENT}: '{name}' says {_short(statement.get(name))}, the results say {_short(value)}")


def verify(pkg_path: str, allowed_signers: str | None = None) -> tuple[int, list[str]]:
    """``(exit status, lines)`` for the package at ``pkg_path``. ``allowed_signers``: an OpenSSH
    allowed-signers file; the package must then be signed by a key it names (the line says whose)."""
    pkg = Path(pkg_path)
    if not pkg.is_dir():
        raise CertifyError(f"{pkg_path}: not a package folder")
    check = _Check(pkg)
    check.digests()
    statement = check.json(STATEMENT)
    check.files(statement)
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
            check.plan(runs)
            check.own_plan(runs, ends)
            check.loaded(runs, rows, statement)
            check.findings(runs)
            check.revision(runs)
            waivers = check.waivers(check.json(WAIVERS), runs, rows)
            check.cases(runs, rows, ends, waivers)
            check.environment(runs, ends)
            check.statement(statement, runs, rows, waivers, merged.digest(), ends)
    signed_by = check.signature(allowed_signers)
    lines = list(check.notes) + list(dict.fromkeys(check.problems))
    if check.problems:
        lines.append(f"REFUSED: {pkg_path}: {len(set(check.problems))} problem(s)")
        return 1, lines
    lines.append(f"verified: {pkg_path}: {statement.get('cases')} must-pass cases, one row each; "
                 f"{statement.get('waived')} waived by recorded findings; revision {statement['suite']['commit']}"
                 + (f"; signed by {signed_by}" if signed_by else ""))
    return 0, lines


def _date_problem(date: str, runs: list[dict], ends: dict) -> str | None:
    """What is wrong with the statement's date: not a UTC time as certify writes it
    (``2026-11-25T10:00:00Z``), before a run ended, or in the future."""
    import datetime as dt

    try:
        when = dt.datetime.strptime(date, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return f"is {_short(date)}, expected a UTC time such as 2026-11-25T10:00:00Z"
    if when > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1):
        return f"is {date}, in the future"
    for run in runs:
        for stamp in (run.get("started"), (ends.get(run["run_id"]) or {}).get("ended")):
            try:
                at = dt.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
            except ValueError:
                continue
            if when < at:
                return f"is {date}, before run {run['run_id']} ended ({stamp})"
    return None


def _torch_under_test(run: dict) -> str:
    """The release whose promises a run judged: its ``--doc-version``, else its torch."""
    env = run.get("env") or {}
    return str(env.get("doc_version") or env.get("torch_version") or "")


def _not_applicable(row: dict, torch_under_test: str | None = None, planned: dict | None = None) -> bool:
    """A ``skipped`` row whose promise does not apply here: it is about another device type
    (``detail.needs_device``: a cuBLAS note on a non-CUDA device, a torch_npu API off the NPU),
    or about other torch releases (``detail.needs_torch``, the entry's range, which leaves out
    ``torch_under_test``: the cuBLAS workspace sentence of the docs of torch < 2.10 on 2.11). The
    row's word is taken only where its planned entry (``planned``, from the run record, written
    before any case ran) says the same: the device its check or recipe declares, the entry's own
    range. A skip on the device it needs (the device was absent), a range that holds the torch
    under test, or a row the plan does not back stays refused."""
    detail = row.get("detail") or {}
    planned = planned or {}
    needs = detail.get("needs_device")
    device = str(row.get("device") or "").split(":")[0]
    if isinstance(needs, str) and bool(needs) and bool(device) and needs != device:
        return planned.get("needs_device") == needs
    needs_torch = detail.get("needs_torch")
    if not isinstance(needs_torch, str) or not torch_under_test or planned.get("torch") != needs_torch:
        return False
    from packaging.version import Version

    try:
        Version(torch_under_test)  # InvalidVersion (a ValueError): torch_in would call it outside
        return not torch_in(torch_under_test, torch_range(needs_torch))
    except ValueError:  # not a version, not a specifier
        return False
