"""How the harness's tests are shared between xdist workers (tests/schedule.py): a module at a
time, heaviest first."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import schedule, warm

ROOT = Path(__file__).resolve().parents[1]


def test_modules_go_heaviest_first_an_unmeasured_one_as_the_median_and_ties_keep_their_order():
    weights = {"a.py": 1.0, "b.py": 9.0, "c.py": 5.0, "d.py": 5.0}
    assert schedule.heaviest_first(["a.py", "c.py", "b.py", "d.py"], weights) == ["b.py", "c.py", "d.py", "a.py"]
    assert schedule.heaviest_first(["d.py", "c.py"], weights) == ["d.py", "c.py"]  # a tie: as collected
    # new.py has no weight: the median of the others (5.0), beside c.py, in the order collected
    assert schedule.heaviest_first(["new.py", "a.py", "b.py", "c.py"], {"a.py": 1.0, "b.py": 9.0, "c.py": 5.0}) \
        == ["b.py", "new.py", "c.py", "a.py"]
    assert schedule.heaviest_first(["x.py", "y.py", "x.py"], {}) == ["x.py", "y.py"]  # no weights: as collected


def test_the_items_of_a_module_stay_together_and_in_their_order():
    items = [SimpleNamespace(nodeid=n) for n in
             ("t/a.py::one", "t/b.py::one", "t/a.py::C::two", "t/b.py::two[x]", "t/c.py::one", "t/a.py::three")]
    schedule.order_items(items, {"t/b.py": 3.0, "t/a.py": 2.0, "t/c.py": 1.0})
    assert [i.nodeid for i in items] == ["t/b.py::one", "t/b.py::two[x]", "t/a.py::one", "t/a.py::C::two",
                                         "t/a.py::three", "t/c.py::one"]


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"seconds": [1]}', '{"measured": {}}'])
def test_a_weights_file_that_is_not_a_table_gives_no_weights(tmp_path, text):
    path = tmp_path / "w.json"
    path.write_text(text, encoding="utf-8")
    assert schedule.load_weights(path) == {}
    assert schedule.load_weights(tmp_path / "missing.json") == {}


def test_a_weight_that_is_not_a_number_of_seconds_is_left_out(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"seconds": {"a.py": 2, "b.py": -1, "c.py": True, "d.py": "3", "e.py": 0.5}}))
    assert schedule.load_weights(path) == {"a.py": 2.0, "e.py": 0.5}


def test_the_committed_weights_name_this_checkouts_test_modules_and_say_what_measured_them():
    data = json.loads(schedule.WEIGHTS.read_text(encoding="utf-8"))
    weights = schedule.load_weights(schedule.WEIGHTS)
    assert weights and len(weights) == len(data["seconds"])
    stale = sorted(m for m in weights if not (ROOT / m).is_file())
    assert not stale, f"{stale}: no such test module; rewrite with python benchmarks/bench_tests.py --write-weights"
    assert data["measured"]["command"].startswith("python benchmarks/bench_tests.py")
    assert {"machine", "commit", "date", "wall_s", "cpu_s"} <= set(data["measured"])


def _inner(tmp_path: Path, *args: str, weights: dict[str, float]) -> str:
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({"seconds": weights}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["DETCONF_TESTS_WEIGHTS"] = str(path)
    done = warm.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"], cwd=ROOT, env=env,
                    capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


def test_the_collection_puts_the_heaviest_module_first(tmp_path):
    modules = ["tests/test_verdict.py", "tests/test_docspec.py", "tests/test_kit.py"]
    for weights in ({modules[0]: 1.0, modules[1]: 3.0, modules[2]: 2.0},
                    {modules[0]: 3.0, modules[1]: 1.0, modules[2]: 2.0}):
        out = _inner(tmp_path, *modules, "--collect-only", "-q", weights=weights)
        seen = list(dict.fromkeys(line.split("::")[0] for line in out.splitlines() if "::" in line))
        assert seen == sorted(modules, key=lambda m: -weights[m])


def test_under_xdist_each_module_runs_whole_on_one_worker(tmp_path):
    """xdist's default would deal test_verdict.py's 156 tests to both workers."""
    modules = ["tests/test_verdict.py", "tests/test_docspec.py"]
    out = _inner(tmp_path, *modules, "-n", "2", "-v", weights={modules[0]: 2.0, modules[1]: 1.0})
    workers: dict[str, set[str]] = {}
    for worker, module in re.findall(r"^\[(gw\d+)\].* PASSED (tests/\w+\.py)::", out, re.M):
        workers.setdefault(module, set()).add(worker)
    assert set(workers) == set(modules), out[-2000:]
    assert all(len(w) == 1 for w in workers.values()), workers


def test_the_benchmark_writes_the_weights_heaviest_first_as_the_scheduler_reads_them(tmp_path):
    """``bench_tests.py --write-weights``: the seconds per test file, with the command, machine and
    commit that measured them; read back, the same order."""
    from tests.test_bench_processes import _bench_tests

    per_file = {"tests/test_b.py": 1.234, "tests/test_a.py": 9.5, "tests/test_c.py": 1.234}
    command = [sys.executable, "-m", "pytest", "tests", "-n", "2", "-p", "no:cacheprovider"]
    path = tmp_path / "w.json"
    path.write_text(_bench_tests().weights_json(per_file, command, 210.04, 400.0), encoding="utf-8")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data["seconds"]) == ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    assert data["measured"]["command"] == "python benchmarks/bench_tests.py -n 2"
    assert data["measured"]["wall_s"] == 210.0 and data["measured"]["cpu_s"] == 400.0
    assert data["measured"]["machine"].startswith(f"{os.cpu_count()} CPUs, ")
    weights = schedule.load_weights(path)
    assert weights == {"tests/test_a.py": 9.5, "tests/test_b.py": 1.23, "tests/test_c.py": 1.23}
    assert schedule.heaviest_first(["tests/test_c.py", "tests/test_b.py", "tests/test_a.py"], weights) == \
        ["tests/test_a.py", "tests/test_c.py", "tests/test_b.py"]
