"""Where the conformance suite lies: a checkout, an editable install or site-packages. Shared by
the ``detconf`` command (:mod:`detconf.cli`) and the GPU runner (:mod:`detconf.gpurun`)."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def suite_root() -> Path | None:
    """The folder that holds the ``conformance`` package: the checkout, or ``site-packages/detconf``."""
    spec = importlib.util.find_spec("detconf.conformance")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "test_documented.py").is_file():
            return Path(location).parent
    return None
