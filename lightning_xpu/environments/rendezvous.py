"""Where rank 0 listens (`MASTER_ADDR`, `MASTER_PORT`): derived from the launch, the same on every rank.

Pure functions of the environment mapping (and of the PBS node file it names). Nothing here writes
`os.environ`; Lightning exports both values itself when it initialises the process group.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping

from lightning_xpu.environments import inputs
from lightning_xpu.environments.launch import LaunchError, Ranks, node_file_hosts

# Used when nothing identifies the launch (MPICH `mpiexec` outside any batch job); PyTorch's own default.
DEFAULT_MAIN_PORT = 29500
# Derived ports fall in [20000, 32000): unprivileged, and below Linux's ephemeral range (32768-60999) from
# which other connections take their local ports.
PORT_RANGE_START = 20000
PORT_RANGE_SIZE = 12000
# Values every rank of one launch sees alike. Scheduler job ids come first: the scheduler sets them on every
# node of the job. Then the launchers' own ids (PALS, Open MPI, Intel MPI); MPICH Hydra exports none.
SHARED_ID_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "PALS_APID", "PMIX_NAMESPACE", "I_MPI_HYDRA_UUID")
LOCAL_HOST = "127.0.0.1"


def main_port(environ: Mapping[str, str]) -> int:
    """`MASTER_PORT`, else a port hashed from the launch's shared id, else `DEFAULT_MAIN_PORT`."""
    if "MASTER_PORT" in environ:
        return inputs.port(environ["MASTER_PORT"])
    for name in SHARED_ID_VARIABLES:
        value = environ.get(name)
        if value:
            # crc32, not hash(): Python salts str hashes per process, and every rank must agree.
            return PORT_RANGE_START + zlib.crc32(f"{name}={value}".encode()) % PORT_RANGE_SIZE
    return DEFAULT_MAIN_PORT


def main_address(environ: Mapping[str, str], ranks: Ranks, first_slurm_host: Callable[[str], str]) -> str:
    """`MASTER_ADDR`, else this host when every rank is local, else the first host of the allocation.

    `first_slurm_host` turns a Slurm node list (`node[1-4]`) into its first host name (Lightning's resolver).
    """
    if "MASTER_ADDR" in environ:
        return inputs.address(environ["MASTER_ADDR"])
    if ranks.local_world_size == ranks.world_size:
        return LOCAL_HOST
    node_list = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if node_list:
        return first_slurm_host(node_list)
    node_file = environ.get("PBS_NODEFILE")
    if node_file:
        hosts = node_file_hosts(node_file)
        if hosts:
            return hosts[0]
        raise LaunchError(f"the PBS node file PBS_NODEFILE={node_file} is empty; set MASTER_ADDR to rank 0's host")
    raise LaunchError(
        f"the {ranks.world_size} ranks span several hosts and no Slurm or PBS allocation names them:"
        " set MASTER_ADDR to the host of rank 0"
    )
