"""ThroughputMonitor on XPU: device synchronised before timing; peak FLOPs known so MFU is reported.

The FLOPs table is checked against the figures its sources give; the patches run on simulated XPU (tests/conftest.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lightning_grid import FABRIC_NAMESPACES, TRAINER_NAMESPACES, trainer_on

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import LIGHTNING, Namespace
from lightning_xpu._patching import original_of
from lightning_xpu.flops import FlopsUnknown, peak_flops

MAX_1550 = "Intel(R) Data Center GPU Max 1550"
XPU0 = torch.device("xpu", 0)


@pytest.mark.parametrize(
    ("dtype", "tf32", "card_tflops"),
    [(torch.float64, False, 52.4), (torch.float32, False, 52.4), (torch.float32, True, 419.4),
     (torch.bfloat16, False, 838.9), (torch.float16, False, 838.9), (torch.int8, False, 1677.7)],
)
def test_max_1550_peaks_per_card_and_per_tile(dtype, tf32, card_tflops) -> None:
    """128 Xe-cores (1024 EUs) at 1.6 GHz per card; one stack (FLAT mode) exposes 512 EUs and gets half."""
    card = peak_flops(MAX_1550, 1024, dtype, tf32_matmul=tf32)
    tile = peak_flops(MAX_1550, 512, dtype, tf32_matmul=tf32)
    assert card / 1e12 == pytest.approx(card_tflops, abs=0.05)
    assert tile * 2 == card


def test_arc_a770_peaks_and_missing_data_types() -> None:
    """Xe-HPG: 512 EUs at 2.1 GHz; no FP64 hardware, and float32 stays FP32 even when TF32 is allowed."""
    name = "Intel(R) Arc(TM) A770 Graphics"
    assert peak_flops(name, 512, torch.float16, tf32_matmul=False) / 1e12 == pytest.approx(137.6, abs=0.05)
    assert peak_flops(name, 512, torch.float32, tf32_matmul=True) / 1e12 == pytest.approx(17.2, abs=0.05)
    with pytest.raises(FlopsUnknown, match="no published peak"):
        peak_flops(name, 512, torch.float64, tf32_matmul=False)


@pytest.mark.parametrize(
    ("name", "eu_count", "message"),
    [("Intel(R) Arc(TM) A770M Graphics", 512, "FLOPs not found"), ("Intel(R) Arc(TM) B580 Graphics", 160, "not found"),
     (MAX_1550, None, "EU count")],
)
def test_unsourced_devices_have_no_figure(name, eu_count, message) -> None:
    with pytest.raises(FlopsUnknown, match=message):
        peak_flops(name, eu_count, torch.bfloat16, tf32_matmul=False)


@FABRIC_NAMESPACES
def test_unpatched_get_available_flops_knows_no_xpu(simulated_xpu, namespace: Namespace) -> None:
    """Simulated XPU: Lightning alone returns None, so ThroughputMonitor logs no MFU."""
    simulated_xpu()
    module = namespace.fabric_module("utilities.throughput")
    assert original_of(module, "get_available_flops")(XPU0, torch.bfloat16) is None


@FABRIC_NAMESPACES
def test_get_available_flops_on_a_max_1550_tile(simulated_xpu, namespace: Namespace) -> None:
    """Simulated XPU (one Max 1550 stack, 512 EUs): bf16 peak 419.4 TFLOP/s."""
    simulated_xpu()
    flops = namespace.fabric_module("utilities.throughput").get_available_flops(XPU0, torch.bfloat16)
    assert flops == peak_flops(MAX_1550, 512, torch.bfloat16, tf32_matmul=False)


def test_unknown_xpu_warns_and_reports_no_flops(simulated_xpu) -> None:
    simulated_xpu(name="Intel(R) Arc(TM) B580 Graphics", eu_count=160)
    get_available_flops = LIGHTNING.fabric_module("utilities.throughput").get_available_flops
    with pytest.warns(UserWarning, match="FLOPs not found for 'Intel\\(R\\) Arc\\(TM\\) B580 Graphics'"):
        assert get_available_flops(XPU0, torch.bfloat16) is None


@FABRIC_NAMESPACES
def test_cpu_available_flops_are_unchanged(namespace: Namespace) -> None:
    module = namespace.fabric_module("utilities.throughput")
    unpatched = original_of(module, "get_available_flops")
    for dtype in (torch.float32, torch.bfloat16):
        assert module.get_available_flops(torch.device("cpu"), dtype) == unpatched(torch.device("cpu"), dtype)


def started_monitor(namespace: Namespace, trainer: object) -> object:
    """A ThroughputMonitor (window of 2 updates) set up for fitting on `trainer`, its clock started."""
    stage = namespace.pytorch_module("trainer.states")
    trainer.state.fn, trainer.state.stage = stage.TrainerFn.FITTING, stage.RunningStage.TRAINING
    monitor = namespace.pytorch_module("callbacks").ThroughputMonitor(batch_size_fn=len, window_size=2)
    monitor.setup(trainer, None, "fit")
    monitor._start(trainer)
    return monitor


@TRAINER_NAMESPACES
def test_monitor_reports_mfu_on_xpu(simulated_xpu, namespace: Namespace) -> None:
    """Simulated XPU: the Trainer callback (which imports get_available_flops by name) gets the tile's fp32 peak,
    so `device/mfu` is among its metrics."""
    simulated_xpu()
    trainer = trainer_on(namespace, "xpu:0")
    monitor = started_monitor(namespace, trainer)
    assert monitor.available_flops == peak_flops(MAX_1550, 512, torch.float32, tf32_matmul=False)
    module = SimpleNamespace(flops_per_batch=10**9)
    for step in range(2):
        monitor._update(trainer, module, torch.zeros(4), step)
    assert monitor._throughputs[trainer.state.stage].compute()["device/mfu"] > 0


@TRAINER_NAMESPACES
def test_monitor_synchronises_the_xpu_before_timing(simulated_xpu, namespace: Namespace) -> None:
    """Simulated XPU: one synchronize per update; Lightning alone synchronises only CUDA."""
    sim = simulated_xpu()
    trainer = trainer_on(namespace, "xpu:0")
    monitor = started_monitor(namespace, trainer)
    cls = type(monitor)
    original_of(cls, "_update")(monitor, trainer, None, torch.zeros(4), 0)
    assert sim.synchronize_calls == 0
    monitor._update(trainer, None, torch.zeros(4), 1)
    assert sim.synchronize_calls == 1


@TRAINER_NAMESPACES
def test_cpu_monitor_never_touches_the_xpu(namespace: Namespace, monkeypatch) -> None:
    monkeypatch.setattr(torch.xpu, "synchronize", lambda *args: pytest.fail("synchronized an XPU on a CPU run"))
    trainer = trainer_on(namespace, "cpu")
    monitor = started_monitor(namespace, trainer)
    monitor._update(trainer, None, torch.zeros(4), 1)
    assert monitor._throughputs[trainer.state.stage].compute()["samples"] == 4
