"""DDP, FSDP and ModelParallel on Intel GPUs, for the Trainer and Fabric of either namespace.

Every wrapper lets Lightning's method run untouched unless the strategy's root device is an XPU (or, for barrier
and broadcast, the process group runs on an XPU backend), except the teardown at exit:
- backend.py        process-group backend: xccl, else ccl (oneCCL bindings), else a clear error
- process_group.py  set_device and oneCCL's local rank before init; no XPU `device_id` binding
- collectives.py    barrier with the rank's device; objects over a gloo side group on ccl
- ddp_module.py     the DDP wrapper built on an XPU stream instead of `torch.cuda.Stream`
- device_mesh.py    FSDP's tuple `device_mesh` built on "xpu" instead of "cuda"
- fork_guard.py     `ddp_fork` refused with a clear message once XPU is initialised in the main process
- teardown.py       on every device: the process groups destroyed at exit, before the interpreter shuts down
                    (a finished gloo run could abort there)
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightning_xpu._namespaces import Namespace, optional_module
from lightning_xpu._patching import record, wrap
from lightning_xpu.strategies.backend import choose_backend
from lightning_xpu.strategies.collectives import barrier_with_device, broadcast_objects_safely
from lightning_xpu.strategies.ddp_module import on_xpu_stream
from lightning_xpu.strategies.device_mesh import mesh_on_xpu
from lightning_xpu.strategies.fork_guard import refuse_fork_after_xpu_init
from lightning_xpu.strategies.process_group import around_process_group_init, unbind_xpu_device
from lightning_xpu.strategies.teardown import torn_down_at_exit

Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True)
class StrategyPatch:
    """Where one strategy class keeps the methods we wrap (names differ between Trainer and Fabric)."""

    module: str  # relative to the namespace's Trainer or Fabric package
    cls: str
    process_group_init: str  # the method that calls `_init_dist_connection`
    ddp_module: tuple[str, str] | None = None  # (method building DDP, method giving its device ids)
    fsdp_kwargs: str | None = None  # attribute holding FSDP arguments, where a tuple `device_mesh` may wait

    def method_wrappers(self) -> dict[str, list[Wrapper]]:
        """Method name -> wrappers, innermost first."""
        wrappers: dict[str, list[Wrapper]] = {
            "_get_process_group_backend": [choose_backend],
            "barrier": [barrier_with_device],
            "broadcast": [broadcast_objects_safely],
        }
        wrappers.setdefault(self.process_group_init, []).append(around_process_group_init)
        if self.ddp_module is not None:
            wrappers.setdefault(self.ddp_module[0], []).append(on_xpu_stream(self.ddp_module[1]))
        if self.fsdp_kwargs is not None:
            # Trainer FSDP creates the process group and the mesh in this same method: the mesh wrapper goes outside.
            wrappers.setdefault("setup_environment", []).append(mesh_on_xpu(self.fsdp_kwargs))
        return wrappers


PYTORCH_STRATEGIES = (
    StrategyPatch("strategies.ddp", "DDPStrategy", "setup_distributed",
                  ddp_module=("_setup_model", "determine_ddp_device_ids")),
    StrategyPatch("strategies.fsdp", "FSDPStrategy", "setup_environment", fsdp_kwargs="kwargs"),
    StrategyPatch("strategies.model_parallel", "ModelParallelStrategy", "_setup_distributed"),
)
FABRIC_STRATEGIES = (
    StrategyPatch("strategies.ddp", "DDPStrategy", "_setup_distributed",
                  ddp_module=("setup_module", "_determine_ddp_device_ids")),
    StrategyPatch("strategies.fsdp", "FSDPStrategy", "_setup_distributed", fsdp_kwargs="_fsdp_kwargs"),
    StrategyPatch("strategies.model_parallel", "ModelParallelStrategy", "_setup_distributed"),
)


# The multiprocessing launcher behind ddp_spawn/ddp_fork/ddp_notebook: same place in both packages.
LAUNCHER_MODULE = "strategies.launchers.multiprocessing"
LAUNCHER_CLASS = "_MultiProcessingLauncher"


def _compose(wrappers: list[Wrapper]) -> Wrapper:
    return lambda original: functools.reduce(lambda function, wrapper: wrapper(function), wrappers, original)


def _apply(package: str, patches: tuple[StrategyPatch, ...]) -> None:
    launcher = getattr(importlib.import_module(f"{package}.{LAUNCHER_MODULE}"), LAUNCHER_CLASS)
    wrap(launcher, "launch", refuse_fork_after_xpu_init)
    for patch in patches:
        module = optional_module(package, patch.module)  # model_parallel: 2.3+
        cls = getattr(module, patch.cls, None)
        if module is None or cls is None:
            for name in ("_init_dist_connection", *patch.method_wrappers()):
                owner = f"{package}.{patch.module}" + ("" if name == "_init_dist_connection" else f".{patch.cls}")
                record(owner, name, False, f"{package}.{patch.module}.{patch.cls} does not exist in this Lightning")
            continue
        wrap(module, "_init_dist_connection", _compose([unbind_xpu_device, torn_down_at_exit]))
        for name, wrappers in patch.method_wrappers().items():
            wrap(cls, name, _compose(wrappers))


def apply_fabric(namespace: Namespace) -> None:
    _apply(namespace.fabric, FABRIC_STRATEGIES)


def apply_pytorch(namespace: Namespace) -> None:
    assert namespace.pytorch is not None
    _apply(namespace.pytorch, PYTORCH_STRATEGIES)
