"""The report header: torch, the devices, the flags at start and the options that shaped the run."""
from __future__ import annotations

import platform

import pytest

from detconf.vocabulary import DEFAULT_MODES
from detconf.plugin.devices import device_lines
from detconf.plugin.options import compilers


def pytest_report_header(config: pytest.Config) -> list[str]:
    import torch
    from hypothesis import settings

    from detconf.engine.determinism import current_state

    lines = [f"detconf: torch {torch.__version__} (git {getattr(torch.version, 'git_version', '?')[:10]}), "
             f"python {platform.python_version()}, {platform.platform()}"]
    for backend in config._detconf_backends:
        info = backend.describe()
        state = "available" if info["available"] else "absent"
        versions = ", ".join(f"{k} {v}" for k, v in info.get("versions", {}).items())
        lines.append(f"detconf: device {backend.name} ({state}): {info.get('device_name', '')}"
                     + (f" [{versions}]" if versions else ""))
    lines += device_lines(config)
    lines.append(f"detconf: flags at start: {current_state().summary()}")
    lines.append(f"detconf: hypothesis profile {settings._current_profile}; sources "
                 f"{config.getoption('--source') or 'all'}; modes {config.getoption('--mode') or list(DEFAULT_MODES)}; "
                 f"compile {compilers(config)}; "
                 f"doc version {config.getoption('--doc-version') or 'installed'}; results {config.getoption('--results')}")
    return lines
