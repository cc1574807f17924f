"""Fork strategies and the bad-fork state on faithful profiles (tests/xpu_profiles.py rows count_poisons_fork,
initialising_calls, ipex_replaces_memory_calls).

- `ddp_fork`/`ddp_notebook` on XPU are refused in the parent, before any fork, where counting poisoned fork; allowed
  where torch 2.13+ counts through Level Zero Sysman and XPU is not initialised.
- A process forked after XPU was counted never touches XPU: RNG states and empty_cache are left alone.
- Real CPU `ddp_fork` runs (real fork, real gloo) complete with the faithful profile of an XPU machine active.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import LIGHTNING
from lightning_xpu.rng import XPU_KEY

pytestmark = pytest.mark.usefixtures("rank_zero_only_rank")


class ReachedFork(Exception):
    """Raised instead of starting processes: the launcher got past every check."""




def fork_launcher(side: str, monkeypatch: pytest.MonkeyPatch, strategy: str = "ddp_fork") -> Any:
    def start_processes(*args: Any, **kwargs: Any) -> None:
        raise ReachedFork

    monkeypatch.setattr(torch.multiprocessing, "start_processes", start_processes)
    monkeypatch.setenv("MASTER_PORT", "29500")
    if side == "trainer":
        owner = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy=strategy, logger=False)
    else:
        owner = LIGHTNING.fabric_module("").Fabric(accelerator="xpu", devices=2, strategy=strategy)
    return owner.strategy.launcher


@pytest.mark.parametrize("side", ["trainer", "fabric"])
@pytest.mark.parametrize("strategy", ["ddp_fork", "ddp_notebook"])
@pytest.mark.parametrize("version", ["2.7", "2.13"])
def test_fork_on_xpu_is_refused_in_the_parent_where_counting_poisoned_fork(simulated_xpu, monkeypatch, side,
                                                                            strategy, version) -> None:
    """Fails on main (its guard looked at is_initialized only, so every child died at its first XPU call)."""
    sim = simulated_xpu(torch=version)  # 2.13 without pyzes: counted through the runtime
    launcher = fork_launcher(side, monkeypatch, strategy)
    assert sim.fork_poisoned and not sim.initialized  # building the Trainer/Fabric counted the XPUs
    with pytest.raises(RuntimeError, match=r"strategy='ddp_spawn' \(or 'ddp' outside notebooks\)") as refused:
        launcher.launch(print)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("side", ["trainer", "fabric"])
def test_fork_on_xpu_goes_ahead_where_sysman_counts_and_xpu_is_not_initialized(simulated_xpu, monkeypatch,
                                                                               side) -> None:
    sim = simulated_xpu(torch="2.13", pyzes=True)
    with pytest.raises(ReachedFork):
        fork_launcher(side, monkeypatch).launch(print)
    assert not sim.fork_poisoned


def forked_child(sim: Any) -> None:
    """What torch's fork handler leaves in a child forked after the parent counted XPUs."""
    sim.fork_poisoned = True
    sim.in_bad_fork, sim.initialized = True, False


def test_rng_states_leave_xpu_alone_in_a_bad_fork(simulated_xpu) -> None:
    """Fails on main: get_rng_state_all raised 'Cannot re-initialize XPU in forked subprocess' (row
    initialising_calls), which killed Lightning's sanity check (isolate_rng(include_cuda=True)) in every child."""
    sim = simulated_xpu(torch="2.7")
    forked_child(sim)
    seed = LIGHTNING.fabric_module("utilities.seed")
    with pytest.raises(RuntimeError, match="Cannot re-initialize XPU in forked subprocess"):
        torch.xpu.get_rng_state_all()  # the simulation does refuse, as torch does
    states = seed._collect_rng_states(include_cuda=True)
    assert XPU_KEY not in states
    seed._set_rng_states({**states, XPU_KEY: [g.get_state() for g in sim.generators]})
    with LIGHTNING.pytorch_module("utilities.seed").isolate_rng(include_cuda=True):
        torch.manual_seed(0)  # torch itself skips XPU in a bad fork (row manual_seed_skips_bad_fork)
    assert not sim.initialized and sim.deferred == []


def test_empty_cache_leaves_xpu_alone_in_a_bad_fork_under_ipex(simulated_xpu) -> None:
    """Fails on main: with IPEX imported (2.5-2.7) empty_cache is IPEX's, modelled as starting the runtime, which
    raises in a bad fork; the batch-size finder's garbage collection then crashed."""
    sim = simulated_xpu(torch="2.7", ipex=True)
    import intel_extension_for_pytorch  # noqa: F401  (replaces torch.xpu.empty_cache, row ipex_replaces_...)

    forked_child(sim)
    LIGHTNING.pytorch_module("utilities.memory").garbage_collection_cuda()
    assert sim.empty_cache_calls == 0 and not sim.initialized


# ---- real CPU runs with the faithful profile of an XPU machine active (real fork, real gloo) -------------------

STEPS = 3


def cpu_model_class() -> type:
    pl = LIGHTNING.pytorch_module("")

    class Tiny(pl.LightningModule):
        def __init__(self, out: str) -> None:
            super().__init__()
            self.out = out
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.layer(batch[0])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def loader(self) -> Any:
            data = torch.utils.data.TensorDataset(torch.randn(16, 4))
            return torch.utils.data.DataLoader(data, batch_size=4)

        def train_dataloader(self) -> Any:
            return self.loader()

        def val_dataloader(self) -> Any:
            return self.loader()

        def on_train_end(self) -> None:
            Path(self.out, f"rank-{self.global_rank}.json").write_text(json.dumps({"steps": self.global_step}))

    return Tiny


def test_cpu_ddp_fork_trainer_fit_completes_on_an_xpu_machine(simulated_xpu, tmp_path: Path) -> None:
    """Fails on main: each forked child died in the sanity check's isolate_rng (XPU RNG states in a bad fork)."""
    sim = simulated_xpu(torch="2.7")
    torch.xpu.device_count()  # counted in the parent (as the banner, the profiler or the user do): fork poisoned
    assert sim.fork_poisoned
    trainer = LIGHTNING.pytorch_module("").Trainer(
        accelerator="cpu", strategy="ddp_fork", devices=2, max_steps=STEPS, limit_val_batches=1,
        num_sanity_val_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False)
    trainer.fit(cpu_model_class()(str(tmp_path)))
    reports = sorted(tmp_path.glob("rank-*.json"))
    assert [json.loads(path.read_text()) for path in reports] == [{"steps": STEPS}] * 2


def fabric_worker(fabric: Any, out: str) -> None:
    seed = LIGHTNING.fabric_module("utilities.seed")
    fabric.seed_everything(0)
    model = fabric.setup_module(torch.nn.Linear(4, 1))
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    states = seed._collect_rng_states(include_cuda=True)  # what isolate_rng and the launchers do
    for _ in range(STEPS):
        loss = model(torch.randn(4, 4)).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    seed._set_rng_states(states)
    fabric.barrier()
    Path(out, f"rank-{fabric.global_rank}.json").write_text(json.dumps({"xpu_rng": XPU_KEY in states}))


def test_cpu_ddp_fork_fabric_run_completes_on_an_xpu_machine(simulated_xpu, tmp_path: Path) -> None:
    sim = simulated_xpu(torch="2.7")
    torch.xpu.device_count()
    assert sim.fork_poisoned
    fabric = LIGHTNING.fabric_module("").Fabric(accelerator="cpu", strategy="ddp_fork", devices=2)
    fabric.launch(fabric_worker, str(tmp_path))
    reports = sorted(tmp_path.glob("rank-*.json"))
    assert [json.loads(path.read_text()) for path in reports] == [{"xpu_rng": False}] * 2
