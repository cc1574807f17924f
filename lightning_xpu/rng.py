"""XPU random-number-generator states are saved and restored wherever Lightning does it for CUDA.

`_collect_rng_states`/`_set_rng_states` (Fabric's seed utilities) cover torch, numpy, Python and `torch.cuda` only.
They serve `isolate_rng` (used by the sanity check and the LR finder) and the spawn launchers, which hand the
parent's states to each worker; on XPU the device generators were neither isolated nor handed over. Lightning's
checkpoints store no RNG state, so there is nothing to add there.

The XPU states go under the key "torch.xpu", next to "torch.cuda", and only when an XPU is available; the
`include_cuda` flag (False in forked processes, where device re-initialisation is forbidden) governs them too.
They are left out in a process forked after the parent counted or initialised XPUs (`torch.xpu._is_in_bad_fork()`):
reading them starts the XPU runtime, which raises there, and Lightning's sanity check calls
`isolate_rng(include_cuda=True)` in every process, so CPU `ddp_fork` on an XPU machine would die otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.device import xpu_available, xpu_in_bad_fork

XPU_KEY = "torch.xpu"
COLLECT, RESTORE = "_collect_rng_states", "_set_rng_states"


def _collect_xpu_too(original: Callable[..., Any]) -> Callable[..., Any]:
    def _collect_rng_states(include_cuda: bool = True) -> dict[str, Any]:
        states = original(include_cuda)
        if include_cuda and xpu_available() and not xpu_in_bad_fork():
            states[XPU_KEY] = torch.xpu.get_rng_state_all()
        return states

    return _collect_rng_states


def _restore_xpu_too(original: Callable[..., Any]) -> Callable[..., Any]:
    def _set_rng_states(rng_state_dict: dict[str, Any]) -> None:
        original(rng_state_dict)
        if XPU_KEY in rng_state_dict and xpu_available() and not xpu_in_bad_fork():
            torch.xpu.set_rng_state_all(rng_state_dict[XPU_KEY])

    return _set_rng_states


def _wrap_both(module: Any) -> None:
    wrap(module, COLLECT, _collect_xpu_too)
    wrap(module, RESTORE, _restore_xpu_too)


def apply_fabric(namespace: Namespace) -> None:
    # The defining module, and the launcher that imported both functions by name.
    _wrap_both(namespace.fabric_module("utilities.seed"))
    _wrap_both(namespace.fabric_module("strategies.launchers.multiprocessing"))


def apply_pytorch(namespace: Namespace) -> None:
    # `isolate_rng` and the Trainer's spawn launcher hold their own by-name references.
    _wrap_both(namespace.pytorch_module("utilities.seed"))
    _wrap_both(namespace.pytorch_module("strategies.launchers.multiprocessing"))
