"""``python -m detconf.reports upstream``: a failing or waived cell as a script that imports only
torch, and an issue text.

The end-to-end test runs the suite on the cells of every known finding recorded for the CPU and
the installed torch, writes their scripts, and runs each isolated (``python3 -I``, from an empty
folder, so detconf cannot be imported; forked from an ``-I`` interpreter that imported only the
torch modules the script imports itself, see ``_run_script``): the script's own verdict must be
the finding's. The planted rows show that check failing where the script sees something else.
"""
from __future__ import annotations

import ast
import copy
import functools
import json
import math
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from detconf.conformance.findings import Finding, load_findings
from detconf.engine import runner, strategies
from detconf.findings_rule import torch_in
from detconf.reports import upstream
from tests import warm

ROOT = Path(__file__).resolve().parents[1]


def _run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return warm.reports("upstream", *args, cwd=cwd, timeout=300)


def _run_script(path: Path, cwd: Path) -> dict:
    """Run ``path`` isolated (no detconf, no PYTHONPATH, no user site) and return its RESULT.

    It is forked from an ``-I`` interpreter that imported only the torch modules the script
    imports itself whatever it does (``tests/warm.py``): those of its opening imports, and where it
    compiles those ``torch.compile`` imports (Dynamo and Inductor's configuration, and Inductor's
    compiler for that backend)."""
    return _result(_run_isolated(path, cwd))


def _run_isolated(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``python -I path`` as :func:`_run_script` runs it; it must exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    # Inductor compiles in the script's own process: no pool of compile workers, each importing
    # torch, beside the two scripts that run at once (the compiled code is the same).
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    proc = warm.run([sys.executable, "-I", str(path)], cwd=cwd, env=env, capture_output=True, text=True,
                    timeout=600, imports=_script_imports(path.read_text(encoding="utf-8")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _result(proc: subprocess.CompletedProcess) -> dict:
    """The script's RESULT line."""
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stdout[-2000:]
    return json.loads(line[-1][len("RESULT "):])


@functools.cache
def _inductor_config_on_mode_change() -> bool:
    """Whether this torch's ``use_deterministic_algorithms`` imports Inductor's configuration (it
    sets Inductor's ``deterministic`` too), read from its source: 2.13's does, 2.5.1's does not."""
    import inspect

    try:
        return "import torch._inductor.config" in inspect.getsource(torch.use_deterministic_algorithms)
    except (OSError, TypeError):
        return False


def _opening_imports(body: list) -> list[str]:
    """The modules the import statements at the start of ``body`` name (after a docstring)."""
    names: list[str] = []
    for k, node in enumerate(body):
        if k == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        else:
            break
    return names


def _main_runs(tree: ast.Module) -> ast.FunctionDef | None:
    """The module's ``main`` where its last statement is ``if __name__ == '__main__': main()``."""
    last = tree.body[-1] if tree.body else None
    runs = (isinstance(last, ast.If) and ast.unparse(last.test).replace('"', "'") == "__name__ == '__main__'"
            and [ast.unparse(n) for n in last.body] == ["main()"])
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"), None) if runs else None


#: ``ast.parse`` from two threads at once is not safe on CPython 3.11: where a garbage collection
#: runs Python code (a ``__del__``) while one thread builds its tree, the other's parse moves the
#: interpreter's shared AST depth counter and one of them fails with ``SystemError: AST
#: constructor recursion depth mismatch`` (seen in this module: two scripts started at once by
#: the pool below). The scripts' imports are read one at a time.
_PARSING = threading.Lock()


def _script_imports(text: str) -> tuple[str, ...]:
    """The torch modules a script imports whatever it does: those its opening import statements
    name, and those of its ``main`` where the script ends by calling it; then, where its
    ``COMPILE`` names a backend, what ``torch.compile`` imports for it, or where it sets the mode
    (every run does) and this torch's ``use_deterministic_algorithms`` imports Inductor's
    configuration, that. Inductor's configuration comes after Dynamo, which it imports: a script
    compiled with ``aot_eager``, an eager one and one that imports the configuration itself are
    forked from the same server."""
    with _PARSING:
        tree = ast.parse(text)
    main = _main_runs(tree)
    names = _opening_imports(tree.body) + (_opening_imports(main.body) if main is not None else [])
    names = [n for n in names if n.split(".")[0] == "torch"]
    backend = re.search(r"^COMPILE = '(\w+)'", text, re.M)
    if backend or ("torch.use_deterministic_algorithms(" in text and _inductor_config_on_mode_change()):
        names += ["torch._dynamo", "torch._inductor.config"]
    if "torch._inductor.config" in names and "torch._dynamo" not in names[:names.index("torch._inductor.config")]:
        names.insert(names.index("torch._inductor.config"), "torch._dynamo")
    if backend and backend.group(1) == "inductor":
        names += ["torch._inductor.compile_fx"]
    return tuple(dict.fromkeys(names))


def test_a_script_names_the_torch_modules_it_imports_first():
    text = '"""doc"""\nimport json\nimport torch\nimport torch.nn.functional as F\nfrom torch.testing._internal.x import y\n'
    assert _script_imports(text + "x = 1\nimport torch._dynamo\n") == ("torch", "torch.nn.functional",
                                                                       "torch.testing._internal.x")
    assert _script_imports(text + "COMPILE = 'aot_eager'\n")[-2:] == ("torch._dynamo", "torch._inductor.config")
    assert _script_imports(text + "COMPILE = 'inductor'\n")[-1] == "torch._inductor.compile_fx"
    assert _script_imports(text + "COMPILE = None\n")[-1] == "torch.testing._internal.x"
    assert _script_imports('import json\n') == ()
    # every script sets the mode: where that imports Inductor's configuration, an eager script's
    # list is an aot_eager one's
    eager = _script_imports(text + "COMPILE = None\ntorch.use_deterministic_algorithms(True)\n")
    aot = _script_imports(text + "COMPILE = 'aot_eager'\ntorch.use_deterministic_algorithms(True)\n")
    assert aot == _script_imports(text + "COMPILE = 'aot_eager'\n")
    assert (eager == aot) is _inductor_config_on_mode_change()
    # the opening imports of a main() the script ends by calling; not of one it does not call
    body = text + 'def main():\n    """doc"""\n    import torch._inductor.config as c\n    x = 1\n    import torch.fft\n'
    assert _script_imports(body + "\n\nif __name__ == '__main__':\n    main()\n") == _script_imports(
        text + "COMPILE = 'aot_eager'\n")
    assert _script_imports(body) == _script_imports(text)


def test_the_imports_of_scripts_started_at_once_are_read_one_at_a_time():
    """Two threads read a script's imports while collections run a ``__del__`` (what the
    fixture's two script threads meet): neither fails. Planted (the lock taken away), CPython
    3.11 fails it with ``AST constructor recursion depth mismatch``."""
    import gc

    class Finalized:
        def __del__(self):
            pass

    text = upstream.repro_script(_row())
    failures: list[str] = []

    def read() -> None:
        for _ in range(20):
            garbage = [Finalized() for _ in range(50)]
            for item in garbage:
                item.cycle = item  # freed only by a collection, which runs __del__
            del garbage
            try:
                _script_imports(text)
            except SystemError as exc:
                failures.append(str(exc))
                return

    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(50, 1, 1)
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=read) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(interval)
    assert failures == []


# -- the inputs a script builds are the suite's --------------------------------------------


def test_the_scripts_input_builders_give_the_suites_bytes():
    space: dict = {"torch": torch, "math": math}
    exec(upstream.INPUT_BUILDERS, space)  # noqa: S102 - the text every script holds
    cases = [((3, 4), torch.float32, 1, True), ((3, 4), torch.bfloat16, 7, False), ((5,), torch.float16, 2, False),
             ((2, 3, 2), torch.complex64, 3, False), ((4,), torch.int64, 4, True), ((2, 2), torch.bool, 5, True),
             ((), torch.float64, 6, True), ((2, 5), torch.uint8, 8, False)]
    for shape, dtype, seed, contiguous in cases:
        ours = space["build_tensor"](shape, dtype, seed, low=-3, high=9, contiguous=contiguous)
        theirs = strategies.build_tensor(shape, dtype, seed, low=-3, high=9, contiguous=contiguous)
        assert ours.stride() == theirs.stride() and ours.dtype == theirs.dtype
        assert torch.equal(ours.contiguous().view(-1).view(torch.uint8), theirs.contiguous().view(-1).view(torch.uint8))
    for shape, size, seed, dup, unique in [((47,), 30, 0, 0.0, False), ((6, 2), 5, 3, 0.9, False), ((4,), 9, 1, 0.0, True),
                                           ((0,), 3, 2, 0.5, False)]:
        ours = space["build_indices"](shape, size, seed, duplicates=dup, unique=unique)
        assert torch.equal(ours, strategies.build_indices(shape, size, seed, duplicates=dup, unique=unique))


def test_the_batch_invariance_builders_give_the_suites_functions_and_bytes():
    from detconf.conformance import batch_invariance as bi

    for op in bi.OPS:
        space: dict = {"torch": torch, "F": torch.nn.functional}
        exec(upstream.batch_builder_source(op), space)  # noqa: S102 - the text a script holds
        for batch, width, seed in ((64, 129, 7), (3, 33, 11)):
            fn, inputs, fixed = space["build"](batch, width, seed)
            their_fn, theirs, their_fixed = bi.OPS[op].build(bi.Example(batch=batch, k=1, width=width, seed=seed),
                                                             torch.Generator().manual_seed(seed))
            assert (list(inputs), list(fixed)) == (list(theirs), list(their_fixed)), op
            assert all(torch.equal(a[k], b[k]) for a, b in ((inputs, theirs), (fixed, their_fixed)) for k in a), op
            assert torch.equal(fn(**inputs, **fixed), their_fn(**theirs, **their_fixed)), op



def test_a_batch_invariance_script_puts_every_tensor_on_the_cells_device():
    """The script builds on the CPU from a seeded generator and moves the batched and the fixed
    inputs (matmul's weight, layer_norm's) to the cell's device: a tensor left on the CPU fails a
    GPU's kernel ("Expected all tensors to be on the same device")."""
    row = {"source": "batch-invariance", "entry_id": "batch-invariance:matmul", "device": "cuda", "mode": "error",
           "compile": "inductor", "verdict": "violated", "observed": "batch-dependent"}
    detail = {"example": {"batch": 8, "k": 3, "width": 5, "seed": 1}, "promised": True, "threads": 4,
              "setting": "torch._inductor.config.batch_invariant=True"}
    script = upstream._batch_invariance_script(row, detail)
    compile(script, "repro.py", "exec")
    assert "DEVICE = 'cuda'" in script
    assert "fixed = {name: t.to(DEVICE) for name, t in fixed.items()}" in script
    assert "whole = run(**batched, **fixed)" in script

def test_the_gradient_seed_is_the_runners():
    assert upstream.GRAD_SEED == runner.GRAD_SEED


# -- every known finding on the CPU, reproduced without detconf --------------------------------


def _cpu_findings() -> list[Finding]:
    return [f for f in load_findings() if (not f.devices or "cpu" in f.devices)
            and torch_in(torch.__version__, f.torch)]


def _cell(f: Finding) -> tuple[str, str]:
    """The one cell run for finding ``f``: its first mode and compile setting."""
    return (f.modes[0] if f.modes else "error"), (f.compile[0] if f.compile else "eager")


def _nodeid(f: Finding) -> str:
    mode, setting = _cell(f)
    prefix = "" if f.source == "torch-docs" else f"{f.source}:"
    return (f"conformance/test_documented.py::test_documented[{prefix}{f.entry_id}-cpu-{mode}"
            + ("" if setting == "eager" else f"-{setting}") + "]")


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    """{finding index: (finding, row, the script's RESULT)} for every CPU finding."""
    findings = _cpu_findings()
    if not findings:
        pytest.skip(f"no known finding is recorded for the CPU and torch {torch.__version__}")
    tmp = tmp_path_factory.mktemp("upstream")
    results = tmp / "results.jsonl"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--hypothesis-profile", "ci",
           "--device", "cpu", "--no-report-build", "--fresh-results", "--results", str(results)]
    for option, values in (("--source", {f.source for f in findings}), ("--mode", {_cell(f)[0] for f in findings}),
                           ("--compile", {_cell(f)[1] for f in findings})):
        for value in sorted(values):
            cmd += [option, value]
    suite = warm.run(cmd + sorted({_nodeid(f) for f in findings}), cwd=ROOT, capture_output=True, text=True,
                           timeout=1800)
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-2000:]
    rows = upstream.read_rows(upstream._records(results), results)
    out = tmp / "upstream"
    cli = _run_cli(str(results), "--out", str(out))
    assert cli.returncode == 0, cli.stderr
    jobs = {}
    for k, f in enumerate(findings):
        mode, setting = _cell(f)
        row = next((r for r in rows if f.matches(r) and r["mode"] == mode and (r.get("compile") or "eager") == setting),
                   None)
        assert row is not None, f"no row for {f.entry_id} {mode}/{setting}"
        assert row["verdict"] == f.verdict, (f.entry_id, row["verdict"])
        jobs[k] = (f, row, out / upstream._slug(row) / "repro.py")
    empty = tmp / "empty"
    empty.mkdir()
    with ThreadPoolExecutor(2) as pool:
        answers = dict(zip(jobs, pool.map(lambda job: _run_script(job[2], empty), jobs.values())))
    return {k: (f, row, answers[k]) for k, (f, row, _) in jobs.items()}


def _disagreement(finding: Finding, row: dict, result: dict) -> str | None:
    """What the script of ``finding``'s cell reported that is not the finding (None: it reproduced it)."""
    if result["torch"] != torch.__version__:
        return f"ran torch {result['torch']}"
    if not result["verdict"] == finding.verdict == result["recorded"]:
        return f"verdict {result['verdict']}, recorded {result['recorded']}, the finding says {finding.verdict}"
    if finding.verdict == "stale-doc" and not (result["raised_runs"] == 0 and result["identical"] is True):
        return f"stale-doc, yet raised in {result['raised_runs']} run(s) or differed ({result['identical']})"
    if finding.verdict == "missing-warning" and not (result["raised_runs"] == 0
                                                     and result["warned_runs"] < result["runs"] == row["runs"]):
        return f"missing-warning, yet {result['raised_runs']} raised / {result['warned_runs']} warned of {result['runs']}"
    if finding.verdict == "wrong-result" and not (result["identical"] is True and result["matches_eager"] is False
                                                  and result["max_abs_diff_vs_eager"] > 0):
        return f"wrong-result, yet identical {result['identical']}, matches eager {result['matches_eager']}"
    if finding.verdict == "violated" and not (result["observed"] == row["observed"] or (
            row["observed"] in ("zeros", "unfilled") and result["observed"] in ("zeros", "unfilled"))):
        return f"violated, observed {result['observed']} where the row observed {row['observed']}"
    return None


def test_every_cpu_finding_reproduces_in_an_isolated_interpreter_without_detconf(reproduced):
    """One test for all of them: the suite run and the scripts are made once (a parametrized test
    would build the module's fixture once per xdist worker that draws one of its cases)."""
    assert len(reproduced) == len(_cpu_findings())
    problems = [f"{finding.entry_id} {'/'.join(_cell(finding))}: {problem}"
                for finding, row, result in reproduced.values()
                for problem in [_disagreement(finding, row, result)] if problem]
    assert not problems, problems


def test_a_script_that_does_not_reproduce_its_finding_is_named():
    finding = Finding(source="torch-docs", entry_id="put_(accumulate=False)", verdict="stale-doc", torch=">=2.0",
                      why="x")
    agreed = {"torch": torch.__version__, "verdict": "stale-doc", "recorded": "stale-doc", "raised_runs": 0,
              "identical": True}
    assert _disagreement(finding, {"runs": 2}, agreed) is None
    assert "verdict conforms" in _disagreement(finding, {"runs": 2}, dict(agreed, verdict="conforms"))
    assert "raised in 2" in _disagreement(finding, {"runs": 2}, dict(agreed, raised_runs=2))


# -- planted faults: a script that sees something else says so ---------------------------------


PUT_REPRO = """import math
import warnings

import torch
import torch.nn.functional as F
from detconf.engine.strategies import build_indices, build_tensor

x = build_tensor((5, 6), torch.float32, 0, device='cpu', low=-10, high=10, contiguous=True)
index = build_indices((47,), 30, 0, duplicates=0.0, unique=False, device='cpu', dtype=torch.int64)
source = build_tensor((47,), torch.float32, 0, device='cpu', low=-10, high=10, contiguous=True)


def put_op(x, index, source, *, accumulate, clone):
    return (x.clone() if clone else x).put_(index, source, accumulate=accumulate)


out = put_op(x=x, index=index, source=source, accumulate=False, clone=False)"""


def _row(**changes) -> dict:
    row = {"record": "result", "source": "torch-docs", "entry_id": "put_(accumulate=False)", "op": "torch.Tensor.put_",
           "sentence": ":func:`torch.Tensor.put_` when ``accumulate=False``", "device": "cpu", "mode": "error",
           "compile": "eager", "phase": "program", "expected": "raises", "observed": "deterministic",
           "verdict": "stale-doc", "runs": 2, "examples": 3, "torch_version": torch.__version__,
           "detail": {"repro": PUT_REPRO, "example": "put_ on cpu"}}
    row.update(changes)
    return row


def _script_result(tmp_path: Path, row: dict) -> dict:
    path = tmp_path / "repro.py"
    path.write_text(upstream.repro_script(row), encoding="utf-8")
    return _run_script(path, tmp_path)


def test_a_planted_stale_doc_row_whose_op_raises_is_not_reproduced(tmp_path):
    """Eager put_(accumulate=False) raises the alert as documented: the script says conforms, so
    the end-to-end check (its verdict must be the finding's) fails on such a row."""
    result = _script_result(tmp_path, _row())
    assert result["alert_raises"] == 2 and result["verdict"] == "conforms" != result["recorded"]


def test_a_planted_nondeterministic_op_is_seen_as_nondeterministic(tmp_path):
    repro = PUT_REPRO.replace("return (x.clone() if clone else x).put_(index, source, accumulate=accumulate)",
                              "return x + torch.rand(x.shape)")
    row = _row(mode="error", expected="deterministic", verdict="nondeterministic",
               detail={"repro": repro})
    result = _script_result(tmp_path, row)
    assert result["identical"] is False and result["verdict"] == "nondeterministic"
    same = _script_result(tmp_path, _row(expected="deterministic", mode="off", verdict="conforms"))
    assert same["identical"] is True and same["raised_runs"] == 0


def test_an_op_handed_its_last_output_again_is_seen_as_nondeterministic(tmp_path):
    """A caching allocator (CUDA's) hands the block a run freed to the next request of its size:
    an op that returns memory it did not write would hand the next run the first run's result
    again, and the runs would look identical. Emulated by an op that returns the tensor it
    returned before, unwritten: the script overwrites each run's outputs once it has copied
    them, so it sees the runs differ. Planted: the same script without the overwrite sees
    identical runs."""
    repro = PUT_REPRO.replace("def put_op", "HANDED = []\n\n\ndef put_op").replace(
        "return (x.clone() if clone else x).put_(index, source, accumulate=accumulate)",
        "if not HANDED:\n        HANDED.append(torch.ones_like(x))\n    return HANDED[0]")
    row = _row(mode="error", expected="deterministic", verdict="nondeterministic", detail={"repro": repro})
    script = upstream.repro_script(row)
    overwrite = upstream.SCRIBBLE_LINE
    assert script.count(overwrite) == 1
    scripts = []
    for name, text in (("overwritten", script), ("planted", script.replace(overwrite, ""))):
        (tmp_path / name).mkdir()
        scripts.append(tmp_path / name / "repro.py")
        scripts[-1].write_text(text, encoding="utf-8")
    with ThreadPoolExecutor(2) as pool:
        seen, planted = pool.map(lambda path: _run_script(path, path.parent), scripts)
    assert seen["identical"] is False and seen["verdict"] == "nondeterministic" and seen["raised_runs"] == 0
    assert planted["identical"] is True and planted["verdict"] == "conforms"


def test_a_backward_program_runs_its_backward_with_the_seeded_gradient(tmp_path):
    repro = PUT_REPRO.replace("out = put_op", "x.requires_grad_()\nsource.requires_grad_()\nout = put_op").replace(
        "clone=False)", "clone=True)\n# then backward through out with a seeded gradient; compare x.grad, source.grad")
    row = _row(mode="off", expected="deterministic", verdict="conforms", detail={"repro": repro})
    script = upstream.repro_script(row)
    assert "GRADS = ('x', 'source')" in script and "clone=True" in script and "# then backward" not in script
    assert _script_result(tmp_path, row)["identical"] is True


# -- OpInfo sweep cells: the sample from torch's own test database -----------------------------

SWEEP_CELLS = ("sweep:empty_like-cpu-off", "sweep:index_add-cpu-error")


@pytest.fixture(scope="module")
def sweep_rows(tmp_path_factory) -> dict[str, dict]:
    """The rows of two real sweep cells: empty_like with the mode off (its runs read memory nobody
    wrote: they differ) and index_add's backward sample under the mode (deterministic)."""
    results = tmp_path_factory.mktemp("sweep") / "results.jsonl"
    suite = warm.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--hypothesis-profile", "ci",
         "--device", "cpu", "--no-report-build", "--fresh-results", "--results", str(results), "--source", "sweep",
         "--mode", "error", "--mode", "off", *(f"conformance/test_documented.py::test_documented[{c}]" for c in SWEEP_CELLS)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-2000:]
    rows = upstream.read_rows(upstream._records(results), results)
    return {f"{r['entry_id']}-{r['mode']}": r for r in rows}


def test_a_sweep_cell_reproduces_from_torchs_opinfo_database_in_an_isolated_interpreter(sweep_rows, tmp_path):
    """Both scripts run with ``python3 -I`` from an empty folder (no detconf), generate the same
    input bytes in every run, and see what the suite saw: empty_like's runs differ, index_add's
    forward and backward are identical.

    empty_like's output is memory nobody wrote: what it holds is the allocator's, and two runs can
    be handed memory that holds the same bytes (fresh zeroed pages, or the allocator's own
    pointers in four of the sample's five floats): ``python benchmarks/bench_stale_read.py`` counts
    how often. Its script is run again, up to three times in all, until it sees them differ."""
    empty, index_add = sweep_rows["empty_like-off"], sweep_rows["index_add-error"]
    assert (empty["verdict"], index_add["verdict"]) == ("nondeterminism-seen", "conforms")
    scripts = []
    for name, row in (("empty", empty), ("index_add", index_add)):
        script = upstream.repro_script(row)
        assert "from torch.testing._internal.common_methods_invocations import op_db" in script
        assert "detconf" not in script.split('"""')[2] and "BACKWARD = " in script
        (tmp_path / name).mkdir()
        scripts.append(tmp_path / name / "repro.py")
        scripts[-1].write_text(script, encoding="utf-8")
    assert "BACKWARD = True" in scripts[1].read_text()
    with ThreadPoolExecutor(2) as pool:
        seen_empty, seen_index_add = pool.map(lambda path: _run_script(path, path.parent), scripts)
    for _ in range(2):
        if seen_empty["identical"] is not True:
            break
        seen_empty = _run_script(scripts[0], scripts[0].parent)
    assert seen_empty["inputs_identical"] is True and seen_empty["raised_runs"] == 0
    assert seen_empty["identical"] is False and seen_empty["verdict"] == "nondeterministic"
    assert seen_index_add["inputs_identical"] is True and seen_index_add["identical"] is True
    assert seen_index_add["verdict"] == "conforms" == seen_index_add["recorded"]


def test_a_failing_sweep_cell_is_written_by_the_command_and_a_wrong_recorded_verdict_shows(sweep_rows, tmp_path):
    """Planted: index_add's row relabelled nondeterministic is written like any failing cell, and
    its script, which sees identical runs, says conforms: the disagreement is there to read."""
    planted = dict(sweep_rows["index_add-error"], verdict="nondeterministic")
    results = _write(tmp_path / "r.jsonl", [planted, sweep_rows["empty_like-off"]])
    proc = _run_cli(str(results), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    [folder] = (tmp_path / "out").iterdir()
    assert folder.name == "index_add-cpu-error-eager" and "index_add [cpu/error/eager]" in proc.stdout
    seen = _run_script(folder / "repro.py", folder)
    assert seen["identical"] is True and seen["verdict"] == "conforms" != seen["recorded"] == "nondeterministic"


def test_a_sweep_row_whose_reproducer_is_not_the_sweeps_is_refused(sweep_rows):
    row = copy.deepcopy(sweep_rows["index_add-error"])
    assert upstream.repro_script(row)
    for tampered in (row["detail"]["repro"].replace("op_db", "my_db"),
                     row["detail"]["repro"] + "\nimport os; os.system('x')",
                     row["detail"]["repro"].replace("('index_add', '')", "(__import__('os').name, '')")):
        row["detail"]["repro"] = tampered
        with pytest.raises(upstream.UpstreamError, match="not the sweep's OpInfo reproducer"):
            upstream.repro_script(row)


@pytest.mark.parametrize("shape", [[3], [1]])
def test_a_fill_script_reads_the_elements_of_a_strided_tensor(tmp_path, shape):
    """empty_strided with gaps between its elements (strides (2,) for half), compiled with Inductor
    (which leaves it unfilled: the known finding): the script judges the elements, where a byte
    view of the strided tensor fails (it did, on torch 2.14.1, for a drawn example). One element
    of stride 2 too: ``contiguous()`` keeps that stride, and the byte view refused it (the
    script of a drawn example did, on torch 2.13.0)."""
    row = {"record": "result", "source": "repro-notes", "entry_id": "fill_uninitialized_memory:empty_strided[floating]",
           "device": "cpu", "mode": "error", "compile": "inductor", "phase": "program", "expected": "holds",
           "observed": "unfilled", "verdict": "violated", "torch_version": torch.__version__,
           "detail": {"fill_uninitialized_memory": True, "op": "empty_strided", "dtype": "torch.float16",
                      "shape": shape, "strides": [2], "expected": "filled-nan"}}
    result = _script_result(tmp_path, row)
    assert result["observed"] in ("unfilled", "zeros") and result["expected"] == "filled-nan"
    assert result["verdict"] == "violated"


def test_a_fill_script_calls_the_op_eight_times_on_memory_it_dirtied_and_a_filled_output_conforms(tmp_path):
    """An unfilled output holds whatever its memory held: NaN left there by an earlier fill looks
    filled (a single half-precision element did, now and then, on the CPU). The script frees
    blocks of the output's size holding a pattern that is no fill before each of eight calls, and
    a single unfilled output is the violation. The control: eager ``empty`` fills as documented,
    over that pattern, eight times out of eight."""
    row = {"record": "result", "source": "repro-notes", "entry_id": "fill_uninitialized_memory:empty[floating]",
           "device": "cpu", "mode": "error", "compile": None, "phase": "program", "expected": "holds",
           "observed": "filled-nan", "verdict": "conforms", "torch_version": torch.__version__,
           "detail": {"fill_uninitialized_memory": True, "op": "empty", "dtype": "torch.float16",
                      "shape": [1], "expected": "filled-nan"}}
    script = upstream.repro_script(row)
    assert "CALLS = 8" in script and "dirty(nbytes)" in script and "0x3C" in script
    path = tmp_path / "repro.py"
    path.write_text(script, encoding="utf-8")
    proc = _run_isolated(path, tmp_path)
    assert "observed in 8 calls: " + repr(["filled-nan"] * 8) in proc.stdout, proc.stdout
    result = _result(proc)
    assert (result["observed"], result["verdict"]) == ("filled-nan", "conforms")


# -- the issue text and the command's input ----------------------------------------------------


def test_the_issue_text_names_versions_device_sentence_and_observed_against_expected():
    text = upstream.issue_text(_row(compile="inductor", device_name="AMD EPYC"), {"python": "3.11.7"})
    for needle in (f"torch: {torch.__version__}", "Python 3.11.7", "device: cpu (AMD EPYC)",
                   ":func:`torch.Tensor.put_` when ``accumulate=False``", "expected: raises",
                   "observed: deterministic (verdict `stale-doc`", "backend='inductor'"):
        assert needle in text
    noted = _row()
    noted["detail"] = dict(noted["detail"], contradiction="contradicted by 'x' of the same docstring")
    assert "the docstring contradicts itself: contradicted by 'x'" in upstream.issue_text(noted, {})


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_command_writes_a_folder_per_cell_and_honours_cell(tmp_path):
    conforming = _row(entry_id="put_(accumulate=True)", verdict="conforms")
    results = _write(tmp_path / "r.jsonl", [_row(), conforming, _row(mode="warn_only", expected="warns",
                                                                      verdict="missing-warning")])
    proc = _run_cli(str(results), "--out", str(tmp_path / "out"), "--mode", "error")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["put__accumulate=False_-cpu-error-eager"]
    assert {p.name for p in (tmp_path / "out" / "put__accumulate=False_-cpu-error-eager").iterdir()} == {"repro.py", "issue.md"}


@pytest.mark.parametrize("case", ["missing", "not-json", "no-failing", "unknown-cell", "sweep-cell", "folder", "no-out"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    results = _write(tmp_path / "r.jsonl", [_row(), _row(source="sweep", entry_id="take", detail={"repro": "x"})])
    args = {
        "missing": [str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")],
        "not-json": [str(_write(tmp_path / "bad.jsonl", []).with_name("bad.jsonl")), "--out", str(tmp_path / "o")],
        "no-failing": [str(_write(tmp_path / "ok.jsonl", [_row(verdict="conforms")])), "--out", str(tmp_path / "o")],
        "unknown-cell": [str(results), "--cell", "nosuch", "--out", str(tmp_path / "o")],
        "sweep-cell": [str(results), "--cell", "take", "--out", str(tmp_path / "o")],
        "folder": [str(tmp_path), "--out", str(tmp_path / "o")],
        "no-out": [str(results)],
    }[case]
    if case == "not-json":
        (tmp_path / "bad.jsonl").write_text("{not json\n", encoding="utf-8")
    proc = _run_cli(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_a_row_the_script_cannot_rebuild_is_refused_with_the_reason():
    with pytest.raises(upstream.UpstreamError, match="not the sweep's OpInfo reproducer"):
        upstream.repro_script(_row(source="sweep"))
    with pytest.raises(upstream.UpstreamError, match="no reproducer"):
        upstream.repro_script(_row(detail={}))
    bad = copy.deepcopy(_row())
    bad["detail"]["repro"] = PUT_REPRO.replace("import math", "import numpy")
    with pytest.raises(upstream.UpstreamError, match="other than torch"):
        upstream.repro_script(bad)


@pytest.mark.parametrize("bad", [["--repeat", "0"], ["--seed", "-1"], ["--repeat", "x"], ["--bogus"]])
def test_the_stale_read_benchmark_refuses_bad_input_in_one_line(bad):
    """``benchmarks/bench_stale_read.py`` counts how often the empty_like script sees identical runs
    (the test above runs it up to three times); bad input is one line and exit 2, before any run."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_stale_read.py"), *bad], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("bench_stale_read: error: ")
