"""The guard sets a mode and restores every setting, also after an exception."""
import os
import random

import pytest
import torch

from engine import determinism
from engine.determinism import GUARDED_ENV_VARS, current_state, deterministic_mode, preserved_global_state
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

    from engine.determinism import preserved_rng

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

