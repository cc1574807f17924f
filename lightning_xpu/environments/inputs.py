"""One rule for launch input, whatever the launcher: every launch variable that is set must be well formed.

Launchers set these variables; a malformed value almost always comes from a job script or a shell that exported
one by hand (or a stale one). Lightning reads them with a bare `int()` (a raw `ValueError` at import or at fit),
or not at all and then runs the wrong world; each is checked here and refused with one line naming the variable
and the fix. Pure functions of a mapping; no DNS lookup ever decides anything (a host name is only checked for
its form).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lightning_xpu.environments.errors import LaunchError

# Variables holding a rank or an index (a whole number, 0 or more).
RANK_VARIABLES = (
    "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK",  # torchrun, Lightning's own launch
    "PMI_RANK", "PMI_LOCAL_RANK",  # MPICH/Intel MPI Hydra, srun --mpi=pmi2, Cray PMI
    "MPI_LOCALRANKID",  # Hydra
    "PALS_RANKID", "PALS_LOCAL_RANKID", "PALS_NODEID",  # PALS
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_NODE_RANK",  # Open MPI
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",  # Slurm
    "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK",  # LSF jsrun
)  # fmt: skip
# Variables holding a count (a whole number, 1 or more).
SIZE_VARIABLES = (
    "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "PMI_SIZE", "PMI_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "PALS_LOCAL_SIZE",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NUM_NODES", "SLURM_NTASKS_PER_NODE",
    "JSM_NAMESPACE_SIZE",
)  # fmt: skip
# Slurm's tasks-per-node lists: "2", "2(x3)", "4(x2),2".
TASK_LIST_VARIABLES = ("SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE")
# (rank, count) pairs that must agree when both are set.
RANK_PAIRS = (
    ("RANK", "WORLD_SIZE"),
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("PMI_LOCAL_RANK", "PMI_LOCAL_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"),
    ("JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE"),
)
CHECKED_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", *RANK_VARIABLES, *SIZE_VARIABLES, *TASK_LIST_VARIABLES)

_WHOLE = re.compile(r"[0-9]+")
_TASK_LIST = re.compile(r"[0-9]+(\(x[0-9]+\))?(,[0-9]+(\(x[0-9]+\))?)*")
_UNSET = "unset it (the launcher sets it)"


def _bad(name: str, value: str, what: str, fix: str) -> LaunchError:
    return LaunchError(f"{name}={value!r} is not {what}: {fix}")


def whole_number(name: str, value: str, minimum: int) -> int:
    """`value` of launch variable `name` as an integer >= `minimum`, else a LaunchError naming the fix."""
    if not _WHOLE.fullmatch(value) or int(value) < minimum:
        raise _bad(name, value, f"a whole number of {minimum} or more", f"{_UNSET} or correct it")
    return int(value)


def port(value: str) -> int:
    """MASTER_PORT as a port number."""
    if not _WHOLE.fullmatch(value) or not 0 < int(value) < 65536:
        raise _bad("MASTER_PORT", value, "a port number", "set it to a free port in 1024-65535, or unset it")
    return int(value)


def address(value: str) -> str:
    """MASTER_ADDR as a host name or IP address, checked for its form only (never looked up)."""
    fix = "set it to the host name or IP address of rank 0 (the port goes in MASTER_PORT), or unset it"
    if not value.strip():
        raise _bad("MASTER_ADDR", value, "a host (it is empty)", fix)
    if any(character.isspace() for character in value):
        raise _bad("MASTER_ADDR", value, "a host (it holds whitespace)", fix)
    # One colon is host:port; an IPv6 address has at least two (and a port never comes in brackets here).
    if value.count(":") == 1 or value.startswith("[") or "/" in value:
        raise _bad("MASTER_ADDR", value, "a host (it looks like host:port or a URL)", fix)
    return value


def tasks_per_node(name: str, value: str) -> list[int]:
    """Slurm's compressed tasks-per-node list ("4(x2),2") expanded, one count per node."""
    if not _TASK_LIST.fullmatch(value):
        raise _bad(name, value, "a Slurm tasks-per-node list (like 4(x2),2)", _UNSET)
    counts: list[int] = []
    for item in value.split(","):
        count, _, repeat = item.partition("(x")
        counts += [int(count)] * (int(repeat.rstrip(")")) if repeat else 1)
    return counts


def check_launch_variables(environ: Mapping[str, str]) -> None:
    """Refuse the first malformed launch variable (in a fixed order, so every rank names the same one)."""
    if "MASTER_ADDR" in environ:
        address(environ["MASTER_ADDR"])
    if "MASTER_PORT" in environ:
        port(environ["MASTER_PORT"])
    for name in RANK_VARIABLES:
        if name in environ:
            whole_number(name, environ[name], 0)
    for name in SIZE_VARIABLES:
        if name in environ:
            whole_number(name, environ[name], 1)
    for name in TASK_LIST_VARIABLES:
        if name in environ:
            tasks_per_node(name, environ[name])
    for rank, size in RANK_PAIRS:
        if rank in environ and size in environ and int(environ[rank]) >= int(environ[size]):
            raise LaunchError(
                f"{rank}={environ[rank]} is not below {size}={environ[size]} (ranks count from 0):"
                f" unset both (the launcher sets them) or correct them"
            )
