"""A wrong launch is refused while the Trainer or Fabric is built, in one line (simulated launches; the real
launches are in test_launch_refusals_real.py):

- a launch that does not fit the arguments (ranks per node, nodes, placement, a spawning strategy), for every
  strategy argument including none: under mpiexec/mpirun/PALS on every device, under srun on XPU (and on every
  device in a job named interactive/bash, where Lightning skips its own check);
- a malformed launch variable, under every launcher kind, with the variable and the fix named;
- an uncaught LaunchError shows one line (per node for a mismatch), LIGHTNING_XPU_DEBUG=1 the traceback.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lightning_xpu.environments import inputs
from lightning_xpu.environments.launch import LaunchError, LaunchMismatch
from tests.runtime import launches

REPO = Path(__file__).resolve().parents[2]
TARGETS = [("trainer", "lightning.pytorch"), ("trainer", "pytorch_lightning"), ("fabric", "lightning.fabric"),
           ("fabric", "lightning_fabric")]
FABRIC_OF = {"lightning.pytorch": "lightning.fabric", "pytorch_lightning": "lightning_fabric"}
USER = {"trainer": "the Trainer", "fabric": "Fabric"}


@pytest.fixture(autouse=True)
def _keep_rank_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a DDP strategy under a simulated launch sets the process-wide rank; put it back afterwards."""
    for name in ("lightning.fabric.utilities.rank_zero", "lightning_fabric.utilities.rank_zero",
                 "lightning_utilities.core.rank_zero"):
        rank_zero_only = importlib.import_module(name).rank_zero_only
        monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)


def build(kind: str, module: str, **arguments: Any) -> Any:
    package = importlib.import_module(module)
    if kind == "trainer":
        return package.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                               enable_model_summary=False, **arguments)
    return package.Fabric(**arguments)


# Rank 1 of 2 on one node (launches.py), per launcher: the words and the per-node option of the message.
MPI_LAUNCHES = {
    "mpich": (launches.MPICH, "MPICH/Intel MPI mpiexec", "-ppn 1"),
    "intel-mpi-in-sbatch": (launches.INTEL_MPI_IN_SBATCH, "MPICH/Intel MPI mpiexec", "-ppn 1"),
    "openmpi": (launches.OPENMPI, "Open MPI mpirun", "--map-by ppr:1:node"),
    "pals": (launches.PALS, "PALS mpiexec", "-ppn 1"),
}
# Arguments that make one process per node on CPU: what `mpiexec -n 2 python train.py` ran twice before.
ONE_PROCESS = {
    "devices=1": {"devices": 1},
    "default devices": {},
    "devices=1, ddp": {"devices": 1, "strategy": "ddp"},
    "auto, auto": {"devices": "auto", "strategy": "auto"},
}
# Each launcher once and each one-process form once, paired in order: the launcher decides the message's words and
# per-node option (lightning_xpu/environments/launch.py), the arguments only the device count it reports.
ONE_PROCESS_LAUNCHES = list(zip(MPI_LAUNCHES, ONE_PROCESS, strict=True))


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize(("launch", "arguments"), ONE_PROCESS_LAUNCHES)
def test_more_mpi_ranks_per_node_than_devices_is_refused(kind, module, launch, arguments, monkeypatch) -> None:
    environ, words, option = MPI_LAUNCHES[launch]
    launches.launch(monkeypatch, environ)
    with pytest.raises(LaunchMismatch) as refused:
        build(kind, module, accelerator="cpu", **ONE_PROCESS[arguments])
    assert str(refused.value) == (
        f"{words} started 2 ranks on this node, but {USER[kind]} uses 1 device per node (devices=1):"
        f" set `devices=2`, or start 1 rank per node ({option})"
    )
    assert refused.value.local_rank == 1 and not refused.value.shown_here  # rank 1: local rank 0 prints it


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize(
    ("environ", "arguments", "message"),
    [
        (launches.MPICH, {"devices": 4, "strategy": "ddp"}, "uses 4 devices per node (devices=4): set `devices=2`,"
                                                            " or start 4 ranks per node (-ppn 4)"),
        (launches.MPICH_TWO_HOSTS_IN_SBATCH, {"devices": 2}, "started 4 ranks in all (2 per node), but"),
        (launches.MPICH, {"devices": 2, "strategy": "ddp_spawn"}, "starts processes itself (DDPStrategy): use"
                                                                  " strategy='ddp'"),
    ],
    ids=["more-devices-than-ranks", "num-nodes", "spawning-strategy"],
)
def test_other_launches_that_do_not_fit_are_refused(kind, module, environ, arguments, message, monkeypatch) -> None:
    launches.launch(monkeypatch, environ)
    with pytest.raises(LaunchMismatch, match="^[^\n]*" + message.replace("(", r"\(").replace(")", r"\)")):
        build(kind, module, accelerator="cpu", **arguments)


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_a_launch_that_fits_is_not_refused(kind, module, monkeypatch) -> None:
    launches.launch(monkeypatch, launches.MPICH)
    build(kind, module, accelerator="cpu", devices=2)  # no strategy: Lightning picks DDP
    launches.launch(monkeypatch, launches.MPICH_TWO_HOSTS_IN_SBATCH)
    build(kind, module, accelerator="cpu", devices=2, num_nodes=2)


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize("launch", [launches.SRUN, launches.SRUN_PMI2], ids=["srun", "srun-pmi2"])
def test_srun_off_xpu_keeps_lightnings_behaviour(kind, module, launch, monkeypatch) -> None:
    """Plain Lightning runs one independent single-device training per srun task; so does lightning_xpu."""
    launches.launch(monkeypatch, launch)
    assert build(kind, module, accelerator="cpu", devices=1) is not None


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize(("arguments", "message"), [
    ({"devices": 1}, "uses 1 device per node (devices=1): set `devices=2`, or start 1 rank per node"
                     " (--ntasks-per-node=1)"),
    ({"devices": 4, "strategy": "ddp"}, "uses 4 devices per node (devices=4): set `devices=2`, or start 4 ranks per"
                                        " node (--ntasks-per-node=4)"),
], ids=["devices=1", "devices=4"])
def test_srun_in_an_interactive_job_that_does_not_fit_is_refused_on_every_device(kind, module, arguments, message,
                                                                                 monkeypatch) -> None:
    """Lightning skips its own check (validate_settings) in a job named interactive; off XPU too, the launch is
    refused instead of training once per task or waiting for ranks that never come."""
    launches.launch(monkeypatch, launches.SALLOC_SRUN)
    with pytest.raises(LaunchMismatch) as refused:
        build(kind, module, accelerator="cpu", **arguments)
    assert str(refused.value) == f"srun started 2 ranks on this node, but {USER[kind]} {message}"
    build(kind, module, accelerator="cpu", devices=2)  # and a launch that fits runs


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize(
    ("environ", "words", "option"),
    [(launches.SRUN, "srun", "--ntasks-per-node=1"), (launches.MPICH, "MPICH/Intel MPI mpiexec", "-ppn 1"),
     (launches.PALS, "PALS mpiexec", "-ppn 1")],
    ids=["srun", "mpich", "pals"],
)
def test_on_simulated_xpu_a_mismatch_always_refuses(kind, module, environ, words, option, simulated_xpu,
                                                    monkeypatch) -> None:
    simulated_xpu(devices=2)
    launches.launch(monkeypatch, environ)
    with pytest.raises(LaunchMismatch, match=f"^{words} started 2 ranks on this node, but .* set `devices=2`, or"
                                             f" start 1 rank per node \\({option}\\)$"):
        build(kind, module, accelerator="xpu", devices=1)
    build(kind, module, accelerator="xpu", devices=2)  # and a launch that fits runs


def test_srun_ranks_per_node_come_from_the_steps_task_list() -> None:
    from lightning_xpu.environments.launch import SRUN, Ranks, launch_ranks

    two_nodes = {**launches.SRUN, "SLURM_STEP_TASKS_PER_NODE": "4,2", "SLURM_STEP_NUM_TASKS": "6",
                 "SLURM_NODEID": "1", "SLURM_PROCID": "5", "SLURM_LOCALID": "1"}
    assert launch_ranks(SRUN, two_nodes) == Ranks(global_rank=5, world_size=6, local_rank=1, local_world_size=2,
                                                  node_rank=1)
    assert inputs.tasks_per_node("SLURM_TASKS_PER_NODE", "4(x2),2") == [4, 4, 2]


# ---- one launch-input rule, every launcher ------------------------------------------------------------------

LAUNCH_KINDS = {
    "lightning": {},
    "srun": launches.SRUN,
    "srun-pmi2": launches.SRUN_PMI2,
    "mpich": launches.MPICH,
    "intel-mpi-in-sbatch": launches.INTEL_MPI_IN_SBATCH,
    "openmpi": launches.OPENMPI,
    "pals": launches.PALS,
    "torchrun": launches.TORCHRUN,
}
# Lightning's own launch (devices > 1) sets these for its children.
LIGHTNINGS_OWN = ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE")
# (launcher, variable, bad value, what the message says after "NAME='value' is not "). The check runs before any
# launcher is looked at (lightning_xpu/environments/selection.py), so each bad value runs once, under a launcher that
# sets that variable itself (its good value replaced: the case where a launcher's own reading could come first), and
# every launcher meets one of its own variables malformed.
BAD_VALUES = [
    ("torchrun", "MASTER_PORT", "notaport", "a port number: set it to a free port in 1024-65535, or unset it"),
    ("lightning", "MASTER_PORT", "70000", "a port number"),
    ("torchrun", "MASTER_ADDR", "", "a host (it is empty): set it to the host name or IP address of rank 0"),
    ("lightning", "MASTER_ADDR", "node 1", "a host (it holds whitespace)"),
    ("torchrun", "MASTER_ADDR", "node1:29500", "a host (it looks like host:port or a URL)"),
    ("torchrun", "WORLD_SIZE", "two", "a whole number of 1 or more: unset it (the launcher sets it) or correct it"),
    ("torchrun", "RANK", "-1", "a whole number of 0 or more"),
    ("lightning", "LOCAL_RANK", "x", "a whole number of 0 or more"),
    ("mpich", "PMI_SIZE", "abc", "a whole number of 1 or more"),
    ("srun-pmi2", "PMI_RANK", "1.0", "a whole number of 0 or more"),
    ("pals", "PALS_RANKID", "r1", "a whole number of 0 or more"),
    ("openmpi", "OMPI_COMM_WORLD_SIZE", "0", "a whole number of 1 or more"),
    ("srun", "SLURM_PROCID", "first", "a whole number of 0 or more"),
    ("intel-mpi-in-sbatch", "SLURM_TASKS_PER_NODE", "2x3", "a Slurm tasks-per-node list (like 4(x2),2): unset it"),
]


def test_every_launcher_meets_a_malformed_variable_of_its_own() -> None:
    """The grid below stays one case per launcher path: each launcher, each with a variable it sets itself."""
    assert {launch for launch, *_ in BAD_VALUES} == set(LAUNCH_KINDS)
    for launch, name, _, _ in BAD_VALUES:
        assert name in (LAUNCH_KINDS[launch] or LIGHTNINGS_OWN), (launch, name)


@pytest.mark.parametrize(("launch", "name", "value", "problem"), BAD_VALUES,
                         ids=[f"{launch}-{name}={value!r}" for launch, name, value, _ in BAD_VALUES])
def test_a_malformed_launch_variable_gives_one_line_naming_it(launch, name, value, problem, monkeypatch) -> None:
    launches.launch(monkeypatch, {**LAUNCH_KINDS[launch], name: value})
    devices = 1 if launch == "lightning" else 2
    with pytest.raises(LaunchError) as refused:
        build("trainer", "lightning.pytorch", accelerator="cpu", devices=devices)
    message = str(refused.value)
    assert message.startswith(f"{name}={value!r} is not {problem}"), message
    assert "\n" not in message


def test_a_rank_outside_its_world_is_refused(monkeypatch) -> None:
    launches.launch(monkeypatch, {"PMI_RANK": "2", "PMI_SIZE": "2"})  # a partial PMI set, no MPI_LOCALRANKID
    with pytest.raises(LaunchError, match=r"^PMI_RANK=2 is not below PMI_SIZE=2 .*: unset both"):
        build("fabric", "lightning.fabric", accelerator="cpu", devices=1)


@pytest.mark.parametrize("partial", [{"PMI_RANK": "0", "PMI_SIZE": "1"}, launches.SRUN_PMI2],
                         ids=["cray-pmi", "srun-pmi2"])
def test_legitimate_partial_pmi_sets_still_work(partial, monkeypatch) -> None:
    launches.launch(monkeypatch, partial)
    arguments = {"devices": 1} if "SLURM_PROCID" not in partial else {"devices": 2, "strategy": "ddp"}
    build("trainer", "lightning.pytorch", accelerator="cpu", **arguments)


@pytest.mark.parametrize("value", ["node1", "10.0.0.1", "fe80::1", "x4000c0s3b0n0.hostmgmt"])
def test_well_formed_master_addresses_pass_without_any_lookup(value) -> None:
    assert inputs.address(value) == value


# ---- what the user sees ---------------------------------------------------------------------------------------

UNCAUGHT = """
import lightning_xpu.environments.launch as launch
raise launch.LaunchMismatch("the one line", local_rank=int(__import__("sys").argv[1]))
"""


@pytest.mark.parametrize("local_rank", [0, 1])
def test_an_uncaught_launch_error_is_one_line_on_local_rank_zero(local_rank: int) -> None:
    env = {**launches.without_launch_variables(os.environ), "PYTHONPATH": str(REPO)}
    env.pop("LIGHTNING_XPU_DEBUG", None)
    shown = subprocess.run([sys.executable, "-c", UNCAUGHT, str(local_rank)], env=env, capture_output=True, text=True)
    assert shown.returncode == 1
    assert shown.stderr == ("LaunchError: the one line\n" if local_rank == 0 else "")
    debug = subprocess.run([sys.executable, "-c", UNCAUGHT, str(local_rank)], env={**env, "LIGHTNING_XPU_DEBUG": "1"},
                           capture_output=True, text=True)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr and "LaunchMismatch: the one line" in debug.stderr


def test_a_malformed_rank_is_refused_before_lightning_reads_it_at_import() -> None:
    """Lightning's rank_zero reads RANK with int() while it is imported: the rule must run first."""
    env = {**launches.without_launch_variables(os.environ), "PYTHONPATH": str(REPO), "RANK": "abc"}
    env.pop("LIGHTNING_XPU_DEBUG", None)
    done = subprocess.run([sys.executable, "-c", "import lightning_xpu, lightning"], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 1
    assert done.stderr == ("LaunchError: RANK='abc' is not a whole number of 0 or more: unset it (the launcher sets it)"
                           " or correct it\n")
