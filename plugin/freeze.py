"""What a run loads before its first case, and what a case loads for good, goes out of the cyclic
garbage collector's sight (``gc.freeze``)."""
from __future__ import annotations

import sys

import pytest

from detconf.plugin.plan import case_of


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What is loaded by now (torch, Hypothesis, the catalog, the collected cases) stays until the
    end of the run: move it out of the cyclic garbage collector's sight (``gc.freeze``), so that
    the collections during the run, and pytest's own at its end, look only at what the run makes."""
    if any(case_of(item) is not None for item in session.items):
        _freeze_loaded(session.config)


def _freeze_loaded(config: pytest.Config) -> None:
    """``gc.freeze`` what is alive now, after collecting the young generations (the garbage a
    case just left is young: it is not kept for good; a full collection of the heap torch and
    Hypothesis made would cost a tenth of a second), and note how many modules were loaded:
    :func:`pytest_runtest_teardown` freezes again after a case that loaded more."""
    import gc

    gc.collect(1)
    gc.freeze()
    config._detconf_frozen_modules = len(sys.modules)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Modules loaded during a case (the first case loads ``torch._inductor``, through
    ``torch.use_deterministic_algorithms``; a compiled case loads Dynamo's and Inductor's
    machinery) stay until the end of the run like those loaded before it: freeze them too."""
    frozen = getattr(item.config, "_detconf_frozen_modules", None)
    if frozen is not None and len(sys.modules) > frozen and case_of(item) is not None:
        _freeze_loaded(item.config)
