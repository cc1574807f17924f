"""With lightning_xpu imported, CUDA machines train exactly as before (needs NVIDIA GPUs; never runs in CI).

Run on a machine with 2 NVIDIA GPUs, from the repository root (needs only torch, Lightning and pytest):
    PYTHONPATH=. python3 -m pytest tests/runtime/test_cuda.py -m cuda -v
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from lightning_grid import QUIET

REPO = Path(__file__).resolve().parents[2]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(GPUS < 1, reason="needs an NVIDIA GPU (CUDA)")]
TWO_GPUS = pytest.mark.skipif(GPUS < 2, reason="needs 2 NVIDIA GPUs")


def lightning() -> ModuleType:
    """`lightning.pytorch` where installed, else the standalone `pytorch_lightning`; lightning_xpu patches it."""
    importlib.import_module("lightning_xpu")
    name = "lightning.pytorch" if importlib.util.find_spec("lightning") is not None else "pytorch_lightning"
    return importlib.import_module(name)


def test_auto_picks_cuda_with_lightning_xpu_imported() -> None:
    pl = lightning()
    trainer = pl.Trainer(accelerator="auto", devices=1, **QUIET)
    assert isinstance(trainer.accelerator, pl.accelerators.CUDAAccelerator)
    assert trainer.strategy.root_device == torch.device("cuda", 0)


def test_bf16_mixed_autocasts_on_cuda_inside_training_step(tmp_path: Path) -> None:
    pl = lightning()
    seen: list[tuple[bool, bool, torch.dtype]] = []

    class Probe(pl.LightningModule):  # type: ignore[name-defined, misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            out = self.layer(batch[0])
            seen.append((torch.is_autocast_enabled("cuda"), torch.is_autocast_enabled("xpu"), out.dtype))
            return out.float().pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 8)), batch_size=4)
    trainer = pl.Trainer(accelerator="auto", devices=1, precision="bf16-mixed", max_steps=2,
                         default_root_dir=str(tmp_path), **QUIET)
    trainer.fit(Probe(), data)
    assert seen and all(entry == (True, False, torch.bfloat16) for entry in seen)


DDP_FIT = """
import json, sys
out, with_lightning_xpu = sys.argv[1], sys.argv[2] == "with"
if with_lightning_xpu:
    import lightning_xpu
import importlib, importlib.util
import torch
pl = importlib.import_module("lightning.pytorch" if importlib.util.find_spec("lightning") else "pytorch_lightning")

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.losses = []
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

pl.seed_everything(0, verbose=False)
x = torch.randn(256, 32)
y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(256, 1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
model = Model()
trainer = pl.Trainer(accelerator="auto", devices=2, strategy="ddp", max_steps=10, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, loader)
with open(f"{out}/rank-{trainer.global_rank}.json", "w") as handle:
    json.dump({"losses": model.losses, "accelerator": type(trainer.accelerator).__name__,
               "backend": torch.distributed.get_backend(), "device": str(trainer.strategy.root_device),
               "lightning_xpu": "lightning_xpu" in sys.modules}, handle)
"""


def ddp_fit(tmp_path: Path, with_lightning_xpu: bool) -> list[dict[str, Any]]:
    tag = "with" if with_lightning_xpu else "without"
    out = tmp_path / tag
    out.mkdir()
    script = tmp_path / "ddp_fit.py"
    script.write_text(DDP_FIT)
    launched = ("RANK", "LOCAL_RANK", "WORLD_SIZE")  # this test's own launcher must not look like torchrun
    environment = {name: value for name, value in os.environ.items() if name not in launched}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if not with_lightning_xpu:
        environment["LIGHTNING_XPU_DISABLE"] = "1"  # also switches off an autoload hook, where one is installed
    done = subprocess.run([sys.executable, str(script), str(out), tag], env=environment, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{tag} lightning_xpu:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


@TWO_GPUS
def test_two_gpu_ddp_losses_are_the_same_with_and_without_lightning_xpu(tmp_path: Path) -> None:
    patched = ddp_fit(tmp_path, with_lightning_xpu=True)
    plain = ddp_fit(tmp_path, with_lightning_xpu=False)
    for rank in (0, 1):
        assert patched[rank]["lightning_xpu"] and not plain[rank]["lightning_xpu"]
        for run in (patched[rank], plain[rank]):
            assert (run["accelerator"], run["backend"], run["device"]) == ("CUDAAccelerator", "nccl", f"cuda:{rank}")
        assert len(patched[rank]["losses"]) == 10
        assert patched[rank]["losses"] == pytest.approx(plain[rank]["losses"], rel=1e-6, abs=1e-7)
