"""What a recipe returns, and the registry that maps an op to its recipe.

A *recipe* turns (Hypothesis ``draw``, an ``Entry``, one case's kwargs, a
``torch.device``) into a :class:`Program`: a function plus the leaf input
tensors it runs on. The runner clones the inputs for every run, so a recipe
may mutate them (``put_``) freely.

Recipes are looked up by the entry's qualified ``op`` name, whichever source
(torch docs, a vendor list) names it: one recipe for ``torch.Tensor.put_``.

Each recipe declares, next to it, the *targets* of the ops it serves: the ATen
operators the documented sentence is about (:mod:`engine.trace`), e.g.
``@recipe("torch.Tensor.put_", targets="aten.put_")``. A target spec is an
operator name, a tuple of alternatives, a :class:`~engine.trace.Targets` with
per-device alternatives, a mapping from op name to one of those (one recipe,
several ops), or a function ``(entry, case) -> spec`` for targets that depend
on the entry (forward or backward) or the case (the ``interpolate`` mode).
``targets=NOT_JUDGED`` says on purpose that no sentence names a kernel (the
sweep); a documented op without targets is a loud failure, like a missing recipe.
The registry is filled by whoever defines recipes (``conformance.registry``
imports the project's recipe modules); the engine never looks for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from detconf.engine.trace import Targets

Recipe = Callable[..., "Program"]
#: The declared-absent target: the op's rows carry no reach (no documented kernel to reach).
NOT_JUDGED = "not-judged"

_RECIPES: dict[str, Recipe] = {}
# Recipes for families of generated ops, e.g. every ``opinfo:*`` op of the sweep.
_PREFIX_RECIPES: dict[str, Recipe] = {}
_TARGETS: dict[str, Any] = {}
_PREFIX_TARGETS: dict[str, Any] = {}
_FORMS: dict[str, Any] = {}
#: op -> the only device type its promise is about (``recipe(device=...)``): a ``skipped`` row
#: that says it needs that device is not applicable elsewhere (certification checks the plan's
#: word for it, not the row's).
_DEVICES: dict[str, str] = {}


class NoRecipe(LookupError):
    """An entry whose op has no recipe: a loud failure, never a silent skip."""


class NoTargets(LookupError):
    """A documented op whose recipe names no target operator: reach cannot be judged."""


class RecipeSkipped(Exception):
    """The op cannot run here for a stated reason (e.g. ``torch_npu`` is not
    installed for a ``torch_npu.*`` API). The case is reported ``skipped``.

    ``needs_device``: the only device type the op runs on, when that is why (see
    :class:`engine.checks.CheckSkipped`)."""

    def __init__(self, message: str, *, needs_device: str | None = None) -> None:
        super().__init__(message)
        self.needs_device = needs_device


@dataclass
class Program:
    """A runnable example.

    - ``fn``: called as ``fn(**inputs)``; returns a tensor, or a tuple / list /
      dict of tensors (non-tensors are ignored when comparing).
    - ``inputs``: leaf tensors, on the target device. The runner hands ``fn``
      fresh clones every run.
    - ``grad_inputs``: names in ``inputs`` to differentiate with respect to; the
      runner sets ``requires_grad`` on their clones and calls backward with a
      seeded gradient. Empty: forward only.
    - ``describe``: a short human-readable account of the example (shapes,
      dtypes, kwargs) for reproducers.
    - ``repro``: Python source that rebuilds the example, where practical.
    - ``compare``: the comparison rules of its outputs against references that are not runs of
      itself (:mod:`engine.comparison`): e.g. ``admissible-set`` where duplicate writes leave the
      winner undefined. Empty: the engine derives what it can, else ``tolerance``.
    """

    fn: Callable[..., Any]
    inputs: Mapping[str, torch.Tensor]
    grad_inputs: tuple[str, ...] = ()
    describe: str = ""
    repro: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    compare: tuple[Any, ...] = ()


def _spec_for(op: str, targets: Any) -> Any:
    if isinstance(targets, Mapping) and not isinstance(targets, Targets):
        if op not in targets:
            raise ValueError(f"targets given per op, but none for {op!r}")
        return targets[op]
    return targets


def _check_spec(op: str, spec: Any) -> None:
    if spec is None or spec == NOT_JUDGED or callable(spec):
        return
    Targets.of(spec)  # raises TargetError on a malformed name


def recipe(*ops: str, targets: Any = None, forms: Any = None, device: str | None = None) -> Callable[[Recipe], Recipe]:
    """Register ``fn`` as the recipe for each qualified op name in ``ops``, with its targets.

    ``forms``: the call forms the sentence covers (``("Tensor.put_", "Tensor.put", "torch.put")``,
    ``("nn.Module", "nn.functional")``, or each dtype the condition names), as a tuple for every
    op, a mapping op -> tuple, or a function entry -> tuple. Every example runs once per form: the recipe reads
    ``case["form"]``. ``device``: the only device type the op runs on (``"npu"`` for a ``torch_npu``
    API); the recipe raises :class:`RecipeSkipped` with ``needs_device`` of the same name elsewhere.
    """

    def register(fn: Recipe) -> Recipe:
        specs = {op: _spec_for(op, targets) for op in ops}  # check everything before registering anything
        form_specs = {op: _spec_for(op, forms) if isinstance(forms, Mapping) else forms for op in ops}
        for op, spec in specs.items():
            if op in _RECIPES and _RECIPES[op] is not fn:
                raise ValueError(f"two recipes registered for {op!r}")
            _check_spec(op, spec)
        for op, spec in specs.items():
            _RECIPES[op] = fn
            if spec is not None:
                _TARGETS[op] = spec
            if form_specs[op]:
                _FORMS[op] = form_specs[op]
            if device:
                _DEVICES[op] = device
        return fn

    return register


def recipe_prefix(prefix: str, *, targets: Any = None) -> Callable[[Recipe], Recipe]:
    """Register ``fn`` as the recipe for every op whose name starts with ``prefix``."""

    def register(fn: Recipe) -> Recipe:
        if prefix in _PREFIX_RECIPES and _PREFIX_RECIPES[prefix] is not fn:
            raise ValueError(f"two recipes registered for prefix {prefix!r}")
        _PREFIX_RECIPES[prefix] = fn
        _check_spec(prefix, targets)
        if targets is not None:
            _PREFIX_TARGETS[prefix] = targets
        return fn

    return register


def forms_for(entry: Any) -> tuple[str | None, ...]:
    """The call forms an entry's examples run in; ``(None,)`` when its recipe declares none.
    A declaration may be a function of the entry (``resize_``: the quantized dtypes, only
    for the quantized entry)."""
    spec = _FORMS.get(entry.op)
    if callable(spec):
        spec = spec(entry)
    return tuple(spec) if spec else (None,)


_ABSENT = object()


def _lookup(op: str, exact: Mapping[str, Any], by_prefix: Mapping[str, Any]) -> Any:
    """What ``op`` is registered under: its own name first, else the first matching prefix."""
    if op in exact:
        return exact[op]
    return next((value for prefix, value in by_prefix.items() if op.startswith(prefix)), _ABSENT)


def declared_targets(op: str) -> Any:
    """The op's target spec as declared; :class:`NoTargets` when none is."""
    spec = _lookup(op, _TARGETS, _PREFIX_TARGETS)
    if spec is _ABSENT:
        raise NoTargets(f"no targets for {op!r}: name the ATen operator(s) its sentence is about with "
                        f"@recipe({op!r}, targets=...)")
    return spec


def targets_for(entry: Any, case: Mapping[str, Any], device_type: str) -> tuple[str, ...] | None:
    """The target operators of one case of ``entry`` on ``device_type``; None when not judged."""
    spec = declared_targets(entry.op)
    if callable(spec) and not isinstance(spec, Targets):
        spec = spec(entry, dict(case))
        if spec is None:
            raise NoTargets(f"the targets of {entry.op!r} name no operator for case {dict(case)!r}")
    if spec == NOT_JUDGED:
        return None
    return Targets.of(spec).for_device(device_type)


def kernels_for(entry: Any, case: Mapping[str, Any], device_type: str) -> tuple[tuple[str, ...], ...]:
    """The kernels (groups of alternative operators) that the examples of a case of ``entry`` on
    ``device_type`` must each reach (:attr:`engine.trace.Targets.required`); empty when any
    target will do or reach is not judged."""
    spec = _lookup(entry.op, _TARGETS, _PREFIX_TARGETS)
    if spec is _ABSENT:
        return ()
    if callable(spec) and not isinstance(spec, Targets):
        spec = spec(entry, dict(case))
    if spec is None or spec == NOT_JUDGED:
        return ()
    return Targets.of(spec).kernels_for(device_type)


def recipe_device(op: str) -> str | None:
    """The only device type ``op``'s recipe runs on, where it declares one (``recipe(device=)``)."""
    return _DEVICES.get(op)


def recipe_for(op: str) -> Recipe:
    fn = _lookup(op, _RECIPES, _PREFIX_RECIPES)
    if fn is _ABSENT:
        raise NoRecipe(f"no recipe for {op!r}: add one with @recipe({op!r}) in conformance/recipes.py")
    return fn


def has_recipe(op: str) -> bool:
    try:
        recipe_for(op)
    except NoRecipe:
        return False
    return True

