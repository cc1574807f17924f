"""MFU's TF32 peak on faithful profiles (tests/xpu_profiles.py rows onednn_allow_tf32, onednn_fp32_precision_api,
mixed_precision_api_raises): it follows oneDNN's switch for the installed torch and never raises."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import LIGHTNING
from lightning_xpu.flops import peak_flops

MAX_1550 = "Simulated Intel(R) Data Center GPU Max 1550"
XPU0 = torch.device("xpu", 0)


@pytest.fixture
def restore_matmul_precision() -> Iterator[None]:
    yield
    if hasattr(torch.backends.mkldnn, "matmul"):
        torch.backends.mkldnn.matmul.fp32_precision = "none"  # back to inheriting: the mix check is off again
    assert torch.get_float32_matmul_precision() == "highest"


def float32_flops() -> int | None:
    return LIGHTNING.fabric_module("utilities.throughput").get_available_flops(XPU0, torch.float32)


def test_mfu_survives_the_new_tf32_api_on_2_13(simulated_xpu, restore_matmul_precision) -> None:
    """Fails on main: get_float32_matmul_precision() raises on 2.13 once the new API was used (measured here),
    which crashed ThroughputMonitor."""
    sim = simulated_xpu(torch="2.13")
    torch.backends.mkldnn.matmul.fp32_precision = "tf32"
    assert float32_flops() == peak_flops(MAX_1550, 512, torch.float32, tf32_matmul=False)
    sim.allow_tf32 = True  # torch.backends.mkldnn.allow_tf32 = True: what XPU matmuls follow
    assert float32_flops() == peak_flops(MAX_1550, 512, torch.float32, tf32_matmul=True)


def test_mfu_has_no_tf32_peak_on_2_5(simulated_xpu, monkeypatch) -> None:
    """Fails on main: it took TF32 from set_float32_matmul_precision, which XPU matmuls ignore (MFU ~8x low)."""
    simulated_xpu(torch="2.5")
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert float32_flops() == peak_flops(MAX_1550, 512, torch.float32, tf32_matmul=False)


def test_mfu_follows_allow_tf32_on_2_8(simulated_xpu, monkeypatch) -> None:
    sim = simulated_xpu(torch="2.8")
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert float32_flops() == peak_flops(MAX_1550, 512, torch.float32, tf32_matmul=False)
    torch.backends.mkldnn.allow_tf32 = True
    assert sim.allow_tf32
    assert float32_flops() == peak_flops(MAX_1550, 512, torch.float32, tf32_matmul=True)
