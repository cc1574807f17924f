"""`ddp_fork`/`ddp_notebook` on XPU: refuse to fork once XPU is initialised in the main process.

Before forking, Lightning checks only CUDA (`_check_bad_cuda_fork`). A child forked after the XPU runtime started
cannot use XPU (PyTorch refuses to re-initialise it there), so each child would fail late with a torch error. The
launcher now says so before forking, as Lightning does for CUDA.
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


def refuse_fork_after_xpu_init(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps `_MultiProcessingLauncher.launch` (Trainer and Fabric)."""

    def launch(self: Any, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._start_method == "fork" and is_xpu_device(self._strategy.root_device) and torch.xpu.is_initialized():
            raise RuntimeError(FORK_MESSAGE)
        return original(self, function, *args, **kwargs)

    return launch
