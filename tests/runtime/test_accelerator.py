"""XPUAccelerator and its registration, on simulated XPU (see tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import lightning_xpu
from lightning_xpu.accelerator import is_xpu_accelerator


def test_import_is_cheap_and_imports_no_lightning_or_torch() -> None:
    code = (
        "import sys, lightning_xpu\n"
        "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module", ["lightning.pytorch.accelerators", "pytorch_lightning.accelerators"])
def test_xpu_is_registered_for_the_trainer_in_both_namespaces(module: str) -> None:
    registry = __import__(module, fromlist=["AcceleratorRegistry"]).AcceleratorRegistry
    assert "xpu" in registry
    assert is_xpu_accelerator(registry.get("xpu"))


@pytest.mark.parametrize("module", ["lightning.fabric.accelerators", "lightning_fabric.accelerators"])
def test_xpu_is_registered_for_fabric_in_both_namespaces(module: str) -> None:
    registry = __import__(module, fromlist=["ACCELERATOR_REGISTRY"]).ACCELERATOR_REGISTRY
    assert "xpu" in registry


@pytest.mark.parametrize(
    ("devices", "expected"),
    [(1, [0]), (2, [0, 1]), ([1, 3], [1, 3]), ("0,2", [0, 2]), ("2", [0, 1]), (-1, [0, 1, 2, 3]), ("-1", [0, 1, 2, 3]),
     (0, None), ("0", None), ([], None)],
)
def test_parse_devices_follows_the_cuda_convention(simulated_xpu, devices, expected) -> None:
    simulated_xpu(devices=4)
    assert lightning_xpu.XPUAccelerator.parse_devices(devices) == expected


def test_parse_devices_rejects_missing_and_duplicate_devices(simulated_xpu, monkeypatch) -> None:
    simulated_xpu(devices=4)
    monkeypatch.setenv("ZE_AFFINITY_MASK", "1,3")  # the process sees 2 of the 4
    with pytest.raises(ValueError, match=r"only 2 XPU device.*ZE_AFFINITY_MASK=1,3"):
        lightning_xpu.XPUAccelerator.parse_devices([0, 2])
    with pytest.raises(ValueError, match="unique"):
        lightning_xpu.XPUAccelerator.parse_devices([1, 1])


def test_accelerator_reports_devices_and_memory_stats(simulated_xpu) -> None:
    sim = simulated_xpu(devices=3)
    accelerator = lightning_xpu.XPUAccelerator()
    assert accelerator.is_available() and accelerator.auto_device_count() == 3
    assert accelerator.get_parallel_devices([0, 2]) == [torch.device("xpu", 0), torch.device("xpu", 2)]
    accelerator.setup_device(torch.device("xpu", 2))
    assert sim.set_device_calls == [torch.device("xpu", 2)]
    assert accelerator.get_device_stats(torch.device("xpu", 2))["allocated_bytes.all.current"] == 1024
    with pytest.raises(RuntimeError, match="not visible"):
        accelerator.setup_device(torch.device("xpu", 3))


def test_without_xpu_the_trainer_says_not_available() -> None:
    from lightning.pytorch import Trainer

    with pytest.raises(Exception, match=r"^XPU cannot be used: "):
        Trainer(accelerator="xpu")


def test_parse_devices_keeps_lightnings_torchelastic_bypass(simulated_xpu, monkeypatch) -> None:
    # torchrun with a per-process affinity mask: each process sees one device, several are asked for.
    simulated_xpu(devices=1)
    with pytest.raises(ValueError, match=r"has only 1 XPU device"):
        lightning_xpu.XPUAccelerator.parse_devices(2)
    launch = {"TORCHELASTIC_RUN_ID": "1", "RANK": "1", "GROUP_RANK": "0", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    for name, value in launch.items():
        monkeypatch.setenv(name, value)
    assert lightning_xpu.XPUAccelerator.parse_devices(2) == [0, 1]
