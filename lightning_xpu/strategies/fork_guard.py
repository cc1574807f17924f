"""`ddp_fork`/`ddp_notebook` on XPU: refused in the parent, before any fork, where a forked child cannot use XPU.

Before forking, Lightning checks only CUDA (`_check_bad_cuda_fork`). A child forked after the XPU runtime started,
or after torch merely counted the XPUs through the runtime, is in a "bad fork": torch raises "Cannot re-initialize
XPU in forked subprocess" at its first XPU call (torch/xpu/__init__.py `_lazy_init`; the count registers the fork
handler in torch/csrc/xpu/Module.cpp). Counting always does this on PyTorch 2.5-2.12; from 2.13 it does not when
Level Zero Sysman counting works (`torch.xpu._device_count_zes()`, through the `pyzes` package). The connector and
the accelerator count devices while the Trainer/Fabric is built, so where counting poisons fork, forking for XPU
is refused with one line naming the strategies that work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu.device import is_xpu_device

FORK_MESSAGE = (
    "Lightning can't fork processes for strategy='ddp_fork'/'ddp_notebook' because XPU is already initialized in"
    " this process (tensors on an XPU or torch.xpu calls before fit), and forked processes cannot use it. Use"
    " strategy='ddp_spawn' (or 'ddp' outside notebooks), or touch no XPU before fit; in a notebook, restart the"
    " kernel."
)


def poisoned_fork_message() -> str:
    return (
        f"strategy='ddp_fork'/'ddp_notebook' cannot use XPUs with PyTorch {torch.__version__}: counting the XPUs"
        " (done when the Trainer/Fabric was built) leaves forked processes unable to use them. Use"
        " strategy='ddp_spawn' (or 'ddp' outside notebooks); PyTorch >= 2.13 with working Level Zero Sysman"
        " (the pyzes package) counts without this."
    )


def counting_poisons_fork() -> bool:
    """Whether counting XPUs goes through the runtime (and so makes forked processes unable to use XPU)."""
    sysman_count = getattr(torch.xpu, "_device_count_zes", None)  # PyTorch >= 2.13
    if sysman_count is None:
        return True
    try:
        return int(sysman_count()) < 0  # -1: Sysman unusable, torch counted through the runtime
    except Exception:  # a failing probe is treated as the runtime count
        return True


def fork_refusal() -> str | None:
    """Why forking now would leave the children without XPU, or None when it is safe."""
    if torch.xpu.is_initialized():
        return FORK_MESSAGE
    if counting_poisons_fork():
        return poisoned_fork_message()
    return None


def refuse_fork_after_xpu_init(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps `_MultiProcessingLauncher.launch` (Trainer and Fabric)."""

    def launch(self: Any, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._start_method == "fork" and is_xpu_device(self._strategy.root_device):
            refusal = fork_refusal()
            if refusal is not None:
                raise RuntimeError(refusal)
        return original(self, function, *args, **kwargs)

    return launch
