"""``--shard I/N``: a stable split of the plan over N runners, and the merge of their files."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from detconf.conformance.shard import ShardError, parse_shard, select, shard_group, shard_of
from tests import warm

ROOT = Path(__file__).resolve().parents[1]


def _pytest(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return warm.run([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def full_plan():
    """Every source but the sweep, with complements, on two device types, three modes, two compile settings."""
    from detconf.conformance.catalog import load_catalog
    from detconf.conformance.complements import complements
    from detconf.conformance.plan import plan
    from detconf.vocabulary import DEFAULT_SOURCES

    catalog = load_catalog(list(DEFAULT_SOURCES))
    catalog = catalog + complements(catalog)
    return plan(catalog, ["cpu", "cuda"], ["error", "warn_only", "off"], ["eager", "inductor"])


@pytest.mark.parametrize("total", [1, 2, 3, 4, 7, 16])
def test_the_shards_are_disjoint_and_cover_the_plan(full_plan, total):
    parts = [select(full_plan, i, total) for i in range(1, total + 1)]
    ids = [c.id for part in parts for c in part]
    assert len(ids) == len(set(ids)), "a case is in two shards"
    assert sorted(ids) == sorted(c.id for c in full_plan), "the shards do not make up the plan"
    if total > 1:  # the split is not lopsided (a hash of about 2,000 cases' groups)
        sizes = [len(p) for p in parts]
        assert min(sizes) > 0 and max(sizes) < 2 * len(full_plan) / total, sizes


def test_the_split_ignores_collection_order_and_keeps_an_entry_together(full_plan):
    shuffled = list(full_plan)
    random.Random(7).shuffle(shuffled)
    for i in (1, 2, 3):
        assert {c.id for c in select(shuffled, i, 3)} == {c.id for c in select(full_plan, i, 3)}
    # Every mode and phase of an entry on a device under a compile setting: one shard.
    by_group: dict[str, set[int]] = {}
    for case in full_plan:
        by_group.setdefault(shard_group(case), set()).add(shard_of(case, 5))
    assert all(len(parts) == 1 for parts in by_group.values())
    assert any(len({c.mode for c in full_plan if shard_group(c) == g}) == 3 for g in list(by_group)[:5])


def test_the_split_is_the_same_on_every_machine(full_plan):
    """Pinned: a SHA-256 of the group, not Python's per-process hash(), decides."""
    case = next(c for c in full_plan if c.id == "put_(accumulate=False)-cpu-error")
    assert shard_group(case) == "torch-docs::put_(accumulate=False)|cpu|eager"
    code = ("from detconf.conformance.shard import shard_of; from detconf.conformance.catalog import load_catalog; "
            "from detconf.conformance.plan import plan; "
            "cases = plan(load_catalog(['torch-docs']), ['cpu'], ['error']); "
            "print([shard_of(c, 7) for c in cases if c.id == 'put_(accumulate=False)-cpu-error'][0])")
    other = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONHASHSEED="12345"))
    assert other.returncode == 0, other.stderr
    assert int(other.stdout) == shard_of(case, 7)


@pytest.mark.parametrize("text,needle", [
    ("0/3", "the part must be from 1 to 3"),
    ("4/3", "the part must be from 1 to 3"),
    ("1/0", "the number of parts must be at least 1"),
    ("a/b", "--shard must be I/N"),
    ("2", "--shard must be I/N"),
    ("", "--shard must be I/N"),
    ("-1/3", "--shard must be I/N"),
])
def test_parse_shard_refuses_what_is_not_a_part(text, needle):
    with pytest.raises(ShardError, match=needle.replace("/", "/")):
        parse_shard(text)


def test_parse_shard():
    assert parse_shard("2/4") == (2, 4) and parse_shard(" 1 / 1 ") == (1, 1)


@pytest.mark.parametrize("text,needle", [("0/3", "from 1 to 3"), ("a/b", "must be I/N"), ("1/0", "at least 1")])
def test_a_bad_shard_is_a_one_line_usage_error(tmp_path, text, needle):
    out = _pytest("--shard", text, "--results", str(tmp_path / "r.jsonl"), "--collect-only")
    assert out.returncode == 4
    assert "Traceback" not in out.stdout + out.stderr
    assert len([line for line in out.stderr.splitlines() if needle in line]) == 1, out.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_the_rerun_hint_keeps_the_shard(tmp_path):
    from detconf.plugin.rerun import rerun_command

    option = SimpleNamespace(source=["flag-api"], doc_version=None, no_complements=False, mode=None,
                             runs=2, hypothesis_seed=None, isolate=False, results=str(tmp_path / "r.jsonl"),
                             shard="2/3", detconf_compile=None)
    config = SimpleNamespace(option=option, _detconf_backends=[SimpleNamespace(name="cpu")],
                             _detconf_shard=(2, 3), getoption=lambda name: getattr(option, name, None))
    node = SimpleNamespace(path=ROOT / "conformance" / "test_documented.py", name="test_documented[x]")
    command = rerun_command(config, node)
    assert "--shard 2/3" in command
    option.shard, config._detconf_shard = None, None  # no --shard: the whole plan
    assert "--shard" not in rerun_command(config, node)


def test_shards_run_apart_and_merge_into_the_whole_plan(tmp_path):
    """Two runners, one shard each: their run records list disjoint parts of the plan, and
    ``reports build`` over both files shows every case once, none missing."""
    common = ["--source", "flag-api", "--device", "cpu", "--hypothesis-profile", "ci", "-n", "0", "--no-report-build"]
    files = []
    for part in ("1/2", "2/2"):
        path = tmp_path / f"shard-{part[0]}.jsonl"
        out = _pytest(*common, "--shard", part, "--results", str(path))
        assert out.returncode == 0, out.stdout[-2000:]
        files.append(path)
    records = [[json.loads(line) for line in f.read_text().splitlines()] for f in files]
    planned = [{c["id"] for c in r[0]["planned_cases"]} for r in records]
    assert planned[0] and planned[1] and not planned[0] & planned[1]
    assert [r[0]["env"]["shard"] for r in records] == ["1/2", "2/2"]
    for r, ids in zip(records, planned):
        rows = [x for x in r if x["record"] == "result"]
        assert len(rows) == len(ids) == r[-1]["written"] and r[-1]["outcome"] == "complete"
    from detconf.conformance.catalog import load_catalog
    from detconf.conformance.plan import plan

    whole = {c.id for c in plan(load_catalog(["flag-api"]), ["cpu"], ["error", "warn_only"])}
    assert planned[0] | planned[1] == whole
    built = warm.reports("build", *files, "--out", tmp_path / "m", timeout=120)
    assert built.returncode == 0, built.stderr
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["cells"] == len(whole) and summary["missing"] == 0
    assert "incomplete" not in built.stdout
