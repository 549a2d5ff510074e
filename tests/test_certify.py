"""Certification packages: ``reports certify`` builds one from a real run, ``reports verify``
accepts it, and refuses it -- one line per problem, exit 1 -- after each way of tampering."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from detconf.reports.certify import SUMS, write_sums
from detconf.reports.verify import verify
from detconf.revision import plan_digest
from tests.environments import allow_this_machines_plugins, as_a_whole_plan_run
from tests import warm

ROOT = Path(__file__).resolve().parents[1]
#: A small real run: the flag API's and the notes' debug-mode entries on CPU; one of them is a
#: recorded known finding on torch >= 2.11 (violated in both modes), so the package has waivers.
#: The notes' cuDNN entries are about CUDA: on the CPU they are skipped as not applicable.
RUN = ["--source", "flag-api", "--source", "repro-notes", "--device", "cpu", "--hypothesis-profile", "ci",
       "-k", "debug_mode or cudnn", "-n", "0", "--no-report-build"]


#: The entry whose recorded known finding gives the package its waivers.
WAIVED_ENTRY = "set_deterministic_debug_mode->inductor.config.deterministic"


def _recorded_findings_of_the_run() -> list:
    """The recorded known findings that cover the waived entry on the installed torch (the run's
    rows carry ``torch.__version__``, local label and all: ``2.5.1+cu124`` is release 2.5.1)."""
    import torch

    from detconf.conformance.findings import load_findings
    from detconf.findings_rule import torch_in

    return [f for f in load_findings() if f.source == "repro-notes" and f.entry_id == WAIVED_ENTRY
            and torch_in(torch.__version__, f.torch)]


@pytest.fixture
def waivable():
    """Skip, saying why, where no recorded finding covers a row of this torch's run: the package
    then has no waiver to tamper with (the finding holds for torch >= 2.11; before 2.10 the docs
    make no Inductor promise and the entry's rows are skipped as not applicable)."""
    if not _recorded_findings_of_the_run():
        import torch

        pytest.skip(f"torch {torch.__version__}: no recorded known finding covers {WAIVED_ENTRY} on this "
                    "release, so the certified run has no failing row and the package no waiver")


def _reports(*args: str) -> subprocess.CompletedProcess:
    return warm.reports(*args, timeout=300)


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A package certified from a real run of this checkout. The run records whether the
    working tree had changes; a tree under development has them, so the record is set to
    what a clean checkout of the same commit records (the one field changed)."""
    folder = tmp_path_factory.mktemp("certify")
    results = folder / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", *RUN,
                          "--results", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:]
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert lines[0]["env"]["suite_commit"], "the run records its git commit"
    # A small run stands for a whole-plan run of the default sources (certification refuses a
    # selection: test_hostile_round3.py::test_C_certify_ksubset): the fields such a run records.
    as_a_whole_plan_run(lines)
    results.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    (folder / "pytest.log").write_text(out.stdout)
    made = _reports("certify", str(results), "--out", str(folder / "pkg"), "--product", "x86-64 CPU",
                    "--vendor", "Example Inc.", "--log", str(folder / "pytest.log"),
                    *allow_this_machines_plugins(lines[0]))
    assert made.returncode == 0, made.stdout + made.stderr
    assert "verified:" in made.stdout
    return folder / "pkg"


@pytest.fixture
def pkg(package, tmp_path) -> Path:
    copy = tmp_path / "pkg"
    shutil.copytree(package, copy)
    return copy


def _refused(pkg: Path, needle: str) -> list[str]:
    code, lines = verify(str(pkg))
    assert code == 1, lines
    assert lines[-1].startswith("REFUSED:")
    assert all("\n" not in line for line in lines)
    hits = [line for line in lines if needle in line]
    assert hits, f"no line says {needle!r}: {lines}"
    return lines


def _rewrite_results(pkg: Path, change) -> None:
    path = next((pkg / "results").iterdir())
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records = change(records)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def test_the_package_holds_what_a_certification_needs(package):
    names = sorted(p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file())
    assert names == sorted(["SHA256SUMS", "environment.json", "known-findings.json", "must-pass.jsonl",
                            "statement.json", "waivers.json", "results/01-results.jsonl", "logs/01-pytest.log"])
    statement = json.loads((package / "statement.json").read_text())
    assert statement["product"] == "x86-64 CPU" and statement["vendor"] == "Example Inc."
    assert statement["devices"][0]["device"] == "cpu" and statement["devices"][0]["device_name"]
    assert statement["suite"]["dirty"] is False and len(statement["suite"]["commit"]) == 40
    assert statement["hypothesis"]["profile"] == "ci" and statement["torch"]["version"]
    must_pass = (package / "must-pass.jsonl").read_text().splitlines()
    assert len(must_pass) == statement["cases"] == statement["rows"] == 24
    waivers = json.loads((package / "waivers.json").read_text())
    findings = _recorded_findings_of_the_run()
    assert statement["waived"] == len(waivers) == (2 if findings else 0)
    if findings:
        assert {w["case"]["mode"] for w in waivers} == {"error", "warn_only"}
        assert all(w["verdict"] == "violated" and w["why"] == w["finding"]["why"] for w in waivers)
        assert {w["why"] for w in waivers} <= {f.why for f in findings}
    else:  # no finding: the entry's rows passed as they may (not applicable, unsupported, or conforms)
        rows = [json.loads(line) for line in next((package / "results").iterdir()).read_text().splitlines()]
        inductor = [r for r in rows if r.get("record") == "result" and r["entry_id"] == WAIVED_ENTRY]
        assert len(inductor) == 2 and all(r["verdict"] in ("skipped", "unsupported", "conforms") for r in inductor)
    sums = (package / SUMS).read_text().splitlines()
    assert len(sums) == len(names) - 1


def test_a_good_package_is_accepted(pkg):
    code, lines = verify(str(pkg))
    assert code == 0, lines
    assert lines[-1].startswith("verified:") and "24 must-pass cases" in lines[-1]
    out = _reports("verify", str(pkg))
    assert out.returncode == 0 and "verified:" in out.stdout


def test_a_changed_file_is_refused(pkg):
    path = pkg / "logs" / "01-pytest.log"
    path.write_text(path.read_text() + "edited\n")
    _refused(pkg, "logs/01-pytest.log: digest does not match SHA256SUMS")
    (pkg / "extra.txt").write_text("x")
    _refused(pkg, "extra.txt: not listed in SHA256SUMS")


def test_a_missing_row_is_refused(pkg):
    _rewrite_results(pkg, lambda rs: [r for r in rs if not (r["record"] == "result" and r["mode"] == "error"
                                                           and r["entry_id"] == rs[1]["entry_id"])])
    write_sums(pkg)
    _refused(pkg, "has no row")


def test_a_duplicate_row_is_refused(pkg):
    _rewrite_results(pkg, lambda rs: rs[:2] + [rs[1]] + rs[2:])
    write_sums(pkg)
    _refused(pkg, "has 2 rows")


@pytest.mark.parametrize("verdict,needle", [
    ("nondeterministic", "verdict nondeterministic is not allowed (failing, not waived"),
    ("skipped", "verdict skipped is not allowed"),
])
def test_a_disallowed_verdict_is_refused(pkg, verdict, needle):
    def change(rs):
        row = next(r for r in rs if r["record"] == "result" and r["verdict"] == "conforms")
        row["verdict"] = verdict
        return rs
    _rewrite_results(pkg, change)
    write_sums(pkg)
    _refused(pkg, needle)


def test_a_promise_about_another_device_is_not_applicable(pkg):
    rows = [json.loads(line) for line in next((pkg / "results").iterdir()).read_text().splitlines()]
    skipped = [r for r in rows if r["record"] == "result" and r["verdict"] == "skipped"]
    # The cuDNN entries, about CUDA (4 rows); on a torch before 2.10 the Inductor entry's rows too,
    # skipped for another reason: the docs of this torch make no such promise (detail.needs_torch).
    other_device = [r for r in skipped if "needs_device" in r["detail"]]
    assert len(other_device) == 4 and all(r["detail"]["needs_device"] == "cuda" for r in other_device)
    assert all(r["entry_id"] == WAIVED_ENTRY and r["detail"]["needs_torch"] for r in skipped if r not in other_device)
    assert verify(str(pkg))[0] == 0  # accepted with them


@pytest.mark.parametrize("needs", [None, "cpu"])  # no word why, or the certified device itself was absent
def test_a_skip_that_is_not_about_another_device_is_refused(pkg, needs):
    def change(rs):
        for row in rs:
            if row["record"] == "result" and row["verdict"] == "skipped":
                row["detail"]["needs_device"] = needs
        return rs
    _rewrite_results(pkg, change)
    write_sums(pkg)
    _refused(pkg, "verdict skipped is not allowed")


@pytest.mark.parametrize("needs", ["npu", "cuda"])
def test_a_skip_the_planned_entry_does_not_back_is_refused(pkg, needs):
    """C17: a conforming row turned into a skip 'about another device' by editing the row alone:
    the plan (written before any case ran) does not say its entry is about that device."""
    def change(rs):
        row = next(r for r in rs if r["record"] == "result" and r["verdict"] == "conforms")
        row["verdict"], row["detail"] = "skipped", {"reason": "needs another device", "needs_device": needs}
        return rs
    _rewrite_results(pkg, change)
    write_sums(pkg)
    _refused(pkg, "verdict skipped is not allowed")


def test_the_plan_names_the_device_of_the_entries_about_one(package):
    run = json.loads(next((package / "results").iterdir()).read_text().splitlines()[0])
    about = {e["entry_id"]: e["needs_device"] for e in run["planned_entries"] if e["needs_device"]}
    assert about and set(about.values()) == {"cuda"} and all(k.startswith("cudnn.") for k in about), about


@pytest.mark.parametrize(("needs_torch", "accepted"), [("<2.0", True), (">=99", True), (">=2.0", False), ("2.0", False)])
def test_a_promise_about_other_torch_releases_is_not_applicable(pkg, needs_torch, accepted):
    """A skip saying the entry's torch range (``detail.needs_torch``) leaves out the torch under
    test is accepted; a range that holds it (or is no range) is not: the case should have run."""
    def change(rs):
        skipped = set()
        for row in rs:
            if row["record"] == "result" and row["verdict"] == "skipped":
                row["detail"] = {"reason": "not applicable: the promise is made by the docs of torch "
                                           f"{needs_torch} only", "needs_torch": needs_torch}
                skipped.add((row["source"], row["entry_id"]))
        for entry in rs[0]["planned_entries"]:  # the entries' own ranges say the same
            if (entry["source"], entry["entry_id"]) in skipped:
                entry["torch"] = needs_torch
        rs[-1]["suite_plan"]["digest"] = plan_digest(rs[0])  # as the suite's own plan of such entries says
        return rs
    _rewrite_results(pkg, change)
    if accepted:  # the statement names the rows' digest, environment.json the end record: a resubmission says the new ones
        from detconf.reports.certify import environment_of, read_runs
        from detconf.reports.load import load

        paths = sorted((pkg / "results").iterdir())
        statement = json.loads((pkg / "statement.json").read_text())
        statement["rows_digest"] = load(paths).digest()
        (pkg / "statement.json").write_text(json.dumps(statement, indent=2, sort_keys=True) + "\n")
        runs, _, ends = read_runs(paths)
        (pkg / "environment.json").write_text(json.dumps(environment_of(runs, ends), indent=2, sort_keys=True) + "\n")
    write_sums(pkg)
    if accepted:
        code, lines = verify(str(pkg))
        assert code == 0, lines
    else:
        _refused(pkg, "verdict skipped is not allowed")


def test_unsupported_needs_its_reason(pkg):
    def change(rs):
        row = next(r for r in rs if r["record"] == "result" and r["verdict"] == "conforms")
        row["verdict"], row["detail"] = "unsupported", {}
        return rs
    _rewrite_results(pkg, change)
    write_sums(pkg)
    _refused(pkg, "unsupported without a reason")


@pytest.mark.parametrize("change,needle", [
    ({"suite_dirty": True}, "the suite checkout had local changes"),
    ({"suite_dirty": None}, "is not recorded as clean"),
    ({"suite_commit": None}, "the suite revision is unknown"),
    ({"suite_commit": "0" * 40}, "is not a commit of the repository"),
])
def test_a_dirty_or_unknown_revision_is_refused(pkg, change, needle):
    def edit(rs):
        rs[0]["env"].update(change)
        return rs
    _rewrite_results(pkg, edit)
    write_sums(pkg)
    _refused(pkg, needle)


def test_the_run_record_names_what_the_run_loaded(package):
    run = json.loads(next((package / "results").iterdir()).read_text().splitlines()[0])
    env = run["env"]
    assert env["hypothesis_settings"] == {"max_examples": 6, "derandomize": True, "database": None, "deadline": None,
                                          "print_blob": True}
    assert env["complements"] is True
    assert env["conftest_files"][0]["path"] == "conftest.py" and len(env["conftest_files"][0]["sha256"]) == 64
    modules = {p["module"]: p for p in env["plugins"]}
    assert modules["xdist.plugin"]["distribution"] == "pytest-xdist" and modules["xdist.plugin"]["version"]
    assert modules["_hypothesis_pytestplugin"]["distribution"] == "hypothesis"


_FOREIGN_PLUGIN = {"module": "evil_plugin", "name": "evil_plugin", "distribution": "evil-dist", "version": "6.6"}


@pytest.mark.parametrize("change,needle", [
    ({"hypothesis_profile": "dev"}, "Hypothesis profile 'dev' draws random examples"),
    ({"hypothesis_profile": "mine"}, "Hypothesis profile 'mine' is not one of the suite's"),
    ({"hypothesis_settings": {"max_examples": 1, "derandomize": True, "database": None, "deadline": None,
                              "print_blob": True}}, "not profile 'ci''s: max_examples 1 (defined 6)"),
    ({"doc_version": "1.8.0"}, "against the docs of '1.8.0' (--doc-version)"),  # a release no tested torch is
    ({"complements": False}, "left out the condition complements"),
    ({"conftest_files": [{"path": "conftest.py", "sha256": "0" * 64},
                         {"path": "conformance/conftest.py", "sha256": "1" * 64}]},
     "loaded a conftest.py that is not the suite's: 'conformance/conftest.py'"),
    ({"plugins": [_FOREIGN_PLUGIN]}, "loaded the pytest plugin 'evil_plugin' ('evil-dist' 6.6), which the statement"),
    ({"plugins": None}, "does not record what it loaded (plugins"),
])
def test_a_run_that_loaded_or_chose_what_the_suite_does_not_define_is_refused(pkg, change, needle):
    def edit(rs):
        for key, value in change.items():
            if value is None:
                del rs[0]["env"][key]
            else:
                rs[0]["env"][key] = value
        return rs
    _rewrite_results(pkg, edit)
    write_sums(pkg)
    _refused(pkg, needle)


def test_a_plugin_the_statement_allows_is_accepted_and_named(pkg):
    def edit(rs):
        rs[0]["env"]["plugins"] = rs[0]["env"]["plugins"] + [_FOREIGN_PLUGIN]
        return rs
    _rewrite_results(pkg, edit)
    environment = json.loads((pkg / "environment.json").read_text())
    environment["runs"][0]["env"]["plugins"].append(_FOREIGN_PLUGIN)
    (pkg / "environment.json").write_text(json.dumps(environment))
    statement = json.loads((pkg / "statement.json").read_text())
    statement["allowed_plugins"] = sorted(statement["allowed_plugins"] + ["evil-dist"])
    (pkg / "statement.json").write_text(json.dumps(statement))
    write_sums(pkg)
    code, lines = verify(str(pkg))
    assert code == 0, lines


def _bf16_matmuls(rs):
    rs[0]["env"]["math_mode"]["cpu"]["matmul"] = "bf16"  # torch.set_float32_matmul_precision("medium")
    rs[0]["env"]["math_mode"]["cpu"]["settings"]["float32_matmul_precision"] = "medium"
    return rs


def test_a_run_under_another_math_mode_is_refused_unless_the_statement_declares_it(pkg, tmp_path):
    """C02: bf16 matmuls certify like IEEE ones only when the statement says so."""
    _rewrite_results(pkg, _bf16_matmuls)
    write_sums(pkg)
    _refused(pkg, "float32 math mode is not torch's default (cpu matmul bf16) and the statement does not declare it")
    results = next((pkg / "results").iterdir())
    run = json.loads(results.read_text().splitlines()[0])
    made = _reports("certify", str(results), "--out", str(tmp_path / "declared"), "--product", "x86-64 CPU",
                    "--vendor", "Example Inc.", "--declare-math-mode", *allow_this_machines_plugins(run))
    assert made.returncode == 0, made.stdout + made.stderr
    statement = json.loads((tmp_path / "declared" / "statement.json").read_text())
    assert statement["math_modes"] == {"cpu": {"matmul": "bf16"}}


def test_a_declared_math_mode_the_runs_did_not_have_is_refused(pkg):
    statement = json.loads((pkg / "statement.json").read_text())
    statement["math_modes"] = {"cpu": {"matmul": "bf16"}}
    (pkg / "statement.json").write_text(json.dumps(statement))
    write_sums(pkg)
    _refused(pkg, "'math_modes' declares")


def test_a_row_after_the_end_record_is_refused(pkg):
    def edit(rs):
        row = next(r for r in rs if r.get("record") == "result")
        return rs + [dict(row)]
    _rewrite_results(pkg, edit)
    write_sums(pkg)
    _refused(pkg, "1 row(s) after its end record")


def _run_with_plugin(tmp_path: Path, name: str, code: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """A suite run with plugin module ``name`` (source ``code``) given through ``PYTEST_ADDOPTS``:
    the command line does not show it."""
    (tmp_path / f"{name}.py").write_text(code)
    results = tmp_path / "r.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTEST_ADDOPTS=f"-p {name}", PYTHONPATH=str(tmp_path))
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "--device",
                          "cpu", "-n", "0", "--no-report-build", *args, "--results", str(results)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return out, results


def test_a_plugin_given_through_pytest_addopts_is_in_the_run_record(tmp_path):
    _, results = _run_with_plugin(tmp_path, "sneaky_plugin", "def pytest_configure(config):\n    pass\n",
                                  "--source", "flag-api", "-k", "are_deterministic")
    run = json.loads(results.read_text().splitlines()[0])
    assert {"module": "sneaky_plugin", "name": "sneaky_plugin", "distribution": None, "version": None} in run["env"]["plugins"]
    assert "sneaky_plugin" not in " ".join(run["env"]["argv"])  # the command line does not show it: the record does


def test_a_conftest_file_under_the_suite_is_in_the_run_record(tmp_path, monkeypatch):
    from detconf.plugin import environment

    (tmp_path / "conftest.py").write_text("# the suite's\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conformance" / "deep").mkdir(parents=True)
    (tmp_path / "conformance" / "deep" / "conftest.py").write_text("import hypothesis\n")
    monkeypatch.setattr(environment, "ROOT", tmp_path)
    assert [f["path"] for f in environment.conftest_files(None)] == ["conftest.py", "conformance/deep/conftest.py"]


@pytest.mark.parametrize("field", ["torch_git", "platform", "hypothesis_profile", "devices"])
def test_an_incomplete_environment_is_refused(pkg, field):
    def edit(rs):
        del rs[0]["env"][field]
        return rs
    _rewrite_results(pkg, edit)
    write_sums(pkg)
    _refused(pkg, f"the environment lacks {field}")


def test_an_environment_file_that_is_not_the_runs_is_refused(pkg):
    env = json.loads((pkg / "environment.json").read_text())
    env["runs"][0]["env"]["driver"] = "999.99"
    (pkg / "environment.json").write_text(json.dumps(env))
    write_sums(pkg)
    _refused(pkg, "environment.json does not match the run records")


@pytest.mark.parametrize("edit,needle", [
    (lambda ws: ws[0]["finding"].update(why="a reason nobody recorded"), "matches no recorded known finding"),
    (lambda ws: ws[0]["finding"].update(torch="<2.0"), "matches no recorded known finding"),
    (lambda ws: ws.append(dict(ws[0], case=dict(ws[0]["case"], entry_id="get_deterministic_debug_mode"))),
     "matches no recorded known finding"),
    (lambda ws: ws[0].update(why="we say so"), "its reason is not the finding's"),
])
def test_a_waiver_without_a_finding_is_refused(waivable, pkg, edit, needle):
    waivers = json.loads((pkg / "waivers.json").read_text())
    edit(waivers)
    (pkg / "waivers.json").write_text(json.dumps(waivers))
    write_sums(pkg)
    _refused(pkg, needle)


def test_a_failing_row_without_its_waiver_is_refused(waivable, pkg):
    (pkg / "waivers.json").write_text("[]")
    write_sums(pkg)
    _refused(pkg, "verdict violated is not allowed (failing, not waived by a recorded finding)")


@pytest.mark.parametrize("edit,needle", [
    (lambda s: s["torch"].update(version="9.9.9"), "'torch' says"),
    (lambda s: s["verdicts"].update(conforms=20), "'verdicts' says"),
    (lambda s: s["devices"][0].update(device_name="a faster chip"), "'devices' says"),
    (lambda s: s.update(rows_digest="0" * 64), "'rows_digest' says"),
    (lambda s: s.update(product=""), "'product' is missing or empty"),
])
def test_a_statement_that_disagrees_with_the_results_is_refused(pkg, edit, needle):
    statement = json.loads((pkg / "statement.json").read_text())
    edit(statement)
    (pkg / "statement.json").write_text(json.dumps(statement))
    write_sums(pkg)
    lines = _refused(pkg, needle)
    assert len(lines) == 2, lines  # that one problem, and the verdict


def test_a_must_pass_list_that_is_not_the_plan_is_refused(pkg):
    path = pkg / "must-pass.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[1:]))
    write_sums(pkg)
    _refused(pkg, "must-pass.jsonl does not list the planned cases of the runs (23 listed, 24 planned)")


def test_bad_input_is_one_line_and_exit_2(tmp_path, package):
    out = _reports("verify", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a package folder" in out.stderr
    results = next((package / "results").iterdir())
    for args, needle in [
        (["certify", str(results), "--out", str(package), "--product", "p", "--vendor", "v"], "exists"),
        (["certify", str(results), "--out", str(tmp_path / "p"), "--product", " ", "--vendor", "v"], "needs --product"),
        (["certify", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "p"), "--product", "p", "--vendor", "v"],
         "none.jsonl"),
        (["certify", str(results), "--out", str(tmp_path / "p"), "--product", "p", "--vendor", "v",
          "--log", str(tmp_path)], "not a file"),
    ]:
        out = _reports(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.count("\n") == 1 and needle in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "p").exists()


def test_certify_needs_runs_that_list_their_cases(tmp_path, package):
    results = next((package / "results").iterdir())
    records = [json.loads(line) for line in results.read_text().splitlines()]
    for key in ("planned_cases", "planned_entries"):
        del records[0][key]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = _reports("certify", str(old), "--out", str(tmp_path / "p"), "--product", "p", "--vendor", "v")
    assert out.returncode == 2 and "does not list its planned cases" in out.stderr


def test_a_package_of_some_shards_only_is_refused(pkg):
    def edit(rs):
        rs[0]["env"]["shard"] = "1/2"
        return rs
    _rewrite_results(pkg, edit)
    write_sums(pkg)
    _refused(pkg, "the runs cover 1 of 2 shards: part(s) 2 missing")


def test_outside_a_repository_the_revision_is_not_looked_up_and_it_says_so(pkg, tmp_path, monkeypatch):
    import detconf.reports.verify as verify_mod

    monkeypatch.setattr(verify_mod, "ROOT", tmp_path)  # not a git repository
    code, lines = verify(str(pkg))
    assert code == 0, lines
    assert any(line.startswith("note:") and "is not a git repository" in line for line in lines)
    # Waivers (where this torch's run has any) are checked against the checkout's findings file.
    has_waivers = bool(json.loads((pkg / "waivers.json").read_text()))
    assert has_waivers == bool(_recorded_findings_of_the_run())
    assert any(line.startswith("note: waivers checked against") for line in lines) == has_waivers


# ----------------------------------------------------------------------------- signed packages

def _key(folder: Path, principal: str) -> tuple[Path, str]:
    """A fresh OpenSSH ed25519 key (no passphrase) and its allowed-signers line."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH) is not installed")
    key = folder / principal.split("@")[0]
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", principal, "-f", str(key)], check=True,
                   capture_output=True, timeout=60)
    return key, f"{principal} {key.with_suffix('.pub').read_text().split()[0]} " \
                f"{key.with_suffix('.pub').read_text().split()[1]}\n"


@pytest.fixture(scope="module")
def signed(package, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("signed")
    key, line = _key(folder, "vendor@example.com")
    other, other_line = _key(folder, "mallory@example.com")
    (folder / "allowed_signers").write_text(line)
    results = next((package / "results").iterdir())
    run = json.loads(results.read_text().splitlines()[0])
    made = _reports("certify", str(results), "--out", str(folder / "pkg"), "--product", "x86-64 CPU", "--vendor",
                    "Example Inc.", "--sign", str(key), "--allowed-signers", str(folder / "allowed_signers"),
                    *allow_this_machines_plugins(run))
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stdout.splitlines()[-1].endswith("; signed by vendor@example.com"), made.stdout
    return {"pkg": folder / "pkg", "allowed": folder / "allowed_signers", "other": other, "results": results,
            "run": run, "folder": folder}


def test_a_signed_package_says_who_signed_it(signed, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(signed["pkg"], pkg)
    code, lines = verify(str(pkg), allowed_signers=str(signed["allowed"]))
    assert code == 0 and lines[-1].endswith("signed by vendor@example.com"), lines
    code, lines = verify(str(pkg))  # no signers given: accepted, and the signature said unchecked
    assert code == 0 and any("SHA256SUMS.sig is there but was not checked" in line for line in lines), lines


def test_a_package_changed_after_signing_is_refused_even_with_consistent_digests(signed, tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(signed["pkg"], pkg)
    statement = json.loads((pkg / "statement.json").read_text())
    statement["vendor"] = "Someone Else"
    (pkg / "statement.json").write_text(json.dumps(statement))
    write_sums(pkg)  # the forger recomputes the digests; the signature is over the old ones
    assert verify(str(pkg))[0] == 0  # consistency alone cannot tell
    code, lines = verify(str(pkg), allowed_signers=str(signed["allowed"]))
    assert code == 1 and any(line.startswith("SHA256SUMS.sig: the signature does not match") for line in lines), lines


def test_a_key_the_allowed_signers_do_not_name_is_refused(signed, tmp_path):
    made = _reports("certify", str(signed["results"]), "--out", str(tmp_path / "pkg"), "--product", "X", "--vendor",
                    "Y", "--sign", str(signed["other"]), *allow_this_machines_plugins(signed["run"]))
    assert made.returncode == 0, made.stdout + made.stderr
    code, lines = verify(str(tmp_path / "pkg"), allowed_signers=str(signed["allowed"]))
    assert code == 1 and any("the key that signed it is not in" in line for line in lines), lines


def test_an_unsigned_package_is_refused_when_signers_are_asked_for(pkg, signed):
    code, lines = verify(str(pkg), allowed_signers=str(signed["allowed"]))
    assert code == 1 and any("the package is not signed (SHA256SUMS.sig is missing)" in line for line in lines), lines


def test_a_key_that_cannot_sign_is_one_line_and_no_package(signed, tmp_path):
    (tmp_path / "notakey").write_text("hello\n")
    made = _reports("certify", str(signed["results"]), "--out", str(tmp_path / "pkg"), "--product", "X", "--vendor",
                    "Y", "--sign", str(tmp_path / "notakey"))
    assert made.returncode == 2 and len(made.stderr.strip().splitlines()) == 1, made.stderr
    assert "certify --sign:" in made.stderr and not (tmp_path / "pkg").exists()


def _edit_end(pkg: Path, change) -> None:
    def edit(rs):
        change(rs[-1])
        return rs
    _rewrite_results(pkg, edit)
    write_sums(pkg)


@pytest.mark.parametrize("change,needle", [
    (lambda end: end.pop("suite_plan"), "does not give the suite's own plan"),
    (lambda end: end.update(suite_plan={"error": "child process exited with 1"}), "could not be computed"),
    (lambda end: end["suite_plan"].update(cases=end["suite_plan"]["cases"] + 30, digest="0" * 64),
     "its plan is not the suite's own plan for its options"),
])
def test_a_run_whose_plan_is_not_the_suites_own_is_refused(pkg, change, needle):
    _edit_end(pkg, change)
    _refused(pkg, needle)


def test_a_changed_expected_outcome_in_the_run_record_departs_from_the_suites_own_plan(pkg):
    def edit(rs):
        case = rs[0]["planned_cases"][0]
        case["expected"] = "raises" if case["expected"] != "raises" else "deterministic"
        return rs
    _rewrite_results(pkg, edit)
    write_sums(pkg)
    _refused(pkg, "its plan is not the suite's own plan for its options")


def test_the_fresh_process_plans_what_an_honest_run_planned(tmp_path):
    """No false refusal: the suite's own plan, computed in a fresh process, has the digest of
    the plan an untouched run lists (here a run of one source, given the same options)."""
    from detconf.child import run_in_child
    from detconf.conformance.planned import SUITE_PLAN_TARGET

    results = tmp_path / "r.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "--source",
                          "flag-api", "--device", "cpu", "--mode", "error", "-n", "0", "--no-report-build",
                          "--results", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    run = json.loads(results.read_text().splitlines()[0])
    fresh = run_in_child(SUITE_PLAN_TARGET, {"sources": ["flag-api"], "modes": ["error"], "compilers": ["eager"],
                                             "devices": ["cpu"], "doc_version": None, "complements": True,
                                             "shard": None}, timeout=300)
    assert fresh == {"cases": run["whole_plan"], "digest": plan_digest(run)}
    other = run_in_child(SUITE_PLAN_TARGET, {"sources": ["flag-api"], "modes": ["error", "off"], "compilers": ["eager"],
                                             "devices": ["cpu"], "doc_version": None, "complements": True,
                                             "shard": None}, timeout=300)
    assert other["digest"] != fresh["digest"] and other["cases"] > fresh["cases"]


def test_a_plugin_that_drops_cases_from_the_plan_is_caught_by_the_suites_own_plan(tmp_path):
    """The hostile input: something the run loads (here a plugin through PYTEST_ADDOPTS; an
    untracked conformance/conftest.py acts the same) filters the catalog, so the run record's
    whole plan is the filtered one. The end record carries the plan a fresh process computes
    for the same options; the run warns, and a certification refuses it."""
    from detconf.reports.certify import read_runs
    from detconf.reports.verify import _Check as Check

    out, results = _run_with_plugin(tmp_path, "dropper", (
        "import detconf.conformance.catalog as catalog\n"
        "_load = catalog.load_catalog\n"
        "def load_catalog(*args, **kwargs):\n"
        "    return [e for e in _load(*args, **kwargs) if e.source == 'flag-api'][:2]\n"
        "catalog.load_catalog = load_catalog\n"), "--mode", "error", "--mode", "warn_only")
    runs, _, ends = read_runs([results])
    plan = ends[runs[0]["run_id"]]["suite_plan"]
    assert plan["same"] is False and plan["cases"] > 4 * runs[0]["whole_plan"], plan
    assert "a conftest.py or pytest plugin changed the plan" in out.stdout
    check = Check(tmp_path)
    check.own_plan(runs, ends)
    assert any("its plan is not the suite's own plan for its options" in p for p in check.problems), check.problems
    # The same check passes the record once its plan is the suite's own (the planted fault is what it catches).
    ends[runs[0]["run_id"]]["suite_plan"]["digest"] = plan_digest(runs[0])
    clean = Check(tmp_path)
    clean.own_plan(runs, ends)
    assert clean.problems == []
