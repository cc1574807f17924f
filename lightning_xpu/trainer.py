"""Trainer extras: the device banner reports XPU, and checkpoints saved on XPU load where there is none.

- `trainer.setup._log_device_info` logs "GPU available" for CUDA/MPS only: Lightning's lines stay; ours follow.
  One line always states the device used and, inside our environments, the environment and its variant, taken
  from the install's manifest or `LIGHTNING_XPU_ROOT` (set by the module and the setup script), so a job that fell back
  to CPU says so in its log. The XPU line follows where XPU is used or may be: never inside an environment of
  another variant (cpu, cuda), whose machine did not ask for XPU: querying XPU there could poison a later fork.
- `core.saving._default_map_location` (used by `load_from_checkpoint` when no `map_location` is given) moves
  cuda/mps/xla storages to CPU when that device is missing, but not xpu storages, so `torch.load` raises.
"""

from __future__ import annotations

from typing import Any

from lightning_xpu import device as xpu
from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.accelerator import is_xpu_accelerator
from lightning_xpu.install_facts import environment_tag, variant_of


def _banner_reports_xpu(namespace: Namespace) -> Any:
    def make(original: Any) -> Any:
        def log_device_info(trainer: Any) -> None:
            original(trainer)
            rank_zero = namespace.pytorch_module("utilities.rank_zero")
            used = is_xpu_accelerator(trainer.accelerator)
            tag = environment_tag()
            where = f", in lightning-xpu/{tag} ({variant_of(tag)} variant)" if tag else ""
            try:
                device = str(trainer.strategy.root_device)
            except Exception:  # a strategy whose device is only known after launch (XLA)
                device = type(trainer.accelerator).__name__
            rank_zero.rank_zero_info(f"lightning_xpu: training on {device}{where}")
            if not used and ((tag and variant_of(tag) != "xpu") or not xpu.xpu_available()):
                return  # not asked for (an environment of another variant, never queried), or not there
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
