"""PyTorchProfiler requests XPU activity by default on XPU (simulated XPU, see tests/conftest.py)."""

from __future__ import annotations

import torch
from lightning_grid import TRAINER_NAMESPACES
from torch.profiler import ProfilerActivity

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import LIGHTNING, Namespace
from lightning_xpu._patching import original_of


def profiler_class(namespace: Namespace) -> type:
    return namespace.pytorch_module("profilers").PyTorchProfiler


def requested_activities(profiler: object) -> list[ProfilerActivity]:
    return profiler._profiler_kwargs["activities"]  # what Lightning hands to torch.profiler.profile


@TRAINER_NAMESPACES
def test_unpatched_lightning_requests_no_xpu_activity(simulated_xpu, namespace) -> None:
    """Simulated XPU: Lightning alone asks for CPU (and CUDA if present) only, so XPU kernels go unrecorded."""
    simulated_xpu()
    cls = profiler_class(namespace)
    assert ProfilerActivity.XPU not in original_of(cls, "_default_activities")(cls())


@TRAINER_NAMESPACES
def test_profiler_requests_xpu_activity_on_xpu(simulated_xpu, namespace) -> None:
    """Simulated XPU: the default activities gain ProfilerActivity.XPU."""
    simulated_xpu()
    assert requested_activities(profiler_class(namespace)()) == [ProfilerActivity.CPU, ProfilerActivity.XPU]


@TRAINER_NAMESPACES
def test_activities_given_by_the_user_are_kept(simulated_xpu, namespace) -> None:
    simulated_xpu()
    profiler = profiler_class(namespace)(activities=[ProfilerActivity.CPU])
    assert requested_activities(profiler) == [ProfilerActivity.CPU]


def test_no_xpu_activity_when_torch_cannot_trace_xpu(simulated_xpu, monkeypatch) -> None:
    """Simulated XPU on a torch build without the XPU tracer: asking for XPU activity would break profiling."""
    simulated_xpu()
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {ProfilerActivity.CPU})
    assert ProfilerActivity.XPU not in requested_activities(profiler_class(LIGHTNING)())


@TRAINER_NAMESPACES
def test_cpu_default_activities_are_unchanged(namespace) -> None:
    cls = profiler_class(namespace)
    profiler = cls()
    assert requested_activities(profiler) == original_of(cls, "_default_activities")(profiler)
    assert ProfilerActivity.XPU not in requested_activities(profiler)
