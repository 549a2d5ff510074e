"""Judge one case in a fresh Python process.

Some backends keep the determinism flag per thread, first setting wins
(Ascend NPU): two modes cannot be judged one after the other in one process.
A backend declares ``isolate_modes=True`` and every case on it runs here; so do
all cases under ``--isolate``, and the old docs' cuBLAS entries, which need
``CUBLAS_WORKSPACE_CONFIG`` unset before CUDA starts.

The case travels to the child as JSON (:meth:`Case.to_json`) through the one
child runner, :mod:`detconf.child`; the child judges exactly that case and sends
the row back. Run by hand::

    python -m detconf.child conformance.isolated:judge_payload '{"case": ..., "profile": "ci", "runs": 2}'
"""
from __future__ import annotations

from typing import Any

from detconf.conformance.catalog import PROFILE_SOURCES, import_vendor_recipes
from detconf.conformance.plan import Case
from detconf.child import ChildFailed, child_env, run_in_child

TARGET = "detconf.conformance.isolated:judge_payload"


def payload_for(case: Case, *, profile: str, runs: int, device_index: int | None = None) -> dict[str, Any]:
    return {"case": case.to_json(), "profile": profile, "runs": runs, "device_index": device_index}


def judge_in_subprocess(case: Case, *, profile: str, runs: int, timeout: float = 600,
                        unset_env: tuple[str, ...] = (), device_index: int | None = None) -> dict[str, Any]:
    """The row the child computed; a child that dies gives a ``harness-error`` row.

    ``unset_env`` names variables the child must not see (e.g.
    ``CUBLAS_WORKSPACE_CONFIG``, which CUDA reads once per process).
    """
    from detconf.conformance.harness import crashed_row

    try:
        row = run_in_child(TARGET, payload_for(case, profile=profile, runs=runs, device_index=device_index),
                           env=child_env(unset=unset_env),
                           timeout=timeout, what=f"isolated case {case.id}")
    except ChildFailed as exc:
        return crashed_row(case, str(exc).splitlines()[0])
    row.setdefault("detail", {})["isolated"] = True
    return row


def judge_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Child side: judge the case in ``payload`` on its device and return the row."""
    from detconf.conformance import profiles
    from detconf.conformance.harness import judge
    from detconf.engine.devices import resolve_devices

    profiles.load(payload["profile"])
    case = Case.from_json(payload["case"])
    if case.entry.source in PROFILE_SOURCES:
        import_vendor_recipes(case.entry.source)
    backend = resolve_devices([case.device])[0]
    index = payload.get("device_index")
    if index is not None:
        backend = backend.on(int(index))
    return judge(case, backend, runs=int(payload["runs"]))
