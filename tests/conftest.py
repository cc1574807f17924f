"""Fixtures shared by every test directory.

`simulated_xpu` is the ONE place where an Intel GPU is simulated: no Intel GPU exists on the machines that run
these tests, so code paths that only run on XPU are exercised on the CPU build of torch with `torch.xpu`'s device
queries patched. Nothing here runs on Intel hardware. `simulated_cuda` (with `simulate_cuda`, which the equivalence
grid's subprocesses call directly) is the one simulation of NVIDIA GPUs, for tests that CUDA keeps its behaviour.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch


def require_service(name: str, available: bool, why: str) -> None:
    """Skip when a real service is missing locally; fail under CI (`LXPU_REQUIRE_SERVICES=1`)."""
    if available:
        return
    message = f"{name} is not available here: {why}"
    if os.environ.get("LXPU_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " (LXPU_REQUIRE_SERVICES=1: CI must provide it; see ci/)")
    pytest.skip(message)


@dataclass
class SimulatedXPU:
    """What the simulation reports and what the code under test asked of it."""

    devices: int = 2
    xccl: bool = True
    fp64: bool = True
    current: int = 0
    set_device_calls: list[Any] = field(default_factory=list)
    synchronize_calls: int = 0
    empty_cache_calls: int = 0

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 2048}


@pytest.fixture
def simulated_xpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., SimulatedXPU]]:
    """Call it to make this process look like it has Intel GPUs: `sim = simulated_xpu(devices=4, xccl=False)`.

    Patches only device *queries* (availability, count, current/set device, properties, memory stats, cache,
    synchronize, XCCL availability); tensors still cannot be moved to "xpu" on the CPU build.
    """

    def simulate(devices: int = 2, xccl: bool = True, fp64: bool = True) -> SimulatedXPU:
        sim = SimulatedXPU(devices=devices, xccl=xccl, fp64=fp64)

        def set_device(device: Any) -> None:
            sim.set_device_calls.append(device)
            sim.current = torch.device(device).index if not isinstance(device, int) else device

        def synchronize(device: Any = None) -> None:
            sim.synchronize_calls += 1

        def empty_cache() -> None:
            sim.empty_cache_calls += 1

        def properties(device: Any = None) -> SimpleNamespace:
            return SimpleNamespace(name="Simulated Intel(R) Data Center GPU Max 1550", has_fp64=sim.fp64,
                                   total_memory=64 * 2**30, driver_version="simulated")

        monkeypatch.setattr(torch.xpu, "is_available", lambda: sim.devices > 0)
        monkeypatch.setattr(torch.xpu, "device_count", lambda: sim.devices)
        monkeypatch.setattr(torch.xpu, "current_device", lambda: sim.current)
        monkeypatch.setattr(torch.xpu, "set_device", set_device)
        monkeypatch.setattr(torch.xpu, "synchronize", synchronize)
        monkeypatch.setattr(torch.xpu, "empty_cache", empty_cache)
        monkeypatch.setattr(torch.xpu, "get_device_properties", properties)
        monkeypatch.setattr(torch.xpu, "get_device_name", lambda device=None: properties(device).name)
        monkeypatch.setattr(torch.xpu, "memory_stats", sim.memory_stats)
        monkeypatch.setattr(torch.distributed, "is_xccl_available", lambda: sim.xccl, raising=False)
        return sim

    yield simulate


_LIGHTNING_CUDA_MODULES = (
    "lightning.fabric.accelerators.cuda",
    "lightning.pytorch.accelerators.cuda",
    "lightning_fabric.accelerators.cuda",
    "pytorch_lightning.accelerators.cuda",
)


def simulate_cuda(setattr_: Callable[[Any, str, Any], None], devices: int = 2) -> None:
    """Make torch and Lightning report `devices` NVIDIA GPUs: device queries only, nothing runs on CUDA.

    `setattr_` is `monkeypatch.setattr` in tests and plain `setattr` in the equivalence grid's subprocesses
    (tests/runtime/_equivalence_probe.py). Lightning counts GPUs through `num_cuda_devices`, imported by name into
    its accelerator modules; those already imported are patched too.
    """
    setattr_(torch.cuda, "is_available", lambda: devices > 0)
    setattr_(torch.cuda, "device_count", lambda: devices)
    for name in _LIGHTNING_CUDA_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "num_cuda_devices"):
            setattr_(module, "num_cuda_devices", lambda: devices)


@pytest.fixture
def simulated_cuda(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Call it to make this process look like it has NVIDIA GPUs: `simulated_cuda(2)` (see `simulate_cuda`)."""

    def simulate(devices: int = 2) -> None:
        simulate_cuda(monkeypatch.setattr, devices)

    return simulate
