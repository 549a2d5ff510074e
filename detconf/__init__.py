"""detconf: the conformance suite and differential test harness for PyTorch's deterministic mode.

Every module of the project is ``detconf.*``: its shared, torch-free definitions
(:mod:`detconf.vocabulary`, the command line, the GPU session) live in this folder, and the
design's four packages are its subpackages ``detconf.engine``, ``detconf.conformance``,
``detconf.plugin`` and ``detconf.reports``. Installed (``pip install .``), they lie in
``site-packages/detconf/``: nothing else goes to the top level of site-packages, so no other
distribution's ``engine`` or ``reports`` and no such folder where a command runs can stand in for
them. In a checkout they stay at the repository's top level (the design's layout): this package's
search path then also holds the repository root, which is recognised by its ``pyproject.toml``
naming this project, never merely by a folder's name (docs/architecture.md).
"""
from __future__ import annotations

import os as _os

#: The design's packages, each a subpackage of detconf (the repository's top-level folders).
SUBPACKAGES = ("engine", "conformance", "plugin", "reports")


def _checkout_root() -> str | None:
    """The repository root when this package runs from a checkout (or an editable install of
    one): the folder above this one, holding ``pyproject.toml`` for the project ``detconf`` and
    the design's packages. None when installed (the subpackages are then inside this folder)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if all(_os.path.isfile(_os.path.join(here, name, "__init__.py")) for name in SUBPACKAGES):
        return None
    root = _os.path.dirname(here)
    try:
        with open(_os.path.join(root, "pyproject.toml"), encoding="utf-8") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    if 'name = "detconf"' not in head:
        return None
    if not all(_os.path.isfile(_os.path.join(root, name, "__init__.py")) for name in SUBPACKAGES):
        return None
    return root


_root = _checkout_root()
if _root is not None and _root not in __path__:
    __path__.append(_root)
del _root
