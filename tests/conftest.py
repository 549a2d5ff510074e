"""Fixtures for the harness's own tests.

Every test must leave the process as it found it: the determinism flags, the cuDNN and Inductor
settings the suite guards, the processor's flush-to-zero mode, and the environment.
``_no_state_leaks`` (autouse) fails a test that changes any of them and does not put it back,
naming what changed.
"""
import os
import sys

import pytest

from detconf.engine.determinism import capture_state
from detconf.plugin.freeze import _freeze_loaded
from tests import schedule, warm

# detconf.child's fresh processes forked from a warm interpreter where they may be (tests/warm.py)
warm.fork_children()


# Variables pytest, Hypothesis and torch itself set on first use (Inductor records a pointer on
# import; torch 2.5's torch.compile sets its cache folder and CUDA_MODULE_LOADING): not the suite's
# to restore.
_SET_BY_OTHERS = ("PYTEST_", "HYPOTHESIS_", "_TORCHINDUCTOR_", "TORCHINDUCTOR_CACHE_DIR", "CUDA_MODULE_LOADING")


def _snapshot() -> tuple[dict, dict]:
    from detconf.engine.compiled import flushes_denormals

    # Flush-to-zero too: torch 2.5.1's Inductor kernels (built with -ffast-math) switched it on for
    # the whole process when loaded, and every later test's float draws failed in Hypothesis.
    return dict(capture_state().summary(), flush_to_zero=flushes_denormals()), dict(os.environ)


def leaks(before: tuple[dict, dict], after: tuple[dict, dict]) -> list[str]:
    """What differs between two snapshots, one ``name: before -> after`` each."""
    (flags_before, env_before), (flags_after, env_after) = before, after
    changed = [f"{k}: {flags_before.get(k)!r} -> {flags_after.get(k)!r}"
               for k in sorted(set(flags_before) | set(flags_after)) if flags_before.get(k) != flags_after.get(k)]
    changed += [f"${k}: {env_before.get(k)!r} -> {env_after.get(k)!r}"
                for k in sorted(set(env_before) | set(env_after))
                if env_before.get(k) != env_after.get(k) and not k.startswith(_SET_BY_OTHERS)]
    return changed


@pytest.fixture(autouse=True)
def _no_state_leaks(request):
    before = _snapshot()
    yield
    after = _snapshot()
    changed = leaks(before, after)
    if after[0]["flush_to_zero"] and not before[0]["flush_to_zero"]:
        import torch

        torch.set_flush_denormal(False)  # named below; the next test starts as this one did
    if changed:
        pytest.fail(f"{request.node.nodeid} left global state changed: " + "; ".join(changed), pytrace=False)


@pytest.hookimpl(tryfirst=True)  # its cleanup is then one of the last to run
def pytest_configure(config):
    """Once pytest is done, an xdist worker and a ``pytest`` command leave as the interpreter
    would, with the session's exit status, but without tearing their modules down
    (``tests/warm_server.py`` ``_exit``: threads waited for, ``atexit`` run, streams flushed): about
    a second of an interpreter holding torch and Dynamo, which a worker's controller waits for
    before its summary and a command's caller after it. Not where pytest runs inside another
    program (``pytest.main``), nor where no session ran (a usage error).
    ``DETCONF_TESTS_TEARDOWN=1``: the interpreter's own exit."""
    if os.environ.get("DETCONF_TESTS_TEARDOWN") == "1":
        return
    if hasattr(config, "workerinput") or _pytest_is_the_program():
        config.add_cleanup(lambda: _leave(config))


def _pytest_is_the_program() -> bool:
    """``python -m pytest`` or the ``pytest`` command, not ``pytest.main()`` called by a program."""
    import sys

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return spec.name in ("pytest", "pytest.__main__")
    return os.path.basename(sys.argv[0] if sys.argv else "") in ("pytest", "py.test")


def pytest_sessionstart(session):
    session.config._detconf_tests_session = session


def _leave(config) -> None:
    session = getattr(config, "_detconf_tests_session", None)
    if session is None:  # no session ran: the interpreter's own exit
        return
    from tests import warm_server

    warm_server._exit(int(session.exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """What the harness's tests load before their first test (torch, pandas, Hypothesis, the
    catalog, 66 test modules and the collected items) stays to the end: out of the cyclic garbage
    collector's sight (``gc.freeze``), as the suite's own plugin does for a run's cases, with its
    :func:`detconf.plugin.freeze._freeze_loaded`. In ``pytest tests -n 2`` on the 2-core sandbox a
    worker's full collections took 0.12-0.17 s each, 25 and 31 of them, and its collections 4.0
    and 6.7 s in all; frozen, 3.5 and 3.3 s."""
    _freeze_loaded(session.config)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    """Modules a test loaded (Inductor, Dynamo, playwright, the op database) stay loaded to the
    end too: frozen with the rest (the plugin's own hook does this after a suite case only)."""
    frozen = getattr(item.config, "_detconf_frozen_modules", None)
    if frozen is not None and len(sys.modules) > frozen:
        _freeze_loaded(item.config)


@pytest.hookimpl(tryfirst=True)  # before --lf/--ff put the failures first
def pytest_collection_modifyitems(session, config, items):
    """Modules heaviest first, each module's tests together (tests/schedule.py)."""
    schedule.order_items(items, schedule.load_weights())


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own answer
def pytest_xdist_make_scheduler(config, log):
    """Under xdist's default distribution, a module at a time to each worker (tests/schedule.py)."""
    if config.getvalue("dist") == "load":
        return schedule.module_scheduling(config, log)
    return None
