"""Hypothesis profiles, registered once for the plugin and for isolated children.

- ``dev``: 10 examples a case, random, with the example database (local work): about 1.7x
  the examples of ``ci``, other ones every run.
- ``ci``: 6 examples a case, derandomized (same examples every run and in every process), no
  database, no deadline: identical rows from ``-n 0``, ``-n auto`` and an isolated child
  process. The default plan on the CPU: the README's figure for command 1.
- ``thorough``: 100 examples a case, random; strategies draw large tensors (scale ``large``):
  about 17x the examples of ``ci``, each larger.
- ``stress``: the stress tier: 2 derandomized examples per case built to make races visible
  (scale ``stress``: sizes at the top of their range up to 4 Mi elements, sized to the device's
  free memory, thousands of writes per destination, overlapping windows), the same examples in
  every mode, at least :data:`conformance.harness.STRESS_RUNS` runs each. For a GPU: on one
  H100 about 0.8 cases a second with 16 workers (torch-docs, three modes: 214 cases).
"""
import contextlib
from typing import Iterator

from hypothesis import settings

from detconf.vocabulary import HYPOTHESIS_PROFILES, base_profile

PROFILES = {name: dict(kwargs) for name, kwargs in HYPOTHESIS_PROFILES.items()}
SCALE_FOR_PROFILE = {"dev": "small", "ci": "small", "thorough": "large", "stress": "stress"}

def register() -> None:
    """(Re-)register the profiles: other code (torch's test utilities) may register its own under our names."""
    for name, kwargs in PROFILES.items():
        settings.register_profile(name, **kwargs)


#: Hypothesis's own ``_get_local_constants``, once :func:`without_local_constants` replaced it
#: (None: it did not): tests/test_strategies.py shows what it would have drawn.
_local_constants_of_hypothesis = None


def without_local_constants() -> bool:
    """Draw from the strategies and Hypothesis's own constants only, not from the source of the
    modules this process has loaded.

    Hypothesis (from 6.131) mixes into its draws the constants it reads in the source of every
    *local* module loaded when it first draws (outside site-packages, not a test file), and keeps
    them under ``.hypothesis/constants/`` in the working folder. The suite's examples would then
    depend on what the process had loaded: a checkout's detconf is local, an installed one is
    not; a user's conftest or a vendor's backend module adds its own numbers. A derandomized
    profile would not give the same examples in every process, and every run would write into
    the folder it runs from (and read some hundred source files: about 75 ms of a one-case run
    on the 2-core sandbox). Returns whether this Hypothesis had local constants to turn off
    (where it lacks the feature, there is nothing to do)."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - every supported Hypothesis has the module
        return False
    if not callable(getattr(providers, "_get_local_constants", None)) or not callable(
            getattr(providers, "Constants", None)):
        return False
    global _local_constants_of_hypothesis
    if _local_constants_of_hypothesis is None:
        _local_constants_of_hypothesis = providers._get_local_constants
    none = providers.Constants()
    providers._get_local_constants = lambda: none
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if hasattr(cache, "clear"):  # what was worked out from the constants found so far
        cache.clear()
    return True


register()
without_local_constants()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Put the chosen profile back after the body: torch's test utilities register and load
    profiles of their own when imported (one of them named ``dev``, like ours)."""
    chosen = settings._current_profile
    try:
        yield
    finally:
        register()
        if chosen in PROFILES:
            load(chosen)
        else:
            settings.load_profile(chosen)


def load(name: str) -> None:
    """Load profile ``name`` and its scale; a name Hypothesis's plugin derived from one of ours
    (``stress-with-verbose-verbosity``) keeps that profile's scale (the stress tier stays on), and
    where it is not registered (an isolated child) the profile it stands for is loaded."""
    if name not in settings._profiles and base_profile(name) in PROFILES:
        name = base_profile(name)
    settings.load_profile(name)
    try:
        from detconf.engine import strategies
    except ImportError:
        return
    set_scale = getattr(strategies, "set_scale", None)
    if set_scale is not None:
        set_scale(SCALE_FOR_PROFILE.get(base_profile(name), "small"))
