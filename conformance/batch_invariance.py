"""Batch invariance: does ``f(x[:k])`` equal ``f(x)[:k]`` bit for bit?

torch promises it in one place, Inductor's ``batch_invariant`` setting (torch >= 2.13; the
comment above it in ``torch/_inductor/config.py``: "stable per-sample compiled kernel across
batch sizes. Implies deterministic."), and only for compiled code. So a cell is judged two ways:

- **promised** (compiled with Inductor, the setting on, a torch that has it, an op the data
  file lists): a difference is the failing verdict ``violated``, no difference ``conforms``;
- **elsewhere** (eager, ``aot_eager``, the setting off, an op it does not cover): nothing is
  promised, so the cell is ``recorded`` with how many examples differed: sensitivity, never a
  failure (the determinism docs promise run-to-run equality, not batch-size equality).

The promise and the known findings about it are data: ``data/batch-invariance.json``. A cell
is one (op, device, compile setting, setting on/off); its row is written to the results file
as soon as it is judged. ``python -m detconf.conformance.batch_invariance --help`` runs them.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from detconf.findings_rule import covers, torch_in, torch_range

SOURCE = "batch-invariance"
DATA_FILE = Path(__file__).resolve().parent / "data" / "batch-invariance.json"
COMPILE_SETTINGS = ("eager", "aot_eager", "inductor")
SETTINGS = ("off", "on")


class BatchInvarianceError(ValueError):
    """A malformed data file or a bad option (one-line message)."""


# --- the promise, as data ------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """A known violation of the promise: the cell keeps ``violated``, the run does not fail."""

    entry_id: str
    torch: str
    why: str
    devices: tuple[str, ...] = ()
    compile: tuple[str, ...] = ()

    def matches(self, row: dict[str, Any]) -> bool:
        return covers(row, source=SOURCE, entry_id=self.entry_id, torch=torch_range(self.torch),
                      devices=self.devices, compile=self.compile)


@dataclass(frozen=True)
class Promise:
    """Where torch promises batch invariance: the setting, its text, its releases, the compile
    settings and the ops it covers."""

    setting: str
    text: str
    where: str
    torch: str
    compile: tuple[str, ...]
    ops: tuple[str, ...]
    findings: tuple[Finding, ...] = ()

    def made_by(self, torch_version: str) -> bool:
        """Does torch ``torch_version`` have the setting?"""
        return torch_in(torch_version, torch_range(self.torch))

    def holds_for(self, op_id: str, compile: str, setting: str, torch_version: str) -> bool:
        """Is the cell promised (judged), rather than measured?"""
        return setting == "on" and compile in self.compile and op_id in self.ops and self.made_by(torch_version)

    def finding_for(self, row: dict[str, Any]) -> Finding | None:
        return next((f for f in self.findings if f.matches(row)), None)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise BatchInvarianceError(f"{where}: expected a non-empty list of strings")
    return tuple(value)


def _text(item: dict, key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BatchInvarianceError(f"{where}: field {key!r} must be non-blank text")
    return value


def _range(item: dict, where: str) -> str:
    text = _text(item, "torch", where)
    try:
        torch_range(text)
    except ValueError as exc:
        raise BatchInvarianceError(f"{where}: field 'torch' is {text!r} ({exc}), expected a version "
                                   "specifier such as '>=2.13'") from None
    return text


def load_promise(path: str | Path | None = None) -> Promise:
    """The promise of ``path`` (default :data:`DATA_FILE`); :class:`BatchInvarianceError` naming
    the file and the field for anything malformed (unknown keys, an op without a program)."""
    path = Path(path) if path is not None else DATA_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BatchInvarianceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise BatchInvarianceError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    if not isinstance(raw, dict) or set(raw) - {"promise", "findings"} or not isinstance(raw.get("promise"), dict):
        raise BatchInvarianceError(f"{path}: expected an object with 'promise' (an object) and 'findings'")
    p = raw["promise"]
    unknown = set(p) - {"setting", "text", "where", "torch", "compile", "ops"}
    if unknown:
        raise BatchInvarianceError(f"{path}: promise: unknown field {sorted(unknown)[0]!r}")
    compile_ = _strings(p.get("compile"), f"{path}: promise.compile")
    if set(compile_) - set(COMPILE_SETTINGS):
        raise BatchInvarianceError(f"{path}: promise.compile: unknown setting {sorted(set(compile_) - set(COMPILE_SETTINGS))[0]!r}")
    ops = _strings(p.get("ops"), f"{path}: promise.ops")
    for op in ops:
        if op not in OPS:
            raise BatchInvarianceError(f"{path}: promise.ops: {op!r} has no program (known: {', '.join(OPS)})")
    findings = []
    items = raw.get("findings", [])
    if not isinstance(items, list):
        raise BatchInvarianceError(f"{path}: 'findings' must be a list")
    for k, item in enumerate(items):
        where = f"{path}: finding #{k}"
        if not isinstance(item, dict) or set(item) - {"entry_id", "torch", "why", "devices", "compile"}:
            raise BatchInvarianceError(f"{where}: expected an object with entry_id, torch, why, devices, compile")
        findings.append(Finding(entry_id=_text(item, "entry_id", where), torch=_range(item, where),
                                why=_text(item, "why", where),
                                devices=_strings(item["devices"], f"{where}.devices") if "devices" in item else (),
                                compile=_strings(item["compile"], f"{where}.compile") if "compile" in item else ()))
    return Promise(setting=_text(p, "setting", f"{path}: promise"), text=_text(p, "text", f"{path}: promise"),
                   where=_text(p, "where", f"{path}: promise"), torch=_range(p, f"{path}: promise"),
                   compile=compile_, ops=ops, findings=tuple(findings))


# --- the programs ----------------------------------------------------------------

@dataclass(frozen=True)
class Example:
    """One drawn example: the batch, the prefix ``k`` compared, the row width and the seed of
    the tensors (built from a seeded generator, not drawn element by element)."""

    batch: int
    k: int
    width: int
    seed: int

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BatchOp:
    """An op over a batch: ``build(example, generator)`` gives ``fn``, its batched inputs
    (every one sliced to ``[:k]`` along dimension 0) and its fixed inputs (a weight: the same in
    both calls). ``fn`` takes every tensor as an argument and closes over none, so that
    :func:`observe` moves them all to the device (a tensor left in a closure stays on the CPU)."""

    id: str
    op: str
    build: Callable[..., tuple[Callable[..., Any], dict[str, Any]]]


def _randn(gen, *shape):
    import torch

    return torch.randn(*shape, generator=gen)


def _matmul(ex, gen):
    import torch

    w = _randn(gen, ex.width, ex.width + 3)
    return torch.matmul, {"input": _randn(gen, ex.batch, ex.width)}, {"other": w}


def _bmm(ex, gen):
    import torch

    return torch.bmm, {"input": _randn(gen, ex.batch, 3, ex.width), "mat2": _randn(gen, ex.batch, ex.width, 5)}, {}


def _reduction(name):
    def build(ex, gen):
        return (lambda x: getattr(x, name)(-1)), {"x": _randn(gen, ex.batch, ex.width)}, {}

    return build


def _softmax(ex, gen):
    import torch

    return (lambda x: torch.softmax(x, -1)), {"x": _randn(gen, ex.batch, ex.width)}, {}


def _layer_norm(ex, gen):
    import torch.nn.functional as F

    weight, bias = _randn(gen, ex.width), _randn(gen, ex.width)
    return ((lambda x, weight, bias: F.layer_norm(x, (ex.width,), weight, bias)), {"x": _randn(gen, ex.batch, ex.width)},
            {"weight": weight, "bias": bias})


def _attention(ex, gen):
    import torch.nn.functional as F

    heads, length = 2, 1 + ex.width % 7
    q, k, v = (_randn(gen, ex.batch, heads, length, ex.width) for _ in range(3))
    return F.scaled_dot_product_attention, {"query": q, "key": k, "value": v}, {}


#: The programs, by the id the data file's ``ops`` names.
OPS: dict[str, BatchOp] = {op.id: op for op in (
    BatchOp("matmul", "torch.matmul", _matmul),
    BatchOp("bmm", "torch.bmm", _bmm),
    BatchOp("sum", "torch.sum", _reduction("sum")),
    BatchOp("mean", "torch.mean", _reduction("mean")),
    BatchOp("softmax", "torch.softmax", _softmax),
    BatchOp("layer_norm", "torch.nn.functional.layer_norm", _layer_norm),
    BatchOp("attention", "torch.nn.functional.scaled_dot_product_attention", _attention),
)}


def examples(count: int, *, seed: int = 0) -> list[Example]:
    """``count`` examples from a seeded stream: the same in every run. Batches up to 64 rows,
    widths up to 257 (long reductions split differently when the row count changes). The first
    is always a full batch of 64 rows of width 129 against its first 5: CPU BLAS kernels pick
    their blocking by the row count, and this pair is one where it changes."""
    rng = random.Random(seed)
    out = [Example(batch=64, k=5, width=129, seed=rng.randrange(1 << 30))]
    for i in range(count - 1):
        batch = rng.choice((2, 3, 8, 17, 32, 64))
        out.append(Example(batch=batch, k=rng.randint(1, batch - 1), width=rng.choice((4, 33, 129, 257)),
                           seed=rng.randrange(1 << 30)))
    return out


# --- observing one cell ------------------------------------------------------------

@dataclass
class Cell:
    """What one (op, device, compile setting, setting) showed over its examples."""

    judged: int = 0
    differing: int = 0
    max_abs_diff: float = 0.0
    largest_input: int = 0
    first_difference: dict[str, Any] | None = None
    unsupported: str | None = None


def _outputs(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    return [t for t in value if isinstance(t, torch.Tensor)]


def _bytes_equal(a, b) -> bool:
    """The same shape, dtype and bytes (``engine.fingerprint.tensor_bytes``, whatever the strides:
    ``contiguous()`` keeps the stride of a size-1 dimension, which a byte view refuses)."""
    from detconf.engine.fingerprint import tensor_bytes

    return a.shape == b.shape and a.dtype == b.dtype and tensor_bytes(a) == tensor_bytes(b)


@contextlib.contextmanager
def _setting(setting: str) -> Iterator[None]:
    """Inductor's ``batch_invariant`` on or off for the block, put back after (a torch without
    it: nothing to set, the caller has skipped ``on``)."""
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config, "batch_invariant"):
        yield
        return
    with inductor_config.patch(batch_invariant=setting == "on"):
        yield


def observe(op: BatchOp, device: str, compile: str, setting: str, exs: Sequence[Example]) -> Cell:
    """Run ``op`` on each example's whole batch and on its first ``k`` rows, compiled as
    ``compile`` (a fresh Dynamo cache, so no earlier cell's code is reused) with the setting
    ``setting``, and compare ``f(x)[:k]`` with ``f(x[:k])`` as bytes."""
    import torch

    from detconf.engine.determinism import preserved_global_state

    cell = Cell()
    with preserved_global_state(), _setting(setting):
        torch._dynamo.reset()
        try:
            for ex in exs:
                gen = torch.Generator().manual_seed(ex.seed)
                fn, batched, fixed = op.build(ex, gen)
                batched = {name: t.to(device) for name, t in batched.items()}
                fixed = {name: t.to(device) for name, t in fixed.items()}
                run = fn if compile == "eager" else torch.compile(fn, backend=compile)
                try:
                    whole = _outputs(run(**batched, **fixed))
                    part = _outputs(run(**{name: t[:ex.k].clone() for name, t in batched.items()}, **fixed))
                except (NotImplementedError, TypeError) as exc:
                    cell.unsupported = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                    break
                cell.judged += 1
                cell.largest_input = max(cell.largest_input, *(t.numel() for t in batched.values()))
                prefix = [t[:ex.k] for t in whole]
                if not all(_bytes_equal(a, b) for a, b in zip(prefix, part)) or len(prefix) != len(part):
                    cell.differing += 1
                    diff = max(float((a.double() - b.double()).abs().max()) if a.shape == b.shape and a.numel()
                               else math.inf for a, b in zip(prefix, part))
                    cell.max_abs_diff = max(cell.max_abs_diff, diff)
                    if cell.first_difference is None:
                        cell.first_difference = {**ex.to_json(), "max_abs_diff": diff}
        finally:
            torch._dynamo.reset()
    return cell


def verdict_for(promised: bool, cell: Cell) -> str:
    """``violated`` / ``conforms`` where promised, ``recorded`` elsewhere; ``unsupported`` when
    no example ran."""
    if cell.judged == 0:
        return "unsupported"
    if not promised:
        return "recorded"
    return "violated" if cell.differing else "conforms"


def judge_cell(op: BatchOp, device: str, compile: str, setting: str, exs: Sequence[Example], *,
               promise: Promise, torch_version: str) -> dict[str, Any]:
    """The row of one cell: the verdict, the evidence and, for a known violation, its finding."""
    promised = promise.holds_for(op.id, compile, setting, torch_version)
    row: dict[str, Any] = {
        "record": SOURCE, "source": SOURCE, "entry_id": op.id, "op": op.op,
        "promise": "batch-invariant" if promised else "none", "device": device, "compile": compile,
        "setting": setting, "torch_version": torch_version,
    }
    if setting == "on" and not promise.made_by(torch_version):
        reason = f"torch {torch_version} has no {promise.setting} (it came in torch {promise.torch})"
        return {**row, "verdict": "skipped", "examples_judged": 0, "examples_differing": 0,
                "fraction_differing": None, "detail": {"reason": reason}}
    try:
        cell = observe(op, device, compile, setting, exs)
    except Exception as exc:  # noqa: BLE001 - a program or compiler failure: the row says so, the run goes on
        return {**row, "verdict": "harness-error", "examples_judged": 0, "examples_differing": 0,
                "fraction_differing": None, "detail": {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}}
    verdict = verdict_for(promised, cell)
    row.update(verdict=verdict, examples_judged=cell.judged, examples_differing=cell.differing,
               fraction_differing=round(cell.differing / cell.judged, 3) if cell.judged else None,
               max_abs_diff=cell.max_abs_diff, largest_input=cell.largest_input,
               detail={"first_difference": cell.first_difference,
                       "promise": promise.text if promised else None})
    if cell.unsupported:
        row["detail"]["unsupported"] = cell.unsupported
    finding = promise.finding_for(row) if verdict == "violated" else None
    if finding is not None:
        row["detail"]["known_finding"] = finding.why
    return row


def plan(ops: Iterable[str], devices: Iterable[str], compiles: Iterable[str]) -> list[tuple[str, str, str, str]]:
    """Every (op, device, compile, setting) cell, sorted: the same plan in every run."""
    return sorted((op, device, compile, setting) for op in ops for device in devices for compile in compiles
                  for setting in SETTINGS)


def failing(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that fail a run: a violated promise no known finding covers, or a cell that
    could not be run (``harness-error``)."""
    return [r for r in rows if r["verdict"] == "harness-error"
            or (r["verdict"] == "violated" and "known_finding" not in r.get("detail", {}))]


# --- the sensitivity table --------------------------------------------------------------

#: The columns of the table, in the shape of ``reports/sensitivity.py``'s (one row per cell;
#: ``setting`` and ``promise`` say whether the cell was judged or measured).
TABLE_COLUMNS = ("source", "entry_id", "promise", "device", "compile", "setting", "torch_version", "verdict",
                 "examples_judged", "examples_differing", "fraction_differing", "max_abs_diff", "largest_input")


def table_rows(rows: Iterable[dict[str, Any]]) -> list[list[Any]]:
    """The table's rows: most-differing first within each device, then by op."""
    picked = [[r.get(c) for c in TABLE_COLUMNS] for r in rows]
    index = {c: i for i, c in enumerate(TABLE_COLUMNS)}
    return sorted(picked, key=lambda r: (r[index["device"]], -(r[index["fraction_differing"]] or 0),
                                         r[index["entry_id"]], r[index["compile"]], r[index["setting"]]))


def headline(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per device: promised cells that held, and measured cells whose prefix differed."""
    lines = []
    for device in sorted({r["device"] for r in rows}):
        mine = [r for r in rows if r["device"] == device]
        promised = [r for r in mine if r["promise"] == "batch-invariant"]
        measured = [r for r in mine if r["verdict"] == "recorded"]
        waived = [r for r in promised if "known_finding" in r.get("detail", {})]
        lines.append(f"{device}: promised {sum(r['verdict'] == 'conforms' for r in promised)}/{len(promised)} held "
                     f"({len(waived)} violated, known finding); measured: "
                     f"{sum(r['examples_differing'] > 0 for r in measured)}/{len(measured)} cells differed")
    return lines


def _md(value: Any) -> str:
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def table_markdown(rows: Sequence[dict[str, Any]]) -> str:
    body = ["# Batch invariance: `f(x[:k])` against `f(x)[:k]`", "",
            *[f"- {line}" for line in headline(rows)], "",
            "| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    body += ["| " + " | ".join(_md(v) for v in row) + " |" for row in table_rows(rows)]
    return "\n".join(body) + "\n"


def table_csv(rows: Sequence[dict[str, Any]]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TABLE_COLUMNS)
    writer.writerows([["" if v is None else v for v in row] for row in table_rows(rows)])
    return out.getvalue()


# --- command line --------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2
        raise BatchInvarianceError(f"{self.prog}: {message}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="python -m detconf.conformance.batch_invariance",
                     description="Check f(x[:k]) == f(x)[:k] where torch promises it; measure it elsewhere.")
    parser.add_argument("--device", action="append", help="device type (repeatable; default cpu)")
    parser.add_argument("--compile", action="append", choices=COMPILE_SETTINGS,
                        help="compile setting (repeatable; default eager and inductor)")
    parser.add_argument("--op", action="append", help=f"op id (repeatable; default all: {', '.join(OPS)})")
    parser.add_argument("--examples", type=int, default=4, help="examples per cell (default 4)")
    parser.add_argument("--results", default="reports/out/batch-invariance.jsonl",
                        help="rows go here, one JSON line each, as they are judged (appended)")
    parser.add_argument("--out", help="write batch-invariance.md and batch-invariance.csv into this folder")
    parser.add_argument("--data", help=argparse.SUPPRESS)
    try:
        args = parser.parse_args(argv)
        if args.examples < 1:
            raise BatchInvarianceError("--examples must be at least 1")
        ops = args.op or list(OPS)
        unknown = [o for o in ops if o not in OPS]
        if unknown:
            raise BatchInvarianceError(f"--op {unknown[0]!r} is not known (known: {', '.join(OPS)})")
        promise = load_promise(args.data)
        import torch

        devices = args.device or ["cpu"]
        for device in devices:
            try:
                torch.empty(1, device=device)
            except (RuntimeError, ValueError) as exc:
                raise BatchInvarianceError(f"--device {device!r} cannot be used here: {' '.join(str(exc).split())[:160]}") from None
        results = Path(args.results)
        results.parent.mkdir(parents=True, exist_ok=True)
        exs = examples(args.examples)
        rows = []
        with open(results, "a", encoding="utf-8") as sink:
            for op, device, compile, setting in plan(ops, devices, args.compile or ["eager", "inductor"]):
                row = judge_cell(OPS[op], device, compile, setting, exs, promise=promise,
                                 torch_version=str(torch.__version__))
                sink.write(json.dumps(row, sort_keys=True) + "\n")
                sink.flush()
                rows.append(row)
                print(f"{op} {device} {compile} batch_invariant={setting}: {row['verdict']}"
                      f" ({row['examples_differing']}/{row['examples_judged']} differed)", flush=True)
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "batch-invariance.md").write_text(table_markdown(rows), encoding="utf-8")
            (out / "batch-invariance.csv").write_text(table_csv(rows), encoding="utf-8")
        for line in headline(rows):
            print(line)
        bad = failing(rows)
        for row in bad:
            what = (row["detail"]["error"] if row["verdict"] == "harness-error" else
                    f"f(x[:k]) != f(x)[:k] where {promise.setting} promises it; first difference "
                    f"{row['detail']['first_difference']}")
            print(f"FAIL {row['entry_id']} {row['device']} {row['compile']} batch_invariant={row['setting']}: {what}")
        return 1 if bad else 0
    except (BatchInvarianceError, OSError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
