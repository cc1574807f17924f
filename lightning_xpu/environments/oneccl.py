"""What oneCCL needs from the launch, and the `CCL_*` settings that give it to a rank (a pure function of a mapping).

oneCCL sits beneath both XPU process-group backends: PyTorch's XCCL (torch >= 2.8) and the `ccl` bindings
(torch-ccl, PyTorch <= 2.7). XCCL reads and sets no `CCL_*` variable and no `LOCAL_RANK` (intel/torch-xpu-ops
`src/xccl`@release/2.8..release/2.14), so oneCCL's own rules apply unchanged (uxlfoundation/oneCCL@2021.14):

- Its place on the node (local index and count) comes from the launcher named by `CCL_PROCESS_LAUNCHER`
  (`src/common/global/global.cpp`, `set_local_coord`; default `hydra`, `src/common/env/env.cpp`): `hydra` reads
  `MPI_LOCALRANKID`/`MPI_LOCALNRANKS` (set by MPICH and Intel MPI `mpiexec` only), `torchrun` reads
  `LOCAL_RANK`/`LOCAL_WORLD_SIZE`, `pmix` asks a PMIx server (`PMIx_Init` fails without one, as under a plain
  local launch: `src/common/api_wrapper/pmix_api_wrapper.cpp`), `none` reads `CCL_LOCAL_RANK`/`CCL_LOCAL_SIZE`
  (`src/common/env/vars.hpp`). Without them it warns "could not get local_idx/count from environment variables"
  and falls back; users report that several ranks on one node then fail (pytorch/pytorch#158722, torchrun;
  huggingface/accelerate#2340, #3664). Accelerate's fix (huggingface/accelerate#2339) is the one applied here:
  `none` with the rank's local rank and size.
- `CCL_ATL_TRANSPORT=mpi` and `CCL_KVS_MODE=mpi` need an MPI world: ranks are gathered over `MPI_COMM_WORLD`
  (`src/atl/mpi/atl_mpi.cpp`) and the socket KVS refuses the `mpi` mode unless the transport is `ofi`
  (`src/atl/util/pm/pmi_resizable_rt/pmi_resizable/kvs/internal_kvs.cpp`). Aurora's module sets both, with
  `CCL_PROCESS_LAUNCHER=pmix`, for `mpiexec --pmi=pmix`; a local launch from that shell has neither.

So a site's or user's value is kept wherever it can work under the launcher that really started the rank, and
replaced only where it cannot (`oneccl_settings`).

The `ccl` bindings then rewrite what was set: the `ProcessGroupCCL` constructor (intel/torch-ccl
`src/ProcessGroupCCL.cpp`@v2.5.0+xpu..v2.8.0+xpu, `with_mpirun` and the block after it, ~591 and ~696-711 at
v2.7.0+xpu), when none of MPI_LOCALRANKID, MPI_LOCALNRANKS, PMI_RANK, PMI_SIZE, PMIX_RANK is set, sets
`CCL_PROCESS_LAUNCHER=none` and `CCL_LOCAL_RANK`/`CCL_LOCAL_SIZE` from `LOCAL_RANK`/`LOCAL_WORLD_SIZE`, or from the
group's global rank and size when either is missing. Lightning's launcher never exports `LOCAL_WORLD_SIZE` and srun
no `LOCAL_RANK`, so on two or more nodes that rewrite would give every rank a wrong place. For `ccl` the rank's true
`LOCAL_RANK`/`LOCAL_WORLD_SIZE` are therefore exported too (`oneccl_settings(..., bindings=True)`): the bindings'
own rewrite then computes the right values.

Version: this contract was read from oneCCL 2021.14 (the oneCCL of torch-ccl v2.5.0+xpu..v2.8.0+xpu). XCCL wheels
bundle newer ones (2021.15.2 with PyTorch 2.8 up to 2022.1.x with 2.14, and from 2.14 XCCL creates communicators
only through oneCCL's newer C API `onecclCommInitRank`, intel/torch-xpu-ops `src/xccl/ProcessGroupXCCL.cpp`
@release/2.14). No readable source says whether those read the same variables: assumed, not verified (docs/
xpu-guide.md, "What no source settles").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lightning_xpu.environments.launch import (
    HYDRA,
    LOCAL_PLACE_VARIABLES,
    SRUN,
    TORCHRUN,
    detect_launcher,
    mpi_launcher,
)

LAUNCHER = "CCL_PROCESS_LAUNCHER"
LOCAL_RANK, LOCAL_SIZE = "CCL_LOCAL_RANK", "CCL_LOCAL_SIZE"
TRANSPORT, KVS_MODE = "CCL_ATL_TRANSPORT", "CCL_KVS_MODE"
ONECCL_LAUNCH_VARIABLES = (LAUNCHER, LOCAL_RANK, LOCAL_SIZE, TRANSPORT, KVS_MODE)
# What the `ccl` bindings' ProcessGroupCCL reads to rewrite CCL_LOCAL_RANK/CCL_LOCAL_SIZE (see the module docstring).
BINDINGS_LOCAL_PLACE = ("LOCAL_RANK", "LOCAL_WORLD_SIZE")
DEFAULT_LAUNCHER = "hydra"  # oneCCL env.cpp
# Values used instead of an `mpi` setting that cannot work: oneCCL's defaults without MPI (env.cpp, env_parser.cpp).
_WITHOUT_MPI = {TRANSPORT: "ofi", KVS_MODE: "pmi"}
# Where each launcher value finds the local index and count (oneCCL global.cpp), for the values read from variables.
_LOCAL_VARIABLES = {"hydra": LOCAL_PLACE_VARIABLES[HYDRA], "torchrun": LOCAL_PLACE_VARIABLES[TORCHRUN]}


@dataclass(frozen=True)
class OneCCLSettings:
    """The variables to set for this rank, and the site or user values they replace (name -> old value)."""

    set: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the log: what was replaced and why."""
        old = ", ".join(f"{name}={value}" for name, value in self.replaced.items())
        new = ", ".join(f"{name}={self.set[name]}" for name in self.replaced)
        return (f"lightning_xpu: {old} cannot work under this launch (no MPI launcher or PMIx server gave this rank"
                f" its place): using {new} with {LOCAL_RANK}/{LOCAL_SIZE} for oneCCL")


def has_mpi_world(environ: Mapping[str, str]) -> bool:
    """An MPI launcher started this process as one of several ranks (or srun with a PMI plugin did)."""
    if mpi_launcher(environ) is not None:
        return True
    return detect_launcher(environ) == SRUN and ("PMI_RANK" in environ or "PMIX_RANK" in environ)


def _finds_local_place(launcher: str, environ: Mapping[str, str], local_rank: int, local_size: int) -> bool:
    """Whether oneCCL, told `launcher`, finds this rank's true place on its node."""
    if launcher in _LOCAL_VARIABLES:
        rank_name, size_name = _LOCAL_VARIABLES[launcher]
        # Variables inherited from an outer launch (`mpiexec -n 1` around Lightning's launcher) describe another rank.
        return (environ.get(rank_name), environ.get(size_name)) == (str(local_rank), str(local_size))
    if launcher == "pmix":  # a PMIx server gave this process PMIX_RANK: PALS --pmi=pmix, Open MPI, srun --mpi=pmix
        # Unverified for PALS: no readable source says it exports PMIX_RANK (docs/xpu-guide.md, What no source
        # settles). Where it does not, `none` with the rank's place is used instead, which needs no PMIx server.
        return "PMIX_RANK" in environ and has_mpi_world(environ)
    return launcher == "none"  # its variables are always written below; any other value oneCCL refuses itself


def oneccl_settings(environ: Mapping[str, str], local_rank: int, local_size: int,
                    bindings: bool = False) -> OneCCLSettings:
    """The `CCL_*` values this rank (local rank `local_rank` of `local_size` on its node) needs; with `bindings`
    (backend `ccl`) also the `LOCAL_RANK`/`LOCAL_WORLD_SIZE` the bindings rewrite them from."""
    settings = OneCCLSettings()
    if bindings:
        settings.set.update(zip(BINDINGS_LOCAL_PLACE, (str(local_rank), str(local_size)), strict=True))
    launcher = environ.get(LAUNCHER) or DEFAULT_LAUNCHER
    if not _finds_local_place(launcher, environ, local_rank, local_size):
        if LAUNCHER in environ:
            settings.replaced[LAUNCHER] = environ[LAUNCHER]
        launcher = settings.set[LAUNCHER] = "none"
    if launcher == "none":
        settings.set.update({LOCAL_RANK: str(local_rank), LOCAL_SIZE: str(local_size)})
    if not has_mpi_world(environ):
        for name, value in _WITHOUT_MPI.items():
            if environ.get(name) == "mpi":
                settings.replaced[name] = "mpi"
                settings.set[name] = value
    return settings
