"""`PyTorchProfiler` records XPU kernels by default when an Intel GPU is present.

Lightning fills the profiler's `activities` itself (CPU, plus CUDA when CUDA is available) and passes them to
`torch.profiler.profile` explicitly, so torch's own default (every supported activity, XPU included) never applies
and an XPU run shows no device time. The CUDA rule is "available on this machine", and the same rule is used here.
Activities the user passes are left alone. Fabric has no profiler integration, so there is nothing to patch there.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.device import xpu_available


def xpu_activity() -> Any | None:
    """`ProfilerActivity.XPU` when this torch can profile an available XPU, else None."""
    activity = getattr(torch.profiler.ProfilerActivity, "XPU", None)
    if activity is None or not xpu_available():
        return None
    # An XPU build without the Kineto/PTI tracer cannot record XPU activity; asking for it would break profiling.
    return activity if activity in torch.profiler.supported_activities() else None


def _xpu_activity_adder(profiler_module: ModuleType) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def _default_activities(self: Any) -> list[Any]:
            activities = original(self)
            activity = xpu_activity()
            # Without Kineto, Lightning uses the legacy autograd profiler, which takes no activities.
            kineto = getattr(profiler_module, "_KINETO_AVAILABLE", False)
            if kineto and activity is not None and activity not in activities:
                activities.append(activity)
            return activities

        return _default_activities

    return make


def apply_pytorch(namespace: Namespace) -> None:
    profiler_module = namespace.pytorch_module("profilers.pytorch")
    wrap(profiler_module.PyTorchProfiler, "_default_activities", _xpu_activity_adder(profiler_module))
