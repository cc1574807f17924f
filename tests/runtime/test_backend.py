"""Process-group backend of DDP, FSDP and ModelParallel on simulated XPU (tests/conftest.py): xccl where torch has
it, else ccl through a stand-in `oneccl_bindings_for_pytorch`, else a clear error; an explicit backend wins."""

from __future__ import annotations

import pytest
import torch
from lightning_grid import NAMESPACE_SIDES, NAMESPACES, QUIET, strategy_class, xpu_strategy

from lightning_xpu._patching import original_of

STRATEGIES = pytest.mark.parametrize("name", ["DDPStrategy", "FSDPStrategy", "ModelParallelStrategy"])


@NAMESPACE_SIDES
@STRATEGIES
@pytest.mark.parametrize(("xccl", "expected"), [(True, "xccl"), (False, "ccl")], ids=["xccl", "ccl-without-xccl"])
def test_xccl_where_torch_has_it_else_ccl_through_the_oneccl_bindings(simulated_xpu, namespace, side, name, xccl,
                                                                       expected) -> None:
    simulated_xpu(xccl=xccl, oneccl=True)
    assert xpu_strategy(namespace, side, name)._get_process_group_backend() == expected


@NAMESPACE_SIDES
@STRATEGIES
def test_clear_error_naming_what_to_install_without_either(simulated_xpu, namespace, side, name) -> None:
    simulated_xpu(xccl=False, oneccl=False)
    strategy = xpu_strategy(namespace, side, name)
    with pytest.raises(RuntimeError, match=r"No process-group backend for Intel GPUs.*PyTorch >= 2\.8.*oneccl_bind_pt"):
        strategy._get_process_group_backend()


@NAMESPACE_SIDES
@STRATEGIES
def test_an_explicit_backend_wins(simulated_xpu, namespace, side, name) -> None:
    simulated_xpu(xccl=False, oneccl=False)
    strategy = xpu_strategy(namespace, side, name, process_group_backend="gloo")
    assert strategy._get_process_group_backend() == "gloo"


@NAMESPACE_SIDES
@STRATEGIES
def test_unpatched_lightning_never_picks_ccl(simulated_xpu, namespace, side, name) -> None:
    """Simulated XPU with oneCCL and no XCCL: Lightning alone says xccl (torch's map, >= 2.5.5) or gloo (older)."""
    simulated_xpu(xccl=False, oneccl=True)
    strategy = xpu_strategy(namespace, side, name)
    assert original_of(type(strategy), "_get_process_group_backend")(strategy) in ("xccl", "gloo")


@NAMESPACE_SIDES
def test_off_xpu_lightning_chooses_as_before(namespace, side) -> None:
    cls = strategy_class(namespace, side, "DDPStrategy")
    strategy = cls(parallel_devices=[torch.device("cpu")] * 2)
    assert strategy._get_process_group_backend() == "gloo"
    assert original_of(cls, "_get_process_group_backend")(strategy) == "gloo"


@NAMESPACES
@pytest.mark.parametrize(("strategy", "start_method"), [("ddp", "popen"), ("ddp_spawn", "spawn"), ("ddp_fork", "fork")])
def test_trainer_ddp_strings_run_on_xpu_with_xccl(simulated_xpu, namespace, strategy, start_method) -> None:
    simulated_xpu(devices=2)
    trainer = namespace.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy=strategy, **QUIET)
    assert type(trainer.strategy).__name__ == "DDPStrategy"
    assert trainer.strategy._start_method == start_method
    assert trainer.strategy.root_device == torch.device("xpu", 0)
    assert trainer.strategy._get_process_group_backend() == "xccl"


@NAMESPACES
def test_fabric_ddp_on_xpu_with_xccl(simulated_xpu, namespace) -> None:
    simulated_xpu(devices=2)
    fabric = namespace.fabric_module("").Fabric(accelerator="xpu", devices=2, strategy="ddp")
    assert type(fabric.strategy).__name__ == "DDPStrategy"
    assert fabric.strategy.root_device == torch.device("xpu", 0)
    assert fabric.strategy._get_process_group_backend() == "xccl"


@NAMESPACES
def test_a_user_ddp_instance_on_xpu_gets_ccl_without_xccl(simulated_xpu, namespace) -> None:
    simulated_xpu(devices=2, xccl=False, oneccl=True)
    pl = namespace.pytorch_module("")
    trainer = pl.Trainer(accelerator="xpu", devices=2, strategy=pl.strategies.DDPStrategy(static_graph=True))
    assert trainer.strategy._get_process_group_backend() == "ccl"
