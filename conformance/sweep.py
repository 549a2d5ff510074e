"""The undocumented-op sweep: one catalog entry per OpInfo of torch's own op database.

The documented catalog (``torch-docs``) covers the ops that
``torch.use_deterministic_algorithms`` names. The sweep covers the rest: every
OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` becomes
an entry promising the general contract of deterministic mode, "deterministic
or raises". The generic recipe (``conformance/recipes_sweep.py``) runs the
OpInfo's own sample inputs; a run that differs without raising is
*undocumented nondeterminism*, a raise on an op the docs do not name is an
*undocumented raise*.

Entries whose op the docs do name carry the qualifier ``"documented"`` (see
:func:`documented_ops`), so that a raise there is told apart from a raise
nobody wrote down.

The op database needs the ``expecttest`` package (``requirements-base.txt``)
and takes seconds to import, so it is imported only when the sweep is asked
for, and the global state its import touches (RNG seeds, ``sys.argv``
parsing, frozen ``torch.backends`` flags, warning filters) is put back.
"""
from __future__ import annotations

from typing import Any, Iterable

from detconf.engine.entry import CatalogError, Entry, check_unique

SOURCE = "sweep"
LIST_NAME = "sweep"
OP_PREFIX = "opinfo:"
DOCUMENTED = "documented"
# Qualifier of the OpInfos whose output is random by design; the recipe reseeds
# the global RNG before every call, so that deterministic mode is judged on the
# algorithm and not on the random numbers.
RESEEDED = "reseeded"

# OpInfos whose result is random even with deterministic algorithms: they draw
# from the global generator (samplers, dropout, randomized pooling and
# activations, randomized low-rank factorizations, attention with dropout).
# OpInfo has no flag for this; torch's own tests wrap these ops in
# ``wrapper_set_seed``. Reseeding an op that is not random changes nothing, so
# the name patterns below may over-match safely.
RANDOM_OPS = frozenset({
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
    "normal", "normal.in_place", "normal.number_mean", "uniform",
    "rand_like", "randint", "randint_like", "randn", "randn_like",
    "nn.functional.alpha_dropout", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.feature_alpha_dropout.without_train",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "nn.functional.rrelu",
    "nn.functional.multi_head_attention_forward", "nn.functional.scaled_dot_product_attention",
    "torch.ops.aten._efficient_attention_forward", "torch.ops.aten._flash_attention_forward",
    "pca_lowrank", "svd_lowrank",
})
# Name fragments of random ops a later torch may add. ``__rand__`` is the
# reflected bitwise and, not a sampler.
RANDOM_NAME_PARTS = ("rand", "dropout", "bernoulli", "multinomial", "lowrank", "fractional_max_pool")
NOT_RANDOM = frozenset({"__rand__"})


def is_random_op(name: str) -> bool:
    """Is the OpInfo called ``name`` random by design (reseeded before every call)?"""
    if name in NOT_RANDOM:
        return False
    return name in RANDOM_OPS or any(part in name for part in RANDOM_NAME_PARTS)


# OpInfos whose output holds uninitialized memory (deterministic only because
# deterministic mode fills it): their results are not compared with the
# default algorithm's, which leaves the memory as it was.
UNINITIALIZED_OPS = frozenset({
    "empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided",
    "resize_", "resize_as_",
})

_OP_DB: list | None = None


def opinfo_name(opinfo: Any) -> str:
    """``name`` or ``name.variant_test_name``: unique within ``op_db``."""
    variant = getattr(opinfo, "variant_test_name", "") or ""
    return f"{opinfo.name}.{variant}" if variant else opinfo.name


def load_op_db() -> list:
    """torch's OpInfo database, imported once per process.

    Raises :class:`CatalogError` (one line) when it cannot be imported.
    """
    global _OP_DB
    if _OP_DB is None:
        _OP_DB = list(_import_op_db())
    return _OP_DB


def _import_op_db() -> list:
    # The testing package parses sys.argv, reseeds every RNG, freezes the torch.backends flags
    # and adds warning filters when imported: the guard undoes that
    # (engine.determinism.import_effects_undone). It also registers and loads Hypothesis
    # profiles of its own (one of them named "dev", like ours): the chosen profile survives.
    from detconf.conformance import profiles
    from detconf.engine.determinism import import_effects_undone  # torch: imported when the sweep is asked for

    try:
        with profiles.kept(), import_effects_undone():
            from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc).splitlines()[0]
        raise CatalogError(
            f"the sweep source needs torch's OpInfo database, which failed to import ({missing}): "
            "pip install -r requirements-base.txt (expecttest)"
        ) from None
    return op_db


def opinfo_by_name() -> dict[str, Any]:
    """``{opinfo_name(op): op}`` over the whole database."""
    return {opinfo_name(op): op for op in load_op_db()}


# ---------------------------------------------------------------------------
# Documented ops: qualified names in the docs -> OpInfo names

# nn.Module classes the docs name, and the functional OpInfo(s) that run the
# same kernels.
MODULE_TO_FUNCTIONAL: dict[str, tuple[str, ...]] = {
    "AdaptiveAvgPool1d": ("nn.functional.adaptive_avg_pool1d",),
    "AdaptiveAvgPool2d": ("nn.functional.adaptive_avg_pool2d",),
    "AdaptiveAvgPool3d": ("nn.functional.adaptive_avg_pool3d",),
    "AdaptiveMaxPool1d": ("nn.functional.adaptive_max_pool1d",),
    "AdaptiveMaxPool2d": ("nn.functional.adaptive_max_pool2d",),
    "AdaptiveMaxPool3d": ("nn.functional.adaptive_max_pool3d",),
    "AvgPool1d": ("nn.functional.avg_pool1d",),
    "AvgPool2d": ("nn.functional.avg_pool2d",),
    "AvgPool3d": ("nn.functional.avg_pool3d",),
    "CTCLoss": ("nn.functional.ctc_loss",),
    "Conv1d": ("nn.functional.conv1d",),
    "Conv2d": ("nn.functional.conv2d",),
    "Conv3d": ("nn.functional.conv3d",),
    "ConvTranspose1d": ("nn.functional.conv_transpose1d",),
    "ConvTranspose2d": ("nn.functional.conv_transpose2d",),
    "ConvTranspose3d": ("nn.functional.conv_transpose3d",),
    "Embedding": ("nn.functional.embedding",),
    "EmbeddingBag": ("nn.functional.embedding_bag",),
    "FractionalMaxPool2d": ("nn.functional.fractional_max_pool2d",),
    "FractionalMaxPool3d": ("nn.functional.fractional_max_pool3d",),
    "MaxPool1d": ("nn.functional.max_pool1d",),
    "MaxPool2d": ("nn.functional.max_pool2d",),
    "MaxPool3d": ("nn.functional.max_pool3d",),
    "MaxUnpool1d": ("nn.functional.max_unpool1d",),
    "MaxUnpool2d": ("nn.functional.max_unpool2d",),
    "MaxUnpool3d": ("nn.functional.max_unpool3d",),
    "NLLLoss": ("nn.functional.nll_loss",),
    "ReflectionPad1d": ("nn.functional.pad.reflect",),
    "ReflectionPad2d": ("nn.functional.pad.reflect",),
    "ReflectionPad3d": ("nn.functional.pad.reflect",),
    "ReplicationPad1d": ("nn.functional.pad.replicate", "nn.functional.pad.replicate_negative"),
    "ReplicationPad2d": ("nn.functional.pad.replicate", "nn.functional.pad.replicate_negative"),
    "ReplicationPad3d": ("nn.functional.pad.replicate", "nn.functional.pad.replicate_negative"),
    "Upsample": ("nn.functional.interpolate",),
}

_PREFIXES = ("torch.Tensor.", "torch.nn.functional.", "torch.")


def _candidate_names(op: str) -> tuple[str, ...]:
    """OpInfo names (``name``, or ``name.variant`` for one variant) a documented qualified op may stand for."""
    if op.startswith("torch.nn.") and op.rsplit(".", 1)[-1] in MODULE_TO_FUNCTIONAL:
        return MODULE_TO_FUNCTIONAL[op.rsplit(".", 1)[-1]]
    if op.startswith("torch.nn.functional."):
        return ("nn.functional." + op[len("torch.nn.functional."):],)
    for prefix in _PREFIXES:
        if op.startswith(prefix):
            base = op[len(prefix):]
            break
    else:
        base = op
    # ``put_`` is OpInfo ``put``, ``index_add_`` is ``index_add``; ``resize_``
    # keeps its underscore in op_db. Try both spellings.
    return tuple(dict.fromkeys((base, base.rstrip("_") or base)))


def documented_ops(torch_docs_entries: Iterable[Entry],
                   opinfo_names: Iterable[tuple[str, str]] | None = None) -> set[str]:
    """The OpInfo names (``name`` or ``name.variant``) of the ops the entries name.

    ``torch.Tensor.put_`` -> ``put``; ``torch.nn.functional.interpolate`` ->
    every ``nn.functional.interpolate.*`` variant; ``torch.nn.MaxUnpool1d`` ->
    ``nn.functional.max_unpool1d`` and its ``.grad`` variant. A module the
    explicit table :data:`MODULE_TO_FUNCTIONAL` does not list maps to nothing.
    ``opinfo_names``: ``(name, variant_test_name)`` pairs; default: the
    installed op database.
    """
    if opinfo_names is None:
        opinfo_names = [(op.name, op.variant_test_name or "") for op in load_op_db()]
    # A candidate is an OpInfo name (all its variants) or one variant's full
    # name (``nn.functional.pad.reflect`` in MODULE_TO_FUNCTIONAL).
    matches: dict[str, set[str]] = {}
    for name, variant in opinfo_names:
        full = f"{name}.{variant}" if variant else name
        matches.setdefault(name, set()).add(full)
        matches.setdefault(full, set()).add(full)
    found: set[str] = set()
    for entry in torch_docs_entries:
        for candidate in _candidate_names(entry.op):
            found.update(matches.get(candidate, ()))
    return found


# ---------------------------------------------------------------------------
# Entries


def _qualified(name: str) -> str:
    return name if name.startswith("torch.") else f"torch.{name}"


def sweep_entries(torch_docs_entries: Iterable[Entry] | None = None) -> list[Entry]:
    """One ``deterministic`` entry per OpInfo, in ``op_db`` order.

    ``torch_docs_entries`` decides which ops count as documented (qualifier
    ``"documented"``); default: the installed torch's docstring.
    """
    ops = load_op_db()
    if torch_docs_entries is None:
        from detconf.engine import docspec

        torch_docs_entries = docspec.installed_entries()
    names = [opinfo_name(op) for op in ops]
    documented = documented_ops(torch_docs_entries, [(op.name, op.variant_test_name or "") for op in ops])
    entries = []
    for position, (op, name) in enumerate(zip(ops, names)):
        qualifiers = []
        if name in documented:
            qualifiers.append(DOCUMENTED)
        if is_random_op(name):
            qualifiers.append(RESEEDED)
        where = "documented in use_deterministic_algorithms" if name in documented else "not in the deterministic-mode lists"
        entries.append(Entry(
            id=name,
            op=OP_PREFIX + name,
            sentence=f"OpInfo {_qualified(op.name)}" + (f" ({op.variant_test_name})" if op.variant_test_name else "")
                     + f" (sweep: {where})",
            promise="deterministic",
            devices=(),
            backward=bool(op.supports_autograd),
            qualifiers=tuple(qualifiers),
            source=SOURCE,
            list_name=LIST_NAME,
            position=position,
        ))
    return check_unique(entries)
