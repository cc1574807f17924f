"""DDP communication hooks (`DDPStrategy(ddp_comm_hook=...)`) are registered on XPU.

`DDPStrategy._register_ddp_hooks` registers the hook only when `root_device.type == "cuda"` (a leftover from when
hooks needed NCCL), so on XPU the user's hook is silently ignored. `DistributedDataParallel.register_comm_hook` is
device-agnostic, so on XPU the same Lightning helper (`_register_ddp_comm_hook`) is called with the strategy's hook
settings. Trainer only: Fabric's DDPStrategy has no hook option (Fabric users register hooks on the module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.device import is_xpu_device


def register_hooks_on_xpu(namespace: Namespace) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def _register_ddp_hooks(self: Any) -> None:
            if not is_xpu_device(self.root_device):
                return original(self)
            register = namespace.pytorch_module("overrides.distributed")._register_ddp_comm_hook
            register(
                model=self.model,
                ddp_comm_state=self._ddp_comm_state,
                ddp_comm_hook=self._ddp_comm_hook,
                ddp_comm_wrapper=self._ddp_comm_wrapper,
            )
            return None

        return _register_ddp_hooks

    return make


def apply_pytorch(namespace: Namespace) -> None:
    ddp_strategy = namespace.pytorch_module("strategies.ddp").DDPStrategy
    wrap(ddp_strategy, "_register_ddp_hooks", register_hooks_on_xpu(namespace))
