"""Registers the project's recipes and checks with the engine's registries.

Importing a recipe or check module runs its ``@recipe`` / ``@check``
decorators; this module imports all of them, so ``import conformance.registry``
is all a caller (the harness, a test, a benchmark) needs before looking one up.
"""
from detconf.conformance import checks, recipes, recipes_ascend, recipes_sweep  # noqa: F401
from detconf.conformance.checks import attention  # noqa: F401  (the sdpa and flex-attention checks)
from detconf.conformance.checks import batch_invariance  # noqa: F401  (the batch-invariance checks)
