"""DDP on simulated XPU (tests/conftest.py), Trainer and Fabric, both namespaces: the DDP wrapper on an XPU stream,
set_device before the process group, oneCCL's local rank, device_id, barrier and object broadcast.

Each process group here is recorded, not created (`recorded_process_group`); strategies run as local rank 1 of 2
devices (lightning_grid), so the rank's device is xpu:1 and anything that lands on xpu:0 shows.
"""

from __future__ import annotations

import atexit
import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from lightning_grid import NAMESPACE_SIDES, init_kwargs, strategy_class, strategy_module, xpu_strategy

from lightning_xpu._patching import original_of

XPU1 = torch.device("xpu", 1)
ONECCL_VARIABLES = ("CCL_LOCAL_RANK", "CCL_LOCAL_SIZE", "CCL_PROCESS_LAUNCHER")


def ddp_module_method(side: str) -> str:
    """The method building the DistributedDataParallel wrapper: `_setup_model` (Trainer) / `setup_module` (Fabric)."""
    return "_setup_model" if side == "trainer" else "setup_module"


@pytest.fixture
def cuda_streams_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    def touched(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("torch.cuda stream API used on XPU")

    monkeypatch.setattr(torch.cuda, "Stream", touched)
    monkeypatch.setattr(torch.cuda, "stream", touched)


@NAMESPACE_SIDES
@pytest.mark.usefixtures("cuda_streams_raise")
def test_ddp_wrapper_is_built_on_an_xpu_stream(simulated_xpu, namespace, side, monkeypatch) -> None:
    sim = simulated_xpu()

    def build(**kwargs: Any) -> SimpleNamespace:  # a CPU module cannot really be wrapped for an XPU device here
        sim.events.append(("ddp_built", kwargs["device_ids"]))
        return SimpleNamespace(**kwargs)

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", build)
    strategy = xpu_strategy(namespace, side, "DDPStrategy", find_unused_parameters=True)
    module = torch.nn.Linear(2, 2)
    wrapped = getattr(strategy, ddp_module_method(side))(module)

    assert wrapped.module is module and wrapped.device_ids == [1] and wrapped.find_unused_parameters is True
    assert [event for event, _ in sim.events] == ["enter_stream", "ddp_built", "exit_stream"]


@NAMESPACE_SIDES
def test_unpatched_ddp_wrapper_needs_torch_cuda(simulated_xpu, namespace, side) -> None:
    simulated_xpu()
    strategy = xpu_strategy(namespace, side, "DDPStrategy")
    with pytest.raises(RuntimeError, match=r"(?i)cuda"):
        original_of(type(strategy), ddp_module_method(side))(strategy, torch.nn.Linear(2, 2))


@NAMESPACE_SIDES
def test_off_xpu_lightning_builds_the_ddp_wrapper(namespace, side, monkeypatch) -> None:
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(strategy_module(namespace, side, "strategies.ddp"), "DistributedDataParallel",
                        lambda **kwargs: built.append(kwargs) or "built by Lightning")
    strategy = strategy_class(namespace, side, "DDPStrategy")(parallel_devices=[torch.device("cpu")] * 2)
    assert getattr(strategy, ddp_module_method(side))(torch.nn.Linear(2, 2)) == "built by Lightning"
    assert built[-1]["device_ids"] is None


@NAMESPACE_SIDES
def test_the_rank_device_is_current_before_the_process_group_exists(
    simulated_xpu, recorded_process_group, namespace, side
) -> None:
    """Even when the accelerator leaves the device alone, set_device(xpu:1) precedes init_process_group."""
    sim = simulated_xpu()
    pg = recorded_process_group(sim.events)
    strategy = xpu_strategy(namespace, side, "DDPStrategy")
    strategy.accelerator.setup_device = lambda device: None
    strategy.setup_environment()

    assert pg.backend == "xccl"
    assert pg.init_kwargs["rank"] == 1 and pg.init_kwargs["world_size"] == 2
    names = [event for event, _ in sim.events]
    assert ("set_device", XPU1) in sim.events
    assert names.index("set_device") < names.index("init_process_group")
    assert all(device == XPU1 for event, device in sim.events if event == "set_device")


@NAMESPACE_SIDES
@pytest.mark.parametrize("xccl", [True, False], ids=["xccl", "ccl"])
def test_the_backend_gets_oneccl_local_rank_before_init(simulated_xpu, recorded_process_group, namespace, side,
                                                        xccl, monkeypatch) -> None:
    """XCCL sets no CCL_* variable itself: oneCCL beneath it needs them as much as under ccl (tests/oneccl_launch.py;
    the launcher table is tested in test_oneccl_launch.py)."""
    sim = simulated_xpu(xccl=xccl, oneccl=not xccl)
    pg = recorded_process_group(sim.events)
    seen: dict[str, str | None] = {}

    def init_process_group(backend: str | None = None, **kwargs: Any) -> None:
        seen.update({name: os.environ.get(name) for name in ONECCL_VARIABLES})
        pg.backend = backend

    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    xpu_strategy(namespace, side, "DDPStrategy").setup_environment()
    assert pg.backend == ("xccl" if xccl else "ccl")
    assert seen == {"CCL_LOCAL_RANK": "1", "CCL_LOCAL_SIZE": "2", "CCL_PROCESS_LAUNCHER": "none"}


@NAMESPACE_SIDES
@pytest.mark.parametrize("backend", ["xccl", "ccl"])
def test_ddp_does_not_bind_the_device_lightning_binds(simulated_xpu, recorded_process_group, namespace, side,
                                                      backend) -> None:
    """A bound XCCL group breaks a user's 2-D device mesh from PyTorch 2.12 (tests/runtime/test_profiles.py); ccl's
    PyTorch accepted only CUDA devices there."""
    sim = simulated_xpu(xccl=backend == "xccl", oneccl=True)
    pg = recorded_process_group(sim.events)
    assert "device_id" not in init_kwargs(xpu_strategy(namespace, side, "DDPStrategy"), side, "DDPStrategy", pg)
    assert pg.backend == backend
    alone = recorded_process_group(sim.events)  # a fresh world for Lightning alone
    lightning = init_kwargs(xpu_strategy(namespace, side, "DDPStrategy"), side, "DDPStrategy", alone, True)
    assert lightning.get("device_id") in (XPU1, None)  # None: Lightning < 2.5.5


@NAMESPACE_SIDES
def test_barrier_passes_the_rank_device_on_xpu_backends(simulated_xpu, recorded_process_group, namespace,
                                                         side) -> None:
    pg = recorded_process_group(simulated_xpu().events)
    strategy = xpu_strategy(namespace, side, "DDPStrategy")
    strategy.setup_environment()
    strategy.barrier()
    assert pg.barriers[-1]["device_ids"] == [1]
    original_of(type(strategy), "barrier")(strategy)
    assert pg.barriers[-1]["device_ids"] is None  # Lightning alone: device ids for nccl only


@NAMESPACE_SIDES
def test_off_xpu_barrier_is_lightnings(recorded_process_group, namespace, side) -> None:
    pg = recorded_process_group()
    pg.backend = "gloo"
    strategy_class(namespace, side, "DDPStrategy")(parallel_devices=[torch.device("cpu")] * 2).barrier()
    assert pg.barriers[-1]["device_ids"] is None


@NAMESPACE_SIDES
def test_objects_travel_over_a_gloo_group_on_ccl(simulated_xpu, recorded_process_group, namespace, side) -> None:
    sim = simulated_xpu(xccl=False, oneccl=True)
    pg = recorded_process_group(sim.events)
    strategy = xpu_strategy(namespace, side, "DDPStrategy")
    strategy.setup_environment()
    strategy.broadcast("checkpoints/epoch=0.ckpt")

    assert [group.kwargs.get("backend") for group in pg.new_groups] == ["gloo"]
    names = [event for event, _ in sim.events]
    assert names.index("init_process_group") < names.index("new_group")
    sent = pg.object_broadcasts[-1]
    assert sent.objects == ["checkpoints/epoch=0.ckpt"] and sent.src == 0 and sent.group is pg.new_groups[0]


@NAMESPACE_SIDES
def test_the_object_group_is_destroyed_at_exit(simulated_xpu, recorded_process_group, namespace, side,
                                               monkeypatch) -> None:
    at_exit: list[tuple[Any, tuple[Any, ...]]] = []
    monkeypatch.setattr(atexit, "register", lambda function, *args: at_exit.append((function, args)))
    pg = recorded_process_group(simulated_xpu(xccl=False, oneccl=True).events)
    xpu_strategy(namespace, side, "DDPStrategy").setup_environment()
    for function, args in at_exit:
        function(*args)
    assert pg.destroyed == [pg.new_groups[0]]


@NAMESPACE_SIDES
def test_unpatched_broadcast_uses_the_ccl_world_group(simulated_xpu, recorded_process_group, namespace, side) -> None:
    pg = recorded_process_group(simulated_xpu(xccl=False, oneccl=True).events)
    strategy = xpu_strategy(namespace, side, "DDPStrategy")
    strategy.setup_environment()
    original_of(type(strategy), "broadcast")(strategy, "logs/version_0")
    assert pg.backend == "ccl" and pg.object_broadcasts[-1].group is not pg.new_groups[0]


@NAMESPACE_SIDES
def test_xccl_broadcasts_objects_on_the_world_group(simulated_xpu, recorded_process_group, namespace, side) -> None:
    pg = recorded_process_group(simulated_xpu(xccl=True).events)
    strategy = xpu_strategy(namespace, side, "DDPStrategy")
    strategy.setup_environment()
    assert strategy.broadcast({"log_dir": "logs/version_0"}) == {"log_dir": "logs/version_0"}
    assert pg.new_groups == [] and pg.object_broadcasts[-1].objects == [{"log_dir": "logs/version_0"}]


@NAMESPACE_SIDES
def test_the_object_group_follows_the_world(simulated_xpu, recorded_process_group, namespace, side,
                                            monkeypatch) -> None:
    pg = recorded_process_group(simulated_xpu(xccl=False, oneccl=True).events)
    strategy = xpu_strategy(namespace, side, "DDPStrategy")
    strategy.setup_environment()
    strategy.setup_environment()  # set up again in the same world: the group is kept
    assert len(pg.new_groups) == 1
    # The process group was destroyed and created again: torch.distributed.group.WORLD is another object.
    monkeypatch.setattr(torch.distributed.distributed_c10d._world, "default_pg", object())
    strategy.setup_environment()
    strategy.broadcast("ckpt")
    assert len(pg.new_groups) == 2 and pg.object_broadcasts[-1].group is pg.new_groups[1]


class LaunchReachedLightning(Exception):
    """Raised instead of starting processes: the launcher got past every check."""


def ddp_fork_launcher(namespace: Any, side: str, accelerator: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    def start_processes(*args: Any, **kwargs: Any) -> None:
        raise LaunchReachedLightning

    monkeypatch.setattr(torch.multiprocessing, "start_processes", start_processes)
    monkeypatch.setenv("MASTER_PORT", "29500")  # the launcher writes it
    if side == "trainer":
        owner = namespace.pytorch_module("").Trainer(accelerator=accelerator, devices=2, strategy="ddp_fork")
    else:
        owner = namespace.fabric_module("").Fabric(accelerator=accelerator, devices=2, strategy="ddp_fork")
    return owner.strategy.launcher


@NAMESPACE_SIDES
def test_ddp_fork_is_refused_once_xpu_is_initialized(simulated_xpu, namespace, side, monkeypatch) -> None:
    simulated_xpu().initialized = True
    launcher = ddp_fork_launcher(namespace, side, "xpu", monkeypatch)
    with pytest.raises(RuntimeError, match=r"can't fork processes.*XPU is already initialized.*ddp_spawn"):
        launcher.launch(print)


@NAMESPACE_SIDES
@pytest.mark.parametrize(("accelerator", "initialized"), [("xpu", False), ("cpu", True)],
                         ids=["xpu-not-initialized", "cpu-with-xpu-initialized"])
def test_ddp_fork_goes_ahead_where_it_is_safe_or_not_ours(simulated_xpu, namespace, side, accelerator, initialized,
                                                          monkeypatch) -> None:
    simulated_xpu().initialized = initialized
    with pytest.raises(LaunchReachedLightning):
        ddp_fork_launcher(namespace, side, accelerator, monkeypatch).launch(print)


@NAMESPACE_SIDES
def test_unpatched_lightning_forks_after_xpu_initialization(simulated_xpu, namespace, side) -> None:
    """Lightning's own pre-fork check looks at CUDA only: with XPU initialized (simulated) it lets the fork go."""
    simulated_xpu().initialized = True
    strategy_module(namespace, side, "strategies.launchers.multiprocessing")._check_bad_cuda_fork()
