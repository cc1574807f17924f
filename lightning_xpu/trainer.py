"""Trainer extras: the device banner reports XPU, and checkpoints saved on XPU load where there is none.

- `trainer.setup._log_device_info` logs "GPU available" for CUDA/MPS only: Lightning's lines stay, ours follows
  them where XPU is available (off XPU the banner is Lightning's, byte for byte).
- `core.saving._default_map_location` (used by `load_from_checkpoint` when no `map_location` is given) moves
  cuda/mps/xla storages to CPU when that device is missing, but not xpu storages, so `torch.load` raises.
"""

from __future__ import annotations

from typing import Any

from lightning_xpu import device as xpu
from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.accelerator import is_xpu_accelerator


def _banner_reports_xpu(namespace: Namespace) -> Any:
    def make(original: Any) -> Any:
        def log_device_info(trainer: Any) -> None:
            original(trainer)
            if not xpu.xpu_available():
                return
            rank_zero = namespace.pytorch_module("utilities.rank_zero")
            used = is_xpu_accelerator(trainer.accelerator)
            count = xpu.xpu_device_count()
            rank_zero.rank_zero_info(f"XPU available: True ({count} device{'s' * (count != 1)}), used: {used}")
            if not used:
                rank_zero.rank_zero_warn(
                    "XPU available but not used. You can set it by doing `Trainer(accelerator='xpu')`.",
                    category=namespace.fabric_module("utilities.warnings").PossibleUserWarning,
                )

        return log_device_info

    return make


def _xpu_storages_to_cpu_without_xpu(original: Any) -> Any:
    def default_map_location(storage: Any, location: str) -> Any:
        mapped = original(storage, location)
        if mapped is None and location.startswith("xpu") and not xpu.xpu_available():
            return storage.cpu()
        return mapped

    return default_map_location


def apply_pytorch(namespace: Namespace) -> None:
    wrap(namespace.pytorch_module("trainer.setup"), "_log_device_info", _banner_reports_xpu(namespace))
    wrap(namespace.pytorch_module("core.saving"), "_default_map_location", _xpu_storages_to_cpu_without_xpu)
