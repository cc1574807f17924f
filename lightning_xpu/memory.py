"""XPU out-of-memory errors are recognised, and XPU cached memory is released where Lightning frees CUDA's.

`is_oom_error` (used by the batch-size finder and `garbage_collection_cuda`) knows CUDA, cuDNN and CPU texts only,
so `scale_batch_size` on XPU crashes at the first OOM instead of backing off. XPU OOM texts, from public reports:
- torch's XPU caching allocator raises `torch.OutOfMemoryError` (a RuntimeError) "XPU out of memory. Tried to
  allocate ..." (https://github.com/intel/torch-xpu-ops/issues/1324, https://github.com/intel/torch-xpu-ops/issues/3011);
- the Level Zero runtime surfaces an exhausted device as RuntimeError "level_zero backend failed with error: 39
  (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)" (https://github.com/intel/torch-xpu-ops/issues/5432,
  https://github.com/pytorch/pytorch/issues/177714).
Lightning calls `torch.cuda.empty_cache()` before loading a checkpoint (Trainer and Fabric strategies), after
restoring one (`_CheckpointConnector.resume_end`) and in `garbage_collection_cuda` (batch-size finder); on XPU the
same points call `torch.xpu.empty_cache()`, never in a process forked after XPU was counted or initialised (a bad
fork: IPEX 2.5-2.7 replaces `empty_cache` with its own, which is not known to spare the runtime there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.device import is_xpu_device, xpu_available, xpu_in_bad_fork

XPU_OOM_TEXTS = ("XPU out of memory", "UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY")


def is_xpu_out_of_memory(exception: BaseException) -> bool:
    return isinstance(exception, RuntimeError) and any(
        isinstance(arg, str) and any(text in arg for text in XPU_OOM_TEXTS) for arg in exception.args
    )


def _recognise_xpu_oom(original: Callable[..., Any]) -> Callable[..., Any]:
    def is_oom_error(exception: BaseException) -> bool:
        return original(exception) or is_xpu_out_of_memory(exception)

    return is_oom_error


def _empty_xpu_cache_too(original: Callable[..., Any]) -> Callable[..., Any]:
    def garbage_collection_cuda() -> None:
        original()  # gc.collect() and CUDA's cache
        if xpu_available() and not xpu_in_bad_fork():
            try:
                torch.xpu.empty_cache()
            except RuntimeError as exception:
                if not is_xpu_out_of_memory(exception):  # same tolerance as Lightning's for CUDA
                    raise

    return garbage_collection_cuda


def _empty_xpu_cache_first(original: Callable[..., Any]) -> Callable[..., Any]:
    """For strategy methods that free CUDA's cache before loading a checkpoint."""

    def load_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        if is_xpu_device(self.root_device):
            torch.xpu.empty_cache()
        return original(self, *args, **kwargs)

    return load_checkpoint


def _empty_xpu_cache_after(original: Callable[..., Any]) -> Callable[..., Any]:
    """For `_CheckpointConnector.resume_end`, which drops the loaded checkpoint and then frees CUDA's cache."""

    def resume_end(self: Any) -> None:
        original(self)
        if is_xpu_device(self.trainer.strategy.root_device):
            torch.xpu.empty_cache()

    return resume_end


def apply_fabric(namespace: Namespace) -> None:
    wrap(namespace.fabric_module("strategies.strategy").Strategy, "load_checkpoint", _empty_xpu_cache_first)


def apply_pytorch(namespace: Namespace) -> None:
    # Both functions are imported by name into the batch-size finder, so each holder is wrapped.
    for module in (namespace.pytorch_module("utilities.memory"), namespace.pytorch_module("tuner.batch_size_scaling")):
        wrap(module, "is_oom_error", _recognise_xpu_oom)
        wrap(module, "garbage_collection_cuda", _empty_xpu_cache_too)
    wrap(namespace.pytorch_module("strategies.strategy").Strategy, "load_checkpoint", _empty_xpu_cache_first)
    connector = namespace.pytorch_module("trainer.connectors.checkpoint_connector")._CheckpointConnector
    wrap(connector, "resume_end", _empty_xpu_cache_after)
