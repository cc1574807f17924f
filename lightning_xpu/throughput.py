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


def xpu_matmul_uses_tf32() -> bool:
    """Whether XPU float32 matmuls run on TF32 now. Never raises.

    XPU kernels follow oneDNN's own switch, `torch.backends.mkldnn.allow_tf32` (matmuls from PyTorch 2.7,
    pytorch#144240; still what eager XPU reads in 2026: pytorch#187948, intel/torch-xpu-ops#4919), not
    `torch.set_float32_matmul_precision`; PyTorch 2.5 and 2.6 have no switch (fp32 only). Where the switch reads None (a
    build without XPU), the newer per-backend setting `torch.backends.mkldnn.matmul.fp32_precision` (2.9+) is used.
    `torch.get_float32_matmul_precision()` is not read: on 2.13 it raises once the new API has been used.
    """
    mkldnn = getattr(torch.backends, "mkldnn", None)
    try:
        allow_tf32 = getattr(mkldnn, "allow_tf32", None)
        if isinstance(allow_tf32, bool):
            return allow_tf32
        return getattr(getattr(mkldnn, "matmul", None), "fp32_precision", None) == "tf32"
    except Exception:
        return False


def xpu_available_flops(device: torch.device, dtype: Any) -> int:
    """Peak FLOP/s of the XPU `device` for `dtype`; raises `FlopsUnknown` when no sourced figure exists."""
    properties = torch.xpu.get_device_properties(device)
    return peak_flops(
        torch.xpu.get_device_name(device),
        getattr(properties, "gpu_eu_count", None),
        dtype,
        tf32_matmul=xpu_matmul_uses_tf32(),
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
