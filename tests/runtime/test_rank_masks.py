"""Per-rank tile masks (issue 18): every rank of a launch sees one tile of its own through ZE_AFFINITY_MASK, as
ALCF's gpu_tile_compact.sh sets it on Aurora (`<card>.<tile>`, from the local rank).

- The simulation (tests/xpu_profiles.py MASK_FACTS): a masked rank sees only its tile, as xpu:0; on 2.13+ a
  card.tile mask defeats the Sysman count, so counting poisons fork even with pyzes.
- The runtime: under every launcher that says N ranks per node, devices="auto", N and -1 give an N-device run with
  every rank on its xpu:0 (Trainer and Fabric, both namespaces); any other value gets one line naming N, and no
  line names a value that is refused in turn. Without masks nothing changes, except that a launch of more ranks
  than a rank sees XPUs is told to change the launch instead of `devices`.
- One real launch: LAUNCHED_RANKS PALS stand-in ranks on a 12-tile node through a gpu_tile_compact.sh-style wrapper
  train with devices="auto" and devices=N (tests/runtime/masked_rank.py); fewer ranks than the node has tiles, to
  keep CI cheap: the unit table above covers 12.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_xpu.environments.launch import LaunchMismatch
from lightning_xpu.strategies.fork_guard import counting_poisons_fork
from tests.runtime import launches
from tests.runtime.test_launch_refusals import TARGETS, _keep_rank_zero, build  # noqa: F401  (a fixture)
from tests.xpu_profiles import NEWEST_PROFILE, TILES_PER_CARD, Profile
from tests.xpu_simulation import bootstrap_env

REPO = Path(__file__).resolve().parents[2]
NODE_TILES = 12  # an Aurora node: 6 Max 1550 cards of 2 tiles (FLAT)
RANKS = 12
# Ranks of the real launch: enough for distinct cards and distinct tiles (masks 0.0 0.1 1.0); each rank costs an
# interpreter importing torch and Lightning on CI's 2 cores.
LAUNCHED_RANKS = 3
LOCAL_RANK = 3  # any rank but 0, so that a launch taken for another shows
MASK = f"{LOCAL_RANK // TILES_PER_CARD}.{LOCAL_RANK % TILES_PER_CARD}"  # gpu_tile_compact.sh's mask for it


def _mpich(rank: int, size: int) -> dict[str, str]:
    return {**launches.MPICH, "PMI_RANK": str(rank), "PMI_SIZE": str(size), "MPI_LOCALRANKID": str(rank),
            "MPI_LOCALNRANKS": str(size)}


def _pals(rank: int, size: int) -> dict[str, str]:
    return {**launches.PALS, "PALS_RANKID": str(rank), "PALS_LOCAL_RANKID": str(rank), "PALS_LOCAL_SIZE": str(size),
            "PMI_RANK": str(rank), "PMI_SIZE": str(size), "PMI_LOCAL_RANK": str(rank), "PMI_LOCAL_SIZE": str(size)}


def _srun(rank: int, size: int) -> dict[str, str]:
    counts = {name: str(size) for name in ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE")}
    return {**launches.SRUN, **counts, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)}


def _torchrun(rank: int, size: int) -> dict[str, str]:
    return {**launches.TORCHRUN, "RANK": str(rank), "LOCAL_RANK": str(rank), "ROLE_RANK": str(rank),
            "WORLD_SIZE": str(size), "LOCAL_WORLD_SIZE": str(size)}


# Rank LOCAL_RANK of `size` ranks on one node; the words each launcher's messages use.
LAUNCHERS = {"pals": (_pals, "PALS mpiexec"), "mpich": (_mpich, "MPICH/Intel MPI mpiexec"),
             "srun": (_srun, "srun"), "torchrun": (_torchrun, "torchrun")}
FITTING = ["auto", RANKS, -1, list(range(RANKS))]
WRONG = [1, 3, "2"]


def masked(simulated_xpu: Any, monkeypatch: pytest.MonkeyPatch, launcher: str, mask: str | None = MASK,
           tiles: int = NODE_TILES, ranks: int = RANKS) -> None:
    """This process as rank LOCAL_RANK (or the last) of `ranks` started by `launcher` on a node of `tiles`, masked
    by `mask`."""
    simulated_xpu(devices=tiles)
    launches.launch(monkeypatch, LAUNCHERS[launcher][0](min(LOCAL_RANK, ranks - 1), ranks))
    if mask is None:
        monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    else:
        monkeypatch.setenv("ZE_AFFINITY_MASK", mask)


# ---- the simulation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mask", "visible"), [(None, NODE_TILES), ("1.1", 1), ("3", 1), ("0.0,0.1,5", 3),
                                               ("6.0", 0), ("0.2", 0), ("12", 0)])
def test_a_mask_selects_the_tiles_a_process_sees(simulated_xpu, monkeypatch, mask, visible) -> None:
    simulated_xpu(devices=NODE_TILES)
    if mask is None:
        monkeypatch.delenv("ZE_AFFINITY_MASK", raising=False)
    else:
        monkeypatch.setenv("ZE_AFFINITY_MASK", mask)
    assert torch.xpu.device_count() == visible


@pytest.mark.parametrize(("mask", "poisons"), [("3", False), ("1.1", True)])
def test_on_2_13_a_card_tile_mask_counts_through_the_runtime_even_with_sysman(simulated_xpu, monkeypatch, mask,
                                                                              poisons) -> None:
    monkeypatch.setenv("ZE_AFFINITY_MASK", mask)
    sim = simulated_xpu(torch="2.13", pyzes=True, devices=NODE_TILES)
    assert torch.xpu._device_count_zes() == (-1 if poisons else 1)
    assert torch.xpu.device_count() == 1
    assert sim.fork_poisoned is poisons
    assert counting_poisons_fork() is poisons  # what the runtime's ddp_fork guard concludes


# ---- the runtime ---------------------------------------------------------------------------------------------


def on_every_masked_launch(values: list[Any]) -> Any:
    """Parametrize over Trainer/Fabric of both namespaces x launchers x `devices` values."""
    marks = [pytest.mark.parametrize(("kind", "module"), TARGETS), pytest.mark.parametrize("launcher", list(LAUNCHERS)),
             pytest.mark.parametrize("devices", values, ids=repr)]

    def apply(test: Any) -> Any:
        for mark in marks:
            test = mark(test)
        return test

    return apply


@on_every_masked_launch(FITTING)
def test_one_masked_tile_per_rank_is_an_n_device_run(simulated_xpu, monkeypatch, kind, module, launcher,
                                                     devices) -> None:
    masked(simulated_xpu, monkeypatch, launcher)
    built = build(kind, module, devices=devices)
    strategy = built.strategy if kind == "trainer" else built._connector.strategy
    assert type(strategy.accelerator).__name__ == "XPUAccelerator"
    assert strategy.root_device == torch.device("xpu", 0)  # its own tile, whatever its local rank
    assert strategy.parallel_devices == [torch.device("xpu", 0)] * RANKS
    assert (strategy.local_rank, strategy.world_size) == (LOCAL_RANK, RANKS)


@on_every_masked_launch(WRONG)
def test_a_wrong_value_gets_one_line_naming_the_right_one(simulated_xpu, monkeypatch, kind, module, launcher,
                                                          devices) -> None:
    masked(simulated_xpu, monkeypatch, launcher)
    with pytest.raises(LaunchMismatch) as refused:
        build(kind, module, devices=devices)
    message = str(refused.value)
    assert "\n" not in message and refused.value.local_rank == LOCAL_RANK
    assert message.startswith(f"{LAUNCHERS[launcher][1]} started {RANKS} ranks on this node and"
                              f" ZE_AFFINITY_MASK={MASK} shows this rank one XPU")
    assert re.findall(r"set `devices=(\d+)`", message) == [str(RANKS)]  # the right value, and no other advice
    assert message.endswith(f"not devices={devices!r}")
    build(kind, module, devices=RANKS)  # which works


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize("devices", [1, 2, "auto"], ids=repr)
def test_without_masks_more_ranks_than_xpus_is_a_launch_to_change(simulated_xpu, monkeypatch, kind, module,
                                                                  devices) -> None:
    """2 ranks on a node whose ranks each see the same single XPU: no `devices` fits, so none is suggested in a
    circle (before: devices=2 got "only 1 XPU device(s)", devices=1 got "set `devices=2`")."""
    masked(simulated_xpu, monkeypatch, "pals", mask=None, tiles=1, ranks=2)
    with pytest.raises(LaunchMismatch) as refused:
        build(kind, module, devices=devices)
    assert str(refused.value) == (
        "PALS mpiexec started 2 ranks on this node, but this rank sees 1 XPU, so no devices= value fits: start 1"
        " rank per node (-ppn 1) with devices=1, or give each rank one XPU of its own (ZE_AFFINITY_MASK=<card>.<tile>"
        " per rank, as ALCF's gpu_tile_compact.sh does) with devices=2"
    )


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_without_a_launcher_or_off_xpu_nothing_changes(simulated_xpu, monkeypatch, kind, module) -> None:
    masked(simulated_xpu, monkeypatch, "pals")
    assert build(kind, module, accelerator="cpu", devices=RANKS) is not None  # Lightning's CPU processes
    launches.launch(monkeypatch, {})  # a plain process masked to one tile: Lightning's own rules
    with pytest.raises(ValueError, match=rf"^You requested xpu: \[0, 1\], but your machine has only 1 XPU .*"
                                         rf"ZE_AFFINITY_MASK={re.escape(MASK)}"):
        build(kind, module, devices=2)
    assert build(kind, module, devices="auto") is not None


# ---- one real launch -----------------------------------------------------------------------------------------

# As ALCF's gpu_tile_compact.sh: local rank r gets card (r / 2) % 6, tile r % 2.
TILE_COMPACT = """#!/bin/sh
ZE_AFFINITY_MASK=$(( (PALS_LOCAL_RANKID / 2) % 6 )).$(( PALS_LOCAL_RANKID % 2 ))
export ZE_AFFINITY_MASK
exec "$@"
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_masked_pals_ranks_train_with_auto_and_n(tmp_path: Path, newest_lightning_only: bool) -> None:
    wrapper = tmp_path / "gpu_tile_compact.sh"
    wrapper.write_text(TILE_COMPACT)
    wrapper.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    base = {**launches.without_launch_variables(os.environ), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "LXPU_PALS_STANDIN_PMI_SIZE": "1",
            "PYTHONWARNINGS": "ignore"}
    for name in ("ZE_AFFINITY_MASK", "CCL_PROCESS_LAUNCHER", "LIGHTNING_XPU_DEBUG"):
        base.pop(name, None)
    env = bootstrap_env(Profile(NEWEST_PROFILE, pyzes=True), base, devices=NODE_TILES)
    command = [sys.executable, str(REPO / "tests" / "pals_standin.py"), "--pmi=pmix", "-n", str(LAUNCHED_RANKS),
               "--ppn", str(LAUNCHED_RANKS), str(wrapper), sys.executable,
               str(REPO / "tests" / "runtime" / "masked_rank.py"), str(out), str(LAUNCHED_RANKS)]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=540, check=False)
    print(f"{LAUNCHED_RANKS} masked PALS ranks: {time.monotonic() - started:.0f} s")  # wall time, for the report (-s)
    assert done.returncode == 0, done.stderr[-3000:]
    n = LAUNCHED_RANKS
    reports = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(n)]

    masks = [f"{(rank // 2) % 6}.{rank % 2}" for rank in range(n)]
    assert [report["mask"] for report in reports] == masks and len(set(masks)) == n
    assert all(report["visible"] == 1 for report in reports)
    assert all(report["trainer"] == {"strategy": "DDPStrategy", "root": "xpu:0", "num_devices": n,
                                     "world_size": n} for report in reports)
    for devices in ("auto", "n"):
        runs = [report[devices] for report in reports]
        assert [(run["global_rank"], run["local_rank"]) for run in runs] == [(rank, rank) for rank in range(n)]
        assert all(run["accelerator"] == "XPUAccelerator" and run["device"] == "xpu:0" for run in runs)
        assert all(run["world_size"] == n and run["parallel_devices"] == ["xpu:0"] * n for run in runs)
        # Each rank had its own batch: equal weights after the step mean the gradients were all-reduced.
        assert all(run["changed"] for run in runs) and len({run["weights"] for run in runs}) == 1
    for report in reports:  # devices=N+1: one line naming the right value
        assert report["wrong"].startswith(f"LaunchMismatch: PALS mpiexec started {n} ranks on this node and"
                                          f" ZE_AFFINITY_MASK={report['mask']} shows this rank one XPU")
        assert "\n" not in report["wrong"] and re.findall(r"set `devices=(\d+)`", report["wrong"]) == [str(n)]
