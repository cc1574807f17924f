"""Questions about Intel GPUs, answered through `torch.xpu` only (tests simulate devices by patching it)."""

from __future__ import annotations

import os
from typing import Any

import torch


def xpu_available() -> bool:
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def xpu_in_bad_fork() -> bool:
    """This process was forked after the parent counted or initialised XPUs: any call that starts the XPU runtime
    raises here ("Cannot re-initialize XPU in forked subprocess"), so nothing may touch XPU."""
    xpu = getattr(torch, "xpu", None)
    in_bad_fork = getattr(xpu, "_is_in_bad_fork", None)
    return bool(in_bad_fork is not None and in_bad_fork())


def xpu_device_count() -> int:
    return torch.xpu.device_count() if xpu_available() else 0


def is_xpu_device(device: Any) -> bool:
    """True for `torch.device("xpu", ...)` and the strings "xpu"/"xpu:N"."""
    if isinstance(device, torch.device):
        return device.type == "xpu"
    return isinstance(device, str) and device.split(":", 1)[0] == "xpu"


def has_fp64(device: torch.device | int | None = None) -> bool:
    """Arc A-series and some integrated GPUs lack fp64, which GradScaler's unscale needs."""
    properties = torch.xpu.get_device_properties(device)
    return bool(getattr(properties, "has_fp64", True))


def affinity_hint() -> str:
    """Why a device index may be missing: a per-rank ZE_AFFINITY_MASK leaves each process one device (xpu:0)."""
    mask = os.environ.get("ZE_AFFINITY_MASK")
    if mask:
        return f" ZE_AFFINITY_MASK={mask} limits this process to the devices it lists (renumbered from 0)."
    return ""


def parse_device_indices(
    devices: int | str | list[int] | tuple[int, ...], torchelastic: bool = False, available: int | None = None
) -> list[int] | None:
    """Lightning's GPU convention: an int or plain string is a count (-1 = all), "0,2" or a list are indices.

    0, "0" and [] mean no device (None), as for CUDA. `torchelastic`: launched by torchrun (Lightning's
    TorchElasticEnvironment.detect()); then, as in Lightning's `_parse_gpu_ids`, several indices are accepted
    unchecked where the process sees one device (a per-process affinity mask). `available`: the devices to check
    against, instead of those this process sees (a launch of one masked device per rank counts the node's). A copy
    of Lightning's logic: listed in lightning_xpu/versions.py COPIES.
    """
    if isinstance(devices, bool) or not isinstance(devices, (int, str, list, tuple)):
        raise TypeError(f"devices must be an int, a string or a list of ints, got {devices!r}")
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("", "0", "[]"):
            return None
        if "," in text:
            indices = [int(part) for part in text.split(",") if part.strip()]
        else:
            return parse_device_indices(int(text), torchelastic, available)
    elif isinstance(devices, int):
        if devices == 0:
            return None
        if devices == -1:
            indices = list(range(xpu_device_count() if available is None else available))
        elif devices < -1:
            raise ValueError(f"devices must be -1 (all) or a count >= 0, got {devices}")
        else:
            indices = list(range(devices))
    else:
        if not devices:
            return None
        indices = [int(index) for index in devices]
    available = xpu_device_count() if available is None else available
    if torchelastic and len(indices) != 1 and available == 1:
        return indices  # Lightning's torchelastic bypass: each process shows one device by default
    if len(set(indices)) != len(indices):
        raise ValueError(f"Device IDs (XPU) must be unique, got {indices}")
    missing = [index for index in indices if not 0 <= index < available]
    if missing:
        raise ValueError(
            f"You requested xpu: {indices}, but your machine has only {available} XPU device(s)"
            + (f": ask for those (devices={available} or devices=\"auto\")." if available else ".")
            + affinity_hint()
        )
    return indices
