"""The guard sets a mode and restores every setting, also after an exception."""
import os
import random

import pytest
import torch

from detconf.engine import determinism
from detconf.engine.determinism import GUARDED_ENV_VARS, current_state, deterministic_mode, preserved_global_state
from detconf.engine.program import Program, recipe
from tests.capabilities import has_inductor_deterministic, require_inductor_deterministic


@pytest.fixture(autouse=True)
def pristine():
    with preserved_global_state(rng=True):
        yield


@pytest.mark.parametrize("mode,enabled,warn_only", [("error", True, False), ("warn_only", True, True), ("off", False, False)])
def test_mode_is_applied(mode, enabled, warn_only):
    with deterministic_mode(mode):
        assert torch.are_deterministic_algorithms_enabled() is enabled
        assert torch.is_deterministic_algorithms_warn_only_enabled() is warn_only


def test_everything_restored_after_exception():
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = True
    before = current_state()
    with pytest.raises(ZeroDivisionError):
        with deterministic_mode("error"):
            torch.utils.deterministic.fill_uninitialized_memory = True
            torch.backends.cudnn.deterministic = True
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
            assert torch.backends.cudnn.benchmark is False  # the notes' recommendation
            1 / 0
    assert current_state() == before
    torch.utils.deterministic.fill_uninitialized_memory = True
    torch.backends.cudnn.benchmark = False


def test_nested_guards_restore_in_order():
    torch.use_deterministic_algorithms(False)
    with deterministic_mode("warn_only"):
        with deterministic_mode("error"):
            assert torch.get_deterministic_debug_mode() == 2
        assert torch.get_deterministic_debug_mode() == 1
    assert torch.get_deterministic_debug_mode() == 0


def test_unknown_mode_rejected_without_side_effects():
    before = current_state()
    with pytest.raises(ValueError, match="mode must be one of"):
        with deterministic_mode("sometimes"):
            pass
    assert current_state() == before


def test_inductor_setting_environment_and_rng_come_back():
    require_inductor_deterministic()
    import torch._inductor.config as inductor_config

    before = current_state()
    torch_rng, python_rng = torch.default_generator.get_state(), random.getstate()
    with deterministic_mode("off", rng=True):
        inductor_config.deterministic = not inductor_config.deterministic
        for name in GUARDED_ENV_VARS:
            os.environ[name] = "planted"
        torch.manual_seed(1234)
        random.seed(1234)
        torch.rand(3)
    assert current_state() == before
    assert all(os.environ.get(name) == before.env[name] for name in GUARDED_ENV_VARS)
    assert torch.equal(torch.default_generator.get_state(), torch_rng)
    assert random.getstate() == python_rng


def test_the_guard_sees_a_leak_it_did_not_restore():
    require_inductor_deterministic()
    import torch._inductor.config as inductor_config

    before = current_state()
    inductor_config.deterministic = not inductor_config.deterministic
    try:
        assert current_state() != before  # what the guard compares is what it restores
    finally:
        inductor_config.deterministic = not inductor_config.deterministic


def test_environment_and_rng_come_back_without_the_inductor_setting(monkeypatch):
    # The guard's sentinel path: a torch without Inductor's deterministic setting
    # still restores everything else. Elsewhere the setting is hidden from the guard.
    if has_inductor_deterministic():
        monkeypatch.setattr(determinism, "_inductor_config", lambda: None)
    before = current_state()
    assert before.summary()["inductor_deterministic"] is None
    torch_rng = torch.default_generator.get_state()
    with deterministic_mode("error", rng=True):
        torch.utils.deterministic.fill_uninitialized_memory = not torch.utils.deterministic.fill_uninitialized_memory
        for name in GUARDED_ENV_VARS:
            os.environ[name] = "planted"
        torch.manual_seed(1234)
        torch.rand(3)
    assert current_state() == before
    assert all(os.environ.get(name) == before.env[name] for name in GUARDED_ENV_VARS)
    assert torch.equal(torch.default_generator.get_state(), torch_rng)


def test_the_leak_check_of_the_harness_tests_names_what_a_test_left_changed(monkeypatch):
    import os

    import torch

    from tests.conftest import _snapshot, leaks

    before = _snapshot()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", not torch.backends.cudnn.benchmark)
    changed = leaks(before, _snapshot())
    assert any(c.startswith("$CUBLAS_WORKSPACE_CONFIG") for c in changed)
    assert any(c.startswith("cudnn_benchmark") for c in changed)
    assert leaks(before, before) == []
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"  # monkeypatch puts both back after the test


def test_the_guard_works_after_torch_test_utilities_froze_the_flags():
    """torch.testing._internal.common_utils calls torch.backends.disable_global_flags() when
    imported; a process that imported it must still run cases (and stay frozen afterwards)."""
    frozen = torch.backends.flags_frozen.__globals__
    name = "__allow_nonbracketed_mutation_flag"
    before = frozen[name]
    torch.backends.disable_global_flags()
    try:
        assert torch.backends.flags_frozen()
        with pytest.raises(RuntimeError, match="disable_global_flags"):
            torch.backends.cudnn.benchmark = True  # what a plain assignment meets
        with deterministic_mode("error", cudnn_benchmark=False):
            assert torch.are_deterministic_algorithms_enabled()
            assert torch.backends.cudnn.benchmark is False
        assert not torch.are_deterministic_algorithms_enabled()
        assert torch.backends.flags_frozen()
    finally:
        frozen[name] = before


def test_inside_a_case_guard_the_run_guards_leave_random_and_numpy_to_it():
    # The harness opens preserved_rng once per case; the guards of the runs inside it snapshot
    # torch's generators only (NumPy's legacy state costs about 40 µs each way), and the case
    # guard puts random and NumPy back when it closes. Outside one, a run guard does it all.
    import numpy as np

    from detconf.engine.determinism import preserved_rng

    random.random()  # a state no seeding makes: an earlier test may have left random just seeded with 5
    py, legacy, torch_rng = random.getstate(), np.random.get_state(), torch.default_generator.get_state()
    with preserved_rng():
        with deterministic_mode("off", rng=True) as saved:
            assert "torch" in saved.rng and "random" not in saved.rng and "numpy" not in saved.rng
            random.seed(5)
            np.random.seed(5)
            torch.manual_seed(5)
        assert torch.equal(torch.default_generator.get_state(), torch_rng)  # the run guard's own
        assert random.getstate() != py  # left to the case guard
    assert random.getstate() == py
    assert np.array_equal(np.random.get_state()[1], legacy[1]) and np.random.get_state()[2] == legacy[2]
    with deterministic_mode("off", rng=True) as saved:
        assert {"torch", "random", "numpy"} <= saved.rng.keys()
        random.seed(7)
        np.random.seed(7)
    assert random.getstate() == py
    assert np.array_equal(np.random.get_state()[1], legacy[1])



# ----------------------------------------------------------------------------- math modes
def _flip_cudnn_tf32():
    """``torch.backends.cudnn.allow_tf32 = not ...``, as a user writes it (even after torch's
    test utilities froze the flags)."""
    from detconf.engine.determinism import _flags_unfrozen

    with _flags_unfrozen():
        torch.backends.cudnn.allow_tf32 = not torch.backends.cudnn.allow_tf32


MATH_FLIPS = {
    "cudnn.allow_tf32": (_flip_cudnn_tf32, "math_mode.cudnn.allow_tf32"),
    "set_float32_matmul_precision('high')": (lambda: torch.set_float32_matmul_precision("high"),
                                             "math_mode.float32_matmul_precision"),
}


@pytest.mark.parametrize("flip", sorted(MATH_FLIPS))
def test_the_guard_puts_back_a_math_mode_the_body_changed(flip):
    import warnings

    change, _ = MATH_FLIPS[flip]
    before = current_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither reading nor restoring warns (legacy and new API mixed)
        with deterministic_mode("error"):
            change()
            assert current_state().math_mode != before.math_mode
        assert current_state() == before
        with pytest.raises(ZeroDivisionError):
            with preserved_global_state():
                change()
                1 / 0
        assert current_state() == before


@pytest.mark.parametrize("flip", sorted(MATH_FLIPS))
def test_the_summary_names_a_math_mode_leak(flip):
    from tests.conftest import _snapshot, leaks

    change, key = MATH_FLIPS[flip]
    before = current_state()
    change()
    try:
        was, now = before.summary(), current_state().summary()
        changed = [k for k in was if was[k] != now.get(k)]
        assert key in changed  # what conformance/harness.py:_check_no_leak reports
        assert all(k.startswith("math_mode.") for k in changed)
        assert any(c.startswith(key + ":") for c in leaks((was, {}), (now, {})))  # and the harness tests' check
    finally:
        determinism.restore_state(before)
    assert current_state() == before


@recipe("planted.leaks_cudnn_tf32", targets="aten.mul")
def leaks_cudnn_tf32(draw, entry, case, device):
    """Turns cuDNN's TF32 around while building its example (outside the runner's guard)."""
    _flip_cudnn_tf32()
    return Program(fn=lambda x: x * 2, inputs={"x": torch.arange(3.0, device=device)}, describe="leaks tf32")


@recipe("planted.sets_matmul_precision_in_its_program", targets="aten.mm")
def sets_matmul_precision(draw, entry, case, device):
    """Asks for TF32 matmuls inside its program: the runner's guard puts it back after each run."""

    def fn(x):
        torch.set_float32_matmul_precision("high")
        return x @ x

    return Program(fn=fn, inputs={"x": torch.eye(2, device=device)}, describe="sets 'high'")


def test_a_case_that_leaves_a_math_mode_changed_is_named_and_put_back():
    """The harness's leak check (conformance/harness.py:_check_no_leak) on a recipe that turns
    cuDNN's TF32 off while building its example, outside the runner's guard."""
    from hypothesis import settings

    from detconf.conformance.harness import judge
    from detconf.conformance.plan import Case
    from detconf.engine.devices import backends
    from tests.planted import planted_entry

    fast = settings(max_examples=1, derandomize=True, database=None, deadline=None)
    before = current_state().summary()
    leaky = judge(Case(planted_entry("planted.leaks_cudnn_tf32", "deterministic"), "cpu", "error", None, "program"),
                  backends()["cpu"], hypothesis_settings=fast)
    assert leaky["verdict"] == "harness-error"
    assert "math_mode.cudnn.allow_tf32" in leaky["detail"]["error"]
    assert current_state().summary() == before
    tidy = judge(Case(planted_entry("planted.sets_matmul_precision_in_its_program", "deterministic"), "cpu", "error",
                      None, "program"), backends()["cpu"], hypothesis_settings=fast)
    assert tidy["verdict"] == "conforms", tidy.get("detail")
    assert current_state().summary() == before


def test_the_math_mode_guard_costs_little():
    """The guard runs several times per example: the math settings add a few µs to it (resolved
    once; read through torch._C). A generous bound: a loaded machine must not fail it."""
    import timeit

    from detconf.engine import mathmode

    saved = mathmode.capture()
    n = 2000
    capture = min(timeit.repeat(mathmode.capture, number=n, repeat=5)) / n
    restore = min(timeit.repeat(lambda: mathmode.restore(saved), number=n, repeat=5)) / n
    assert capture < 100e-6 and restore < 100e-6, (capture, restore)


# -- one guard, one mode -> flags mapping ----------------------------------------------------
def test_the_modes_flags_come_from_one_table(monkeypatch):
    from detconf import vocabulary

    for mode, flags in vocabulary.MODE_FLAGS.items():
        with deterministic_mode(mode):
            assert (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) == flags
            assert torch.get_deterministic_debug_mode() == vocabulary.debug_level(*flags)
    monkeypatch.setitem(vocabulary.MODE_FLAGS, "error", (True, True))  # planted: the table decides
    with deterministic_mode("error"):
        assert torch.is_deterministic_algorithms_warn_only_enabled() is True


def test_the_mode_table_is_the_only_one():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for rel in ("engine/determinism.py", "conformance/children.py", "conformance/checks/flag_api.py",
                "conformance/checks/inductor.py"):
        text = (root / rel).read_text(encoding="utf-8")
        assert "MODE_FLAGS[" in text or "MODE_CALLS[" in text, rel
        assert not re.search(r'warn_only\s*=\s*\(?\s*mode\s*==|mode\s*!=\s*"off"', text), rel


def test_environment_sets_and_puts_back(monkeypatch):
    monkeypatch.setenv("DETCONF_PLANTED_A", "before")
    monkeypatch.delenv("DETCONF_PLANTED_B", raising=False)
    with pytest.raises(RuntimeError):
        with determinism.environment({"DETCONF_PLANTED_A": None, "DETCONF_PLANTED_B": "set"}):
            assert "DETCONF_PLANTED_A" not in os.environ and os.environ["DETCONF_PLANTED_B"] == "set"
            raise RuntimeError("the body fails")
    assert os.environ["DETCONF_PLANTED_A"] == "before" and "DETCONF_PLANTED_B" not in os.environ


def test_the_compile_cache_folder_uses_the_one_guard(monkeypatch):
    from detconf.engine.compiled import CACHE_ENV_VARS, private_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with private_cache() as folder:
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == folder and os.environ["TRITON_CACHE_DIR"].startswith(folder)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere" and "TRITON_CACHE_DIR" not in os.environ
    assert not os.path.exists(folder) and CACHE_ENV_VARS == ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def test_import_effects_are_undone():
    import sys
    import warnings

    import numpy as np

    argv, filters = list(sys.argv), list(warnings.filters)
    torch_state, py_state, np_state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    frozen = torch.backends.flags_frozen.__globals__
    allowed = frozen.get("__allow_nonbracketed_mutation_flag", True)
    with determinism.import_effects_undone():
        assert sys.argv == argv[:1]
        sys.argv = ["changed", "--by", "the-import"]
        warnings.simplefilter("ignore")
        torch.manual_seed(1), random.seed(1), np.random.seed(1)
        frozen["__allow_nonbracketed_mutation_flag"] = False
    assert sys.argv == argv and warnings.filters == filters
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == py_state
    assert all(np.array_equal(a, b) if hasattr(a, "shape") else a == b for a, b in zip(np.random.get_state(), np_state))
    assert frozen.get("__allow_nonbracketed_mutation_flag", True) == allowed


def test_no_save_and_restore_block_outside_the_guard():
    """Environment variables and generator states are put back by engine.determinism's guard only."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for rel in ("conformance/sweep.py", "conformance/recipes_sweep.py", "engine/compiled.py"):
        text = (root / rel).read_text(encoding="utf-8")
        assert not re.search(r"saved\w*\s*=|\.getstate\(\)|get_rng_state\(\)|os\.environ\[", text), rel
