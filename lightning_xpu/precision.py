"""Mixed precision on XPU: Lightning's precision plugins, with autocast and gradient scaling on "xpu".

Lightning builds `MixedPrecision(device="cuda")` for every accelerator other than cpu/mps, and `FSDPPrecision`
autocasts on "cuda" and scales with a CUDA `ShardedGradScaler` whatever the device (Lightning #21982, #21815); on XPU
both silently train in fp32. `for_xpu` turns the plugin Lightning built into its XPU counterpart. The classes are
built per Lightning package (Trainer and Fabric, both namespaces) and can be pickled by `ddp_spawn`.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from lightning_xpu import device as xpu
from lightning_xpu._namespaced_classes import NamespacedClasses

_CLASSES = NamespacedClasses(__name__)



@contextlib.contextmanager
def quiet_cuda_scaler_warnings() -> Iterator[None]:
    """Silence the CUDA GradScaler warnings of plugins built for CUDA only to be replaced by their XPU counterpart."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.cuda\.amp\.GradScaler")
        yield


def _rank_zero_warn(package: str, message: str) -> None:
    importlib.import_module(f"{package}.utilities.rank_zero").rank_zero_warn(message)


class _MixedPrecisionOnXPU:
    """Mixed in front of Lightning's `MixedPrecision` (Trainer or Fabric), built with device "xpu".

    16-mixed needs a GradScaler, whose unscaling uses fp64; devices without fp64 (Arc A-series, integrated GPUs)
    fall back to bf16-mixed, as Lightning does for 16-mixed on CPU. The check runs in `convert_module`, the first
    plugin hook that runs in the training process after its device is set, so the connector never initialises XPU
    in a process a launcher may fork.
    """

    _lightning_package: str
    precision: str
    device: str
    scaler: Any

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        if self.scaler is not None and not xpu.has_fp64():
            _rank_zero_warn(
                self._lightning_package,
                f"precision='16-mixed' needs fp64 for gradient scaling, which {torch.xpu.get_device_name()} lacks:"
                " training with precision='bf16-mixed' instead. Pass precision='bf16-mixed' to silence this.",
            )
            # Lightning's own constructor sets every field that depends on the precision, and drops the scaler.
            super().__init__("bf16-mixed", self.device)  # type: ignore[call-arg]
        return super().convert_module(module)  # type: ignore[misc]


def sharded_scaler_supports_xpu() -> bool:
    """Whether torch's `ShardedGradScaler` accepts XPU tensors (PyTorch >= 2.6; on 2.5 `scale()` asserts)."""
    from torch.distributed.fsdp import sharded_grad_scaler

    is_supported = getattr(sharded_grad_scaler, "_is_supported_device", None)
    if is_supported is None:
        return True
    try:  # it reads only `is_cuda` and `device.type`: no XPU tensor (nor device) is needed to ask
        return bool(is_supported(SimpleNamespace(is_cuda=False, device=torch.device("xpu"))))
    except Exception:
        return True


FSDP_16_MIXED_MESSAGE = (
    "strategy='fsdp' with precision='16-mixed' cannot train on XPU with PyTorch {version}: its ShardedGradScaler"
    " does not support XPU (added in PyTorch 2.6). Use precision='bf16-mixed' (no scaler needed), or PyTorch >= 2.6."
)


class _FSDPPrecisionOnXPU:
    """Mixed in front of Lightning's `FSDPPrecision` (Trainer or Fabric): autocast and ShardedGradScaler on xpu.

    Where the scaler cannot do XPU, 16-mixed is refused when the plugin is built (Trainer/Fabric construction), not
    silently switched to bf16 as for a device without fp64: FSDP's precision also fixes the sharded parameters'
    dtypes, so the user chooses."""

    precision: str
    scaler: Any

    def __init__(self, precision: str) -> None:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        if precision == "16-mixed" and not sharded_scaler_supports_xpu():
            raise ValueError(FSDP_16_MIXED_MESSAGE.format(version=torch.__version__))

        with quiet_cuda_scaler_warnings():
            super().__init__(precision)  # type: ignore[call-arg]
        if self.scaler is not None:  # Lightning made a CUDA scaler (its `scaler` argument cannot be used: it raises)
            self.scaler = ShardedGradScaler(device="xpu")

    def forward_context(self) -> Any:
        """Lightning's context; its CUDA autocast (mixed precisions) becomes the same autocast on "xpu"."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*CUDA is not available")  # the CUDA autocast is replaced
            context = super().forward_context()  # type: ignore[misc]
        if isinstance(context, torch.autocast) and context.device == "cuda":
            return torch.autocast("xpu", dtype=context.fast_dtype)
        return context


def _precision_module(package: str) -> Any:
    return importlib.import_module(f"{package}.plugins.precision")


_CLASSES.define("XPUMixedPrecision", lambda package: (_MixedPrecisionOnXPU, _precision_module(package).MixedPrecision))
_CLASSES.define("XPUFSDPPrecision", lambda package: (_FSDPPrecisionOnXPU, _precision_module(package).FSDPPrecision))


def mixed_precision_class(package: str) -> type:
    """`XPUMixedPrecision` for `package` ("lightning.pytorch", "lightning_fabric", ...)."""
    return _CLASSES.get("XPUMixedPrecision", package)


def fsdp_precision_class(package: str) -> type:
    return _CLASSES.get("XPUFSDPPrecision", package)


def for_xpu(plugin: Any, package: str) -> Any:
    """The XPU counterpart of a plugin Lightning built for CUDA; any other plugin is returned unchanged."""
    plugins = _precision_module(package)
    if type(plugin) is plugins.MixedPrecision and plugin.device == "cuda":
        scaler = torch.amp.GradScaler("xpu") if plugin.precision == "16-mixed" else None
        return mixed_precision_class(package)(plugin.precision, "xpu", scaler=scaler)
    if type(plugin) is plugins.FSDPPrecision:
        return fsdp_precision_class(package)(plugin.precision)
    return plugin
