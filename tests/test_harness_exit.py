"""How the harness's own pytest processes end (tests/conftest.py): with the session's exit status,
``atexit`` run, and without tearing their modules down."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import warm

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import atexit, os
OUT = {out!r}


def _write(what):
    with open(os.path.join(OUT, f"{{os.getpid()}}-{{what}}"), "w"):
        pass


class _Torn:
    def __del__(self, _open=open, _join=os.path.join, _pid=os.getpid, _out=OUT):
        # runs where the interpreter tears this module down (its globals may be gone by then)
        with _open(_join(_out, f"{{_pid()}}-teardown"), "w"):
            pass


KEPT = _Torn()
atexit.register(_write, "atexit")
'''


def _seen(folder: Path) -> dict[str, int]:
    names = [p.name.split("-", 1)[1] for p in folder.iterdir()]
    return {what: names.count(what) for what in ("atexit", "teardown")}


def test_the_controller_and_its_worker_leave_with_the_status_and_atexit_but_no_teardown(tmp_path):
    (tmp_path / "plugins").mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "plugins" / "exit_probe.py").write_text(PROBE.format(out=str(marks)), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "DETCONF_TESTS_TEARDOWN"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "plugins"), env.get("PYTHONPATH")]))
    # The probe itself: a plain interpreter's exit runs atexit, then tears the module down.
    plain = subprocess.run([sys.executable, "-c", "import exit_probe"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert _seen(marks) == {"atexit": 1, "teardown": 1}
    for p in marks.iterdir():
        p.unlink()
    # A pytest command of the harness and its one xdist worker: a fresh interpreter each (a
    # forked one never tears down), exit status 5 (no test selected) as pytest gives it.
    done = warm.run([sys.executable, "-m", "pytest", "tests/test_kit.py", "-n", "1", "-q", "-p", "no:cacheprovider",
                     "-p", "exit_probe", "-k", "no_such_test"], cwd=ROOT, env=env, capture_output=True, text=True,
                    timeout=300, cold=True)
    assert done.returncode == 5, done.stdout[-2000:] + done.stderr[-2000:]
    assert _seen(marks) == {"atexit": 2, "teardown": 0}, sorted(p.name for p in marks.iterdir())


def test_only_pytest_as_the_program_leaves_early_not_a_program_that_calls_pytest_main(monkeypatch):
    from types import ModuleType, SimpleNamespace

    from tests import conftest

    for spec, argv0, expected in ((SimpleNamespace(name="pytest.__main__"), "x", True),
                                  (SimpleNamespace(name="pytest"), "x", True),
                                  (SimpleNamespace(name="my_tool"), "/usr/bin/pytest", False),
                                  (None, "/usr/local/bin/pytest", True),
                                  (None, "/usr/local/bin/py.test", True),
                                  (None, "-c", False),
                                  (None, "my_tool.py", False)):
        main = ModuleType("__main__")
        main.__spec__ = spec
        monkeypatch.setitem(sys.modules, "__main__", main)
        monkeypatch.setattr(sys, "argv", [argv0])
        assert conftest._pytest_is_the_program() is expected, (spec, argv0)
