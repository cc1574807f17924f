"""ModelParallelStrategy on simulated XPU (tests/conftest.py), Trainer and Fabric, both namespaces: xccl backend, an
"xpu" device mesh, and no `device_id` binding (ProcessGroupXCCL cannot split a bound group, pytorch#186548)."""

from __future__ import annotations

import torch
from lightning_grid import NAMESPACE_SIDES, init_kwargs, package_of, require_feature, xpu_strategy


@NAMESPACE_SIDES
def test_model_parallel_mesh_on_xpu_without_device_binding(simulated_xpu, recorded_process_group, namespace,
                                                            side) -> None:
    sim = simulated_xpu()
    pg = recorded_process_group(sim.events)
    strategy = xpu_strategy(namespace, side, "ModelParallelStrategy")
    strategy.setup_environment()

    assert pg.backend == "xccl" and pg.init_kwargs.get("device_id") is None
    assert [(mesh.device_type, mesh.mesh_shape) for mesh in pg.meshes] == [("xpu", (1, 2))]
    names = [event for event, _ in sim.events]
    assert names.index("set_device") < names.index("init_process_group")


@NAMESPACE_SIDES
def test_unpatched_model_parallel_binds_the_process_group(simulated_xpu, recorded_process_group, namespace,
                                                          side) -> None:
    pg = recorded_process_group(simulated_xpu().events)
    strategy = xpu_strategy(namespace, side, "ModelParallelStrategy")
    require_feature("process_group_device_id", package_of(namespace, side))
    bound = init_kwargs(strategy, side, "ModelParallelStrategy", pg, unpatched=True)
    assert bound["device_id"] == torch.device("xpu", 1)


@NAMESPACE_SIDES
def test_model_parallel_on_ccl_opens_the_object_group(simulated_xpu, recorded_process_group, namespace,
                                                      side) -> None:
    pg = recorded_process_group(simulated_xpu(xccl=False, oneccl=True).events)
    strategy = xpu_strategy(namespace, side, "ModelParallelStrategy")
    strategy.setup_environment()
    strategy.barrier()
    assert pg.backend == "ccl" and pg.barriers[-1]["device_ids"] == [1]
    assert strategy.broadcast("ckpt") == "ckpt" and pg.object_broadcasts[-1].group is pg.new_groups[0]
