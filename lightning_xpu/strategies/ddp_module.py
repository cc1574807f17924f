"""The DistributedDataParallel wrapper built on an XPU stream.

Lightning builds it inside `torch.cuda.stream(torch.cuda.Stream())` whenever there are device ids, which raises on
a PyTorch without CUDA. On XPU it is built inside an XPU side stream instead, for the reason Lightning uses one on
CUDA: DDP's constructor broadcasts the parameters, and that work should not land on the default stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu.device import is_xpu_device


def on_xpu_stream(device_ids_method: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wraps Trainer DDP's `_setup_model` / Fabric DDP's `setup_module`; `device_ids_method` is the strategy's own
    method giving DDP's `device_ids` (`determine_ddp_device_ids` / `_determine_ddp_device_ids`)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrap_module(self: Any, module: torch.nn.Module) -> Any:
            if not is_xpu_device(self.root_device):
                return original(self, module)
            device_ids = getattr(self, device_ids_method)()
            with torch.xpu.stream(torch.xpu.Stream()):
                return torch.nn.parallel.DistributedDataParallel(
                    module=module, device_ids=device_ids, **self._ddp_kwargs
                )

        return wrap_module

    return make
