"""DDP communication hooks register on XPU (simulated XPU, tests/conftest.py).

A real one-process gloo group (in-process HashStore, no network) backs a real DistributedDataParallel module on CPU;
only the strategy's root device is a simulated xpu:0. A registered hook is seen running during backward.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from lightning_grid import TRAINER_NAMESPACES
from torch.nn.parallel import DistributedDataParallel

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import original_of


@pytest.fixture
def one_process_group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class RecordingHook:
    """A DDP communication hook (a plain function, as Lightning logs its `__qualname__`) that counts its calls and
    leaves the gradients as they are (one process)."""

    def __init__(self) -> None:
        self.calls = 0

        # Unannotated on purpose: DDP compares annotations to the classes, and ours are strings here.
        def recording_hook(state, bucket):  # type: ignore[no-untyped-def]
            self.calls += 1
            future = torch.futures.Future()
            future.set_result(bucket.buffer())
            return future

        self.hook = recording_hook


def strategy_with_hook(namespace: Namespace, device: str, hook: RecordingHook) -> object:
    strategy = namespace.pytorch_module("strategies").DDPStrategy(
        parallel_devices=[torch.device(device)], ddp_comm_hook=hook.hook
    )
    strategy.model = DistributedDataParallel(torch.nn.Linear(2, 1))
    return strategy


def backward(strategy: object) -> None:
    strategy.model(torch.ones(3, 2)).sum().backward()


@TRAINER_NAMESPACES
def test_unpatched_lightning_ignores_the_hook_on_xpu(simulated_xpu, one_process_group, namespace) -> None:
    """Simulated XPU: Lightning alone registers hooks only for CUDA, so the user's hook never runs."""
    simulated_xpu()
    hook = RecordingHook()
    strategy = strategy_with_hook(namespace, "xpu:0", hook)
    original_of(type(strategy), "_register_ddp_hooks")(strategy)
    backward(strategy)
    assert hook.calls == 0


@TRAINER_NAMESPACES
def test_hook_is_registered_on_xpu(simulated_xpu, one_process_group, namespace) -> None:
    """Simulated XPU: the hook is registered on the DDP module and runs during backward."""
    simulated_xpu()
    hook = RecordingHook()
    strategy = strategy_with_hook(namespace, "xpu:0", hook)
    strategy._register_ddp_hooks()
    backward(strategy)
    assert hook.calls == 1


@TRAINER_NAMESPACES
def test_cpu_hook_handling_is_unchanged(one_process_group, namespace) -> None:
    """On CPU Lightning registers no hook (DDP hooks are a CUDA feature there); neither does the patched method."""
    hook = RecordingHook()
    strategy = strategy_with_hook(namespace, "cpu", hook)
    strategy._register_ddp_hooks()
    backward(strategy)
    assert hook.calls == 0
