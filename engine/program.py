"""What a recipe returns, and the registry that maps an op to its recipe.

A *recipe* turns (Hypothesis ``draw``, an ``Entry``, one case's kwargs, a
``torch.device``) into a :class:`Program`: a function plus the leaf input
tensors it runs on. The runner clones the inputs for every run, so a recipe
may mutate them (``put_``) freely.

Recipes are looked up by the entry's qualified ``op`` name, whichever source
(torch docs, a vendor list) names it: one recipe for ``torch.Tensor.put_``.
The registry is filled by whoever defines recipes (``conformance.registry``
imports the project's recipe modules); the engine never looks for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

Recipe = Callable[..., "Program"]

_RECIPES: dict[str, Recipe] = {}
# Recipes for families of generated ops, e.g. every ``opinfo:*`` op of the sweep.
_PREFIX_RECIPES: dict[str, Recipe] = {}


class NoRecipe(LookupError):
    """An entry whose op has no recipe: a loud failure, never a silent skip."""


class RecipeSkipped(Exception):
    """The op cannot run here for a stated reason (e.g. ``torch_npu`` is not
    installed for a ``torch_npu.*`` API). The case is reported ``skipped``."""


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
    """

    fn: Callable[..., Any]
    inputs: Mapping[str, torch.Tensor]
    grad_inputs: tuple[str, ...] = ()
    describe: str = ""
    repro: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def recipe(*ops: str) -> Callable[[Recipe], Recipe]:
    """Register ``fn`` as the recipe for each qualified op name in ``ops``."""

    def register(fn: Recipe) -> Recipe:
        for op in ops:
            if op in _RECIPES and _RECIPES[op] is not fn:
                raise ValueError(f"two recipes registered for {op!r}")
            _RECIPES[op] = fn
        return fn

    return register


def recipe_prefix(prefix: str) -> Callable[[Recipe], Recipe]:
    """Register ``fn`` as the recipe for every op whose name starts with ``prefix``."""

    def register(fn: Recipe) -> Recipe:
        if prefix in _PREFIX_RECIPES and _PREFIX_RECIPES[prefix] is not fn:
            raise ValueError(f"two recipes registered for prefix {prefix!r}")
        _PREFIX_RECIPES[prefix] = fn
        return fn

    return register


def recipe_for(op: str) -> Recipe:
    if op in _RECIPES:
        return _RECIPES[op]
    for prefix, fn in _PREFIX_RECIPES.items():
        if op.startswith(prefix):
            return fn
    raise NoRecipe(f"no recipe for {op!r}: add one with @recipe({op!r}) in conformance/recipes.py")


def has_recipe(op: str) -> bool:
    try:
        recipe_for(op)
    except NoRecipe:
        return False
    return True


def registered_ops() -> list[str]:
    return sorted(_RECIPES)
