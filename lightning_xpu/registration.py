"""Registers "xpu" in the accelerator registries, so `accelerator="xpu"` is a valid name (Lightning #20848)."""

from __future__ import annotations

from lightning_xpu._namespaces import Namespace
from lightning_xpu.accelerator import fabric_accelerator_class, pytorch_accelerator_class


def _register(registry: dict, cls: type) -> None:
    if "xpu" not in registry:
        cls.register_accelerators(registry)


def apply_fabric(namespace: Namespace) -> None:
    registry = namespace.fabric_module("accelerators").ACCELERATOR_REGISTRY
    _register(registry, fabric_accelerator_class(namespace))


def apply_pytorch(namespace: Namespace) -> None:
    registry = namespace.pytorch_module("accelerators").AcceleratorRegistry
    _register(registry, pytorch_accelerator_class(namespace))
