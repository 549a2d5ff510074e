"""The harness's own pytest processes keep what they loaded out of the cyclic garbage collector's
sight (tests/conftest.py): frozen after collection and after a test that loaded modules; the
garbage a test makes is still collected."""
from __future__ import annotations

import gc
import sys
import types
import weakref

from tests import conftest


def _node() -> types.SimpleNamespace:
    """What pytest hands the hooks, as much of it as they read: a session's or an item's ``config``."""
    return types.SimpleNamespace(config=types.SimpleNamespace())


def _tracked(obj: object) -> bool:
    """Is ``obj`` in one of the collector's generations? (frozen objects are in none of them)"""
    return any(o is obj for o in gc.get_objects())


def test_what_is_alive_when_collection_ends_is_frozen():
    """In a whole run the test modules import Inductor's configuration while they are collected,
    so the first test's capture of the global state (engine/determinism.py, which freezes what
    is alive when it imports that configuration itself) freezes nothing: this hook does."""
    alive = {"alive": ["when collection ends"]}
    assert _tracked(alive)
    conftest.pytest_collection_finish(_node())
    assert gc.is_tracked(alive) and not _tracked(alive)


def test_what_a_test_loaded_is_frozen_after_it_and_nothing_more_when_it_loaded_nothing(monkeypatch):
    run = _node()  # the session's and its items' config
    conftest.pytest_collection_finish(run)
    module = types.ModuleType("_harness_gc_probe")
    module.kept = {"kept": ["by a module a test loaded"]}
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert _tracked(module.kept)
    conftest.pytest_runtest_teardown(run)
    assert not _tracked(module.kept)
    loose = {"made": ["after the freeze"]}
    conftest.pytest_runtest_teardown(run)  # no module loaded since: nothing frozen
    assert _tracked(loose)


def test_the_garbage_a_test_makes_is_still_collected():
    class Node:
        other: "Node"

    first, second = Node(), Node()
    first.other, second.other = second, first  # a cycle: only the cyclic collector frees it
    ref = weakref.ref(first)
    del first, second
    gc.collect()
    assert ref() is None
