"""Opt-in `ipex.optimize` (IPEXOptimize callback, `lightning_xpu.ipex.optimize`), tested with the STAND-IN IPEX module
of tests/conftest.py (`stand_in_ipex`), never the real Intel Extension for PyTorch.

Lightning has no IPEX option at all, so there is no unpatched behaviour to show: without the callback nothing runs.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch
from lightning_grid import TRAINER_NAMESPACES, trainer_on
from torch.utils.data import DataLoader

import lightning_xpu.ipex
from lightning_xpu._namespaces import LIGHTNING, STANDALONE, Namespace
from lightning_xpu.ipex import ipex_callback_class


def tiny_module(namespace: Namespace) -> object:
    base = namespace.pytorch_module("").LightningModule

    class Tiny(base):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self.layer(batch).sum()

        def train_dataloader(self) -> DataLoader:
            return DataLoader(torch.zeros(4, 1), batch_size=2)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Tiny()


@TRAINER_NAMESPACES
def test_callback_optimizes_the_module_and_optimizer_in_place(stand_in_ipex, namespace: Namespace, tmp_path) -> None:
    """A CPU fit with the stand-in IPEX: ipex.optimize gets the LightningModule and the optimizer the Trainer uses."""
    callback = ipex_callback_class(namespace)()
    trainer = trainer_on(namespace, "cpu", max_steps=1, default_root_dir=tmp_path, callbacks=[callback])
    model = tiny_module(namespace)
    trainer.fit(model)
    [call] = stand_in_ipex.calls
    assert call["model"] is model and call["inplace"] is True and call["dtype"] is None
    assert call["optimizer"] is trainer.optimizers[0] and trainer.optimizers[0].fused is True


def test_callback_passes_dtype_and_options(stand_in_ipex, simulated_xpu) -> None:
    """Simulated XPU, one process: dtype and ipex.optimize options reach IPEX."""
    simulated_xpu()
    callback = ipex_callback_class(LIGHTNING)(dtype=torch.bfloat16, level="O1")
    trainer = trainer_on(LIGHTNING, "xpu:0")
    callback.setup(trainer, None, "fit")
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
    trainer.strategy.optimizers = [optimizer]
    callback.on_fit_start(trainer, "module")
    assert stand_in_ipex.calls == [
        {"model": "module", "optimizer": optimizer, "dtype": torch.bfloat16, "inplace": True, "level": "O1"}
    ]


def test_without_ipex_the_callback_says_how_to_fix_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "intel_extension_for_pytorch", None)  # import fails
    callback = ipex_callback_class(LIGHTNING)()
    with pytest.raises(ModuleNotFoundError, match=r"only for PyTorch 2\.5-2\.10 XPU.*remove IPEXOptimize"):
        callback.setup(SimpleNamespace(), None, "fit")


def fake_trainer(device: str, world_size: int = 1, optimizers: int = 1) -> SimpleNamespace:
    strategy = SimpleNamespace(root_device=torch.device(device), optimizers=[object() for _ in range(optimizers)])
    return SimpleNamespace(strategy=strategy, world_size=world_size)


@pytest.mark.parametrize(
    ("trainer", "kwargs", "message"),
    [(fake_trainer("cuda:0"), {}, "not cuda"), (fake_trainer("xpu:0", world_size=2), {"dtype": torch.bfloat16}, "DDP")],
)
def test_unsupported_setups_are_refused_before_fitting(stand_in_ipex, trainer, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        ipex_callback_class(LIGHTNING)(**kwargs).setup(trainer, None, "fit")
    assert stand_in_ipex.calls == []


def test_one_optimizer_only(stand_in_ipex) -> None:
    with pytest.raises(ValueError, match="one optimizer, this LightningModule has 2"):
        ipex_callback_class(LIGHTNING)().on_fit_start(fake_trainer("xpu:0", optimizers=2), None)


def test_optimize_refuses_copies(stand_in_ipex) -> None:
    """An IPEX that ignored inplace=True would leave Lightning training the unoptimised originals."""
    stand_in_ipex.copies = True
    model = torch.nn.Linear(1, 1)
    with pytest.raises(RuntimeError, match="new model/optimizer objects"):
        lightning_xpu.ipex.optimize(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="in place only"):
        lightning_xpu.ipex.optimize(model, inplace=False)


def test_optimize_for_fabric_users(stand_in_ipex) -> None:
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert lightning_xpu.ipex.optimize(model, optimizer) == (model, optimizer)
    assert lightning_xpu.ipex.optimize(model) == (model, None)


def test_callback_class_per_namespace() -> None:
    assert issubclass(lightning_xpu.ipex.IPEXOptimize, LIGHTNING.pytorch_module("callbacks").Callback)
    assert issubclass(ipex_callback_class(STANDALONE), STANDALONE.pytorch_module("callbacks").Callback)
