"""How late ``detconf gpu-run --budget N`` ends, whatever step is running, and whether its archive
is whole; and the same for a SIGTERM at a given second (what a device call's time limit sends).

    python benchmarks/bench_gpu_budget.py [--device cpu] [--budgets 30,60,90] [--steps documented,sweep,tests]
                                          [--sigterm 1,5,20] [--scratch]

Each case runs the real command from the checkout (steps on ``--device``, ``-n auto``) in a fresh
output folder, and prints: the budget (or the second of the SIGTERM), the wall time, the time
past the budget, which step was running or cut, and whether the archive holds machine.json,
steps.json, COMMAND.md, console.log and requirements.json with every results file ending in an
end record. With ``--scratch`` each case runs as the pack's run script runs it: ``--out`` inside a
folder made for it (``--scratch``), the archive outside, and the line says whether gpu-run removed
that folder. Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from detconf.gpurun import SCRATCH_MARK  # noqa: E402
RECORDS = ("machine.json", "steps.json", "COMMAND.md", "console.log", "requirements.json")


def whole(out: Path) -> tuple[bool, str]:
    archives = sorted(out.glob("*.tar.gz"))
    if not archives:
        return False, "no archive"
    with tarfile.open(archives[0]) as tar:
        files = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile()}
        missing = [r for r in RECORDS if r not in files]
        if missing:
            return False, f"missing {', '.join(missing)}"
        steps = json.load(tar.extractfile(files["steps.json"]))
        for name, member in files.items():
            if name.startswith("results/") and name.endswith(".jsonl"):
                if b'"record": "end"' not in tar.extractfile(member).read():
                    return False, f"{name} has no end record"
    shown = ", ".join(f"{s['step']} {s['status']}" for s in steps) or "no step"
    return True, shown


def place(case: Path, scratch: bool) -> tuple[list[str], Path | None]:
    """The output options of a case (in ``case``), and the folder gpu-run is to remove."""
    if not scratch:
        return ["--out", str(case)], None
    folder = case / "scratch"
    folder.mkdir(parents=True)
    (folder / SCRATCH_MARK).touch()
    return ["--out", str(folder / "run"), "--archive", str(case / "run.tar.gz"), "--scratch", str(folder)], folder


def left(folder: Path | None) -> str:
    if folder is None:
        return ""
    return "; unpacked folder kept" if folder.exists() else "; unpacked folder removed"


def run(args: list[str], sigterm: float | None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "detconf", "gpu-run", *args, "--quiet"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if sigterm is not None:
        try:
            proc.wait(timeout=sigterm)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
    proc.wait()
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--budgets", default="30,60,90")
    p.add_argument("--steps", default="documented,sweep,tests")
    p.add_argument("--sigterm", default="1,5,20")
    p.add_argument("--scratch", action="store_true", help="as the pack's run script: --out in a folder gpu-run removes")
    a = p.parse_args(argv)
    print(f"{os.cpu_count()} CPUs, load {', '.join(f'{x:.2f}' for x in os.getloadavg())}; steps {a.steps} on {a.device}")
    with tempfile.TemporaryDirectory(prefix="detconf-budget-") as tmp:
        for i, budget in enumerate(float(b) for b in a.budgets.split(",") if b):
            case = Path(tmp) / f"budget-{i}"
            where, folder = place(case, a.scratch)
            wall = run(["--device", a.device, "--steps", a.steps, "--budget", str(budget), *where], None)
            ok, shown = whole(case)
            print(f"budget {budget:5.0f} s: ended after {wall:6.1f} s ({wall - budget:+5.1f} s), "
                  f"archive {'whole' if ok else 'NOT whole'}: {shown}{left(folder)}", flush=True)
        for i, at in enumerate(float(s) for s in a.sigterm.split(",") if s):
            case = Path(tmp) / f"sigterm-{i}"
            where, folder = place(case, a.scratch)
            wall = run(["--device", a.device, "--steps", a.steps, *where], at)
            ok, shown = whole(case) if case.exists() and any(case.glob("*.tar.gz")) else (False, "no archive yet")
            print(f"SIGTERM at {at:5.1f} s: ended after {wall:6.1f} s ({wall - at:+5.1f} s), "
                  f"archive {'whole' if ok else 'NOT whole'}: {shown}{left(folder)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
