"""``python -m detconf.reports upstream RESULTS.jsonl [--cell ENTRY_ID ...] --out DIR``: a finding
that PyTorch's maintainers can run without detconf.

For every failing or waived cell of a results file (or the cells ``--cell``/``--device``/
``--mode``/``--compile``/``--phase`` select) it writes ``DIR/<cell>/repro.py``, a script that
imports only torch, and ``DIR/<cell>/issue.md``, a short issue text. Everything comes from the
row (the reports read results files only):

- op cells: ``detail.repro`` (the input-building lines, the op function and its call, written by
  the recipe kit) with the suite's two input builders written out in torch alone, so the
  example's inputs are materialised exactly; the call runs ``runs`` times under the cell's mode
  (through ``torch.compile(backend=...)`` for a compiled cell, with the seeded gradients and the
  backward-only phase as the runner does them) and the script prints what each run raised,
  warned (Python warnings and alerts C++ printed on stderr), whether the runs' bytes differed,
  for a compiled cell how far the result is from eager, and the verdict those facts make;
- the ``fill_uninitialized_memory`` and Inductor-setting checks: their detail fields (op, dtype,
  shape, call) make the script.

- OpInfo sweep cells: the row's OpInfo reproducer (``detail.repro``) makes a script that takes
  the sample from torch's own test database (``torch.testing._internal``, as torch's OpInfo tests
  do; it needs NumPy and expecttest), generated afresh before every run with the suite's seeds,
  the inputs' digests compared across runs, then run, compared and judged as an op cell.

Other cells (other checks; a row without a reproducer) are named with the reason and not written. Exit status 0
when every selected cell was written, 2 on bad input or when none could be (one line on stderr).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detconf.vocabulary import EXPECTATIONS, FAILING, MODE_CALLS

__all__ = ["GRAD_SEED", "INPUT_BUILDERS", "UpstreamError", "Written", "main", "select_cells", "issue_text",
           "repro_script", "write_upstream"]

#: The seed of the gradients the runner feeds a backward (``engine.runner.GRAD_SEED``; a test
#: keeps the two equal).
GRAD_SEED = 20_240_917

#: The environment a CUDA run gets from the suite (``engine/devices.py``), per the
#: reproducibility notes: without it cuBLAS raises the alert.
CUDA_ENVIRONMENT = (("CUBLAS_WORKSPACE_CONFIG", ":4096:8"),)

_ENGINE_IMPORT = re.compile(r"^from (?:detconf\.)?engine\.strategies import [\w, ]+$", re.M)
_TOLERANCE = re.compile(r"rtol=([0-9.eE+-]+), atol=([0-9.eE+-]+)")


class UpstreamError(Exception):
    """Bad input: one line for the user."""


@dataclass(frozen=True)
class Written:
    cell: str
    folder: Path


# The suite's input builders (engine/strategies.py: build_tensor, build_indices) in torch alone:
# the same generator calls in the same order, so a row's seeds rebuild the same values.
INPUT_BUILDERS = '''
def build_tensor(shape, dtype, seed, *, device="cpu", low=-10, high=10, contiguous=True):
    """Values uniform in [low, high) (integers in [low, high]) from a CPU generator seeded with seed;
    contiguous=False: a transposed (or, in 1-d, strided) view of the same values."""
    shape = tuple(shape)
    gen = torch.Generator().manual_seed(seed)
    flat = contiguous or len(shape) == 0
    base_shape = shape if flat else ((shape[0] * 2,) if len(shape) == 1 else shape[::-1])
    if dtype.is_complex:
        part = torch.float64 if dtype == torch.complex128 else torch.float32
        real = torch.rand(base_shape, generator=gen, dtype=part) * (high - low) + low
        imag = torch.rand(base_shape, generator=gen, dtype=part) * (high - low) + low
        base = torch.complex(real, imag).to(dtype)
    elif dtype.is_floating_point:
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        base = (torch.rand(base_shape, generator=gen, dtype=wide) * (high - low) + low).to(dtype)
    elif dtype == torch.bool:
        base = torch.randint(0, 2, base_shape, generator=gen).to(torch.bool)
    else:
        info = torch.iinfo(dtype)
        lo, hi = max(int(math.ceil(low)), info.min), min(int(math.floor(high)), info.max)
        base = torch.randint(lo, hi + 1, base_shape, generator=gen, dtype=torch.int64).to(dtype)
    base = base.to(device)
    if flat:
        return base
    return base[::2] if len(shape) == 1 else base.permute(*reversed(range(len(shape))))


def build_indices(shape, size, seed, *, duplicates=0.0, unique=False, device="cpu", dtype=torch.int64):
    """prod(shape) indices into [0, size): distinct ones (unique=True), or about a share
    `duplicates` of repeats of a few distinct targets."""
    shape = tuple(shape)
    n = math.prod(shape)
    gen = torch.Generator().manual_seed(seed)
    if n == 0:
        return torch.zeros(shape, dtype=torch.int64).to(dtype=dtype, device=device)
    if unique:
        values = torch.randperm(size, generator=gen)[:n]
    else:
        distinct = min(size, max(1, round(n * (1.0 - duplicates))))
        targets = torch.randperm(size, generator=gen)[:distinct]
        picks = torch.cat([torch.arange(distinct), torch.randint(0, distinct, (n - distinct,), generator=gen)])
        values = targets[picks[torch.randperm(n, generator=gen)]]
    return values.reshape(shape).to(dtype=dtype, device=device)
'''.strip()


# ---------------------------------------------------------------------------
# Reading and choosing cells


def _key(row: dict[str, Any]) -> tuple:
    return (row.get("source"), row.get("entry_id"), row.get("phase") or "program", row.get("device"),
            row.get("mode"), row.get("compile") or "eager")


def cell_label(row: dict[str, Any]) -> str:
    """``put_(accumulate=False) [cpu/error/inductor]`` (``<backward-only>`` after the id where it is that phase)."""
    phase = row.get("phase") or "program"
    return (f"{row.get('entry_id')}" + (f" <{phase}>" if phase != "program" else "")
            + f" [{row.get('device')}/{row.get('mode')}/{row.get('compile') or 'eager'}]")


def _records(path: str | Path) -> list[Any]:
    """Every JSON line of ``path``, read the reports' one way; :class:`UpstreamError` otherwise."""
    from detconf.reports.readfile import BadLine, Unreadable, json_lines, open_regular

    try:
        with open_regular(path) as f:
            return [value for _, value in json_lines(f)]
    except Unreadable as exc:
        raise UpstreamError(f"{path}: {exc.problem}") from None
    except BadLine as exc:
        raise UpstreamError(f"{path}" + (f", line {exc.line}" if exc.line else "") + f": {exc.problem}") from None


def read_rows(records: list[Any], path: str | Path) -> list[dict[str, Any]]:
    """The result rows among ``records`` (of ``path``), a later row of a cell replacing an earlier one."""
    rows: dict[tuple, dict[str, Any]] = {}
    for row in records:
        if isinstance(row, dict) and row.get("record") == "result":
            if not isinstance(row.get("entry_id"), str) or not isinstance(row.get("detail", {}), dict):
                raise UpstreamError(f"{path}: a result row without an entry_id or with a detail that is no object")
            rows[_key(row)] = row
    if not rows:
        raise UpstreamError(f"{path}: no result rows")
    return list(rows.values())


def _failing_or_waived(row: dict[str, Any]) -> bool:
    return row.get("verdict") in FAILING or bool((row.get("detail") or {}).get("known_finding"))


def select_cells(rows: list[dict[str, Any]], *, cells: list[str] = (), devices: list[str] = (),
                 modes: list[str] = (), compile: list[str] = (), phases: list[str] = ()) -> list[dict[str, Any]]:
    """The failing or waived rows that match every given filter (``cells``: entry ids)."""
    chosen = [r for r in rows if _failing_or_waived(r)
              and (not cells or r["entry_id"] in cells)
              and (not devices or r.get("device") in devices)
              and (not modes or r.get("mode") in modes)
              and (not compile or (r.get("compile") or "eager") in compile)
              and (not phases or (r.get("phase") or "program") in phases)]
    for entry_id in cells:
        if not any(r["entry_id"] == entry_id for r in rows):
            raise UpstreamError(f"--cell {entry_id!r}: no row of that entry in the results file")
        if not any(r["entry_id"] == entry_id for r in chosen):
            raise UpstreamError(f"--cell {entry_id!r}: no failing or waived cell of that entry matches the filters")
    if not chosen:
        raise UpstreamError("no failing or waived cell matches: nothing to reproduce")
    return sorted(chosen, key=lambda r: tuple(str(k) for k in _key(r)))


# ---------------------------------------------------------------------------
# The script


def _head(row: dict[str, Any], setting: str, needs: str = "Needs only torch: python3 repro.py") -> list[str]:
    env = [f"os.environ.setdefault({k!r}, {v!r})" for k, v in CUDA_ENVIRONMENT] if row.get("device") == "cuda" else []
    return [
        "#!/usr/bin/env python3",
        f'"""{_docstring_safe(cell_label(row))}: torch {row.get("torch_version")}, {setting}.',
        "",
        f"Documented: {_docstring_safe(str(row.get('sentence', '')))}",
        f"Expected: {row.get('expected')} ({EXPECTATIONS.get(str(row.get('expected')), '')}).",
        f"Recorded: {row.get('verdict')} (observed {row.get('observed')!r}). {needs}",
        '"""',
        "import json",
        "import math",
        "import os",
        "import sys",
        "import warnings",
        *env,
        "",
        "import torch",
        "import torch.nn.functional as F",
        "",
    ]


def _docstring_safe(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', "'''")


def repro_script(row: dict[str, Any]) -> str:
    """The standalone script for ``row``; :class:`UpstreamError` when the row cannot make one."""
    detail = row.get("detail") or {}
    if row.get("mode") not in MODE_CALLS:
        raise UpstreamError(f"{cell_label(row)}: unknown mode {row.get('mode')!r}")
    if row.get("source") == "sweep":
        return _sweep_script(row, detail)
    if row.get("source") == "batch-invariance":
        return _batch_invariance_script(row, detail)
    if "fill_uninitialized_memory" in detail and "op" in detail:
        return _fill_script(row, detail)
    if str(row.get("entry_id", "")).endswith("->inductor.config.deterministic") and "call" in detail:
        return _inductor_setting_script(row, detail)
    if detail.get("repro"):
        return _op_script(row, detail)
    raise UpstreamError(f"{cell_label(row)}: the row carries no reproducer (detail.repro) and is no check this "
                        "command knows; not written")


def _op_parts(row: dict[str, Any], repro: str) -> tuple[str, str, list[str], list[str], list[str]]:
    """(setup source, op function name, input names, constant keyword sources, gradient inputs)."""
    text = _ENGINE_IMPORT.sub("", repro)
    if re.search(r"^\s*(?:from|import) (?:detconf|engine|conformance)\b", text, re.M):
        raise UpstreamError(f"{cell_label(row)}: detail.repro imports detconf beyond its input builders")
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise UpstreamError(f"{cell_label(row)}: detail.repro is not Python ({exc.msg}, line {exc.lineno})") from None
    call = None
    drop: set[int] = set()
    grads: list[str] = []
    assigned: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["out"] \
                and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            call = node.value
            drop.update(range(node.lineno, node.end_lineno + 1))
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "requires_grad_" \
                and isinstance(node.value.func.value, ast.Name):
            grads.append(node.value.func.value.id)
            drop.add(node.lineno)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name.split(".")[0] not in ("math", "warnings", "torch") for a in node.names) \
                    or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] not in ("torch",)):
                raise UpstreamError(f"{cell_label(row)}: detail.repro imports something other than torch")
            drop.update(range(node.lineno, node.end_lineno + 1))
            continue
        if isinstance(node, ast.Assign):
            assigned.update(t.id for t in node.targets if isinstance(t, ast.Name))
    if call is None or call.args:
        raise UpstreamError(f"{cell_label(row)}: detail.repro has no 'out = op(name=...)' call")
    inputs, constants = [], []
    for kw in call.keywords:
        if kw.arg is None:
            raise UpstreamError(f"{cell_label(row)}: detail.repro's call passes **keywords")
        if isinstance(kw.value, ast.Name) and kw.value.id == kw.arg and kw.arg in assigned:
            inputs.append(kw.arg)
        else:
            constants.append(f"{kw.arg}={ast.get_source_segment(text, kw.value)}")
    lines = text.splitlines()
    setup = "\n".join(line for n, line in enumerate(lines, 1) if n not in drop and not line.startswith("# then backward"))
    return setup.strip("\n"), call.func.id, inputs, constants, grads


def _op_script(row: dict[str, Any], detail: dict[str, Any]) -> str:
    setup, op_name, inputs, constants, grads = _op_parts(row, str(detail["repro"]))
    setting = row.get("compile") or "eager"
    compiled = setting != "eager"
    tolerance = _TOLERANCE.search(str(detail.get("wrong_result") or ""))
    settings = [
        f"RUNS = {int(row.get('runs') or 2)!r}  # as many runs as the cell made",
        f"MODE = {row['mode']!r}",
        f"COMPILE = {(setting if compiled else None)!r}  # torch.compile(backend=COMPILE, dynamic=False); None: eager",
        f"PHASE = {(row.get('phase') or 'program')!r}  # backward-only: forward with the mode off, backward under it",
        f"GRADS = {tuple(grads)!r}  # inputs differentiated (the backward is part of the program)",
        f"GRAD_SEED = {GRAD_SEED}",
        f"EXPECTED = {row.get('expected')!r}",
        f"RECORDED = {row.get('verdict')!r}",
        f"TOLERANCE = {(tuple(float(x) for x in tolerance.groups()) if tolerance else None)!r}  "
        "# (rtol, atol) against eager with the mode off; None: torch.testing's defaults",
    ]
    program = [
        f"def program({', '.join(inputs)}):",
        f"    return {op_name}(" + ", ".join([f"{n}={n}" for n in inputs] + constants) + ")",
        "",
        "",
        "INPUTS = {" + ", ".join(f"{n!r}: {n}" for n in inputs) + "}",
    ]
    return "\n".join(_head(row, _setting_words(row)) + [INPUT_BUILDERS, "", "", "# -- the example", setup, "", "",
                                                         *program, "", *settings, "", _OP_RUNNER]) + "\n"


#: The reproducer the sweep writes into ``detail.repro`` (``conformance/recipes_sweep._repro``),
#: line by line: the OpInfo, the seed, the sample and the call.
_SWEEP_REPRO = re.compile(
    r"import itertools, random\n"
    r"import numpy\n"
    r"from torch\.testing\._internal\.common_methods_invocations import op_db\n"
    r"op = next\(o for o in op_db if \(o\.name, o\.variant_test_name\) == \((?P<name>'[^'\\\n]*'|\"[^\"\\\n]*\"), "
    r"(?P<variant>'[^'\\\n]*'|\"[^\"\\\n]*\")\)\)\n"
    r"torch\.manual_seed\((?P<seed>\d+)\); random\.seed\((?P=seed)\); numpy\.random\.seed\((?P=seed)\)\n"
    r"samples = op\.sample_inputs\((?P<device>'[\w:]+'), (?P<dtype>torch\.\w+), requires_grad=(?P<grad>True|False), "
    r"set_seed=False\)\n"
    r"sample = list\(itertools\.islice\(samples, (?P<limit>\d+)\)\)\[(?P<index>\d+)\]\n"
    r"(?:torch\.manual_seed\((?P<reseed>\d+)\)\n)?"
    r"out = (?:(?P<backward>op\.gradcheck_wrapper\(op\.op, sample\.input, \*sample\.args, \*\*sample\.kwargs\))"
    r"|op\(sample\.input, \*sample\.args, \*\*sample\.kwargs\))"
    r"  # run twice \(inputs cloned\) and compare bytes")


def _sweep_script(row: dict[str, Any], detail: dict[str, Any]) -> str:
    """A sweep cell: the sample rebuilt from torch's own OpInfo database (as torch's OpInfo tests
    build it: PyTorch's maintainers run it as they run those), generated afresh before every run
    with every generator seeded as the suite seeds it, the inputs' bytes compared across runs."""
    match = _SWEEP_REPRO.fullmatch(str(detail.get("repro") or ""))
    if match is None:
        raise UpstreamError(f"{cell_label(row)}: the sweep row's detail.repro is not the sweep's OpInfo reproducer; "
                            "not written")
    setting = row.get("compile") or "eager"
    settings = [
        f"OPINFO = ({ast.literal_eval(match['name'])!r}, {ast.literal_eval(match['variant'])!r})  "
        "# (name, variant_test_name) in torch's op_db",
        f"DEVICE = {ast.literal_eval(match['device'])!r}",
        f"DTYPE = {match['dtype']}",
        f"SEED = {int(match['seed'])}  # torch, random and numpy seeded with it before the samples are generated",
        f"LIMIT, INDEX = {int(match['limit'])}, {int(match['index'])}  # the sample: number INDEX of the first LIMIT",
        f"REQUIRES_GRAD = {match['grad'] == 'True'}",
        f"BACKWARD = {bool(match['backward'])}  # gradcheck_wrapper, then backward through output_process_fn_grad",
        f"RESEED = {(int(match['reseed']) if match['reseed'] else None)!r}  # a random op: torch reseeded before each call",
        f"RUNS = {int(row.get('runs') or 2)!r}  # as many runs as the cell made",
        f"MODE = {row['mode']!r}",
        f"COMPILE = {(setting if setting != 'eager' else None)!r}  # torch.compile(backend=COMPILE, dynamic=False); None: eager",
        f"PHASE = {(row.get('phase') or 'program')!r}  # backward-only: forward with the mode off, backward under it",
        f"GRAD_SEED = {GRAD_SEED}",
        f"EXPECTED = {row.get('expected')!r}",
        f"RECORDED = {row.get('verdict')!r}",
        "TOLERANCE = None  # against eager with the mode off: torch.testing's defaults",
    ]
    needs = ("Needs torch and its OpInfo test database (torch.testing._internal, which imports NumPy and "
             "expecttest, as torch's own tests do): python3 repro.py")
    return "\n".join(_head(row, _setting_words(row), needs) + [*settings, "", "", _SWEEP_DATABASE, "", "",
                                                              _RUNNER_HELPERS, "", "", _SWEEP_RUN_ONCE, "", "",
                                                              _RUNNER_TAIL]) + "\n"


# How a sweep script finds its OpInfo: torch's test database, imported with its side effects
# (warning filters, backend flags, a reseed) undone, as the suite imports it.
_SWEEP_DATABASE = r'''
import hashlib
import itertools
import random

try:
    import numpy
    _flags = (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
              torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    _frozen = getattr(torch.backends, "flags_frozen", None)  # the package freezes the backend flags
    with warnings.catch_warnings():
        _argv, sys.argv = sys.argv, sys.argv[:1]  # the testing package parses the command line
        from torch.testing._internal.common_methods_invocations import op_db
        sys.argv = _argv
    if _frozen is not None:
        _frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    (torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
     torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) = _flags
except ImportError as exc:
    sys.exit(f"this script needs torch's OpInfo database (torch.testing._internal), which failed to import: {exc}")
OP = next((o for o in op_db if (o.name, o.variant_test_name) == OPINFO), None)
if OP is None:
    sys.exit(f"torch {torch.__version__} has no OpInfo {OPINFO}")


def fresh_sample():
    """The cell's sample as the suite generates it: every generator seeded with SEED."""
    torch.manual_seed(SEED)
    random.seed(SEED)
    numpy.random.seed(SEED)
    samples = OP.sample_inputs_func(OP, torch.device(DEVICE), DTYPE, REQUIRES_GRAD)
    return list(itertools.islice(samples, LIMIT))[INDEX]


def walk(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from walk(v)


def flat(t):
    """``t``'s elements, one after another, with unit stride (``contiguous()`` keeps the stride of a
    size-1 dimension, which a byte view refuses)."""
    return t.reshape(-1).clone(memory_format=torch.contiguous_format)


def digest(sample):
    """The bytes of every tensor the sample holds (dense), hashed: the inputs of each run."""
    h = hashlib.sha256()
    for t in walk((sample.input, sample.args, sample.kwargs)):
        t = t.detach().to("cpu")
        t = t.to_dense() if t.layout != torch.strided else t
        h.update(str((t.dtype, tuple(t.shape))).encode())
        h.update(flat(t).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def program(the_input, args, kwargs):
    if RESEED is not None:
        torch.manual_seed(RESEED)
    if BACKWARD:
        return OP.gradcheck_wrapper(OP.op, the_input, *args, **kwargs)
    return OP.op(the_input, *args, **kwargs)


INPUT_DIGESTS = []
'''.strip()

_SWEEP_RUN_ONCE = r'''
def dense(t):
    t = t.detach().to("cpu")
    return (t.to_dense() if t.layout != torch.strided else t).clone(memory_format=torch.contiguous_format)


def run_once(fn, mode):
    """One run on a freshly generated sample: (values, raised, alert warnings, stderr alerts)."""
    sample = fresh_sample()
    INPUT_DIGESTS.append(digest(sample))
    leaves = [t for t in walk((sample.input, sample.args, sample.kwargs)) if t.requires_grad and t.is_leaf]
    values, raised = [], None
    with warnings.catch_warnings(record=True) as caught, NativeStderr() as native:
        warnings.simplefilter("always")
        try:
            set_mode("off" if PHASE == "backward-only" else mode)
            out = fn(sample.input, sample.args, sample.kwargs)
            outputs = tensors(out)
            if BACKWARD:
                processed = tensors(sample.output_process_fn_grad(out), "grad_out")
                roots = [(t, seeded_grad(t, i)) for i, (_, t) in enumerate(processed)
                         if t.requires_grad and (t.is_floating_point() or t.is_complex())]
                set_mode(mode)
                if roots:
                    torch.autograd.backward([r for r, _ in roots], [g for _, g in roots])
                outputs += [(f"grad[{i}]", t.grad) for i, t in enumerate(leaves) if t.grad is not None]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            values = [(label, dense(t)) for label, t in outputs]
            scribble_outputs(t for _, t in outputs)
        except Exception as exc:  # what it raised is the evidence
            raised = raised_as(exc)
        finally:
            set_mode("off")
    return (values, raised, *alerts_of(caught, native))
'''.strip()


def _setting_words(row: dict[str, Any]) -> str:
    setting = row.get("compile") or "eager"
    words = f"{row.get('device')}, {MODE_CALLS.get(str(row.get('mode')), row.get('mode'))}"
    return words + (f", torch.compile(backend={setting!r})" if setting != "eager" else ", eager")


#: The line of a script's run that overwrites the run's outputs once copied (``scribble_outputs``),
#: as the op and sweep scripts write it: what a test or a benchmark takes out to see the difference.
SCRIBBLE_LINE = "            scribble_outputs(t for _, t in outputs)\n"

# What a script does with its program: the runner's steps (engine/runner.py) in torch alone —
# the helpers, one run (an op cell's or a sweep cell's), then the runs compared and judged.
_RUNNER_HELPERS = r'''ALERT = ("does not have a deterministic implementation", "not deterministic because it uses CuBLAS")
MODE_FLAGS = {"error": (True, False), "warn_only": (True, True), "off": (False, False)}


def set_mode(mode):
    enabled, warn_only = MODE_FLAGS[mode]
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


SCRIBBLE = torch.Generator().manual_seed(2**31 - 1)  # scribble_outputs' bytes: other bytes each run, the same every time


def scribble_outputs(outputs):
    """After a run's values are copied: the memory of its outputs overwritten with random bytes.
    An allocator hands a freed block to a later request of its size (a caching allocator, as
    CUDA's, hands it to the next one): memory the next run's op reads without writing it then
    holds other bytes, where it would otherwise hold this run's result again and the runs would
    look identical. An op that writes what it reads cannot see them. A tensor whose memory torch
    does not lend as bytes is left as it is (the run's values are copied already)."""
    with torch.no_grad():
        for t in outputs:
            if t.layout == torch.strided and t.numel() and t.device.type != "meta":
                try:
                    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
                except (RuntimeError, NotImplementedError):
                    continue
                raw.copy_(torch.randint(0, 256, (raw.numel(),), dtype=torch.uint8, generator=SCRIBBLE))


def tensors(value, label="out"):
    if isinstance(value, torch.Tensor):
        return [(label, value)]
    if isinstance(value, (tuple, list)):
        return [pair for i, v in enumerate(value) for pair in tensors(v, f"{label}[{i}]")]
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in tensors(v, f"{label}[{k!r}]")]
    return []


def seeded_grad(t, index):
    gen = torch.Generator().manual_seed(GRAD_SEED + index)
    g = torch.randn(tuple(t.shape), generator=gen, dtype=torch.float64)
    if t.is_complex():
        g = torch.complex(g, torch.randn(tuple(t.shape), generator=gen, dtype=torch.float64))
    return g.to(dtype=t.dtype, device=t.device)


class NativeStderr:
    """What C++ writes to file descriptor 2 (the alert of a compiled graph may go only there)."""

    def __enter__(self):
        import tempfile
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        self.lines = []
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        text = self.file.read().decode("utf-8", "replace")
        self.file.close()
        sys.stderr.write(text)
        self.lines = text.splitlines()


def raised_as(exc):
    return f"{type(exc).__name__}: " + (str(exc).strip().splitlines() or [""])[0][:300]


def alerts_of(caught, native):
    """(the alert's Python warnings, the alert lines C++ printed on stderr where none reached Python)."""
    alerts = [str(w.message).splitlines()[0][:300] for w in caught if any(a in str(w.message) for a in ALERT)]
    printed = [line.strip()[:300] for line in native.lines if any(a in line for a in ALERT)] if not alerts else []
    return alerts, printed


'''.strip()

_OP_RUN_ONCE = r'''def run_once(fn, mode):
    """One run on fresh copies of the inputs: (values, raised, alert warnings, stderr alerts)."""
    inputs = {k: v.detach().clone().requires_grad_(k in GRADS) for k, v in INPUTS.items()}
    values, raised = [], None
    with warnings.catch_warnings(record=True) as caught, NativeStderr() as native:
        warnings.simplefilter("always")
        try:
            set_mode("off" if PHASE == "backward-only" else mode)
            outputs = tensors(fn(**inputs))
            if GRADS:
                roots = [(t, seeded_grad(t, i)) for i, (_, t) in enumerate(outputs)
                         if t.requires_grad and (t.is_floating_point() or t.is_complex())]
                set_mode(mode)
                torch.autograd.backward([r for r, _ in roots], [g for _, g in roots])
                outputs += [(f"grad[{k}]", inputs[k].grad) for k in GRADS if inputs[k].grad is not None]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            values = [(label, t.detach().to("cpu").clone(memory_format=torch.contiguous_format)) for label, t in outputs]
            scribble_outputs(t for _, t in outputs)
        except Exception as exc:  # what it raised is the evidence
            raised = raised_as(exc)
        finally:
            set_mode("off")
    return (values, raised, *alerts_of(caught, native))


'''.strip()

_RUNNER_TAIL = r'''def same_bytes(a, b):
    return len(a) == len(b) and all(la == lb and x.dtype == y.dtype and x.shape == y.shape
                                    and torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))
                                    for (la, x), (lb, y) in zip(a, b))


def distance(actual, reference):
    """(max abs difference, within tolerance) of actual against reference, output by output."""
    worst, close = 0.0, True
    for (_, x), (_, y) in zip(actual, reference):
        if x.shape != y.shape:
            return None, False
        if x.is_floating_point() or x.is_complex():
            d = (x.to(torch.complex128 if x.is_complex() else torch.float64)
                 - y.to(torch.complex128 if y.is_complex() else torch.float64)).abs()
            if d.numel():
                worst = max(worst, float(torch.nan_to_num(d, nan=float("inf")).max()))
        try:
            rtol, atol = TOLERANCE if TOLERANCE else (None, None)
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
        except AssertionError:
            close = False
    return worst, close


def judge(runs, raised_runs, alert_raises, warned_runs, printed_runs, identical, close):
    """The verdict these facts make, by the suite's table (docs/results-schema.md)."""
    if EXPECTED == "raises":
        if alert_raises == runs:
            return "conforms"
        return "stale-doc" if identical and not raised_runs else "missing-raise"
    if EXPECTED == "warns":
        if alert_raises:
            return "undocumented-raise"
        return "missing-warning" if warned_runs < runs else "conforms"
    if EXPECTED == "deterministic-or-raises" and alert_raises == runs:
        return "conforms"
    if EXPECTED == "deterministic-or-warns" and warned_runs == runs and not alert_raises:
        return "conforms"
    if EXPECTED == "deterministic-or-warns" and printed_runs and not alert_raises:
        return "missing-warning"
    if alert_raises:
        return "undocumented-raise"
    if raised_runs:
        return "raised (not the alert)"
    if not identical:
        return "nondeterministic"
    if warned_runs or printed_runs:
        return "spurious-warning"
    return "conforms" if close is not False else "wrong-result"


def main():
    fn = program
    if COMPILE is not None:
        fn = torch.compile(program, backend=COMPILE, dynamic=False)
    print(f"torch {torch.__version__}; {MODE} (torch.use_deterministic_algorithms); "
          f"{'torch.compile(backend=%r)' % COMPILE if COMPILE else 'eager'}; {RUNS} runs; phase {PHASE}")
    records = [run_once(fn, MODE) for _ in range(RUNS)]
    for i, (_, raised, alerts, printed) in enumerate(records, 1):
        said = raised or "returned"
        said += "; warned: " + alerts[0] if alerts else ("; printed on stderr only: " + printed[0] if printed else "; no warning")
        print(f"run {i}: {said}")
    ok = [values for values, raised, _, _ in records if raised is None]
    identical = all(same_bytes(ok[0], v) for v in ok[1:]) if ok else None
    raised_runs = sum(1 for r in records if r[1] is not None)
    alert_raises = sum(1 for r in records if r[1] is not None and any(a in r[1] for a in ALERT))
    warned_runs = sum(1 for r in records if r[2])
    printed_runs = sum(1 for r in records if r[3])
    worst = close = None
    if COMPILE is not None and ok and MODE != "off":
        reference = run_once(program, "off")
        if reference[1] is None:
            worst, close = distance(ok[0], reference[0])
            print(f"against eager with the mode off: max abs difference {worst}, "
                  f"{'within' if close else 'beyond'} tolerance {TOLERANCE or 'torch.testing defaults'}")
    verdict = judge(RUNS, raised_runs, alert_raises, warned_runs, printed_runs, identical, close)
    print(f"raised in {raised_runs} of {RUNS} runs; warned in {warned_runs}; printed the alert on stderr only in "
          f"{printed_runs}; results identical across runs: {identical}")
    digests = globals().get("INPUT_DIGESTS") or []  # a sweep script's inputs, generated afresh for each run
    if digests:
        print(f"inputs: {len(set(digests))} distinct digest(s) over {len(digests)} generated samples")
    print(f"expected: {EXPECTED}; verdict: {verdict} (recorded by the suite: {RECORDED})")
    print("RESULT " + json.dumps({
        "inputs_identical": (len(set(digests)) == 1) if digests else None,
        "runs": RUNS, "raised_runs": raised_runs, "alert_raises": alert_raises, "raised": [r[1] for r in records],
        "warned_runs": warned_runs, "stderr_alert_runs": printed_runs, "identical": identical,
        "max_abs_diff_vs_eager": worst, "matches_eager": close, "verdict": verdict, "recorded": RECORDED,
        "torch": torch.__version__}))


if __name__ == "__main__":
    main()
'''.strip()

_OP_RUNNER = "\n\n\n".join([_RUNNER_HELPERS, _OP_RUN_ONCE, _RUNNER_TAIL])


def _fill_script(row: dict[str, Any], detail: dict[str, Any]) -> str:
    op = str(detail["op"])
    dtype = str(detail.get("dtype", ""))
    if not re.fullmatch(r"torch\.\w+", dtype) or op not in ("empty", "empty_like", "empty_strided", "new_empty"):
        raise UpstreamError(f"{cell_label(row)}: a fill_uninitialized_memory row of op {op!r} / dtype {dtype!r}, "
                            "which this command cannot rebuild")
    base_dtype = str(detail.get("base_dtype", dtype))
    if not re.fullmatch(r"torch\.\w+", base_dtype):
        raise UpstreamError(f"{cell_label(row)}: base_dtype {base_dtype!r} is no torch dtype")
    device = str(row.get("device"))
    shape = [int(s) for s in detail.get("shape") or detail.get("input_shape") or []]
    builders = {
        "empty": f"    return torch.empty({shape!r}, dtype={dtype}, device={device!r})",
        "empty_strided": f"    return torch.empty_strided({shape!r}, {[int(s) for s in detail.get('strides', [])]!r}, "
                         f"dtype={dtype}, device={device!r})",
        "new_empty": f"    return BASE.new_empty({shape!r}, dtype={dtype})",
        "empty_like": "    return torch.empty_like(SOURCE)",
    }
    prelude = {
        "new_empty": [f"BASE = torch.ones(3, dtype={base_dtype}, device={device!r})"],
        "empty_like": [f"SOURCE = torch.empty_strided({shape!r}, {[int(s) for s in detail.get('input_strides', [])]!r}, "
                       f"dtype={dtype}, device={device!r}).zero_()"],
    }.get(op, [])
    setting = row.get("compile") or "eager"
    expected = str(detail.get("expected", "filled-nan"))
    body = [
        *prelude,
        "",
        "",
        "def build():",
        builders[op],
        "",
        "",
        f"MODE = {row['mode']!r}",
        f"COMPILE = {(setting if setting != 'eager' else None)!r}",
        f"EXPECTED = {expected!r}  # floating/complex: every element NaN; integers: the dtype's maximum",
        f"RECORDED = {row.get('verdict')!r}",
        "CALLS = 8",
        "",
        "",
        "def observed(t):",
        "    # its elements, not the gaps of its strides (contiguous() keeps a size-1 dimension's stride,",
        "    # which a byte view refuses)",
        "    flat = t.detach().to('cpu').reshape(-1).clone(memory_format=torch.contiguous_format)",
        "    n = flat.numel()",
        "    if t.dtype.is_complex:",
        "        if bool(torch.isnan(torch.view_as_real(flat.to(torch.complex128))).any(dim=-1).all()):",
        "            return 'filled-nan'",
        "    elif t.dtype.is_floating_point:",
        "        if bool(torch.isnan(flat.to(torch.float64)).all()):",
        "            return 'filled-nan'",
        "    elif t.dtype != torch.bool and all(v == torch.iinfo(t.dtype).max for v in flat.tolist()):",
        "        return 'filled-max'",
        "    if n and bool((flat.view(torch.uint8) == 0).all()):",
        "        return 'zeros'",
        "    return 'unfilled'",
        "",
        "",
        "def dirty(nbytes):",
        "    # Blocks of the output's size, freed again: the allocator hands such memory out next, and it",
        "    # holds a byte pattern that is no fill (no NaN, not zero, not the maximum). An output left",
        "    # unfilled shows it or other leftovers; never a NaN by chance.",
        f"    blocks = [torch.full((max(nbytes, 1),), 0x3C, dtype=torch.uint8, device={device!r}) for _ in range(16)]",
        "    del blocks",
        "",
        "",
        "def main():",
        "    torch.use_deterministic_algorithms(True, warn_only=(MODE == 'warn_only'))",
        "    torch.utils.deterministic.fill_uninitialized_memory = True",
        "    fn = torch.compile(build, backend=COMPILE, dynamic=False) if COMPILE else build",
        "    first = fn()  # compiles, where COMPILE says so",
        "    nbytes = first.untyped_storage().nbytes()",
        "    words = [observed(first)]",
        "    del first",
        "    for _ in range(CALLS - 1):",
        "        dirty(nbytes)",
        "        t = fn()",
        "        words.append(observed(t))",
        "    # the promise is for every output: one left unfilled is the violation (an unfilled output",
        "    # whose leftovers happen to be NaN, or the maximum, would look filled)",
        "    word = next((w for w in words if w != EXPECTED), EXPECTED)",
        "    print(f'observed in {CALLS} calls: {words}')",
        "    print(f'torch {torch.__version__}; {MODE}; fill_uninitialized_memory=True; '",
        "          f\"{'torch.compile(backend=%r)' % COMPILE if COMPILE else 'eager'}\")",
        "    print(f'{t.dtype}{list(t.shape)}: {t.reshape(-1)[:6].tolist()}')",
        "    verdict = 'conforms' if word == EXPECTED else 'violated'",
        "    print(f'expected: {EXPECTED}; observed: {word}; verdict: {verdict} (recorded by the suite: {RECORDED})')",
        "    print('RESULT ' + json.dumps({'observed': word, 'expected': EXPECTED, 'verdict': verdict,",
        "                                  'recorded': RECORDED, 'torch': torch.__version__}))",
        "",
        "",
        "if __name__ == '__main__':",
        "    main()",
    ]
    return "\n".join(_head(row, _setting_words(row)) + body) + "\n"


#: The batch-invariance programs (``conformance/batch_invariance.py``'s ``OPS``) in torch alone:
#: ``build(batch, width, seed)`` gives the function and its batched inputs, from a seeded
#: generator, as the suite builds them (a test keeps the two equal).
BATCH_BUILDERS = {  # op: (setup, fn, batched inputs, fixed inputs); fn closes over no tensor
    "matmul": ("w = randn(width, width + 3)", "torch.matmul", "{'input': randn(batch, width)}", "{'other': w}"),
    "bmm": ("", "torch.bmm", "{'input': randn(batch, 3, width), 'mat2': randn(batch, width, 5)}", "{}"),
    "sum": ("", "lambda x: x.sum(-1)", "{'x': randn(batch, width)}", "{}"),
    "mean": ("", "lambda x: x.mean(-1)", "{'x': randn(batch, width)}", "{}"),
    "softmax": ("", "lambda x: torch.softmax(x, -1)", "{'x': randn(batch, width)}", "{}"),
    "layer_norm": ("weight, bias = randn(width), randn(width)",
                   "lambda x, weight, bias: F.layer_norm(x, (width,), weight, bias)", "{'x': randn(batch, width)}",
                   "{'weight': weight, 'bias': bias}"),
    "attention": ("heads, length = 2, 1 + width % 7", "F.scaled_dot_product_attention",
                  "dict(zip(('query', 'key', 'value'), (randn(batch, heads, length, width) for _ in range(3))))", "{}"),
}


def batch_builder_source(op: str) -> str:
    """``build(batch, width, seed)`` of ``op``, as the script holds it: ``fn``, the batched inputs
    and the fixed ones (made on the CPU from a seeded generator; the script moves them)."""
    setup, fn, batched, fixed = BATCH_BUILDERS[op]
    return "\n".join([
        "def build(batch, width, seed):",
        "    gen = torch.Generator().manual_seed(seed)",
        "    randn = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731",
        *([f"    {setup}"] if setup else []),
        f"    fn = {fn}",
        f"    return fn, {batched}, {fixed}",
    ])


def _batch_invariance_script(row: dict[str, Any], detail: dict[str, Any]) -> str:
    """A batch-invariance cell: the example's batch and its first ``k`` rows through the op,
    compiled as the cell was, Inductor's ``batch_invariant`` as the cell had it, on the cell's
    thread count; the prefix compared as bytes."""
    op = str(row.get("entry_id", "")).removeprefix("batch-invariance:")
    example = detail.get("example")
    if op not in BATCH_BUILDERS or not isinstance(example, dict) or \
            not all(isinstance(example.get(k), int) and not isinstance(example.get(k), bool)
                    for k in ("batch", "k", "width", "seed")):
        raise UpstreamError(f"{cell_label(row)}: a batch-invariance row without its op or example; not written")
    setting = str(detail.get("setting", ""))
    if not re.fullmatch(r"torch\._inductor\.config\.batch_invariant=(True|False)", setting):
        raise UpstreamError(f"{cell_label(row)}: detail.setting {setting!r} is not Inductor's batch_invariant")
    threads = detail.get("threads")
    compile_setting = row.get("compile") or "eager"
    body = [
        batch_builder_source(op),
        "",
        "",
        f"BATCH, K, WIDTH, SEED = {example['batch']}, {example['k']}, {example['width']}, {example['seed']}",
        f"DEVICE = {str(row.get('device') or 'cpu')!r}",
        f"MODE = {row['mode']!r}",
        f"COMPILE = {(compile_setting if compile_setting != 'eager' else None)!r}  # torch.compile(backend=COMPILE)",
        f"BATCH_INVARIANT = {setting.endswith('True')!r}  # torch._inductor.config.batch_invariant",
        f"THREADS = {(int(threads) if isinstance(threads, int) else None)!r}  # the cell's torch.get_num_threads()",
        f"PROMISED = {bool(detail.get('promised'))!r}",
        f"RECORDED = {row.get('verdict')!r}",
        f"OBSERVED = {row.get('observed')!r}",
        "",
        "",
        "def main():",
        "    if THREADS is not None:",
        "        torch.set_num_threads(THREADS)",
        "    torch.use_deterministic_algorithms(MODE != 'off', warn_only=(MODE == 'warn_only'))",
        "    import torch._inductor.config as inductor_config",
        "    patch = inductor_config.patch(batch_invariant=BATCH_INVARIANT) if hasattr(inductor_config, 'batch_invariant') \\",
        "        else contextlib.nullcontext()",
        "    fn, batched, fixed = build(BATCH, WIDTH, SEED)",
        "    batched = {name: t.to(DEVICE) for name, t in batched.items()}",
        "    fixed = {name: t.to(DEVICE) for name, t in fixed.items()}",
        "    with patch:",
        "        torch._dynamo.reset()",
        "        run = torch.compile(fn, backend=COMPILE) if COMPILE else fn",
        "        whole = run(**batched, **fixed)",
        "        part = run(**{name: t[:K].clone() for name, t in batched.items()}, **fixed)",
        "    prefix, part = whole[:K], part",
        "    flat = lambda t: t.reshape(-1).clone(memory_format=torch.contiguous_format).view(torch.uint8)",
        "    same = prefix.shape == part.shape and torch.equal(flat(prefix), flat(part))",
        "    diff = 0.0 if same else float((prefix.double() - part.double()).abs().max())",
        "    observed = 'batch-invariant' if same else 'batch-dependent'",
        "    verdict = ('conforms' if same else 'violated') if PROMISED else 'recorded'",
        "    print(f'torch {torch.__version__}; {MODE}; {\"torch.compile(backend=%r)\" % COMPILE if COMPILE else \"eager\"}; '",
        "          f'batch_invariant={BATCH_INVARIANT}; {torch.get_num_threads()} threads')",
        "    print(f'f(x)[:{K}] against f(x[:{K}]) for {BATCH} rows of width {WIDTH}: '",
        "          f'{\"equal bytes\" if same else \"differ, max abs %g\" % diff}')",
        "    print(f'observed: {observed}; verdict: {verdict} (recorded by the suite: {RECORDED})')",
        "    print('RESULT ' + json.dumps({'observed': observed, 'verdict': verdict, 'recorded': RECORDED,",
        "                                  'max_abs_diff': diff, 'torch': torch.__version__}))",
        "",
        "",
        "if __name__ == '__main__':",
        "    main()",
    ]
    return "\n".join(_head(row, _setting_words(row)) + ["import contextlib", "", *body]) + "\n"


def _inductor_setting_script(row: dict[str, Any], detail: dict[str, Any]) -> str:
    call = str(detail["call"])
    match = re.fullmatch(r"(set_deterministic_debug_mode|use_deterministic_algorithms)\(([^()]*)\)", call)
    if not match or not re.fullmatch(r"[\w'\"=, ]*", match.group(2)):
        raise UpstreamError(f"{cell_label(row)}: detail.call {call!r} is not a call this command can rebuild")
    expected_on = row.get("mode") in ("error", "warn_only")
    body = [
        f"CALL = {('torch.' + call)!r}",
        f"RECORDED = {row.get('verdict')!r}",
        "",
        "",
        "def main():",
        "    import torch._inductor.config as inductor_config",
        f"    inductor_config.deterministic = {not expected_on!r}  # the opposite: a stale value cannot pass",
        f"    torch.{call}",
        "    after = inductor_config.deterministic",
        f"    verdict = 'conforms' if after is {expected_on!r} else 'violated'",
        "    print(f'torch {torch.__version__}; after {CALL}: torch._inductor.config.deterministic = {after!r}, '",
        "          f'torch.are_deterministic_algorithms_enabled() = {torch.are_deterministic_algorithms_enabled()}')",
        f"    print(f'expected: {expected_on!r}; verdict: {{verdict}} (recorded by the suite: {{RECORDED}})')",
        "    print('RESULT ' + json.dumps({'observed': f'inductor-deterministic={after!r}', 'verdict': verdict,",
        "                                  'recorded': RECORDED, 'torch': torch.__version__}))",
        "",
        "",
        "if __name__ == '__main__':",
        "    main()",
    ]
    return "\n".join(_head(row, f"{row.get('device')}, {call}") + body) + "\n"


# ---------------------------------------------------------------------------
# The issue text


def issue_text(row: dict[str, Any], env: dict[str, Any]) -> str:
    """A short issue: versions, device, the documented sentence, observed against expected."""
    detail = row.get("detail") or {}
    setting = row.get("compile") or "eager"
    what = row.get("op") or row.get("entry_id")
    title = {
        "stale-doc": "is documented to raise under torch.use_deterministic_algorithms(True) but does not",
        "missing-raise": "is documented to raise under torch.use_deterministic_algorithms(True) but does not",
        "missing-warning": "gives no UserWarning under use_deterministic_algorithms(True, warn_only=True) "
                           "although documented to",
        "nondeterministic": "differs between runs under torch.use_deterministic_algorithms(True)",
        "undocumented-raise": "raises the determinism alert although documented as deterministic",
        "spurious-warning": "warns the determinism alert although documented as deterministic",
        "wrong-result": "gives a result that differs from eager",
        "violated": "does not keep a documented determinism promise",
    }.get(str(row.get("verdict")), f"{row.get('verdict')} under deterministic mode")
    evidence = [f"- {k}: {detail[k]}" for k in ("raised", "warnings", "stderr_alerts", "mismatch", "max_abs_diff",
                                                 "wrong_result", "preview", "inductor_deterministic_after")
                if detail.get(k) not in (None, "", [])]
    lines = [
        f"# `{what}` {title}" + (f" (torch.compile, backend={setting!r})" if setting != "eager" else ""),
        "",
        f"- torch: {row.get('torch_version')}" + (f"; Python {env['python']}" if env.get("python") else ""),
        f"- device: {row.get('device')} ({row.get('device_name') or 'unnamed'})",
        f"- mode: `{MODE_CALLS.get(str(row.get('mode')), row.get('mode'))}`"
        + (f"; `torch.compile(fn, backend={setting!r})`" if setting != "eager" else "; eager")
        + (f"; phase {row.get('phase')}" if (row.get("phase") or "program") != "program" else ""),
        f"- documented ({row.get('source')}): {row.get('sentence')}",
        f"- expected: {row.get('expected')}: {EXPECTATIONS.get(str(row.get('expected')), '')}",
        f"- observed: {row.get('observed')} (verdict `{row.get('verdict')}`; {row.get('examples')} examples, "
        f"{row.get('runs')} runs each)",
        *evidence,
    ]
    if detail.get("example"):
        lines.append(f"- example: {detail['example']}")
    if detail.get("contradiction"):
        lines.append(f"- the docstring contradicts itself: {detail['contradiction']}")
    if detail.get("known_finding"):
        lines.append(f"- already recorded: {detail['known_finding']}")
    lines += ["", "Reproducer (needs only torch): `python3 repro.py` in this folder; its last line, `RESULT {...}`, "
                  "holds what it saw.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# The command


def _slug(row: dict[str, Any]) -> str:
    parts = [str(row.get("entry_id")), str(row.get("device")), str(row.get("mode")), str(row.get("compile") or "eager")]
    if (row.get("phase") or "program") != "program":
        parts.append(str(row.get("phase")))
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(parts)).strip("_.")[:150]


def _run_env(records: list[Any]) -> dict[str, Any]:
    run = next((r for r in records if isinstance(r, dict) and r.get("record") == "run"), {})
    env = run.get("env") or {}
    return env if isinstance(env, dict) else {}


def write_upstream(results: str | Path, out: str | Path, *, cells: list[str] = (), devices: list[str] = (),
                   modes: list[str] = (), compile: list[str] = (), phases: list[str] = ()) -> tuple[list[Written], list[str]]:
    """Write a folder per selected cell; (written, the cells not written with why)."""
    records = _records(results)
    rows = select_cells(read_rows(records, results), cells=cells, devices=devices, modes=modes, compile=compile,
                        phases=phases)
    env = _run_env(records)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UpstreamError(f"{out}: exists and is not a folder")
    written, refused = [], []
    for row in rows:
        try:
            script = repro_script(row)
        except UpstreamError as exc:
            refused.append(str(exc))
            continue
        folder = out / _slug(row)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "repro.py").write_text(script, encoding="utf-8")
        (folder / "issue.md").write_text(issue_text(row, env), encoding="utf-8")
        written.append(Written(cell_label(row), folder))
    return written, refused


def main(argv: list[str]) -> int:
    from detconf.reports.output import ArgumentParser, emit
    from detconf.reports.safe import terminal

    parser = ArgumentParser(prog="python -m detconf.reports upstream",
                            description="A standalone torch-only reproducer and an issue text per failing or "
                                        "waived cell of a results file.")
    parser.add_argument("results", help="a results file (JSON lines)")
    parser.add_argument("--out", required=True, help="the folder to write into (one sub-folder per cell)")
    parser.add_argument("--cell", action="append", default=[], metavar="ENTRY_ID", help="only this entry's cells (repeatable)")
    parser.add_argument("--device", action="append", default=[], help="only cells of this device (repeatable)")
    parser.add_argument("--mode", action="append", default=[], choices=list(MODE_CALLS), help="only this mode (repeatable)")
    parser.add_argument("--compile", action="append", default=[], help="only this compile setting (repeatable)")
    parser.add_argument("--phase", action="append", default=[], help="only this phase (repeatable)")
    args = parser.parse_args(argv)
    try:
        written, refused = write_upstream(args.results, args.out, cells=args.cell, devices=args.device,
                                          modes=args.mode, compile=args.compile, phases=args.phase)
    except UpstreamError as exc:
        print(f"reports: error: {terminal(str(exc))}", file=sys.stderr)
        return 2
    if not written:
        print("reports: error: " + terminal(refused[0] if len(refused) == 1 else
                                            f"none of {len(refused)} cells could be written: {refused[0]}"),
              file=sys.stderr)
        return 2
    lines = [f"wrote {w.folder}/repro.py and issue.md: {w.cell}" for w in written]
    lines += [f"not written: {why}" for why in refused]
    emit(terminal("\n".join(lines)))
    return 2 if refused and args.cell else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
