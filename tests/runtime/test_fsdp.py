"""FSDP on simulated XPU (tests/conftest.py), Trainer and Fabric, both namespaces: a tuple `device_mesh` becomes
an "xpu" mesh, and the process group is not bound to a device (ProcessGroupXCCL cannot split a bound group).

Process groups and meshes are recorded, not created (`recorded_process_group`); local rank 1 of 2 devices.
"""

from __future__ import annotations

import pytest
import torch
from lightning_grid import (
    NAMESPACE_SIDES,
    give_oneccl_its_place,
    init_kwargs,
    package_of,
    require_feature,
    strategy_class,
    xpu_strategy,
)

from lightning_xpu._patching import original_of


def fsdp_with_mesh(namespace, side):  # type: ignore[no-untyped-def]
    require_feature("fsdp_device_mesh", package_of(namespace, side))
    return xpu_strategy(namespace, side, "FSDPStrategy", device_mesh=(1, 2), sharding_strategy="HYBRID_SHARD")


def fsdp_kwargs(strategy) -> dict:  # type: ignore[no-untyped-def]
    return strategy.kwargs if hasattr(strategy, "kwargs") else strategy._fsdp_kwargs


@NAMESPACE_SIDES
def test_tuple_device_mesh_is_built_on_xpu(simulated_xpu, recorded_process_group, namespace, side) -> None:
    sim = simulated_xpu()
    pg = recorded_process_group(sim.events)
    strategy = fsdp_with_mesh(namespace, side)
    strategy.setup_environment()

    assert [(mesh.device_type, mesh.mesh_shape) for mesh in pg.meshes] == [("xpu", (1, 2))]
    assert fsdp_kwargs(strategy)["device_mesh"] is pg.meshes[0]
    assert pg.backend == "xccl" and ("set_device", torch.device("xpu", 1)) in sim.events


@NAMESPACE_SIDES
def test_unpatched_fsdp_builds_the_tuple_mesh_on_cuda(simulated_xpu, recorded_process_group, namespace, side,
                                                      monkeypatch) -> None:
    pg = recorded_process_group(simulated_xpu().events)
    strategy = fsdp_with_mesh(namespace, side)
    give_oneccl_its_place(monkeypatch, strategy)
    original_of(type(strategy), "setup_environment")(strategy)
    assert [mesh.device_type for mesh in pg.meshes] == ["cuda"]


@NAMESPACE_SIDES
def test_a_failed_setup_leaves_the_tuple_in_place(simulated_xpu, recorded_process_group, namespace, side,
                                                 monkeypatch) -> None:
    recorded_process_group(simulated_xpu().events)
    strategy = fsdp_with_mesh(namespace, side)

    def refuse(*args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        raise ConnectionError("rendezvous failed")

    monkeypatch.setattr(torch.distributed, "init_process_group", refuse)
    with pytest.raises(ConnectionError):
        strategy.setup_environment()
    assert fsdp_kwargs(strategy)["device_mesh"] == (1, 2)


@NAMESPACE_SIDES
def test_fsdp_does_not_bind_the_process_group_to_the_xpu(simulated_xpu, recorded_process_group, namespace,
                                                        side) -> None:
    pg = recorded_process_group(simulated_xpu().events)
    assert init_kwargs(xpu_strategy(namespace, side, "FSDPStrategy"), side, "FSDPStrategy", pg).get("device_id") is None


@NAMESPACE_SIDES
def test_unpatched_fsdp_binds_the_process_group_to_the_xpu(simulated_xpu, recorded_process_group, namespace,
                                                          side) -> None:
    pg = recorded_process_group(simulated_xpu().events)
    require_feature("process_group_device_id", package_of(namespace, side))
    bound = init_kwargs(xpu_strategy(namespace, side, "FSDPStrategy"), side, "FSDPStrategy", pg, unpatched=True)
    assert bound["device_id"] == torch.device("xpu", 1)


@NAMESPACE_SIDES
def test_off_xpu_fsdp_mesh_is_lightnings(recorded_process_group, namespace, side) -> None:
    pg = recorded_process_group()
    require_feature("fsdp_device_mesh", package_of(namespace, side))
    cls = strategy_class(namespace, side, "FSDPStrategy")
    strategy = cls(device_mesh=(1, 2), sharding_strategy="HYBRID_SHARD", parallel_devices=[torch.device("cpu")] * 2)
    strategy.cluster_environment = namespace.fabric_module("plugins.environments").LightningEnvironment()
    strategy.accelerator = (namespace.pytorch_module("accelerators") if side == "trainer"
                            else namespace.fabric_module("accelerators")).CPUAccelerator()
    strategy.setup_environment()
    assert pg.backend == "gloo" and [mesh.device_type for mesh in pg.meshes] == ["cuda"]
