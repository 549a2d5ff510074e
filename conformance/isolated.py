"""Judge one case in a fresh Python process.

Some backends keep the determinism flag per thread, first setting wins
(Ascend NPU): two modes cannot be judged one after the other in one process.
A backend declares ``isolate_modes=True`` and every case on it runs here. The
child rebuilds the catalog from the same options, finds the case by its id,
judges it, and prints the row as JSON on its last line of output.

Run by hand: ``python -m conformance.isolated CASE_ID --source torch-docs --device cpu``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conformance.catalog import Case

ROOT = Path(__file__).resolve().parents[1]
MARKER = "DETCONF-ROW "


def child_command(case: Case, *, sources: list[str], doc_version: str | None, profile: str, runs: int) -> list[str]:
    cmd = [sys.executable, "-m", "conformance.isolated", case.id, "--device", case.device, "--profile", profile,
           "--runs", str(runs)]
    for source in sources:
        cmd += ["--source", source]
    if doc_version:
        cmd += ["--doc-version", doc_version]
    return cmd


def judge_in_subprocess(case: Case, *, sources: list[str], doc_version: str | None, profile: str, runs: int,
                        timeout: float = 600, unset_env: tuple[str, ...] = ()) -> dict[str, Any]:
    """The row the child computed; a child that dies gives a ``harness-error`` row.

    ``unset_env`` names variables the child must not see (e.g.
    ``CUBLAS_WORKSPACE_CONFIG``, which CUDA reads once per process).
    """
    from conformance.harness import crashed_row

    cmd = child_command(case, sources=sources, doc_version=doc_version, profile=profile, runs=runs)
    env = {k: v for k, v in os.environ.items() if k not in unset_env}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return crashed_row(case, f"isolated child timed out after {timeout:.0f} s")
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(MARKER):
            row = json.loads(line[len(MARKER):])
            row.setdefault("detail", {})["isolated"] = True
            return row
    tail = (out.stderr or out.stdout).strip().splitlines()
    return crashed_row(case, f"isolated child exited {out.returncode}: {tail[-1] if tail else 'no output'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.isolated", description=__doc__.splitlines()[0])
    parser.add_argument("case_id")
    parser.add_argument("--device", required=True)
    parser.add_argument("--source", action="append", default=None)
    parser.add_argument("--doc-version", default=None)
    parser.add_argument("--profile", default="ci")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)

    from conformance import profiles
    from conformance.catalog import ALL_MODES, DEFAULT_SOURCES, load_catalog, plan
    from conformance.harness import judge
    from engine.devices import resolve_devices

    profiles.load(args.profile)
    try:
        backend = resolve_devices([args.device])[0]
        catalog = load_catalog(args.source or list(DEFAULT_SOURCES), doc_version=args.doc_version)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cases = {c.id: c for c in plan(catalog, [args.device], list(ALL_MODES))}
    if args.case_id not in cases:
        print(f"error: no case {args.case_id!r} for these options", file=sys.stderr)
        return 2
    row = judge(cases[args.case_id], backend, runs=args.runs)
    print(MARKER + json.dumps(row, sort_keys=True, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
