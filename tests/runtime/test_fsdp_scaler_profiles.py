"""FSDP + 16-mixed on faithful profiles (tests/xpu_profiles.py row sharded_scaler_xpu): where ShardedGradScaler
cannot do XPU (PyTorch 2.5), Trainer/Fabric construction refuses it and names bf16-mixed."""

from __future__ import annotations

import pytest

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import LIGHTNING

pytestmark = pytest.mark.usefixtures("rank_zero_only_rank")


@pytest.mark.parametrize("side", ["trainer", "fabric"])
def test_fsdp_16_mixed_is_refused_at_construction_where_the_scaler_lacks_xpu(simulated_xpu, side) -> None:
    """Fails on main: construction succeeded and the first scaler.scale() asserted on 2.5."""
    simulated_xpu(torch="2.5")
    with pytest.raises(ValueError, match=r"16-mixed.*ShardedGradScaler.*precision='bf16-mixed'"):
        if side == "trainer":
            LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy="fsdp", precision="16-mixed",
                                                 logger=False)
        else:
            LIGHTNING.fabric_module("").Fabric(accelerator="xpu", devices=2, strategy="fsdp", precision="16-mixed")


def test_fsdp_bf16_mixed_is_accepted_where_the_scaler_lacks_xpu(simulated_xpu) -> None:
    simulated_xpu(torch="2.5")
    fabric = LIGHTNING.fabric_module("").Fabric(accelerator="xpu", devices=2, strategy="fsdp",
                                                precision="bf16-mixed")
    assert fabric._precision.scaler is None
