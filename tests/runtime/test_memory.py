"""XPU out-of-memory errors are recognised; XPU cached memory is released where Lightning frees CUDA's.

XPU errors are built from the texts torch and Level Zero raise (sources in lightning_xpu/memory.py); device paths
run on simulated XPU (tests/conftest.py).
"""

from __future__ import annotations

import pytest
import torch
from lightning_grid import APIS, TRAINER_NAMESPACE_LIST, TRAINER_NAMESPACES, strategies, trainer_on
from torch.utils.data import DataLoader

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import original_of

XPU_OOMS = [
    torch.OutOfMemoryError(
        "XPU out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 16.50 GiB. Of the allocated"
        " memory 16.50 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    ),
    RuntimeError("level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)"),
]
NOT_OOMS = [
    RuntimeError("level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)"),
    ValueError("XPU out of memory"),  # not a RuntimeError: never an allocator error
]
LIGHTNING_CASES = [
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:114] DefaultCPUAllocator: can't allocate memory"),
    RuntimeError("some other failure"),
    KeyError("CUDA out of memory"),
]


def oom_holders() -> list[object]:
    """Both modules holding `is_oom_error` (the batch-size finder imports it by name), in both namespaces."""
    return [ns.pytorch_module(name) for ns in TRAINER_NAMESPACE_LIST
            for name in ("utilities.memory", "tuner.batch_size_scaling")]


@pytest.mark.parametrize("module", oom_holders(), ids=lambda module: module.__name__)
@pytest.mark.parametrize("error", XPU_OOMS, ids=["torch", "level-zero"])
def test_xpu_oom_is_recognised_where_lightning_misses_it(module, error) -> None:
    assert original_of(module, "is_oom_error")(error) is False
    assert module.is_oom_error(error) is True


@pytest.mark.parametrize("module", oom_holders(), ids=lambda module: module.__name__)
def test_other_errors_are_judged_as_before(module) -> None:
    unpatched = original_of(module, "is_oom_error")
    for error in LIGHTNING_CASES:
        assert module.is_oom_error(error) == unpatched(error), error
    for error in NOT_OOMS:
        assert module.is_oom_error(error) is False, error


def oom_above(namespace: Namespace, limit: int) -> object:
    """A LightningModule whose training step fails like an XPU allocator above `limit` samples per batch."""
    base = namespace.pytorch_module("").LightningModule

    class XPUOutOfMemoryAbove(base):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 2
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            if len(batch) > limit:
                raise XPU_OOMS[0]
            return self.layer(batch).sum()

        def train_dataloader(self) -> DataLoader:
            return DataLoader(torch.zeros(256, 1), batch_size=self.batch_size)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return XPUOutOfMemoryAbove()


@TRAINER_NAMESPACES
def test_batch_size_finder_backs_off_at_an_xpu_oom(namespace: Namespace, tmp_path) -> None:
    """The XPU OOM text raised in a CPU run: `scale_batch_size` keeps the largest batch size that fitted."""
    model = oom_above(namespace, limit=8)
    trainer = trainer_on(namespace, "cpu", max_epochs=1, default_root_dir=tmp_path)
    found = namespace.pytorch_module("tuner").Tuner(trainer).scale_batch_size(
        model, mode="power", init_val=2, max_trials=6, steps_per_trial=1
    )
    assert found == model.batch_size == 8


@TRAINER_NAMESPACES
def test_garbage_collection_frees_the_xpu_cache(simulated_xpu, namespace: Namespace) -> None:
    """Simulated XPU: the batch-size finder's cleanup empties the XPU cache; Lightning alone empties CUDA's only."""
    sim = simulated_xpu()
    module = namespace.pytorch_module("tuner.batch_size_scaling")
    original_of(module, "garbage_collection_cuda")()
    assert sim.empty_cache_calls == 0
    module.garbage_collection_cuda()
    assert sim.empty_cache_calls == 1


def saved_checkpoint(tmp_path) -> str:
    path = tmp_path / "state.ckpt"
    torch.save({"value": torch.ones(1)}, path)
    return str(path)


@pytest.mark.parametrize(("api", "package"), APIS)
def test_loading_a_checkpoint_on_xpu_frees_the_xpu_cache_first(simulated_xpu, api: str, package: str, tmp_path) -> None:
    """Simulated XPU: Trainer and Fabric strategies free the XPU cache before loading, as they do for CUDA."""
    sim = simulated_xpu()
    strategy = strategies(package).SingleDeviceStrategy(torch.device("xpu", 0))
    unpatched = original_of(strategies(package).strategy.Strategy, "load_checkpoint")
    path = saved_checkpoint(tmp_path)
    assert torch.equal(unpatched(strategy, path)["value"], torch.ones(1))
    assert sim.empty_cache_calls == 0
    assert torch.equal(strategy.load_checkpoint(path)["value"], torch.ones(1))
    assert sim.empty_cache_calls == 1


def finish_restore(namespace: Namespace, trainer: object, resume_end: object) -> None:
    trainer.state.fn = namespace.pytorch_module("trainer.states").TrainerFn.FITTING
    resume_end(trainer._checkpoint_connector)


@TRAINER_NAMESPACES
def test_restoring_a_checkpoint_on_xpu_frees_the_xpu_cache(simulated_xpu, namespace: Namespace) -> None:
    """Simulated XPU: once the loaded checkpoint is dropped (`resume_end`), the XPU cache is emptied."""
    sim = simulated_xpu()
    trainer = trainer_on(namespace, "xpu:0")
    connector_class = type(trainer._checkpoint_connector)
    finish_restore(namespace, trainer, original_of(connector_class, "resume_end"))
    assert sim.empty_cache_calls == 0
    finish_restore(namespace, trainer, connector_class.resume_end)
    assert sim.empty_cache_calls == 1


@TRAINER_NAMESPACES
def test_cpu_runs_never_empty_an_xpu_cache(namespace: Namespace, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(torch.xpu, "empty_cache", lambda: pytest.fail("emptied an XPU cache on a CPU run"))
    trainer = trainer_on(namespace, "cpu")
    assert torch.equal(trainer.strategy.load_checkpoint(saved_checkpoint(tmp_path))["value"], torch.ones(1))
    finish_restore(namespace, trainer, type(trainer._checkpoint_connector).resume_end)
    namespace.pytorch_module("tuner.batch_size_scaling").garbage_collection_cuda()
