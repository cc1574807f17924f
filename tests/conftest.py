"""Fixtures shared by every test directory.

`simulated_xpu` is the ONE place where an Intel GPU is simulated: no Intel GPU exists on the machines that run
these tests, so code paths that only run on XPU are exercised on the CPU build of torch with `torch.xpu`'s device
queries patched. Nothing here runs on Intel hardware. `simulated_cuda` (with `simulate_cuda`, which the equivalence
grid's subprocesses call directly) is the one simulation of NVIDIA GPUs, for tests that CUDA keeps its behaviour.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
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
    # What get_device_name/get_device_properties report: by default one stack of a Max 1550 (FLAT mode: 512 EUs).
    name: str = "Simulated Intel(R) Data Center GPU Max 1550"
    eu_count: int | None = 512
    current: int = 0
    # One CPU generator per simulated device stands in for its XPU generator (get/set_rng_state_all use them).
    generators: list[torch.Generator] = field(default_factory=list)
    set_device_calls: list[Any] = field(default_factory=list)
    synchronize_calls: int = 0
    empty_cache_calls: int = 0

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 2048}


@pytest.fixture
def simulated_xpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., SimulatedXPU]]:
    """Call it to make this process look like it has Intel GPUs: `sim = simulated_xpu(devices=4, xccl=False)`.

    Patches only device *queries* (availability, count, current/set device, name and properties, memory stats,
    cache, synchronize, XCCL availability, RNG states, profiler support); tensors still cannot be moved to "xpu" on
    the CPU build.
    """

    def simulate(
        devices: int = 2,
        xccl: bool = True,
        fp64: bool = True,
        name: str = SimulatedXPU.name,
        eu_count: int | None = SimulatedXPU.eu_count,
    ) -> SimulatedXPU:
        sim = SimulatedXPU(devices=devices, xccl=xccl, fp64=fp64, name=name, eu_count=eu_count)
        sim.generators = [torch.Generator().manual_seed(1000 + index) for index in range(devices)]

        def set_device(device: Any) -> None:
            sim.set_device_calls.append(device)
            sim.current = torch.device(device).index if not isinstance(device, int) else device

        def synchronize(device: Any = None) -> None:
            sim.synchronize_calls += 1

        def empty_cache() -> None:
            sim.empty_cache_calls += 1

        def properties(device: Any = None) -> SimpleNamespace:
            extra = {} if sim.eu_count is None else {"gpu_eu_count": sim.eu_count}
            return SimpleNamespace(name=sim.name, has_fp64=sim.fp64, total_memory=64 * 2**30,
                                   driver_version="simulated", **extra)

        def set_rng_state_all(states: list[torch.Tensor]) -> None:
            for generator, state in zip(sim.generators, states):
                generator.set_state(state)

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
        monkeypatch.setattr(torch.xpu, "get_rng_state_all", lambda: [g.get_state() for g in sim.generators])
        monkeypatch.setattr(torch.xpu, "set_rng_state_all", set_rng_state_all)
        # An XPU build with the Kineto/PTI tracer can profile XPU activity.
        supported = [*torch.profiler.supported_activities(), torch.profiler.ProfilerActivity.XPU]
        monkeypatch.setattr(torch.profiler, "supported_activities", lambda: set(supported))
        return sim

    yield simulate


@dataclass
class StandInIPEX:
    """What the stand-in `intel_extension_for_pytorch` module was asked to do."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    copies: bool = False  # True: behave as if inplace were ignored (returns new objects)


@pytest.fixture
def stand_in_ipex(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInIPEX]:
    """A STAND-IN for Intel Extension for PyTorch (`intel_extension_for_pytorch`), inserted into `sys.modules`.

    Not IPEX: its `optimize` records its arguments and, like IPEX's `fuse_update_step`, marks the optimizer as fused
    in place (`optimizer.fused = True`). The real package exists only on PyTorch <= 2.8 XPU stacks.
    """
    record = StandInIPEX()

    def optimize(model: Any, dtype: Any = None, optimizer: Any = None, inplace: bool = False, **kwargs: Any) -> Any:
        record.calls.append({"model": model, "optimizer": optimizer, "dtype": dtype, "inplace": inplace, **kwargs})
        if record.copies:
            model, optimizer = copy.deepcopy(model), copy.deepcopy(optimizer)
        if optimizer is not None:
            optimizer.fused = True
        return model if optimizer is None else (model, optimizer)

    module = ModuleType("intel_extension_for_pytorch")
    module.__dict__.update(optimize=optimize, __version__="0.0.0+stand-in")
    monkeypatch.setitem(sys.modules, "intel_extension_for_pytorch", module)
    yield record


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
