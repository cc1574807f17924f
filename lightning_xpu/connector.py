"""XPU in the choices of the Trainer's `_AcceleratorConnector` and Fabric's `_Connector`.

Both connectors make the same choices with their own copies of the same methods, so one set of wrappers serves
both (and both namespaces). Each wrapper runs Lightning's method; the result changes only where XPU is involved:
  - "auto" picks XPU where Lightning would pick CPU; "gpu" picks XPU where Lightning finds neither MPS nor CUDA,
    and where there is no XPU either, Lightning's "No supported gpu backend found!" (unchanged, first) is followed,
    on the same line, by why XPU cannot stand in;
  - a strategy given XPU `parallel_devices` implies the XPU accelerator (Lightning knows only cpu and cuda);
  - `devices="auto"` in a notebook uses one XPU, as Lightning does for CUDA;
  - one device gets a `SingleDeviceStrategy` on `xpu:<index>`, not on CPU;
  - FSDP is accepted on XPU (Lightning accepts it only for CUDA);
  - mixed precision autocasts and scales gradients on "xpu", not "cuda".
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from lightning_xpu import device as xpu
from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.accelerator import explain_unavailable_xpu, is_xpu_accelerator
from lightning_xpu.environments.errors import device_error
from lightning_xpu.precision import for_xpu, quiet_cuda_scaler_warnings

Method = Callable[..., Any]


@dataclass(frozen=True)
class _ConnectorNames:
    """How one connector class names the things the wrappers read."""

    package: str  # "lightning.pytorch", "lightning_fabric", ...
    strategy_registry: str  # attribute of `<package>.strategies`
    user_precision: str  # attribute holding a precision plugin the user passed (returned untouched)


def _auto_prefers_xpu_to_cpu(original: Method) -> Method:
    # A staticmethod from 2.3, an instance method in 2.2: pass through whatever it is called with.
    def choose_auto_accelerator(*args: Any) -> str:
        choice = original(*args)
        return "xpu" if choice == "cpu" and xpu.xpu_available() else choice

    return choose_auto_accelerator


def _gpu_means_xpu_without_cuda_or_mps(original: Method) -> Method:
    def choose_gpu_accelerator_backend(*args: Any) -> str:
        # Lightning's choice stands wherever it finds one; where it finds none (its error), XPU is the GPU, or
        # the error says why there is none (on a CPU build too: which variant to load). Lightning's own message
        # stays first and unchanged, with its exception type: its tests and users' code match that text
        # (pytest.raises(match=) searches the message), so the diagnosis follows it on the same one line.
        try:
            return original(*args)
        except Exception as error:  # Lightning's only raise here: "No supported gpu backend found!" (no MPS, CUDA)
            if xpu.xpu_available():
                return "xpu"
            from lightning_xpu.diagnosis import unusable_reason

            reason = unusable_reason()
            if reason is None:  # torch.xpu says XPU is usable after all: Lightning's error is the whole story
                raise
            raise device_error(type(error), f"{error} No CUDA, no MPS, and {reason}") from None

    return choose_gpu_accelerator_backend


def _xpu_parallel_devices_imply_xpu(original: Method) -> Method:
    def check_config_and_set_final_flags(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        strategy = self._strategy_flag
        devices = None if isinstance(strategy, str) else getattr(strategy, "parallel_devices", None)
        if not devices or not xpu.is_xpu_device(devices[0]):
            return
        accelerator = self._accelerator_flag
        if not accelerator or (isinstance(accelerator, str) and accelerator in ("auto", "gpu")):
            self._accelerator_flag = "xpu"
        elif not is_xpu_accelerator(accelerator):
            raise device_error(
                ValueError,
                f"XPU parallel_devices set through {type(strategy).__name__}, but accelerator={accelerator!r}:"
                " set accelerator='xpu' (or leave it 'auto'), or give the strategy devices of that accelerator.",
            )

    return check_config_and_set_final_flags


def _one_device_in_notebooks(original: Method) -> Method:
    def set_devices_flag_if_auto_passed(self: Any) -> None:
        was_auto = self._devices_flag == "auto"
        original(self)
        interactive = original.__globals__.get("_IS_INTERACTIVE", False)  # read where Lightning reads it
        if was_auto and interactive and is_xpu_accelerator(self.accelerator) and self._devices_flag > 1:
            self._devices_flag = 1  # multi-device DDP forks, which XPU (like CUDA) does not survive in a notebook

    return set_devices_flag_if_auto_passed


def _single_device_on_xpu(original: Method) -> Method:
    def choose_strategy(self: Any) -> Any:
        strategy = original(self)
        if isinstance(strategy, str) or not is_xpu_accelerator(self.accelerator):
            return strategy
        if strategy.root_device.type != "cpu":
            return strategy
        root = self._parallel_devices[0] if self._parallel_devices else torch.device("xpu", 0)
        return type(strategy)(device=root)

    return choose_strategy


def _names_fsdp(names: _ConnectorNames, strategy: Any) -> bool:
    strategies = importlib.import_module(f"{names.package}.strategies")
    if isinstance(strategy, str):
        registry = getattr(strategies, names.strategy_registry)
        return strategy in registry and issubclass(registry[strategy]["strategy"], strategies.FSDPStrategy)
    return isinstance(strategy, strategies.FSDPStrategy)


def _fsdp_allowed_on_xpu(names: _ConnectorNames, original: Method) -> Method:
    def check_strategy_and_fallback(self: Any) -> None:
        try:
            original(self)
        except Exception:
            # Lightning refuses FSDP unless the accelerator is CUDA. Nothing else in this method applies to FSDP
            # (its other checks concern fork and TPU/dp aliases), so accepting FSDP is all that is left to do.
            if is_xpu_accelerator(self.accelerator) and _names_fsdp(names, self._strategy_flag):
                return
            raise

    return check_strategy_and_fallback


def _precision_on_xpu(names: _ConnectorNames, original: Method) -> Method:
    def check_and_init_precision(self: Any) -> Any:
        if not is_xpu_accelerator(self.accelerator):
            return original(self)
        with quiet_cuda_scaler_warnings():
            plugin = original(self)
        if plugin is getattr(self, names.user_precision, None):
            return plugin
        return for_xpu(plugin, names.package)

    return check_and_init_precision


def _patch(cls: type, names: _ConnectorNames) -> None:
    wrap(cls, "_choose_auto_accelerator", _auto_prefers_xpu_to_cpu)
    wrap(cls, "_choose_gpu_accelerator_backend", _gpu_means_xpu_without_cuda_or_mps)
    wrap(cls, "_check_config_and_set_final_flags", _xpu_parallel_devices_imply_xpu)
    wrap(cls, "_set_parallel_devices_and_init_accelerator", explain_unavailable_xpu)  # diagnosis (report/)
    wrap(cls, "_set_devices_flag_if_auto_passed", _one_device_in_notebooks)
    wrap(cls, "_choose_strategy", _single_device_on_xpu)
    wrap(cls, "_check_strategy_and_fallback", functools.partial(_fsdp_allowed_on_xpu, names))
    wrap(cls, "_check_and_init_precision", functools.partial(_precision_on_xpu, names))


def apply_fabric(namespace: Namespace) -> None:
    names = _ConnectorNames(namespace.fabric, "STRATEGY_REGISTRY", "_precision_instance")
    _patch(namespace.fabric_module("connector")._Connector, names)


def apply_pytorch(namespace: Namespace) -> None:
    assert namespace.pytorch is not None
    names = _ConnectorNames(namespace.pytorch, "StrategyRegistry", "_precision_plugin_flag")
    _patch(namespace.pytorch_module("trainer.connectors.accelerator_connector")._AcceleratorConnector, names)
