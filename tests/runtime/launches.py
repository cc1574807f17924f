"""What each launcher puts into a rank's environment, as recorded on the CI machine (see the evidence in
lightning_xpu/environments/launch.py), and `launch` to make this process look launched that way.

Each set is rank 1 of 2 on one host unless its name says otherwise: rank 1 is where a launch taken for
another shows (it becomes rank 0).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from lightning_xpu.validation.framework import SCHEDULER_CONFIGURATION

# Variables by which Lightning or lightning_xpu recognise a launch; removed before every simulated launch so
# that the process running the tests (perhaps itself a Slurm job) does not leak into it.
_LAUNCH_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_", "PMI_", "PMIX_", "MPI_LOCAL", "PALS_", "OMPI_", "PBS_",
                    "HYDRA_", "HYDI_", "I_MPI_", "TORCHELASTIC_", "LSB_", "JSM_")
_LAUNCH_NAMES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                 "LOCAL_WORLD_SIZE", "ROLE_RANK")


def is_launch_variable(name: str) -> bool:
    return (name.startswith(_LAUNCH_PREFIXES) and name not in SCHEDULER_CONFIGURATION) or name in _LAUNCH_NAMES


def without_launch_variables(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in environ.items() if not is_launch_variable(name)}


def without_prefixes(environ: Mapping[str, str], *prefixes: str) -> dict[str, str]:
    """ENVIRON without the variables of PREFIXES, but with where the scheduler's configuration is (SLURM_CONF): a
    test outside any job still submits to CI's cluster."""
    return {name: value for name, value in environ.items()
            if not name.startswith(prefixes) or name in SCHEDULER_CONFIGURATION}  # fmt: skip


# The batch script of `sbatch -N1 --ntasks-per-node=2` (job 7): no step, SLURM_PROCID=0.
BATCH = {
    "SLURM_JOB_ID": "7", "SLURM_JOBID": "7", "SLURM_JOB_NAME": "fit.sh", "SLURM_JOB_NODELIST": "vm",
    "SLURM_NODELIST": "vm", "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "2",
    "SLURM_NPROCS": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2", "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_GTIDS": "0",
}
SRUN = {
    **BATCH, "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_NODELIST": "vm", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_GTIDS": "0,1",
}
# `salloc -N1 --ntasks-per-node=2` (job 25; Slurm names an salloc job `interactive`): its shell, which has no step
# and no SLURM_PROCID; `srun` in it (rank 1 of the step's 2 tasks); `srun -n 1` in it (a one-task step, which keeps
# the allocation's SLURM_NTASKS_PER_NODE).
SALLOC_SHELL = {
    "SLURM_JOB_ID": "25", "SLURM_JOBID": "25", "SLURM_JOB_NAME": "interactive", "SLURM_JOB_NODELIST": "vm",
    "SLURM_NODELIST": "vm", "SLURM_NNODES": "1", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2",
    "SLURM_NTASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_PARTITION": "pvc9",
}
SALLOC_SRUN = {
    **SALLOC_SHELL, "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_NODELIST": "vm", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
    "SLURM_NODEID": "0",
}
SALLOC_SRUN_ONE_TASK = {
    **SALLOC_SRUN, "SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_STEP_NUM_TASKS": "1",
    "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_TASKS_PER_NODE": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
}
SRUN_PMI2 = {**SRUN, "SLURM_MPI_TYPE": "pmi2", "PMI_RANK": "1", "PMI_SIZE": "2", "PMI_FD": "13", "PMI_JOBID": "7.1"}
MPICH = {"PMI_RANK": "1", "PMI_SIZE": "2", "PMI_FD": "6", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
         "HYDI_CONTROL_FD": "7"}
INTEL_MPI = {**MPICH, "I_MPI_HYDRA_UUID": "22460000-ffec-babe-2461-060036e3bb10", "HYDRA_BSTRAP_LAUNCHER": "ssh",
             "HYDRA_BSTRAP_NODE_ID": "0", "HYDRA_BSTRAP_PROXY_ID": "0"}
# Hydra's proxy runs as a one-task step of the job (slurm bootstrap); the ranks keep SLURM_PROCID=0.
_HYDRA_STEP = {"SLURM_STEP_ID": "2", "SLURM_STEPID": "2", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_NODELIST": "vm",
               "SLURM_NPROCS": "1", "SLURM_TASKS_PER_NODE": "1"}
MPICH_IN_SBATCH = {**BATCH, **_HYDRA_STEP, **MPICH}
INTEL_MPI_IN_SBATCH = {**BATCH, **_HYDRA_STEP, **INTEL_MPI, "HYDRA_BSTRAP_LAUNCHER": "slurm"}
OPENMPI = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1", "PMIX_RANK": "1",
           "PMIX_NAMESPACE": "prterun-vm-20470@1"}
# PALS (not run here; names from Slurm's mpi/cray_shasta and Flux's cray_pals sources), inside a PBS job.
PALS = {"PALS_RANKID": "1", "PALS_LOCAL_RANKID": "1", "PALS_NODEID": "0", "PALS_APID": "5f0c6a1e-2b7d",
        "PALS_SPOOL_DIR": "/var/run/palsd/5f0c6a1e", "PMI_RANK": "1", "PMI_SIZE": "2", "PMI_LOCAL_RANK": "1",
        "PMI_LOCAL_SIZE": "2", "PBS_JOBID": "123.aurora-pbsadmin", "PBS_O_WORKDIR": "/home/user"}
TORCHRUN = {"TORCHELASTIC_RUN_ID": "none", "RANK": "1", "LOCAL_RANK": "1", "GROUP_RANK": "0", "ROLE_RANK": "1",
            "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}
# IBM's jsrun under LSF (Lightning's LSFEnvironment); Spectrum MPI's jsrun also sets Open MPI's variables.
# LSB_DJOB_RANKFILE must name a real rank file (launch node first, then one line per rank's host).
JSRUN = {"LSB_JOBID": "4242", "JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_SIZE": "2", "JSM_NAMESPACE_LOCAL_RANK": "1",
         "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
         "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
# Two hosts (node1, node2), two ranks each, rank 3 = local rank 1 of the second host.
MPICH_TWO_HOSTS_IN_SBATCH = {
    **BATCH, **_HYDRA_STEP, "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NODELIST": "node[1-2]", "SLURM_NNODES": "2",
    "SLURM_NTASKS": "4", "PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "6", "MPI_LOCALRANKID": "1",
    "MPI_LOCALNRANKS": "2",
}


def launch(monkeypatch: pytest.MonkeyPatch, environ: Mapping[str, str]) -> None:
    """Make this process's environment hold exactly `environ`'s launch variables (undone after the test)."""
    for name in list(os.environ):
        if is_launch_variable(name):
            monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
