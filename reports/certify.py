"""Certification packages: ``python -m detconf.reports certify`` builds one, ``python -m detconf.reports verify``
checks one (docs/certification.md).

A package is a folder:

- ``statement.json`` -- who and what: product, vendor, date (given by the submitter) and the
  facts read from the results (devices, driver and runtime versions, torch build, suite
  revision, Hypothesis profile and seed, the runs, the verdict counts, the digest of the rows);
- ``must-pass.jsonl`` -- the planned cases of every run, one cell per line;
- ``results/`` -- the results files, byte for byte;
- ``environment.json`` -- every run's environment and end record;
- ``waivers.json`` -- the failing rows waived by a recorded known finding, with its reason;
- ``known-findings.json`` -- the known findings the waivers were taken from (for the reader);
- ``logs/`` -- logs the submitter adds (``--log``);
- ``SHA256SUMS`` -- the SHA-256 of every other file (``sha256sum -c`` reads it).

The reports read the suite's known findings as a data file (they never import the suite).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from detconf.findings_rule import covers
from detconf.revision import file_digest as sha256_file
from detconf.vocabulary import DEFAULT_MATH_MODE, FAILING
from detconf.reports.load import load
from detconf.reports.planned import MISSING, planned_cells
from detconf.reports.records import ResultsError

FORMAT = "detconf-certification/2"
#: Formats ``verify`` reads: /1 (before the statement named the logs) and /2.
FORMATS = ("detconf-certification/1", FORMAT)
ROOT = Path(__file__).resolve().parents[1]
FINDINGS_FILE = ROOT / "conformance" / "data" / "known-findings.json"
FINDINGS_IN_REPO = "conformance/data/known-findings.json"
SUMS = "SHA256SUMS"
STATEMENT, MUST_PASS, ENVIRONMENT, WAIVERS, FINDINGS = (
    "statement.json", "must-pass.jsonl", "environment.json", "waivers.json", "known-findings.json")
#: A cell: what names one case of the plan, torch build included.
CELL = ("source", "doc_version", "entry_id", "phase", "device", "mode", "compile", "torch_version")
#: Verdicts a certified device may show. Failing verdicts pass only waived by a recorded finding;
#: ``unsupported`` only with the reason the row gives; ``skipped`` (nothing ran) and ``missing``
#: (no row) never.
ALLOWED = ("conforms", "no-difference-seen", "nondeterminism-seen", "recorded")
#: What every run's environment must state (non-null).
ENV_REQUIRED = ("torch_version", "torch_git", "python", "platform", "suite_revision", "suite_commit",
                "suite_dirty", "hypothesis_profile", "devices", "argv")
#: The statement's fields the submitter gives (the rest is read from the results).
GIVEN = ("format", "product", "vendor", "date")


class CertifyError(ResultsError):
    """Bad input to certify or verify: one line, exit status 2."""


# ----------------------------------------------------------------------------- reading

def _records(path: Path) -> Iterable[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def read_runs(paths: list[Path]) -> tuple[list[dict], list[dict], dict[str, dict]]:
    """``(runs, rows, ends)`` of results files already validated by :func:`reports.load.load`:
    run records in order, result rows in order (each with ``_file``: its index in ``paths``),
    end records by run id."""
    runs, rows, ends = [], [], {}
    for index, path in enumerate(paths):
        for rec in _records(path):
            kind = rec.get("record")
            if kind == "run":
                runs.append(rec)
            elif kind == "end":
                ends[rec["run_id"]] = rec
            elif kind == "result":
                rows.append(dict(rec, _file=index))
    return runs, rows, ends


def cell_of(row: dict) -> tuple:
    return tuple((row.get(n) or "") if n == "doc_version" else
                 (row.get(n) or ("program" if n == "phase" else "eager" if n == "compile" else None)) for n in CELL)


def cell_dict(cell: tuple) -> dict:
    return dict(zip(CELL, cell))


def cell_name(cell: tuple) -> str:
    c = cell_dict(cell)
    phase = "" if c["phase"] == "program" else f" <{c['phase']}>"
    compiled = "" if c["compile"] == "eager" else f"/{c['compile']}"
    return f"{c['source']}:{c['entry_id']}{phase} [{c['device']}/{c['mode']}{compiled}, torch {c['torch_version']}]"


def must_pass_of(runs: list[dict]) -> list[dict]:
    """The planned cases of every run, one per cell (the order of the runs and their lists)."""
    out: dict[tuple, dict] = {}
    for rec in runs:
        for c in planned_cells(rec):
            cell = cell_of(c)
            out.setdefault(cell, dict(cell_dict(cell), case_id=c["case_id"]))
    return list(out.values())


# ----------------------------------------------------------------------------- findings

def _finding_matches(finding: dict, row: dict) -> bool:
    """Does ``finding`` (an object of the findings file) waive ``row``: the suite's rule
    (:func:`detconf.findings_rule.covers`) and the same verdict."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(str(finding.get("torch", "")))
    except InvalidSpecifier:
        return False
    return finding.get("verdict") == row.get("verdict") and covers(
        row, source=finding.get("source"), entry_id=finding.get("entry_id"), torch=spec,
        devices=finding.get("devices") or (), modes=finding.get("modes") or (), compile=finding.get("compile") or (),
        phases=finding.get("phases") or ())


def findings_at(commit: str | None, root: Path = ROOT) -> list[dict] | None:
    """The known findings recorded at the suite's ``commit`` (``git show`` in the repository at
    ``root``), or None where they cannot be read from there."""
    import subprocess

    if not commit:
        return None
    try:
        shown = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{FINDINGS_IN_REPO}"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if shown.returncode != 0:
        return None
    try:
        data = json.loads(shown.stdout)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, list) else None


def read_findings(path: Path) -> list[dict]:
    """The known findings of a data file (a list of objects), or a CertifyError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CertifyError(f"{path}: cannot read the known findings ({getattr(exc, 'strerror', None) or exc})") from None
    if not isinstance(data, list) or not all(isinstance(f, dict) for f in data):
        raise CertifyError(f"{path}: the known findings must be a list of objects")
    return data


def waivers_for(rows: list[dict], findings: list[dict]) -> list[dict]:
    """A waiver for each failing row (``missing`` aside) that a known finding matches."""
    out = []
    for row in rows:
        if row["verdict"] not in FAILING or row["verdict"] == MISSING:
            continue
        finding = next((f for f in findings if _finding_matches(f, row)), None)
        if finding is not None:
            out.append({"case": cell_dict(cell_of(row)), "verdict": row["verdict"], "why": finding.get("why"),
                        "finding": finding})
    return out


# ----------------------------------------------------------------------------- the statement

def _one(values: Iterable, what: str) -> Any:
    distinct = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    if len(distinct) > 1:
        raise CertifyError(f"the runs disagree on {what}: {', '.join(map(repr, distinct[:3]))}; "
                           "a package certifies one torch build and one suite revision")
    return distinct[0] if distinct else None


def facts(runs: list[dict], rows: list[dict], must_pass: list[dict], waivers: list[dict], digest: str) -> dict:
    """What the statement says that the results decide (certify writes it, verify recomputes it)."""
    envs = [r["env"] for r in runs]
    planned_devices = {c["device"] for c in must_pass}
    devices: dict[str, dict] = {}
    for env in envs:
        for d in env.get("devices") or []:
            if isinstance(d, dict) and d.get("device") in planned_devices and d.get("available", True):
                devices.setdefault(d["device"], {"device": d["device"], "device_name": d.get("device_name"),
                                                 "versions": d.get("versions") or {}})
    return {
        "devices": [devices[k] for k in sorted(devices)],
        "torch": {"version": _one((e.get("torch_version") for e in envs), "the torch version"),
                  "git": _one((e.get("torch_git") for e in envs), "the torch build"),
                  "cuda": _one((e.get("cuda") for e in envs), "the CUDA runtime")},
        "driver": _one((e.get("driver") for e in envs), "the driver version"),
        "cudnn": _one((e.get("cudnn") for e in envs), "the cuDNN version"),
        "suite": {"revision": _one((e.get("suite_revision") for e in envs), "the suite revision"),
                  "commit": _one((e.get("suite_commit") for e in envs), "the suite revision"),
                  "dirty": any(e.get("suite_dirty") is not False for e in envs)},
        "hypothesis": {"profile": _one((e.get("hypothesis_profile") for e in envs), "the Hypothesis profile"),
                       "seed": _one((e.get("hypothesis_seed") for e in envs), "the Hypothesis seed")},
        "doc_version": _one((e.get("doc_version") for e in envs), "the doc version"),
        "platforms": sorted({str(e.get("platform")) for e in envs}),
        "python": sorted({str(e.get("python")) for e in envs}),
        "shards": sorted({e.get("shard") or "whole plan" for e in envs}),
        "runs": [r["run_id"] for r in runs],
        "cases": len(must_pass),
        "rows": len(rows),
        "verdicts": dict(sorted(Counter(r["verdict"] for r in rows).items())),
        "waived": len(waivers),
        "rows_digest": digest,
    }


# ----------------------------------------------------------------------------- files

def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def write_sums(pkg: Path) -> None:
    """``SHA256SUMS`` over every other file of the package (sorted, ``sha256sum`` format)."""
    files = package_files(pkg)
    text = "".join(f"{sha256_file(pkg / name)}  {name}\n" for name in files)
    (pkg / SUMS).write_text(text, encoding="utf-8")


def package_files(pkg: Path) -> list[str]:
    """Every file of a package but ``SHA256SUMS`` and its signature (paths relative to it,
    sorted); a link or anything else that is not a plain file counts too (verify refuses it)."""
    from detconf.reports.signing import SIGNATURE

    return sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*")
                  if (p.is_symlink() or not p.is_dir()) and p.relative_to(pkg).as_posix() not in (SUMS, SIGNATURE))


def _safe_name(index: int, path: Path) -> str:
    name = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in path.name) or "file"
    return f"{index + 1:02d}-{name}"


# ----------------------------------------------------------------------------- certify

def certify(paths: list[str], out: str, *, product: str, vendor: str, logs: Iterable[str] = (),
            findings_file: Path = FINDINGS_FILE, date: str | None = None, allow_plugins: Iterable[str] = (),
            declare_math_mode: bool = False, sign: str | None = None) -> Path:
    """Build a certification package from results files into the new folder ``out``.
    ``allow_plugins``: distributions whose pytest plugins the runs may load besides the known ones
    (a vendor's own backend plugin), named in the statement. ``declare_math_mode``: the runs' float32
    math modes that are not torch's defaults go into the statement (without it, verify refuses them).
    ``sign``: an OpenSSH private key that signs ``SHA256SUMS`` (:mod:`detconf.reports.signing`)."""
    for what, value in (("--product", product), ("--vendor", vendor)):
        if not value or not value.strip():
            raise CertifyError(f"certify needs {what} (the {what[2:]} being certified)")
    target = Path(out)
    if os.path.lexists(target):
        raise CertifyError(f"{out}: exists; certify writes a new package folder")
    inputs = [Path(p) for p in paths]
    log_files = [Path(p) for p in logs]
    for log in log_files:
        if not log.is_file():
            raise CertifyError(f"{log}: not a file (--log takes a log file)")
    results = load(inputs)  # validates every file (one-line ResultsError otherwise)
    runs, rows, ends = read_runs(inputs)
    for rec in runs:
        if rec.get("planned_cases") is None:
            raise CertifyError(f"run {rec['run_id']} does not list its planned cases (results written before the "
                               "list existed): run the suite again to certify")
    must_pass = must_pass_of(runs)
    # The findings recorded at the revision the runs ran (what verify checks the package against);
    # the checkout's file where that revision cannot be read (or another file was given).
    commit = next((r["env"].get("suite_commit") for r in runs if (r.get("env") or {}).get("suite_commit")), None)
    recorded = findings_at(commit) if findings_file == FINDINGS_FILE else None
    if recorded is not None:
        findings = recorded
    else:
        findings = read_findings(findings_file) if os.path.lexists(findings_file) else []
    waivers = waivers_for(rows, findings)
    allowed = sorted({a.strip() for a in allow_plugins})
    if any(not a or any(c.isspace() for c in a) for a in allowed):
        raise CertifyError("--allow-plugin takes a distribution name (e.g. mydev-detconf)")
    statement = {"format": FORMAT, "product": product.strip(), "vendor": vendor.strip(),
                 "date": date or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "allowed_plugins": allowed,
                 "math_modes": non_default_math_modes(runs) if declare_math_mode else {},
                 **facts(runs, rows, must_pass, waivers, results.digest())}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    except OSError as exc:
        raise CertifyError(f"{out}: cannot create the package folder ({exc.strerror or exc})") from None
    try:
        (tmp / "results").mkdir()
        names = []
        for i, path in enumerate(inputs):
            name = f"results/{_safe_name(i, path)}"
            shutil.copyfile(path, tmp / name)
            names.append(name)
        logs = []
        if log_files:
            (tmp / "logs").mkdir()
            for i, log in enumerate(log_files):
                shutil.copyfile(log, tmp / "logs" / _safe_name(i, log))
                logs.append(f"logs/{_safe_name(i, log)}")
        statement["results"] = names
        statement["logs"] = logs
        write_json(tmp / STATEMENT, statement)
        (tmp / MUST_PASS).write_text("".join(json.dumps(c, sort_keys=True) + "\n" for c in must_pass),
                                     encoding="utf-8")
        write_json(tmp / ENVIRONMENT, environment_of(runs, ends))
        write_json(tmp / WAIVERS, waivers)
        write_json(tmp / FINDINGS, findings)
        write_sums(tmp)
        if sign is not None:
            from detconf.reports.signing import SigningError, sign as sign_sums

            try:
                sign_sums(tmp / SUMS, Path(sign))
            except (SigningError, OSError, subprocess.SubprocessError) as exc:
                raise CertifyError(f"certify --sign: {exc}") from None
        os.chmod(tmp, 0o755)
        os.rename(tmp, target)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CertifyError(f"{out}: cannot write the package ({exc.strerror or exc})") from None
    except BaseException:  # an interrupt (SIGINT, SIGTERM): no half-written package is left
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def non_default_math_modes(runs: list[dict]) -> dict[str, dict[str, str]]:
    """``{device: {family: precision}}``: the float32 math modes the runs recorded at their start
    that differ from torch's defaults (:data:`detconf.vocabulary.DEFAULT_MATH_MODE`)."""
    out: dict[str, dict[str, str]] = {}
    for run in runs:
        recorded = (run.get("env") or {}).get("math_mode")
        for device, default in DEFAULT_MATH_MODE.items():
            mode = recorded.get(device) if isinstance(recorded, dict) else None
            if not isinstance(mode, dict):
                continue
            for family, value in default.items():
                if family in mode and mode[family] != value:
                    out.setdefault(device, {})[family] = str(mode[family])
    return {d: dict(sorted(f.items())) for d, f in sorted(out.items())}


def environment_of(runs: list[dict], ends: dict[str, dict]) -> dict:
    return {"runs": [{"run_id": r["run_id"], "started": r.get("started"), "env": r["env"],
                      "end": {k: v for k, v in ends[r["run_id"]].items() if k not in ("record", "schema")}
                      if r["run_id"] in ends else None} for r in runs]}
