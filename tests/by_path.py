"""A script of the repository (``scripts/``, ``benchmarks/``, ``tests/warm_server.py``), loaded
as a module by its path: they are run by path, not imported as packages."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """The module that running ``path`` defines, under ``name`` (not put into ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
