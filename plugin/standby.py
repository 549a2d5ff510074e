"""The end-of-run report builder (:mod:`reports.standby`) in a process of its own."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile

from detconf.child import Child

#: What the standby imports and this process need not: the libraries of the report build.
REPORT_LIBRARIES = ("pandas", "pyarrow", "matplotlib")


class Standby:
    """The end-of-run report builder (:mod:`reports.standby`) in a process of its own, started
    with the session so that its imports overlap the tests; one request, one reply."""

    #: Its target (:mod:`detconf.child`): it answers on its standard output and leaves at once.
    TARGET = "detconf.reports.standby:main"

    def __init__(self, child: Child, folder: str) -> None:
        self.child = child
        self.proc = child.proc
        #: Its warm-up's folder, made here and removed here once it has ended: a standby stopped
        #: during its warm-up is killed, and would leave a folder of its own behind.
        self.folder = folder

    @classmethod
    def start(cls) -> "Standby | None":
        """The builder, or None: it could not start, or this process has imported the report's
        libraries already (a conftest or plugin did): the standby's whole gain is to load them
        beside the tests, and a second interpreter would load them again (about a second of CPU
        on cores the tests use) to save the run only the build itself."""
        if all(name in sys.modules for name in REPORT_LIBRARIES):
            return None  # the build runs in this process instead
        folder = tempfile.mkdtemp(prefix="detconf-standby-")
        try:
            # In the run's working folder: a request names the results file as the run has it.
            child = Child(cls.TARGET, {"warm": folder}, stdin=True)
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            return None  # the build runs in this process instead
        return cls(child, folder)

    def ask(self, request: dict) -> dict | None:
        """The reply, or None when the builder died or answered nonsense (the caller builds)."""
        try:
            out, _ = self.child.communicate(json.dumps(request) + "\n")
        except (OSError, ValueError):
            self.stop()
            return None
        self._remove_folder()  # it has ended
        lines = out.strip().splitlines()
        try:
            reply = json.loads(lines[-1]) if self.proc.returncode == 0 and lines else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not ({"lines", "summary_error"} & reply.keys()):
            return None
        if "build" in request and not ({"built", "build_error"} & reply.keys()):
            return None
        return reply

    def stop(self) -> None:
        """End it without a request (it has nothing to do): at once, whatever it is loading."""
        self.child.stop()
        self._remove_folder()

    def _remove_folder(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
