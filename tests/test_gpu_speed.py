"""What a GPU run pays for once per process rather than once per case (issue: on an H100 the
driver version was asked of ``nvidia-smi`` 319 times in one run of the documented sources)."""
from __future__ import annotations

import subprocess
import types

from detconf.engine import devices


def test_the_driver_version_is_asked_of_nvidia_smi_once_per_process(monkeypatch):
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return types.SimpleNamespace(returncode=0, stdout="580.159\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.delattr(devices.torch.cuda, "driver_version", raising=False)
    devices._nvidia_smi_driver.cache_clear()
    try:
        first = [devices._cuda_versions()["driver"] for _ in range(5)]
    finally:
        devices._nvidia_smi_driver.cache_clear()
    assert first == ["580.159"] * 5
    assert len(calls) == 1 and calls[0][0] == "nvidia-smi"


def test_a_missing_nvidia_smi_leaves_the_driver_out(monkeypatch):
    def missing(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    monkeypatch.setattr(subprocess, "run", missing)
    monkeypatch.delattr(devices.torch.cuda, "driver_version", raising=False)
    devices._nvidia_smi_driver.cache_clear()
    try:
        assert "driver" not in devices._cuda_versions()
    finally:
        devices._nvidia_smi_driver.cache_clear()
