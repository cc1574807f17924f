"""The process-group backend on Intel GPUs: XCCL where PyTorch has it, else oneCCL's "ccl", else a clear error.

PyTorch >= 2.8 builds XCCL in (`torch.distributed.is_xccl_available()`); PyTorch <= 2.7 reaches Intel GPUs through
the oneCCL bindings, whose import registers the "ccl" backend. Lightning only knows torch's device->backend map: it
gives "gloo" for xpu before 2.5.5 and "xccl" from 2.5.5 on, even where XCCL is not built. An explicit
`process_group_backend=` always wins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu.device import is_xpu_device

XCCL = "xccl"
CCL = "ccl"
XPU_BACKENDS = (XCCL, CCL)
ONECCL_MODULE = "oneccl_bindings_for_pytorch"


def xccl_available() -> bool:
    is_available = getattr(torch.distributed, "is_xccl_available", None)  # absent before PyTorch 2.7
    return bool(is_available is not None and is_available())


def xpu_process_group_backend() -> str:
    """ "xccl", else "ccl" (importing the oneCCL bindings registers it), else RuntimeError naming what to install."""
    if xccl_available():
        return XCCL
    try:
        importlib.import_module(ONECCL_MODULE)
    except ImportError as error:
        raise RuntimeError(
            f"No process-group backend for Intel GPUs: PyTorch {torch.__version__} has no XCCL and {ONECCL_MODULE}"
            f" cannot be imported ({error}). Install PyTorch >= 2.8 for XPU (XCCL built in), or for PyTorch <= 2.7"
            " the oneCCL bindings of the same version (pip package oneccl_bind_pt from Intel's XPU wheel index),"
            " or pass process_group_backend=... to the strategy."
        ) from error
    return CCL


def choose_backend(original: Callable[..., str]) -> Callable[..., str]:
    """Wraps a strategy's `_get_process_group_backend`."""

    def _get_process_group_backend(self: Any) -> str:
        if getattr(self, "_process_group_backend", None) or not is_xpu_device(self.root_device):
            return original(self)
        return xpu_process_group_backend()

    return _get_process_group_backend
