"""`XPUAccelerator`: Lightning's Accelerator API for Intel GPUs, built once per Lightning namespace.

Lightning's Trainer and Fabric check `isinstance(accelerator, <their own Accelerator>)`, and `lightning` and the
standalone `pytorch_lightning`/`lightning_fabric` packages have distinct base classes, so the same methods are
mixed into a subclass of each namespace's base class.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu import device as xpu
from lightning_xpu import rank_masks
from lightning_xpu._namespaced_classes import NamespacedClasses
from lightning_xpu._namespaces import Namespace
from lightning_xpu.environments.errors import OneLineError, device_error


class _XPUAcceleratorMethods:
    """The whole accelerator; mixed in front of Lightning's Accelerator base class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # First selection of XPU: say loudly if a patch this Lightning needs found no target (nothing off XPU).
        from lightning_xpu.versions import check_selected

        check_selected()

    def setup_device(self, device: torch.device) -> None:
        if device.type != "xpu":
            raise ValueError(f"Device should be xpu, got {device} instead")
        index = 0 if device.index is None else device.index
        count = xpu.xpu_device_count()
        if index >= count:
            raise device_error(RuntimeError, f"{device} is not visible to this process ({count} XPU device(s)):"
                               f" use an index below {count}." + xpu.affinity_hint())
        torch.xpu.set_device(device)

    def setup(self, trainer: Any) -> None:
        """Trainer hook; XPU needs nothing beyond `setup_device`."""

    def teardown(self) -> None:
        torch.xpu.empty_cache()

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """Memory statistics with the same keys as CUDA's (`allocated_bytes.all.current`, ...)."""
        return dict(torch.xpu.memory_stats(device))

    _lightning_package: str

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int] | None:
        masked = rank_masks.masked_launch()
        if masked is not None:  # one XPU per rank: `devices` must count the ranks on this node
            return rank_masks.one_device_per_rank(devices, masked)
        environments = importlib.import_module(f"{cls._lightning_package}.plugins.environments")
        torchelastic = environments.TorchElasticEnvironment.detect()
        crowded = None if torchelastic else rank_masks.crowded_launch()  # torchrun keeps Lightning's bypass
        if crowded is not None:
            rank_masks.refuse_crowded_launch(*crowded)
        try:
            return xpu.parse_device_indices(devices, torchelastic=torchelastic)
        except OneLineError:
            raise
        except (TypeError, ValueError) as error:  # the user's `devices` cannot be met: the message says why
            raise device_error(type(error), str(error)) from None

    @staticmethod
    def get_parallel_devices(devices: list[int]) -> list[torch.device]:
        if rank_masks.masked_launch() is not None:  # local rank i takes parallel_devices[i]: its own xpu:0
            return [torch.device("xpu", 0) for _ in devices]
        return [torch.device("xpu", index) for index in devices]

    @staticmethod
    def auto_device_count() -> int:
        masked = rank_masks.masked_launch()
        return masked.local_size if masked is not None else xpu.xpu_device_count()

    @staticmethod
    def is_available() -> bool:
        return xpu.xpu_available()

    @staticmethod
    def name() -> str:
        return "xpu"

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        accelerator_registry.register("xpu", cls, description=cls.__name__)


def explain_unavailable_xpu(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps the connectors' `_set_parallel_devices_and_init_accelerator`: when Lightning refuses our accelerator
    as "not available", the error becomes one line with the cause and the fix (lightning-xpu doctor's diagnosis)
    instead of Lightning's list of the accelerators that are. Only runs for XPU."""

    def _set_parallel_devices_and_init_accelerator(self: Any) -> None:
        try:
            original(self)
        except Exception as error:
            accelerator = getattr(self, "accelerator", None)
            if not is_xpu_accelerator(accelerator) or "not available" not in str(error):
                raise
            from lightning_xpu.diagnosis import unusable_reason

            reason = unusable_reason()
            if reason is None:
                raise
            raise device_error(type(error), reason) from None

    return _set_parallel_devices_and_init_accelerator


def _accelerator_bases(package: str) -> tuple[type, ...]:
    return (_XPUAcceleratorMethods, importlib.import_module(f"{package}.accelerators.accelerator").Accelerator)


_CLASSES = NamespacedClasses(__name__)
_CLASSES.define("XPUAccelerator", _accelerator_bases)



def fabric_accelerator_class(namespace: Namespace) -> type:
    """XPUAccelerator for Fabric (`lightning.fabric` or `lightning_fabric`)."""
    return _CLASSES.get("XPUAccelerator", namespace.fabric)


def pytorch_accelerator_class(namespace: Namespace) -> type:
    """XPUAccelerator for the Trainer; it is also a Fabric accelerator of the same namespace."""
    if namespace.pytorch is None:
        raise ValueError(f"{namespace.fabric} has no Trainer package")
    return _CLASSES.get("XPUAccelerator", namespace.pytorch)


def accelerator_class(namespace: Namespace) -> type:
    if namespace.pytorch is None:
        return fabric_accelerator_class(namespace)
    return pytorch_accelerator_class(namespace)


def is_xpu_accelerator(accelerator: Any) -> bool:
    """True for the string "xpu" and for any of our accelerator instances or classes."""
    if isinstance(accelerator, str):
        return accelerator == "xpu"
    cls = accelerator if isinstance(accelerator, type) else type(accelerator)
    return issubclass(cls, _XPUAcceleratorMethods)
