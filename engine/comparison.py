"""Comparison rules: how a result is compared with a reference that is not another run of itself.

Two runs of one program on one device under the mode are compared as bytes, always: that is
the promise (:mod:`engine.runner`). Every other comparison is a correctness check about which
the docs promise nothing bitwise, and a GPU is not a faster CPU. The references
(:data:`REFERENCES`):

- ``default``: the mode-off algorithm on the same device (deterministic but wrong);
- ``cpu``: a CPU reference, for a program on another device;
- ``eager``: eager, for a compiled program.

Each program compares under *rules* (:class:`Rule`), declared by its recipe
(:attr:`engine.program.Program.compare`) or derived here from what the runs showed
(:func:`derive`). A rule names the outputs it covers (labels such as ``out`` or
``grad[x]``; none: every output); the first rule that covers an output judges it, and an
output no rule covers is judged by ``tolerance``. The rules (:data:`RULES`):

- ``exact``: equal values (NaNs equal);
- ``tolerance``: within the dtype's tolerance (:data:`TOLERANCES`, or the device's own:
  :attr:`engine.backends.Backend.tolerances`), widened where a device's
  float32 math mode keeps fewer mantissa bits (TF32's 10, bf16's 7: cuDNN and cuBLAS on CUDA
  by default for convolutions, by setting for matmuls) to the rounding those operands can
  take: ``(2·u_actual + 2·u_reference + u32·log2 K)·max|reference|``, with ``u`` the unit
  roundoff of each side's effective precision and ``K`` the reduction length (at most the
  largest input's size: tree and split reductions accumulate ``log2 K`` roundings). On the
  H100's own TF32 outputs (cuda-evidence, 60 conv/mm cases, K up to 1,001) the error was at
  most 0.83·u_tf32·max|reference|, so the bound passes TF32 and catches an error 10× larger.
  A CPU reference that the device result misses is asked once more (:func:`adjudicate`): a
  result within 4× float32's own noise of a float64 CPU reference is not wrong (an
  ill-conditioned gradient, a cancellation, a long reduction in another order);
- ``admissible-set``: where the docs leave the winner of duplicate writes undefined
  (``index_copy``, ``index_put`` / ``put_`` with ``accumulate=False``, ``scatter``): every
  element written more than once equals one of the values written to it; the rest follow
  ``tolerance``. The recipe says which values go where (:class:`Writes`); with no duplicate
  write in the example the rule is plain tolerance;
- ``runs-only``: no reference at all, only the runs (random streams: another device or
  compiled code draws other numbers; implementation-defined outputs);
- ``invariant``: compared through a function of the output that is unique where the output is
  not (an eigenvector up to sign or phase: its projector).

Rows carry the rules that judged them (``detail.comparison``) with a reason each. The verdict
is still decided in one place (:func:`engine.verdict.verdict_for`); this module only says
whether a reference agreed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

__all__ = ["CONV_OPS", "MATMUL_OPS", "REFERENCES", "RULES", "TOLERANCES", "U32", "Precision", "Rule", "Rules",
           "Writes", "adjudicate", "admissible_set", "compare", "derive", "exact", "families", "invariant",
           "round_operand", "roundoff", "runs_only", "tolerance"]

RULES: dict[str, str] = {
    "exact": "equal values (NaNs equal)",
    "tolerance": "within the dtype's tolerance, widened by the devices' float32 math mode and the reduction length",
    "admissible-set": "each element written more than once equals one of the values written to it; the rest within "
                      "tolerance",
    "runs-only": "only the runs are compared: no reference",
    "invariant": "compared through a quantity that is unique where the output is not",
}
REFERENCES: dict[str, str] = {
    "default": "the mode-off algorithm on the same device",
    "cpu": "a CPU reference",
    "eager": "eager, for a compiled program",
}

#: Tolerances by dtype, (rtol, atol · max(1, max|reference|)): the default algorithm and a CPU
#: reference may round differently, never by more.
TOLERANCES = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
    torch.float32: (1e-4, 1e-5),
    torch.complex64: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
    torch.complex128: (1e-7, 1e-9),
}
#: float32's unit roundoff; TF32 keeps 10 mantissa bits (2**-11), bf16 7 (2**-8).
U32 = 2.0 ** -24
_ROUNDOFF = {"ieee": U32, "tf32": 2.0 ** -11, "bf16": 2.0 ** -8}
#: Operators whose float32 math follows a math-mode setting, by family (``matmul`` / ``conv``
#: as :func:`engine.mathmode.float32_precision` names them). Names match any overload.
CONV_OPS = ("aten.convolution", "aten.convolution_backward", "aten._convolution", "aten.cudnn_convolution",
            "aten.cudnn_convolution_transpose", "aten.mkldnn_convolution", "aten.conv1d", "aten.conv2d",
            "aten.conv3d", "aten.conv_transpose1d", "aten.conv_transpose2d", "aten.conv_transpose3d")
MATMUL_OPS = ("aten.mm", "aten.bmm", "aten.addmm", "aten.addbmm", "aten.baddbmm", "aten.matmul", "aten.linear",
              "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_flash_attention",
              "aten._scaled_dot_product_cudnn_attention", "aten._efficient_attention_forward",
              "aten._flash_attention_forward")


@dataclass(frozen=True)
class Writes:
    """Where an op writes, for the ``admissible-set`` rule: flat positions into the output and
    the value each write carries (``values[j]`` goes to ``positions[j]``)."""

    positions: torch.Tensor
    values: torch.Tensor


@dataclass(frozen=True)
class Rule:
    """One comparison rule, for the outputs whose labels ``outputs`` names (``out`` covers
    ``out``, ``out[0]``, ``out[grad_out][1]``; empty: every output).

    - ``writes``: ``admissible-set``: ``inputs -> {label: Writes}``.
    - ``invariant``: ``invariant``: ``tensor -> tensor``, the quantity compared.
    """

    name: str
    reason: str
    outputs: tuple[str, ...] = ()
    writes: Callable[[Mapping[str, torch.Tensor]], Mapping[str, Writes]] | None = None
    invariant: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if self.name not in RULES:
            raise ValueError(f"comparison rule must be one of {tuple(RULES)}, got {self.name!r}")
        if not self.reason:
            raise ValueError(f"a {self.name} rule needs a reason")
        if (self.name == "admissible-set") != (self.writes is not None):
            raise ValueError("an admissible-set rule, and only one, takes writes=")
        if (self.name == "invariant") != (self.invariant is not None):
            raise ValueError("an invariant rule, and only one, takes invariant=")

    def covers(self, label: str) -> bool:
        return not self.outputs or any(label == o or label.startswith(o + "[") for o in self.outputs)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.name, "reason": self.reason}
        if self.outputs:
            out["outputs"] = list(self.outputs)
        return out


def exact(reason: str, *, outputs: Sequence[str] = ()) -> Rule:
    return Rule("exact", reason, tuple(outputs))


def tolerance(reason: str, *, outputs: Sequence[str] = ()) -> Rule:
    return Rule("tolerance", reason, tuple(outputs))


def admissible_set(writes: Callable[[Mapping[str, torch.Tensor]], Mapping[str, Writes]], reason: str, *,
                   outputs: Sequence[str] = ("out",)) -> Rule:
    return Rule("admissible-set", reason, tuple(outputs), writes=writes)


def runs_only(reason: str, *, outputs: Sequence[str] = ()) -> Rule:
    return Rule("runs-only", reason, tuple(outputs))


def invariant(fn: Callable[[torch.Tensor], torch.Tensor], reason: str, *, outputs: Sequence[str] = ()) -> Rule:
    return Rule("invariant", reason, tuple(outputs), invariant=fn)


_DEFAULT = Rule("tolerance", "the default: the dtype's tolerance, widened by the devices' math mode")


@dataclass(frozen=True)
class Rules:
    """A program's rules in order (declared first, then derived); :meth:`for_label` picks one."""

    rules: tuple[Rule, ...] = ()

    def for_label(self, label: str) -> Rule:
        return next((r for r in self.rules if r.covers(label)), _DEFAULT)

    @property
    def runs_only(self) -> bool:
        """Does a runs-only rule cover every output (no reference is worth running)?"""
        return any(r.name == "runs-only" and not r.outputs for r in self.rules)

    def describe(self) -> list[dict[str, Any]]:
        """Each rule with its reason; the default last, unless a rule covers every output."""
        out = [r.describe() for r in self.rules]
        if not any(not r.outputs for r in self.rules):
            out.append(_DEFAULT.describe())
        return out


def derive(declared: Iterable[Rule], *, random: str | None = None) -> Rules:
    """The declared rules, then those the runs showed: ``random`` (evidence that the program
    draws from a random generator) makes every output runs-only."""
    rules = list(declared)
    if random and not any(r.name == "runs-only" and not r.outputs for r in rules):
        rules.insert(0, runs_only(f"draws from the random generator ({random}): another device, another "
                                  "algorithm or compiled code draws other numbers"))
    return Rules(tuple(rules))


@dataclass(frozen=True)
class Precision:
    """The effective float32 precision (``ieee``, ``tf32``, ``bf16``) of each side of a
    comparison, for the operators the program dispatched, and the reduction length."""

    actual: str = "ieee"
    reference: str = "ieee"
    reduction: int = 1
    why: str = ""
    #: The device's own tolerances by dtype, in place of :data:`TOLERANCES`
    #: (:attr:`engine.backends.Backend.tolerances`).
    tolerances: tuple[tuple[torch.dtype, tuple[float, float]], ...] = ()

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for a result of ``dtype``: the device's own, else the default."""
        for own, pair in self.tolerances:
            if own == dtype:
                return pair
        return TOLERANCES.get(dtype, (1e-4, 1e-5))

    @property
    def widened(self) -> bool:
        return self.actual != "ieee" or self.reference != "ieee"

    def bound(self) -> float:
        """The relative (to max|reference|) rounding bound of float32 results."""
        ua, ur = roundoff(self.actual), roundoff(self.reference)
        return 2 * ua + 2 * ur + U32 * math.log2(max(2, self.reduction))


def roundoff(precision: str) -> float:
    """The unit roundoff of float32 math in ``precision`` (``ieee``, ``tf32``, ``bf16``)."""
    return _ROUNDOFF.get(precision, U32)


#: Mantissa bits a float32 operand keeps in each precision (float32 itself keeps 23).
_MANTISSA = {"tf32": 10, "bf16": 7}


def round_operand(t: torch.Tensor, precision: str, *, nearest: bool = True) -> torch.Tensor:
    """``t`` as an operand of float32 math in ``precision``: its float32 value with the mantissa
    cut to that precision's bits, to nearest (ties away) or towards zero, in ``t``'s own dtype
    (float32 or float64; other tensors, ``ieee`` and non-finite values unchanged)."""
    bits = _MANTISSA.get(precision)
    if bits is None or t.dtype not in (torch.float32, torch.float64):
        return t
    single = t.detach().to(torch.float32).contiguous()
    drop = 23 - bits
    raw = single.view(torch.int32)
    rounded = ((raw + (1 << (drop - 1))) if nearest else raw) & ~((1 << drop) - 1)
    out = torch.where(torch.isfinite(single), rounded.view(torch.float32), single)
    return out.reshape(t.shape).to(t.dtype)


def families(ops: Iterable[str]) -> tuple[str, ...]:
    """The math-mode families (``conv``, ``matmul``) of the dispatched operators ``ops``."""
    found = []
    names = [op.rsplit(".", 1)[0] if op.count(".") >= 2 else op for op in ops]
    if any(n in CONV_OPS for n in names):
        found.append("conv")
    if any(n in MATMUL_OPS for n in names):
        found.append("matmul")
    return tuple(found)


def _finite_scale(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() and bool(torch.isfinite(t).all()) else 1.0


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    diff = torch.nan_to_num((_wide(a) - _wide(b)).abs(), nan=float("inf"))
    return float(diff.max()) if diff.numel() else 0.0


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality, NaN equal to NaN."""
    eq = a == b
    if a.is_floating_point() or a.is_complex():
        eq = eq | (torch.isnan(a) & torch.isnan(b))
    return eq


def _tolerance(label: str, a: torch.Tensor, b: torch.Tensor, precision: Precision) -> str | None:
    try:
        if torch.equal(a, b):  # the same values (the common case): within any tolerance
            return None
    except RuntimeError:  # a dtype without an equality kernel in this torch: compare below
        pass
    if a.is_floating_point() and a.element_size() == 1:  # float8: few kernels, compare as float32
        a, b = a.float(), b.float()
    if not (a.is_floating_point() or a.is_complex()):
        if torch.equal(a, b):
            return None
        return f"{label}: {int((a != b).sum())} of {a.numel()} values differ"
    rtol, atol = precision.tolerance(a.dtype)
    scale = _finite_scale(b)
    if torch.allclose(a, b, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True):
        return None
    text = f"{label}: max abs diff {_max_diff(a, b):.3g} beyond rtol={rtol}, atol={atol}"
    if precision.widened and a.dtype in (torch.float32, torch.complex64):
        bound = precision.bound() * scale
        if torch.allclose(a, b, rtol=rtol, atol=max(bound, atol * max(1.0, scale)), equal_nan=True):
            return None
        text += f" and the {precision.actual}/{precision.reference} bound {bound:.3g} ({precision.why})"
    return text


def _admissible(label: str, a: torch.Tensor, b: torch.Tensor, writes: Writes, precision: Precision) -> str | None:
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    positions = writes.positions.reshape(-1).to(torch.int64).cpu()
    values = writes.values.detach().reshape(-1).cpu().to(a.dtype)
    if positions.numel() != values.numel():
        raise ValueError(f"{label}: {positions.numel()} write positions but {values.numel()} values")
    counts = torch.bincount(positions, minlength=flat_a.numel())
    duplicated = counts > 1
    single = ~duplicated
    problem = _tolerance(label, flat_a[single], flat_b[single], precision)
    if problem:
        return problem + " (elements written at most once)"
    matched = torch.zeros(flat_a.numel(), dtype=torch.int64)
    matched.index_add_(0, positions, _same(flat_a[positions], values).to(torch.int64))
    bad = duplicated & (matched == 0)
    if bool(bad.any()):
        return (f"{label}: {int(bad.sum())} of {int(duplicated.sum())} elements written more than once hold a "
                "value none of their writes carried")
    return None


def compare(actual: Sequence[tuple[str, torch.Tensor]], reference: Sequence[tuple[str, torch.Tensor]],
            rules: Rules = Rules(), *, inputs: Mapping[str, torch.Tensor] | None = None,
            precision: Precision = Precision()) -> str | None:
    """None when every output agrees with the reference under its rule, else what differed first."""
    if [label for label, _ in actual] != [label for label, _ in reference]:
        return f"different outputs: {[l for l, _ in actual]} vs {[l for l, _ in reference]}"
    writes: dict[str, Writes] | None = None
    for (label, a), (_, b) in zip(actual, reference):
        rule = rules.for_label(label)
        if rule.name == "runs-only":
            continue
        if rule.name == "invariant":
            a, b = rule.invariant(a), rule.invariant(b)
        if a.shape != b.shape:
            return f"{label}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
        if a.dtype != b.dtype:
            return f"{label}: dtype {a.dtype} vs {b.dtype}"
        if rule.name == "exact":
            if not bool(_same(a, b).all()):
                return f"{label}: {int((~_same(a, b)).sum())} of {a.numel()} values differ (exact rule)"
            continue
        if rule.name == "admissible-set":
            if writes is None:
                writes = dict(rule.writes(inputs or {}))
            if label in writes:
                problem = _admissible(label, a, b, writes[label], precision)
                if problem:
                    return problem
                continue
        problem = _tolerance(label, a, b, precision)
        if problem:
            return problem
    return None


def adjudicate(actual: Sequence[tuple[str, torch.Tensor]], reference: Sequence[tuple[str, torch.Tensor]],
               wide: Sequence[tuple[str, torch.Tensor]] | None, rules: Rules = Rules(), *,
               inputs: Mapping[str, torch.Tensor] | None = None, precision: Precision = Precision(),
               neighbours: Iterable[Sequence[tuple[str, torch.Tensor]] | None] = (), factor: float = 4.0,
               reference_noise: bool = True) -> str | None:
    """A second look at a result that missed its (narrow) ``reference``: is it as close to the
    float64 reference ``wide`` (the same program on float64 inputs) as float32 arithmetic gets?

    The program's float32 noise is the largest distance from ``wide`` of any output of the
    reference and of its ``neighbours`` (the same program in float32 on inputs one or two
    units in the last place away: what a backward-stable float32 algorithm may return; where
    the device computes in a narrower precision, also the program in float64 on inputs rounded
    to that precision's operands, :func:`round_operand`: what TF32 or bf16 operands alone
    change, cancellation included). An
    output passes when it agrees with ``wide`` cast to its dtype, or when its distance from
    ``wide`` is at most ``factor`` times that noise (an output that is exactly zero in float64,
    like the input gradient of a one-element layer norm, comes out of the same cancelling
    arithmetic as its neighbours). ``reference_noise=False``: the noise is the neighbours' alone
    (where the reference may race, its distance is the difference being judged). None: not wrong.
    """
    problem = compare(actual, reference, rules, inputs=inputs, precision=precision)
    if problem is None or wide is None or [l for l, _ in wide] != [l for l, _ in actual]:
        return problem
    labels = [l for l, _ in wide]
    noise = 0.0
    for run in [*([reference] if reference_noise else []), *neighbours]:
        if run is None or [l for l, _ in run] != labels:
            continue
        noise = max([noise] + [_max_diff(b, w) for (_, b), (_, w) in zip(run, wide)
                               if (b.is_floating_point() or b.is_complex()) and b.shape == w.shape])
    for (label, a), (_, b), (_, w) in zip(actual, reference, wide):
        if compare([(label, a)], [(label, b)], rules, inputs=inputs, precision=precision) is None:
            continue
        if not (a.is_floating_point() or a.is_complex()) or a.shape != w.shape:
            return problem
        narrowed = w.to(a.dtype) if w.dtype != a.dtype else w
        if compare([(label, a)], [(label, narrowed)], rules, inputs=inputs, precision=precision) is None:
            continue
        if _max_diff(a, w) <= factor * noise:
            continue
        own = "float32's own" if not precision.widened else f"float32's and {precision.actual} operands' own"
        return f"{problem}; vs a float64 reference: {label} max abs diff {_max_diff(a, w):.3g}, {own} {noise:.3g}"
    return None
