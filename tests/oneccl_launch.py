"""TEST-ONLY model of oneCCL's launch contract: what each launcher gives a rank, and what oneCCL does with it.

oneCCL is the runtime beneath both XPU process-group backends (XCCL from torch 2.8, the `ccl` bindings before);
XCCL sets and reads no `CCL_*` variable and no `LOCAL_RANK` (intel/torch-xpu-ops `src/xccl`@release/2.8..2.14:
only `TORCH_XCCL_*`). Nothing here runs oneCCL: `oneccl_check` raises `OneCCLLaunchFailure` where the sources say
the real runtime fails or hangs, so that the simulated `ccl`/`xccl` process groups (tests/xpu_simulation.py) fail
fast, by name, instead. The real failure comes at the first collective, which creates the oneCCL communicator;
the simulation checks when the group is created, so no test waits for a hang.

Faithful, not kind: oneCCL@2021.14 answers missing local coordinates with a warning and "trying to get them from
ATL"; whether that fallback finds the right device is not verified, and users report that it does not
(pytorch/pytorch#158722: torchrun with several XPUs on one node fails, works under mpirun; huggingface/accelerate
#2340, #3664). So several ranks on a node without local coordinates fail here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

ONECCL = "uxlfoundation/oneCCL"
GLOBAL_CPP = f"{ONECCL} src/common/global/global.cpp@2021.14"


class OneCCLLaunchFailure(RuntimeError):
    """Where the real oneCCL would fail or hang under this launch (simulated: tests/oneccl_launch.py)."""


@dataclass(frozen=True)
class Launcher:
    """What a launcher puts into the environment of rank `rank` of `size` ranks on one node, and what it provides
    beyond variables: a PMIx server to ask, an MPI world for MPI_Init."""

    name: str
    variables: Callable[[int, int], dict[str, str]]
    pmix_server: bool
    mpi_world: bool
    source: str
    # Variables whose presence identifies the launch (all of them); the empty tuple matches anything.
    signature: tuple[str, ...] = ()


def _hydra(rank: int, size: int) -> dict[str, str]:
    return {"PMI_RANK": str(rank), "PMI_SIZE": str(size), "PMI_FD": "6", "MPI_LOCALRANKID": str(rank),
            "MPI_LOCALNRANKS": str(size)}


def _pals(rank: int, size: int) -> dict[str, str]:
    return {"PALS_RANKID": str(rank), "PALS_LOCAL_RANKID": str(rank), "PALS_NODEID": "0",
            "PALS_LOCAL_SIZE": str(size), "PALS_APID": "model", "PMI_RANK": str(rank), "PMI_SIZE": str(size),
            "PMI_LOCAL_RANK": str(rank), "PMI_LOCAL_SIZE": str(size)}


def _srun(rank: int, size: int) -> dict[str, str]:
    return {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank),
            "SLURM_NODEID": "0", "SLURM_NTASKS": str(size), "SLURM_STEP_NUM_TASKS": str(size),
            "SLURM_STEP_TASKS_PER_NODE": str(size)}


RECORDED = "recorded on the CI machine: lightning_xpu/environments/launch.py (module docstring)"
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("PALS mpiexec --pmi=pmix", lambda r, n: {**_pals(r, n), "PMIX_RANK": str(r)}, True, True,
             "Slurm src/plugins/mpi/cray_shasta, Flux cray_pals (PALS_*); PMIX_RANK from the PMIx server;"
             f" {ONECCL} src/common/env/vars.hpp@2021.14 (pmix goes with mpiexec --pmi=pmix)",
             ("PALS_RANKID", "PMIX_RANK")),
    Launcher("PALS mpiexec", _pals, False, True, "Slurm src/plugins/mpi/cray_shasta, Flux cray_pals (PALS_*, Cray"
             " PMI's PMI_*); no MPI_LOCALRANKID", ("PALS_RANKID",)),
    Launcher("Open MPI mpirun", lambda r, n: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n),
             "OMPI_COMM_WORLD_LOCAL_RANK": str(r), "OMPI_COMM_WORLD_LOCAL_SIZE": str(n), "PMIX_RANK": str(r)},
             True, True, RECORDED, ("OMPI_COMM_WORLD_RANK",)),
    Launcher("Intel MPI mpiexec", lambda r, n: {**_hydra(r, n), "I_MPI_HYDRA_UUID": "model"}, False, True,
             RECORDED + " (Intel MPI 2021.18.1)", ("MPI_LOCALRANKID", "I_MPI_HYDRA_UUID")),
    Launcher("MPICH mpiexec", _hydra, False, True, RECORDED + " (MPICH 4.0.2 Hydra)", ("MPI_LOCALRANKID",)),
    Launcher("srun --mpi=pmi2", lambda r, n: {**_srun(r, n), "PMI_RANK": str(r), "PMI_SIZE": str(n)}, False, True,
             RECORDED + " (Slurm 22.05.8; PMI wire-up, never MPI_LOCALRANKID)", ("SLURM_STEP_ID", "PMI_RANK")),
    Launcher("srun", _srun, False, False, RECORDED + " (Slurm 22.05.8; no PMI_*)", ("SLURM_STEP_ID",)),
    Launcher("torchrun", lambda r, n: {"TORCHELASTIC_RUN_ID": "none", "RANK": str(r), "LOCAL_RANK": str(r),
             "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0"}, False, False,
             "torch/distributed/elastic/agent/server/local_elastic_agent.py@v2.13.0 (_start_workers: LOCAL_RANK,"
             " LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID)", ("TORCHELASTIC_RUN_ID",)),
    # Rank 0 sets these in its own environment before starting the others with their LOCAL_RANK; no
    # LOCAL_WORLD_SIZE, no MPI or PMIx.
    Launcher("Lightning", lambda r, n: {"LOCAL_RANK": str(r), "NODE_RANK": "0", "WORLD_SIZE": str(n)}, False, False,
             "lightning/fabric/strategies/launchers/subprocess_script.py@2.6.6 (_call_children_scripts)"),
)
LAUNCHER_BY_NAME = {launcher.name: launcher for launcher in LAUNCHERS}


def identify(environ: Mapping[str, str]) -> Launcher:
    """The launch `environ` comes from: the first row whose signature variables are all present."""
    return next(row for row in LAUNCHERS if all(name in environ for name in row.signature))


# CCL_PROCESS_LAUNCHER: where each value finds the local index and count (global.cpp set_local_coord).
LOCAL_COORDINATES = {"hydra": ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"), "torchrun": ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                     "none": ("CCL_LOCAL_RANK", "CCL_LOCAL_SIZE")}
DEFAULT_PROCESS_LAUNCHER = "hydra"  # src/common/env/env.cpp@2021.14 (process_launcher(process_launcher_mode::hydra))
# env.cpp@2021.14 process_launcher_names; `torchrun` is new in 2021.14 (absent from env.cpp@2021.13).
PROCESS_LAUNCHERS = ("hydra", "torchrun", "pmix", "none")


def local_coordinates(environ: Mapping[str, str], launch: Launcher, true_place: tuple[int, int]
                      ) -> tuple[int, int] | None:
    """(local index, local count) oneCCL reads, None when it cannot get them."""
    value = environ.get("CCL_PROCESS_LAUNCHER", DEFAULT_PROCESS_LAUNCHER)
    if value not in PROCESS_LAUNCHERS:  # env_2_enum refuses it; global.cpp "unexpected process launcher"
        raise OneCCLLaunchFailure(f"CCL_PROCESS_LAUNCHER={value!r} is not one of {PROCESS_LAUNCHERS} ({GLOBAL_CPP})")
    if value == "pmix":
        # PMIx_Init fails without a PMIx server: get_pmix_local_coord returns false
        # (src/common/api_wrapper/pmix_api_wrapper.cpp@2021.14), global.cpp warns as below.
        return true_place if launch.pmix_server else None
    index, count = (environ.get(name) for name in LOCAL_COORDINATES[value])
    if index is None or count is None:
        return None
    return int(index), int(count)


def oneccl_check(environ: Mapping[str, str], launch: Launcher, local_rank: int, local_size: int) -> None:
    """Raise `OneCCLLaunchFailure` where oneCCL, started in `environ` by `launch` as local rank `local_rank` of
    `local_size`, fails or hangs."""
    value = environ.get("CCL_PROCESS_LAUNCHER", DEFAULT_PROCESS_LAUNCHER)
    read = local_coordinates(environ, launch, (local_rank, local_size))
    if read is None and local_size > 1:
        raise OneCCLLaunchFailure(
            f"oneCCL could not get local_idx/count from environment variables (CCL_PROCESS_LAUNCHER={value} under"
            f" {launch.name}; {GLOBAL_CPP}): with {local_size} ranks on this node they do not find their own"
            " devices and the collective fails or hangs (pytorch/pytorch#158722)")
    if read is not None and read != (local_rank, local_size):
        raise OneCCLLaunchFailure(
            f"oneCCL read local rank {read[0]} of {read[1]} (CCL_PROCESS_LAUNCHER={value} under {launch.name};"
            f" {GLOBAL_CPP}), but this is local rank {local_rank} of {local_size}: ranks collide on one device")
    for name in ("CCL_ATL_TRANSPORT", "CCL_KVS_MODE"):
        if environ.get(name) == "mpi" and not launch.mpi_world:
            raise OneCCLLaunchFailure(
                f"{name}=mpi needs an MPI world, which {launch.name} does not start: oneCCL gathers ranks over"
                f" MPI_COMM_WORLD ({ONECCL} src/atl/mpi/atl_mpi.cpp@2021.14) and its socket KVS refuses the mpi"
                " mode unless the transport is ofi (src/atl/util/pm/pmi_resizable_rt/pmi_resizable/kvs/"
                "internal_kvs.cpp@2021.14)")


def launched_place(environ: Mapping[str, str], rank: int, world_size: int) -> tuple[Launcher, int, int]:
    """(launch, local rank, local size) of a rank of `world_size`: the local place from the launcher's own
    variables where it gives one, else (Lightning's launcher, rank 0 of a node) one node of `world_size` ranks."""
    launch = identify(environ)
    for rank_name, size_name in (("MPI_LOCALRANKID", "MPI_LOCALNRANKS"), ("PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),
                                 ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                                 ("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"),
                                 ("SLURM_LOCALID", "SLURM_TASKS_PER_NODE")):
        if rank_name in environ and environ.get(size_name, "").isdigit():
            return launch, int(environ[rank_name]), int(environ[size_name])
    return launch, rank % world_size, world_size
