"""Barrier and object broadcast on the XPU backends.

Barrier: Lightning passes `device_ids` to `torch.distributed.barrier` only for nccl; on xccl/ccl it passes none and
torch falls back to the bound or current device (warning that this may hang). We pass the rank's device as
Lightning does for nccl.

Objects (checkpoint paths, log directories, profiler names) travel through `broadcast_object_list`. With oneCCL's
"ccl" backend a broadcast of strings was seen to hang (Lightning PR #19443), so on ccl the objects go through a
gloo group of the same ranks, opened once right after the process group; gloo is always built in and objects are
small and rare. The side group belongs to the world it was made in: a strategy set up again after the process
group was destroyed and re-created gets a new one. It is destroyed at exit: a gloo group still alive when the
interpreter shuts down can abort the process ("terminate called without an active exception"), which would fail a
job that trained fine. XCCL serialises objects onto the current XPU like NCCL does on
CUDA and keeps the world group.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu.strategies.backend import CCL, XPU_BACKENDS

# The strategy attribute holding (world group, gloo group for objects); set only on XPU with the ccl backend.
OBJECT_GROUP_ATTRIBUTE = "_lightning_xpu_object_group"


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def xpu_backend_in_use() -> str | None:
    """The default process group's backend if it is an XPU one, else None (also when no group exists)."""
    if not _initialized():
        return None
    backend = str(torch.distributed.get_backend())
    return backend if backend in XPU_BACKENDS else None


def _world() -> Any:
    return torch.distributed.group.WORLD


def object_group(strategy: Any) -> Any:
    """The strategy's gloo group for objects if it has one for the current world, else None."""
    world, group = getattr(strategy, OBJECT_GROUP_ATTRIBUTE, (None, None))
    return group if group is not None and world is _world() else None


def open_object_group(strategy: Any) -> None:
    """Give `strategy` a gloo group for objects when the world runs on ccl. Every rank must call it (collective)."""
    if xpu_backend_in_use() == CCL and object_group(strategy) is None:
        group = torch.distributed.new_group(backend="gloo")
        setattr(strategy, OBJECT_GROUP_ATTRIBUTE, (_world(), group))
        atexit.register(close_object_group, group)


def close_object_group(group: Any) -> None:
    if _initialized():
        with contextlib.suppress(ValueError, RuntimeError):  # the user destroyed it already
            torch.distributed.destroy_process_group(group)


def barrier_with_device(original: Callable[..., None]) -> Callable[..., None]:
    """Wraps a strategy's `barrier`."""

    def barrier(self: Any, *args: Any, **kwargs: Any) -> None:
        if xpu_backend_in_use() is None:
            return original(self, *args, **kwargs)
        torch.distributed.barrier(device_ids=[self.root_device.index])
        return None

    return barrier


def broadcast_objects_safely(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a strategy's `broadcast`."""

    def broadcast(self: Any, obj: Any, src: int = 0) -> Any:
        group = object_group(self) if _initialized() else None
        if group is None:
            return original(self, obj, src)
        box = [obj]
        torch.distributed.broadcast_object_list(box, src, group=group)
        return box[0]

    return broadcast
