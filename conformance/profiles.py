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


register()


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
