"""The perturbation tier (``--perturb``): each case judged in several fresh processes, compared
across them per example.

Runs that users repeat happen in new processes (a resumed training run, a CI rerun); two runs
back to back in one process share what the mode claims to freeze. Here every case is judged in
:data:`PROCESSES` processes at once, each forked from a *zygote*: a process per test worker that
imported the suite and ran no case (fork costs milliseconds where a new interpreter that imports
torch costs seconds). The zygote does run torch code once before it forks
(:func:`engine.perturb.warm_up`: a 3-element op with its backward and a one-example Hypothesis
test, then a frozen heap), so that each forked process does not pay those first-call costs again;
no example, recipe or case-sized tensor has run in it. Each forked process applies :mod:`engine.perturb`'s disturbances, draws the
same examples (the case's derandomized seed) and runs each example ``runs`` times, compared as
bytes within the process as in the normal tier. The parent then compares the processes' rows
example by example: the inputs' digests must agree (else the processes did not judge the same
examples: ``harness-error``) and so must the outputs' fingerprints. Runs that agree within each
process but not across processes are judged by the one verdict function as runs that differ
(``nondeterministic`` where determinism is promised), with evidence naming the processes, the
example and the settings in which they differed.

Sensitivity, never a verdict (the docs promise neither): process 0 runs each example once more
on one thread (``detail.sensitivity.threads``), and with the mode off the comparison across
processes is recorded (``detail.sensitivity.across_processes``).
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from detconf.child import RESULT_MARKER, child_env, reported, start_child
from detconf.conformance.plan import Case

__all__ = ["PROCESSES", "Zygote", "judge_perturbed", "merge_rows", "serve"]

#: Expectations of a documented alert: the op may run its nondeterministic kernel (warn_only).
_ALERTS = ("raises", "warns")
#: Fresh processes per case (at least two: a comparison needs a pair).
PROCESSES = 2
#: The zygote answers each request with one line starting with this marker.
REPLY_MARKER = "@@detconf-perturb@@ "
TARGET = "detconf.conformance.perturbed:serve"


# Zygote side ------------------------------------------------------------------------------


def serve(payload: dict[str, Any]) -> dict[str, Any]:
    """Zygote: import the suite (and ``payload["imports"]``: modules that register recipes), load
    the profile, then for each request line on standard input fork one process per setup, collect
    their rows and print them on one reply line. Ends at the end of its input."""
    import importlib

    from detconf.conformance import harness, profiles  # noqa: F401  (imports torch and every recipe)

    from detconf.engine.perturb import distortion_variable, warm_up

    distortion_variable()  # imports Inductor's config once here, not in every forked process
    profiles.load(payload["profile"])
    for module in payload.get("imports", ()):
        importlib.import_module(module)
    warm_up()  # torch's and Hypothesis's one-time costs, paid here once instead of in every fork
    served = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        rows = _fork_all(request)
        sys.stdout.write(REPLY_MARKER + json.dumps(rows, default=str) + "\n")
        sys.stdout.flush()
        served += 1
    return {"served": served}


def _fork_all(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Fork one process per setup in ``request``; each one's row, or ``{"crashed": reason}``."""
    cache_root = tempfile.mkdtemp(prefix="detconf-perturb-")
    started: list[tuple[int, int]] = []
    try:
        for setup in request["processes"]:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the fresh process: judge, write the row, leave without cleanup handlers
                os.close(read)
                code = 0
                try:
                    out = _judge_here(request, setup, cache_root)
                except BaseException as exc:  # noqa: BLE001 - goes back as evidence
                    out, code = {"crashed": f"{type(exc).__name__}: {exc}"[:8 * 10**2]}, 1
                with os.fdopen(write, "w", encoding="utf-8") as f:
                    f.write(json.dumps(out, default=str))
                os._exit(code)
            os.close(write)
            started.append((pid, read))
        deadline = time.monotonic() + float(request.get("timeout", 6 * 10**2))
        return [_collect(pid, read, deadline) for pid, read in started]
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)


def _collect(pid: int, read: int, deadline: float) -> dict[str, Any]:
    chunks = []
    while True:
        left = deadline - time.monotonic()
        ready = select.select([read], [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return {"crashed": "timed out"}
        chunk = os.read(read, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    if not text:
        return {"crashed": f"the process ended ({_status_text(status)}) without a row"}
    return json.loads(text)


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _judge_here(request: dict[str, Any], setup_fields: dict[str, Any], cache_root: str) -> dict[str, Any]:
    """In a forked process: apply the setup, judge the case under the perturber, return the row."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the judge prints must not reach the zygote's reply channel
    from hypothesis import settings

    from detconf.conformance.harness import judge
    from detconf.engine import strategies
    from detconf.engine.devices import resolve_devices
    from detconf.engine.perturb import Perturber, ProcessSetup, enter_process

    setup = ProcessSetup(**setup_fields)
    applied = enter_process(setup, cache_root)
    case = Case.from_json(request["case"])
    backend = resolve_devices([case.device])[0]
    if request.get("device_index") is not None:
        backend = backend.on(int(request["device_index"]))
    strategies.set_threshold_limit(threshold_limit(backend))  # examples on both sides of kernels' switches
    perturber = Perturber(setup)
    derandomized = settings(settings(), derandomize=True, database=None)  # the same examples in every process
    row = judge(case, backend, runs=int(request["runs"]), hypothesis_settings=derandomized, perturber=perturber)
    detail = row.setdefault("detail", {})
    detail["process"] = dict(applied["settings"], index=setup.index,
                             perturbations=list(dict.fromkeys(applied["perturbations"] + detail.get("perturbations", []))))
    return row


def threshold_limit(backend: Any) -> int:
    """The largest count the tier puts at a kernel's threshold on ``backend``: what the stress tier
    would allow for the device's free memory shared by every process that may judge at once (each
    test worker's :data:`PROCESSES`); where the memory is not known (the CPU),
    :data:`engine.strategies.PERTURB_THRESHOLD_NUMEL`."""
    from detconf.engine.strategies import PERTURB_THRESHOLD_NUMEL, stress_scale

    free = None
    if getattr(backend, "free_memory", None) is not None:
        try:
            free = backend.free_memory(backend.index or 0)
        except Exception:  # noqa: BLE001 - a driver that cannot say: the CPU's limit
            free = None
    if free is None:
        return PERTURB_THRESHOLD_NUMEL
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    return stress_scale(free // (workers * PROCESSES)).max_numel


# Parent side ------------------------------------------------------------------------------


class Zygote:
    """A started zygote, asked one case at a time (one per test worker)."""

    def __init__(self, profile: str, imports: tuple[str, ...] = ()) -> None:
        self.key = (profile, tuple(imports))
        self.child = start_child(TARGET, {"profile": profile, "imports": list(imports)},
                                 env=child_env(), stdin=True)
        # Its standard error (shared by the processes it forks) is read as it comes: a pipe left
        # unread fills at 64 KiB and stops every process that writes to it. The last of it is
        # kept, for the message when the zygote dies.
        self._stderr = bytearray()
        self._reader = threading.Thread(target=self._drain, name="detconf-zygote-stderr", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        """Read the zygote's standard error until it closes (raw reads: a stream without line
        ends is read in chunks too), keeping its last 4 KiB."""
        try:
            fd = self.child.stderr.fileno()
            while chunk := os.read(fd, 1 << 16):
                self._stderr += chunk
                del self._stderr[:-4096]
        except (OSError, ValueError):  # closed under it
            pass

    def _ended(self, code: int, out: str) -> RuntimeError:
        """The zygote's end as an error: the error it reported (its result line, in ``out``), else
        the last of its standard error."""
        try:
            said = str((reported(out) or {}).get("error") or "")
        except ValueError:  # a result line cut short
            said = out
        return RuntimeError(f"the zygote ended ({code}): {(said or self._stderr_tail())[-4 * 10**2:]!r}")

    def _stderr_tail(self) -> str:
        self._reader.join(timeout=5)  # the zygote ended: its last words are on their way
        return bytes(self._stderr).decode("utf-8", "replace")

    def ask(self, request: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        """Send one request; its rows (``ChildFailed``-like ``RuntimeError`` if the zygote died)."""
        proc = self.child
        if proc.poll() is not None:
            raise self._ended(proc.returncode, proc.stdout.read())
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout + 30
        while time.monotonic() < deadline:
            if not select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                break
            line = proc.stdout.readline()
            if not line:
                raise self._ended(proc.wait(), "")
            if line.startswith(REPLY_MARKER):
                return json.loads(line[len(REPLY_MARKER):])
            if line.startswith(RESULT_MARKER):  # its end: what it returned, or the error it died of
                raise self._ended(proc.wait(), line)
        self.close()
        raise RuntimeError(f"the zygote gave no answer in {timeout:g}s")

    def close(self) -> None:
        proc = self.child
        if proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - stuck: end it
                proc.kill()
                proc.wait()
        self._reader.join(timeout=5)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


_zygote: Zygote | None = None


def _zygote_for(profile: str, imports: tuple[str, ...]) -> Zygote:
    global _zygote
    if _zygote is not None and (_zygote.key != (profile, tuple(imports)) or _zygote.child.poll() is not None):
        _zygote.close()
        _zygote = None
    if _zygote is None:
        _zygote = Zygote(profile, imports)
        atexit.register(_zygote.close)
    return _zygote


def process_setups(processes: int = PROCESSES, threads: int | None = None) -> list[dict[str, Any]]:
    """The setups of a case's processes: the same thread-pool size in each (this process's, by
    default), memory scribbled in each, the one-thread probe and the differential comparison
    (against a reference: float64, the mode-off algorithm, the host) in process 0 only. The
    processes judge the same inputs, so one differential is the normal tier's; the others'
    would repeat it."""
    if processes < 2:
        raise ValueError(f"the perturbation tier needs at least 2 processes, got {processes}")
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    return [{"index": i, "threads": threads, "scribble": True, "probe_threads": i == 0, "differential": i == 0}
            for i in range(processes)]


def judge_perturbed(case: Case, *, profile: str, runs: int, processes: int = PROCESSES,
                    device_index: int | None = None, imports: tuple[str, ...] = (),
                    timeout: float = 6 * 10**2) -> dict[str, Any]:
    """The case judged in ``processes`` fresh processes and compared across them: one row."""
    from detconf.conformance.harness import crashed_row

    request = {"case": case.to_json(), "runs": runs, "device_index": device_index, "timeout": timeout,
               "processes": process_setups(processes)}
    try:
        rows = _zygote_for(profile, imports).ask(request, timeout)
    except RuntimeError as exc:
        return _tier(crashed_row(case, f"perturbation tier: {exc}"), [])
    return merge_rows(case, rows)


def _tier(row: dict[str, Any], processes: list[dict[str, Any]]) -> dict[str, Any]:
    detail = row.setdefault("detail", {})
    detail["tier"] = "perturb"
    detail["processes"] = processes
    detail["perturbations"] = sorted({p for proc in processes for p in proc.get("perturbations", [])})
    return row


def merge_rows(case: Case, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the processes' rows: the worst process's row, with the comparison across
    processes judged by the one verdict function when every process passed on its own."""
    from detconf.conformance.harness import crashed_row
    from detconf.engine import verdict
    from detconf.engine.observation import Observation
    from detconf.vocabulary import VERDICTS, is_passing

    crashed = [(i, r["crashed"]) for i, r in enumerate(rows) if "crashed" in r]
    if crashed:
        i, why = crashed[0]
        return _tier(crashed_row(case, f"perturbation tier: process {i}: {why}"),
                     [r.get("detail", {}).get("process", {}) for r in rows if "crashed" not in r])
    processes = [r["detail"].pop("process", {}) for r in rows]
    order = list(VERDICTS)  # worst first
    worst = min(range(len(rows)), key=lambda i: order.index(rows[i]["verdict"]))
    row = dict(rows[worst])
    row["detail"] = dict(rows[worst]["detail"])
    detail = row["detail"]
    if not is_passing(rows[worst]["verdict"]):
        between = [p for p in rows[worst]["detail"].get("perturbations", []) if p in ("scribbled-memory", "competing-load")]
        detail["shown_by"] = (f"process {worst} on its own (runs within it"
                              + (f"; between or during them: {', '.join(between)})" if between else ")"))
    across = _across(rows, processes)
    if across is not None and across.get("error") and not is_passing(rows[worst]["verdict"]):
        # A process that failed on its own stops drawing new examples and shrinks its failure, so
        # its later examples are not the others': its verdict stands, nothing more is compared.
        across = {"processes": len(rows), "not_compared": f"process {worst} failed on its own ({rows[worst]['verdict']}) "
                                                          f"and went on to shrink its failure; {across['error']}"}
    sensitivity = {"threads": _threads(rows[0])}
    if across is not None:
        detail["across_processes"] = across
        if case.mode == "off" and "differing" in across:
            sensitivity["across_processes"] = "differs" if across["differing"] else "same"
    detail["sensitivity"] = sensitivity
    for r in rows:
        r["detail"].pop("per_example", None)
    detail.pop("per_example", None)
    row["runs"] = sum(r.get("runs", 0) for r in rows)
    if across is not None and across.get("error"):
        obs = Observation(error=across["error"])
        rec_verdict = verdict.verdict_for(case.expected, obs, listed=verdict.is_listed(case.entry))
        row.update(verdict=rec_verdict, observed=verdict.observed_word(obs))
        detail["error"] = across["error"]
    elif across is not None and across.get("differing") and is_passing(row["verdict"]) \
            and case.expected not in _ALERTS and rows[worst]["observed"] not in ("raised", "warned"):
        # (A documented alert promises no determinism: its outputs may differ, across processes too.)
        first = across["first"]
        obs = Observation(runs=row["runs"], identical=False,
                          mismatch=f"example {first['example']}: processes {first['processes']} gave different bytes "
                                   f"({across['differing']} of {across['compared']} examples)")
        decided = verdict.verdict_for(case.expected, obs, listed=verdict.is_listed(case.entry))
        row.update(verdict=decided, observed=verdict.observed_word(obs))
        detail["mismatch"] = obs.mismatch
        detail["shown_by"] = across["shown_by"]
    return _tier(row, processes)


def _across(rows: list[dict[str, Any]], processes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per example, process 0's inputs digest and fingerprint against every other process's."""
    lists = [r["detail"].get("per_example") or [] for r in rows]
    if not all(lists):
        return None
    n = min(len(x) for x in lists)
    compared, differing, first = 0, 0, None
    for k in range(n):
        base_inputs, base_out, _ = lists[0][k]
        for p in range(1, len(lists)):
            inputs, out, _ = lists[p][k]
            if inputs != base_inputs:
                return {"error": f"perturbation tier: process {p} drew other inputs than process 0 at example {k} "
                                 f"(inputs digest {inputs} vs {base_inputs}): the processes did not judge the "
                                 "same examples"}
        outs = [lists[p][k][1] for p in range(len(lists))]
        if None in outs:
            continue  # an example whose runs did not complete in some process: nothing to compare
        compared += 1
        if len(set(outs)) > 1:
            differing += 1
            if first is None:
                odd = [p for p in range(1, len(outs)) if outs[p] != outs[0]]
                first = {"example": k, "processes": [0, *odd], "inputs": base_inputs,
                         "fingerprints": outs}
    out: dict[str, Any] = {"processes": len(rows), "compared": compared, "differing": differing,
                           "inputs_checked": n}
    if first is not None:
        out["first"] = first
        changed = _differing_settings(processes, first["processes"])
        out["shown_by"] = (f"across processes {first['processes']} (runs agreed within each); "
                           f"the processes differed in: {changed}")
    return out


def _differing_settings(processes: list[dict[str, Any]], which: list[int]) -> str:
    """The per-process settings that differ between the processes ``which``, as one line."""
    keys = sorted({k for p in which for k in processes[p] if k not in ("index", "perturbations")})
    parts = ["fresh process (pid)"]
    for key in keys:
        values = [processes[p].get(key) for p in which]
        if key != "pid" and len({json.dumps(v, default=str) for v in values}) > 1:
            parts.append(f"{key} {' vs '.join(map(str, values))}")
    parts.append("empty compile cache each")
    return "; ".join(parts)


def _threads(row: dict[str, Any]) -> dict[str, Any] | None:
    """Thread-count sensitivity from process 0's one-thread probe: examples compared and differing."""
    probes = [e[2] for e in row["detail"].get("per_example") or [] if e[2] is not None]
    if not probes:
        return None
    return {"compared": len(probes), "differing": sum(1 for same in probes if not same)}
