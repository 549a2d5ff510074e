"""Checks for ``--source batch-invariance``: does ``f(x[:k])`` equal ``f(x)[:k]`` bit for bit?

The promise (Inductor's ``batch_invariant`` setting, torch >= 2.13, for the ops that
``data/batch-invariance.json`` lists) and the programs are :mod:`conformance.batch_invariance`'s;
this module makes them cells of the suite's matrix, one entry per op
(``data/batch_invariance_catalog.json``):

- compiled with Inductor in a deterministic mode (error, warn_only), on a torch that has the
  setting: the setting is switched on and the cell is **judged** (``held``: no example's prefix
  differed; ``conforms`` or ``violated``);
- eager, ``aot_eager`` or the mode off: the setting stays off and nothing is promised, so the
  cell is ``recorded`` with how many examples differed (sensitivity, never a failure).

Each Hypothesis example is one :class:`conformance.batch_invariance.Example`: the first of a
drawn seed's stream is a full batch of 64 rows of width 129 against its first 5 (a row count at
which CPU BLAS kernels change their blocking), the others drawn from it. The compiled cells use
``torch.compile(backend=...)`` on a fresh Dynamo cache, as the standalone command does.
"""
from __future__ import annotations

import functools

from typing import Any

import torch
from hypothesis import strategies as st

from detconf.conformance import batch_invariance as bi
from detconf.engine.checks import CheckObservation, CheckUnsupported, check
from detconf.engine.determinism import apply_mode as enter_mode
from detconf.engine.determinism import mode_is_on, preserved_global_state

SOURCE = bi.SOURCE
#: Hypothesis examples per cell: each compiles the op for two batch sizes.
MAX_EXAMPLES = 2
#: The examples one drawn seed's stream offers (the first is the fixed 64-against-5 one).
STREAM = 4


def setting_for(mode: str, compile_setting: str, promise: bi.Promise, torch_version: str) -> str:
    """``on`` where torch promises batch invariance for this run (a deterministic mode, compiled
    with a setting the promise names, a torch that has the setting), else ``off``."""
    promised_compile = compile_setting in promise.compile and promise.made_by(torch_version)
    return "on" if mode_is_on(mode) and promised_compile else "off"


def judge(op_id: str, cell: bi.Cell, *, setting: str, compile_setting: str, promise: bi.Promise,
          torch_version: str) -> CheckObservation:
    """What one example's :class:`conformance.batch_invariance.Cell` says (pure: a test can plant
    a cell). Promised: held when no prefix differed. Elsewhere: recorded (``held`` None)."""
    if cell.judged == 0:
        raise CheckUnsupported(cell.unsupported or f"{op_id}: no example ran")
    promised = promise.holds_for(op_id, compile_setting, setting, torch_version)
    differed = cell.differing > 0
    return CheckObservation(
        held=(not differed) if promised else None,
        observed="batch-dependent" if differed else "batch-invariant",
        detail={"setting": f"{promise.setting}={setting == 'on'}", "promised": promised,
                "promise": promise.text if promised else None, "examples_differing": cell.differing,
                "max_abs_diff": cell.max_abs_diff, "largest_input": cell.largest_input,
                "first_difference": cell.first_difference},
    )


@functools.lru_cache(maxsize=1)
def _promise() -> "bi.Promise":
    """The promise of the suite's data file, read and checked once per process (not per example)."""
    return bi.load_promise()


def _check_for(op_id: str):
    def batch_invariant(draw, entry, device: torch.device, mode: str, compiler: Any = None) -> CheckObservation:
        seed = draw(st.integers(0, 2**30 - 1), label="data seed")
        ex = bi.examples(STREAM, seed=seed)[draw(st.integers(0, STREAM - 1), label="example")]
        promise = _promise()
        compile_setting = compiler.setting if compiler is not None else "eager"
        setting = setting_for(mode, compile_setting, promise, torch.__version__)
        with preserved_global_state():
            enter_mode(mode)
            cell = bi.observe(bi.OPS[op_id], str(device), compile_setting, setting, [ex])
        seen = judge(op_id, cell, setting=setting, compile_setting=compile_setting, promise=promise,
                     torch_version=torch.__version__)
        seen.detail["example"] = ex.to_json()
        seen.detail["threads"] = torch.get_num_threads()  # CPU kernels may block by it (the matmul finding)
        return seen

    batch_invariant.__name__ = batch_invariant.__qualname__ = f"batch_invariant_{op_id}"
    return batch_invariant


# No shrinking: an example is a drawn seed and a position in its stream, so a smaller seed or
# position is another example, not a smaller one, and each try compiles the op twice (a violated
# compiled cell spent about 30 s of a 2-core machine's time in shrink tries that could not make
# its example smaller). The first failing example is the row's.
for _op in bi.OPS:
    check(f"{SOURCE}:{_op}", source=SOURCE, compiles=True, max_examples=MAX_EXAMPLES, shrinks=False)(_check_for(_op))
