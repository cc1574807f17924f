"""TEST-ONLY model of oneCCL's launch contract: what each launcher gives a rank, and what oneCCL does with it.

oneCCL is the runtime beneath both XPU process-group backends (XCCL from torch 2.8, the `ccl` bindings before);
XCCL sets and reads no `CCL_*` variable and no `LOCAL_RANK` (intel/torch-xpu-ops `src/xccl`@release/2.8..2.14:
only `TORCH_XCCL_*`). Nothing here runs oneCCL: `oneccl_check` raises `OneCCLLaunchFailure` where the sources say
the real runtime fails or hangs, so that the simulated `ccl`/`xccl` process groups (tests/xpu_simulation.py) fail
fast, by name, instead. The real failure comes at the first collective, which creates the oneCCL communicator;
the simulation checks when the group is created, so no test waits for a hang.

Keyed by oneCCL version (`contract_for`): the contract was read from oneCCL 2021.14, the oneCCL of the `ccl` bindings
(intel/torch-ccl third_party/oneCCL@v2.5.0+xpu..v2.8.0+xpu). The XCCL wheels bundle newer ones (tests/xpu_profiles.py
row bundled_oneccl), whose sources nobody here could read: their rows assume the same contract and say so
(`verified=False`).

The `ccl` bindings rewrite the launch variables themselves (`torch_ccl_rewrite`, modelled from intel/torch-ccl
`src/ProcessGroupCCL.cpp`@v2.5.0+xpu..v2.8.0+xpu): a `ccl` group is checked after that rewrite, as the real one runs.

Faithful, not kind: oneCCL@2021.14 answers missing local coordinates with a warning and "trying to get them from
ATL"; whether that fallback finds the right device is not verified, and users report that it does not
(pytorch/pytorch#158722: torchrun with several XPUs on one node fails, works under mpirun; huggingface/accelerate
#2340, #3664). So several ranks on a node without local coordinates fail here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import Version

ONECCL = "uxlfoundation/oneCCL"
GLOBAL_CPP = f"{ONECCL} src/common/global/global.cpp@2021.14"
TORCH_CCL = "intel/torch-ccl src/ProcessGroupCCL.cpp@v2.5.0+xpu..v2.8.0+xpu"
# How many nodes a simulated launch spans where the launcher's variables do not say it (Lightning's launcher on node
# 0 exports no node count): test-only, read by `launched_place`.
NODES_VARIABLE = "LXPU_SIM_NODES"


class OneCCLLaunchFailure(RuntimeError):
    """Where the real oneCCL would fail or hang under this launch (simulated: tests/oneccl_launch.py)."""


@dataclass(frozen=True)
class Place:
    """A rank's place: local rank `local` of `size` ranks on node `node` of `nodes` (block placement)."""

    local: int
    size: int
    node: int = 0
    nodes: int = 1

    @property
    def rank(self) -> int:
        return self.node * self.size + self.local

    @property
    def world(self) -> int:
        return self.size * self.nodes


@dataclass(frozen=True)
class Launcher:
    """What a launcher puts into the environment of a rank (`variables(local rank, ranks per node, node=0,
    nodes=1)`), and what it provides beyond variables: a PMIx server to ask, an MPI world for MPI_Init."""

    name: str
    variables: Callable[..., dict[str, str]]
    pmix_server: bool
    mpi_world: bool
    source: str
    # Variables whose presence identifies the launch (all of them); the empty tuple matches anything.
    signature: tuple[str, ...] = ()


def _hydra(local: int, size: int, node: int = 0, nodes: int = 1) -> dict[str, str]:
    at = Place(local, size, node, nodes)
    return {"PMI_RANK": str(at.rank), "PMI_SIZE": str(at.world), "PMI_FD": "6", "MPI_LOCALRANKID": str(local),
            "MPI_LOCALNRANKS": str(size)}


def _pals(local: int, size: int, node: int = 0, nodes: int = 1) -> dict[str, str]:
    # PMI_SIZE: the world here; whether PALS sets the world or the node count is unverified (docs/xpu-guide.md).
    at = Place(local, size, node, nodes)
    return {"PALS_RANKID": str(at.rank), "PALS_LOCAL_RANKID": str(local), "PALS_NODEID": str(node),
            "PALS_LOCAL_SIZE": str(size), "PALS_APID": "model", "PMI_RANK": str(at.rank), "PMI_SIZE": str(at.world),
            "PMI_LOCAL_RANK": str(local), "PMI_LOCAL_SIZE": str(size)}


def _srun(local: int, size: int, node: int = 0, nodes: int = 1) -> dict[str, str]:
    at = Place(local, size, node, nodes)
    per_node = str(size) if nodes == 1 else f"{size}(x{nodes})"
    return {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(at.rank), "SLURM_LOCALID": str(local),
            "SLURM_NODEID": str(node), "SLURM_NTASKS": str(at.world), "SLURM_STEP_NUM_TASKS": str(at.world),
            "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_STEP_TASKS_PER_NODE": per_node}


def _open_mpi(local: int, size: int, node: int = 0, nodes: int = 1) -> dict[str, str]:
    at = Place(local, size, node, nodes)
    return {"OMPI_COMM_WORLD_RANK": str(at.rank), "OMPI_COMM_WORLD_SIZE": str(at.world),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local), "OMPI_COMM_WORLD_LOCAL_SIZE": str(size),
            "PMIX_RANK": str(at.rank)}


def _torchrun(local: int, size: int, node: int = 0, nodes: int = 1) -> dict[str, str]:
    at = Place(local, size, node, nodes)
    return {"TORCHELASTIC_RUN_ID": "none", "RANK": str(at.rank), "LOCAL_RANK": str(local),
            "WORLD_SIZE": str(at.world), "LOCAL_WORLD_SIZE": str(size), "GROUP_RANK": str(node)}


def _lightning(local: int, size: int, node: int = 0, nodes: int = 1) -> dict[str, str]:
    return {"LOCAL_RANK": str(local), "NODE_RANK": str(node), "WORLD_SIZE": str(size * nodes)}


RECORDED = "recorded on the CI machine: lightning_xpu/environments/launch.py (module docstring)"
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher("PALS mpiexec --pmi=pmix", lambda *at: {**_pals(*at), "PMIX_RANK": _pals(*at)["PALS_RANKID"]}, True,
             True,
             "Slurm src/plugins/mpi/cray_shasta, Flux cray_pals (PALS_*); PMIX_RANK from the PMIx server;"
             f" {ONECCL} src/common/env/vars.hpp@2021.14 (pmix goes with mpiexec --pmi=pmix); whether PALS exports"
             " PMIX_RANK is unverified (docs/xpu-guide.md, What no source settles)",
             ("PALS_RANKID", "PMIX_RANK")),
    Launcher("PALS mpiexec", _pals, False, True, "Slurm src/plugins/mpi/cray_shasta, Flux cray_pals (PALS_*, Cray"
             " PMI's PMI_*); no MPI_LOCALRANKID", ("PALS_RANKID",)),
    Launcher("Open MPI mpirun", _open_mpi, True, True, RECORDED, ("OMPI_COMM_WORLD_RANK",)),
    Launcher("Intel MPI mpiexec", lambda *at: {**_hydra(*at), "I_MPI_HYDRA_UUID": "model"}, False, True,
             RECORDED + " (Intel MPI 2021.18.1)", ("MPI_LOCALRANKID", "I_MPI_HYDRA_UUID")),
    Launcher("MPICH mpiexec", _hydra, False, True, RECORDED + " (MPICH 4.0.2 Hydra)", ("MPI_LOCALRANKID",)),
    Launcher("srun --mpi=pmi2", lambda *at: {**_srun(*at), "PMI_RANK": _srun(*at)["SLURM_PROCID"],
                                             "PMI_SIZE": _srun(*at)["SLURM_NTASKS"]}, False, True,
             RECORDED + " (Slurm 22.05.8; PMI wire-up, never MPI_LOCALRANKID)", ("SLURM_STEP_ID", "PMI_RANK")),
    Launcher("srun", _srun, False, False, RECORDED + " (Slurm 22.05.8; no PMI_*)", ("SLURM_STEP_ID",)),
    Launcher("torchrun", _torchrun, False, False,
             "torch/distributed/elastic/agent/server/local_elastic_agent.py@v2.13.0 (_start_workers: LOCAL_RANK,"
             " LOCAL_WORLD_SIZE, TORCHELASTIC_RUN_ID)", ("TORCHELASTIC_RUN_ID",)),
    # Rank 0 sets these in its own environment before starting the others with their LOCAL_RANK; no
    # LOCAL_WORLD_SIZE, no MPI or PMIx.
    Launcher("Lightning", _lightning, False, False,
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


@dataclass(frozen=True)
class Contract:
    """oneCCL's launch contract for the oneCCL versions in `oneccl` (a specifier): the launcher values it accepts
    (each reading LOCAL_COORDINATES, `pmix` asking a PMIx server) and whether `mpi` transport/KVS need an MPI
    world. `verified=False`: assumed from an older release, no source of these versions read (`note`)."""

    oneccl: str
    process_launchers: tuple[str, ...]
    source: str
    verified: bool = True
    note: str = ""


CONTRACTS: tuple[Contract, ...] = (
    Contract("==2021.14.*", PROCESS_LAUNCHERS, f"{ONECCL} src/common/env/env.cpp, src/common/global/global.cpp,"
             " src/atl/mpi/atl_mpi.cpp, src/atl/util/pm/pmi_resizable_rt/pmi_resizable/kvs/internal_kvs.cpp@2021.14"),
    Contract(">=2021.15,<2023", PROCESS_LAUNCHERS, f"{ONECCL}@2021.14 (assumed unchanged)", verified=False,
             note="no source of oneCCL 2021.15 or later was readable; nor whether the newer C API"
                  " (onecclCommInitRank, the only one XCCL uses from PyTorch 2.14) honours CCL_PROCESS_LAUNCHER,"
                  " CCL_LOCAL_RANK/CCL_LOCAL_SIZE and CCL_KVS_MODE=mpi"),
)


def contract_for(oneccl: str) -> Contract:
    """The contract row for oneCCL `oneccl` (e.g. "2021.17.2"); refuses a version no row covers."""
    rows = [row for row in CONTRACTS if Version(oneccl) in SpecifierSet(row.oneccl)]
    if len(rows) != 1:
        raise LookupError(f"no single oneCCL launch contract for oneCCL {oneccl}: add a Contract row with its source"
                          " to tests/oneccl_launch.py")
    return rows[0]


READ_ONECCL = "2021.14"  # the oneCCL the contract was read from; the default simulation's


def local_coordinates(environ: Mapping[str, str], launch: Launcher, true_place: tuple[int, int],
                      contract: Contract = CONTRACTS[0]) -> tuple[int, int] | None:
    """(local index, local count) oneCCL reads, None when it cannot get them."""
    value = environ.get("CCL_PROCESS_LAUNCHER", DEFAULT_PROCESS_LAUNCHER)
    if value not in contract.process_launchers:  # env_2_enum refuses it; global.cpp "unexpected process launcher"
        raise OneCCLLaunchFailure(f"CCL_PROCESS_LAUNCHER={value!r} is not one of {contract.process_launchers}"
                                  f" ({GLOBAL_CPP})")
    if value == "pmix":
        # PMIx_Init fails without a PMIx server: get_pmix_local_coord returns false
        # (src/common/api_wrapper/pmix_api_wrapper.cpp@2021.14), global.cpp warns as below.
        return true_place if launch.pmix_server else None
    index, count = (environ.get(name) for name in LOCAL_COORDINATES[value])
    if index is None or count is None:
        return None
    return int(index), int(count)


def oneccl_check(environ: Mapping[str, str], launch: Launcher, local_rank: int, local_size: int,
                 oneccl: str = READ_ONECCL) -> None:
    """Raise `OneCCLLaunchFailure` where oneCCL `oneccl`, started in `environ` by `launch` as local rank
    `local_rank` of `local_size`, fails or hangs."""
    contract = contract_for(oneccl)
    value = environ.get("CCL_PROCESS_LAUNCHER", DEFAULT_PROCESS_LAUNCHER)
    read = local_coordinates(environ, launch, (local_rank, local_size), contract)
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


# ---- the `ccl` bindings' own rewrite (ProcessGroupCCL constructor) ----------------------------------------------
# with_mpirun(): any of these set means "launched by MPI", and the bindings leave the CCL_* variables alone.
TORCH_CCL_MPI_VARIABLES = ("MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMI_RANK", "PMI_SIZE", "PMIX_RANK")


def _bindings_int(environ: Mapping[str, str], name: str) -> int:
    """getOneCCLEnvVar: -1 when unset; std::stoi of the text otherwise (a non-number fails the constructor)."""
    text = environ.get(name)
    if text is None:
        return -1
    match = re.match(r"\s*[+-]?\d+", text)
    if match is None:
        raise OneCCLLaunchFailure(f"Invalid value for environment variable: {name} ({TORCH_CCL})")
    return int(match.group())


def torch_ccl_rewrite(environ: MutableMapping[str, str], rank: int, size: int) -> None:
    """What the `ProcessGroupCCL` constructor of the group's `rank` of `size` does to `environ` (intel/torch-ccl
    src/ProcessGroupCCL.cpp@v2.7.0+xpu ~591-596 with_mpirun, ~696-711; the same at v2.5.0+xpu ~590/695-709,
    v2.6.0+xpu ~591/696-710, v2.8.0+xpu ~825/930-944): without an MPI variable, CCL_PROCESS_LAUNCHER=none and
    CCL_LOCAL_RANK/CCL_LOCAL_SIZE from LOCAL_RANK/LOCAL_WORLD_SIZE, or from `rank`/`size` when either is missing.
    setOneCCLEnvVar(name, int) calls setenv(name, value, overwrite=value): a 0 keeps a value already set."""
    if any(name in environ for name in TORCH_CCL_MPI_VARIABLES):
        return
    local_rank, local_size = _bindings_int(environ, "LOCAL_RANK"), _bindings_int(environ, "LOCAL_WORLD_SIZE")
    if local_rank == -1 or local_size == -1:
        local_rank, local_size = rank, size
    environ["CCL_PROCESS_LAUNCHER"] = "none"
    for name, value in (("CCL_LOCAL_RANK", local_rank), ("CCL_LOCAL_SIZE", local_size)):
        if value != 0 or name not in environ:
            environ[name] = str(value)


# ---- a launched rank's true place, from its launcher's own variables --------------------------------------------


def _tasks_on_node(text: str, node: int) -> int | None:
    """Slurm's tasks-per-node list ("2(x2),1") at `node`."""
    counts: list[int] = []
    for entry in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", entry.strip())
        if match is None:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node] if node < len(counts) else None


def _srun_place(environ: Mapping[str, str]) -> tuple[int, int] | None:
    node = int(environ.get("SLURM_NODEID", "0"))
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        size = _tasks_on_node(environ.get(name, ""), node)
        if size is not None and "SLURM_LOCALID" in environ:
            return int(environ["SLURM_LOCALID"]), size
    return None


def _lightning_place(environ: Mapping[str, str], rank: int, world_size: int) -> tuple[int, int]:
    """Lightning's launcher exports LOCAL_RANK and NODE_RANK, no node size: rank = node * size + local rank gives it
    on a later node; on node 0 the simulated launch says how many nodes it spans (NODES_VARIABLE, default 1)."""
    local, node = int(environ.get("LOCAL_RANK", rank % world_size)), int(environ.get("NODE_RANK", "0"))
    if node > 0:
        return local, (rank - local) // node
    return local, world_size // int(environ.get(NODES_VARIABLE, "1"))


# Where each launcher's own variables give the local place (never LOCAL_WORLD_SIZE outside torchrun: the runtime
# exports it for the bindings, so it would prove nothing).
_OWN_PLACE = {"MPI_LOCALRANKID": ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
              "PALS_RANKID": ("PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),
              "OMPI_COMM_WORLD_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
              "TORCHELASTIC_RUN_ID": ("LOCAL_RANK", "LOCAL_WORLD_SIZE")}


def launched_place(environ: Mapping[str, str], rank: int, world_size: int) -> tuple[Launcher, int, int]:
    """(launch, local rank, local size) of rank `rank` of `world_size`: the local place from the variables of the
    launcher that started it, else (Lightning's launcher) from LOCAL_RANK and NODE_RANK."""
    launch = identify(environ)
    for evidence, (rank_name, size_name) in _OWN_PLACE.items():
        if evidence in launch.signature and environ.get(size_name, "").isdigit():
            return launch, int(environ[rank_name]), int(environ[size_name])
    if "SLURM_STEP_ID" in launch.signature and (place := _srun_place(environ)) is not None:
        return launch, *place
    return launch, *_lightning_place(environ, rank, world_size)
