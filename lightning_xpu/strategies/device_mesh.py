"""FSDP's `device_mesh=(replicas, shards)` on XPU.

Lightning turns the tuple into `init_device_mesh("cuda", ...)` right after creating the process group. On XPU the
tuple is held back while Lightning's method runs and turned into an "xpu" mesh at the same point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_xpu.device import is_xpu_device


def mesh_on_xpu(kwargs_attribute: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wraps FSDP's `setup_environment`; `kwargs_attribute` names the dict of FSDP arguments (`kwargs` for the
    Trainer, `_fsdp_kwargs` for Fabric)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def setup_environment(self: Any) -> Any:
            fsdp_kwargs = getattr(self, kwargs_attribute, None)
            shape = fsdp_kwargs.get("device_mesh") if isinstance(fsdp_kwargs, dict) else None
            if not isinstance(shape, tuple) or not is_xpu_device(self.root_device):
                return original(self)
            del fsdp_kwargs["device_mesh"]
            try:
                result = original(self)
            except BaseException:
                fsdp_kwargs["device_mesh"] = shape
                raise
            from torch.distributed.device_mesh import init_device_mesh

            fsdp_kwargs["device_mesh"] = init_device_mesh("xpu", shape)
            return result

        return setup_environment

    return make
