"""Builds Lightning strategies placed on simulated XPUs, the way the connector leaves them before setup.

Used with the `simulated_xpu` and `recorded_process_group` fixtures (tests/conftest.py): the strategies below then
run their real setup code in this one process while torch.distributed only records what it was asked.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lightning_xpu._namespaces import LIGHTNING, STANDALONE, Namespace
from lightning_xpu._patching import original_of
from lightning_xpu.accelerator import fabric_accelerator_class, pytorch_accelerator_class
from lightning_xpu.strategies import FABRIC_STRATEGIES, PYTORCH_STRATEGIES

# pytest ids -> namespaces; both are installed wherever these tests run.
NAMESPACES = pytest.mark.parametrize("namespace", [LIGHTNING, STANDALONE], ids=["lightning", "pytorch_lightning"])
SIDES = pytest.mark.parametrize("side", ["trainer", "fabric"])


def strategy_class(namespace: Namespace, side: str, name: str) -> type:
    package = namespace.pytorch_module("strategies") if side == "trainer" else namespace.fabric_module("strategies")
    cls = getattr(package, name, None)
    if cls is None:
        pytest.skip(f"{package.__name__} has no {name} in this Lightning version")
    return cls


def strategy_module(namespace: Namespace, side: str, relative: str) -> Any:
    return namespace.pytorch_module(relative) if side == "trainer" else namespace.fabric_module(relative)


def place_on_xpu(strategy: Any, namespace: Namespace, side: str, devices: int = 2, local_rank: int = 1) -> Any:
    """Give `strategy` what the connector would: our accelerator, xpu:0..N-1 and a LightningEnvironment, here as
    local rank 1 by default, so the rank's device is xpu:1 and anything landing on xpu:0 shows."""
    accelerator_class = pytorch_accelerator_class if side == "trainer" else fabric_accelerator_class
    strategy.accelerator = accelerator_class(namespace)()
    strategy.parallel_devices = [torch.device("xpu", index) for index in range(devices)]
    environment = namespace.fabric_module("plugins.environments").LightningEnvironment()
    environment.local_rank = lambda: local_rank  # instead of the LOCAL_RANK variable
    strategy.cluster_environment = environment
    return strategy


def xpu_strategy(namespace: Namespace, side: str, name: str, devices: int = 2, **kwargs: Any) -> Any:
    """An instance of strategy class `name` at local rank 1 on simulated XPUs, ready for `setup_environment()`
    (ModelParallel gets a no-op parallelize_fn on Fabric and a stand-in LightningModule for the mesh on the
    Trainer)."""
    cls = strategy_class(namespace, side, name)
    if side == "fabric" and name == "ModelParallelStrategy":
        kwargs.setdefault("parallelize_fn", lambda module, device_mesh: module)
    strategy = place_on_xpu(cls(**kwargs), namespace, side, devices)
    if side == "trainer" and name == "ModelParallelStrategy":
        strategy._lightning_module = SimpleNamespace()
    return strategy


def process_group_init_method(side: str, name: str) -> str:
    """The strategy method that creates the process group, as lightning_xpu.strategies knows it."""
    table = PYTORCH_STRATEGIES if side == "trainer" else FABRIC_STRATEGIES
    return next(patch.process_group_init for patch in table if patch.cls == name)


def init_kwargs(strategy: Any, side: str, name: str, pg: Any, unpatched: bool = False) -> dict[str, Any]:
    """The keyword arguments `init_process_group` receives from the strategy's setup: patched, or as Lightning
    alone passes them (its own setup method and its own `_init_dist_connection`)."""
    if not unpatched:
        strategy.setup_environment()
        return pg.init_kwargs
    module = sys.modules[type(strategy).__module__]
    with pytest.MonkeyPatch.context() as local:
        local.setattr(module, "_init_dist_connection", original_of(module, "_init_dist_connection"))
        original_of(type(strategy), process_group_init_method(side, name))(strategy)
    return pg.init_kwargs
