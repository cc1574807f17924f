"""ThroughputMonitor on XPU: synchronise the device before timing, and know the peak FLOPs so MFU is reported.

Lightning synchronises only CUDA before reading the clock (`ThroughputMonitor._update`), so XPU timings measure
kernel launches, not work; and `get_available_flops` knows only CUDA and TPU chips, so it returns None on XPU and
no MFU is logged. `measure_flops` counts FLOPs with torch's FlopCounterMode and is device-agnostic: nothing to fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.device import is_xpu_device
from lightning_xpu.flops import FlopsUnknown, peak_flops


def xpu_available_flops(device: torch.device, dtype: Any) -> int:
    """Peak FLOP/s of the XPU `device` for `dtype`; raises `FlopsUnknown` when no sourced figure exists."""
    properties = torch.xpu.get_device_properties(device)
    return peak_flops(
        torch.xpu.get_device_name(device),
        getattr(properties, "gpu_eu_count", None),
        dtype,
        tf32_matmul=torch.get_float32_matmul_precision() != "highest",
    )


def _available_flops_wrapper(namespace: Namespace) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def get_available_flops(device: torch.device, dtype: Any) -> int | None:
            if not is_xpu_device(device):
                return original(device, dtype)
            try:
                return xpu_available_flops(device, dtype)
            except FlopsUnknown as unknown:
                # Same outcome as Lightning's for an unknown CUDA card: a warning and no MFU.
                namespace.fabric_module("utilities.rank_zero").rank_zero_warn(str(unknown))
                return None

        return get_available_flops

    return make


def _synchronize_before_timing(original: Callable[..., Any]) -> Callable[..., Any]:
    def _update(self: Any, trainer: Any, *args: Any, **kwargs: Any) -> Any:
        device = trainer.strategy.root_device
        if is_xpu_device(device):
            torch.xpu.synchronize(device)  # else the elapsed time read next ignores queued XPU work
        return original(self, trainer, *args, **kwargs)

    return _update


def apply_fabric(namespace: Namespace) -> None:
    wrap(namespace.fabric_module("utilities.throughput"), "get_available_flops", _available_flops_wrapper(namespace))


def apply_pytorch(namespace: Namespace) -> None:
    monitor_module = namespace.pytorch_module("callbacks.throughput_monitor")
    # Imported there by name, so the Fabric module's patch does not reach it.
    wrap(monitor_module, "get_available_flops", _available_flops_wrapper(namespace))
    wrap(monitor_module.ThroughputMonitor, "_update", _synchronize_before_timing)
