"""The one child runner (detconf.child): a target's result, what it printed, its failures, and a
path that a folder in the working directory cannot take over."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from detconf.child import Child, ChildFailed, run_in_child, start_child
from tests import warm

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh_processes():
    """These tests judge detconf.child's own start: its processes are not forked here
    (tests/warm.py), as nowhere outside the harness's tests."""
    with warm.children_cold():
        yield

TARGETS = '''
import errno
import os
import sys


def echo(payload):
    print("printed first")
    return {"got": payload}


def no_space(payload):
    raise OSError(errno.ENOSPC, "No space left on device")


def bad(payload):
    raise ValueError("bad input " + str(payload))


def dies(payload):
    print("dying", file=sys.stderr)
    sys.stderr.flush()
    os._exit(7)


def where(payload):
    return __file__
'''


@pytest.fixture
def targets(tmp_path) -> Path:
    folder = tmp_path / "lib"
    (folder / "childtargets").mkdir(parents=True)
    (folder / "childtargets" / "__init__.py").write_text(TARGETS)
    return folder


def test_a_result_and_what_the_target_printed(targets):
    child = Child("childtargets:echo", [1, "a"], path=(targets,))
    assert child.result(timeout=120) == {"got": [1, "a"]}
    assert child.printed == "printed first\n"


def test_an_os_error_keeps_its_reason_and_another_error_its_last_traceback_line(targets):
    with pytest.raises(ChildFailed) as failed:
        Child("childtargets:no_space", path=(targets,)).result(timeout=120)
    assert failed.value.os_error and failed.value.reason == "No space left on device"
    with pytest.raises(ChildFailed) as failed:
        Child("childtargets:bad", 3, path=(targets,)).result(timeout=120)
    assert not failed.value.os_error and failed.value.reason == "ValueError: bad input 3"
    assert "child process failed: ValueError: bad input 3" in str(failed.value)


def test_a_child_that_dies_without_a_result_is_named(targets):
    with pytest.raises(ChildFailed, match="exited with 7 and printed no result: dying") as failed:
        Child("childtargets:dies", path=(targets,)).result(timeout=120, what="the planted crash")
    assert str(failed.value).startswith("the planted crash: ") and failed.value.reason == "dying"


def test_a_folder_of_the_same_name_in_the_working_directory_takes_nothing_over(targets, tmp_path):
    # A working folder holding a 'detconf' and a 'childtargets' of its own, as -m alone would
    # put first on the child's path.
    for name in ("detconf", "childtargets"):
        (tmp_path / "cwd" / name).mkdir(parents=True)
        (tmp_path / "cwd" / name / "__init__.py").write_text("raise ImportError('the wrong package')\n")
    child = Child("childtargets:where", cwd=tmp_path / "cwd", path=(targets,))
    assert child.result(timeout=120) == str(targets / "childtargets" / "__init__.py")


def test_a_timeout_kills_the_child_and_says_so(targets):
    proc = start_child("time:sleep", 30)
    from detconf.child import finish_child

    with pytest.raises(ChildFailed, match="timed out after 0.5s"):
        finish_child(proc, timeout=0.5, what="sleep")
    assert proc.poll() is not None


def test_run_in_child_runs_a_project_target_from_any_folder(tmp_path):
    assert run_in_child("detconf.conformance.children:default_fill", {"numel": 4}, timeout=120) == {
        "default": True, "empty_all_nan": True}


@pytest.mark.parametrize("argv, message", [([], "usage: python -m detconf.child"),
                                           (["a:b"], "usage: python -m detconf.child")])
def test_the_command_line_takes_a_target_and_a_payload(argv, message):
    out = subprocess.run([sys.executable, "-m", "detconf.child", *argv], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "usage: python -m detconf.child package.module:function PAYLOAD_JSON"]
