"""The end-of-run report builder (:mod:`reports.standby`) in a process of its own."""
from __future__ import annotations

import json

from detconf.child import Child


class Standby:
    """The end-of-run report builder (:mod:`reports.standby`) in a process of its own, started
    with the session so that its imports overlap the tests; one request, one reply."""

    #: Its target (:mod:`detconf.child`): it answers on its standard output and leaves at once.
    TARGET = "detconf.reports.standby:main"

    def __init__(self, child: Child) -> None:
        self.child = child
        self.proc = child.proc

    @classmethod
    def start(cls) -> "Standby | None":
        try:
            # In the run's working folder: a request names the results file as the run has it.
            child = Child(cls.TARGET, stdin=True)
        except OSError:
            return None  # the build runs in this process instead
        return cls(child)

    def ask(self, request: dict) -> dict | None:
        """The reply, or None when the builder died or answered nonsense (the caller builds)."""
        try:
            out, _ = self.child.communicate(json.dumps(request) + "\n")
        except (OSError, ValueError):
            self.stop()
            return None
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
