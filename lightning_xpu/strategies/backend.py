"""The process-group backend on Intel GPUs: XCCL where PyTorch has it, else oneCCL's "ccl", else a clear error.

PyTorch >= 2.8 builds XCCL in (`torch.distributed.is_xccl_available()`); PyTorch <= 2.7 reaches Intel GPUs through
the oneCCL bindings, whose import registers the "ccl" backend. Lightning only knows torch's device->backend map: it
gives "gloo" for xpu before 2.5.5 and "xccl" from 2.5.5 on, even where XCCL is not built. An explicit
`process_group_backend=` always wins.

The oneCCL bindings of PyTorch 2.5-2.7 (torch-ccl v2.5.0+xpu..v2.7.0+xpu) load their XPU part,
`lib/liboneccl_bindings_for_pytorch_xpu.so`, only when Intel Extension for PyTorch was imported before them (the
library finds IPEX's GPU library through RPATH `$ORIGIN` only); otherwise the import merely prints "CCL doesn't
work for XPU device" and the first XPU collective fails. So IPEX, when installed, is imported first, and the XPU
part is checked to be loaded before the backend is used.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lightning_xpu.device import is_xpu_device

XCCL = "xccl"
CCL = "ccl"
XPU_BACKENDS = (XCCL, CCL)
ONECCL_MODULE = "oneccl_bindings_for_pytorch"
ONECCL_XPU_LIBRARY = "lib/liboneccl_bindings_for_pytorch_xpu.so"
IPEX_MODULE = "intel_extension_for_pytorch"


def xccl_available() -> bool:
    is_available = getattr(torch.distributed, "is_xccl_available", None)  # absent before PyTorch 2.6
    return bool(is_available is not None and is_available())


def oneccl_xpu_loaded(bindings: Any) -> bool:
    """Whether the bindings' XPU part is loaded in this process (asked of the dynamic loader, nothing is loaded)."""
    library = Path(getattr(bindings, "__file__", None) or ".").parent / ONECCL_XPU_LIBRARY
    try:
        ctypes.CDLL(str(library), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    return True


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: imported, without a spec
        return sys.modules.get(name) is not None


def import_oneccl_bindings() -> Any:
    """Import the oneCCL bindings after IPEX (when installed) and check that their XPU collectives are registered;
    ImportError when the bindings are missing, RuntimeError naming the fix when their XPU part did not load."""
    ipex_installed = _installed(IPEX_MODULE)
    bindings_were_imported = sys.modules.get(ONECCL_MODULE) is not None
    if ipex_installed:
        importlib.import_module(IPEX_MODULE)
    bindings = importlib.import_module(ONECCL_MODULE)
    if oneccl_xpu_loaded(bindings):
        return bindings
    if not ipex_installed:
        fix = (f"install {IPEX_MODULE} of the same version as PyTorch {torch.__version__} (the bindings of PyTorch"
               " <= 2.7 need it), or move to PyTorch >= 2.8 (XCCL built in)")
    elif bindings_were_imported:
        fix = f"import {IPEX_MODULE} before {ONECCL_MODULE} (here the bindings were imported first)"
    else:
        fix = f"check that {IPEX_MODULE} and {ONECCL_MODULE} are the versions made for PyTorch {torch.__version__}"
    raise RuntimeError(
        f"{ONECCL_MODULE} imported, but its XPU part ({ONECCL_XPU_LIBRARY}) is not loaded, so XPU collectives on"
        f" 'ccl' would fail: {fix}."
    )


def xpu_process_group_backend() -> str:
    """ "xccl", else "ccl" (importing the oneCCL bindings registers it), else RuntimeError naming what to install."""
    if xccl_available():
        return XCCL
    try:
        import_oneccl_bindings()
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
