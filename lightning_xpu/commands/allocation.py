"""What a batch job's allocation says, from the scheduler's variables alone: the directory the job was submitted
from, its node count and its id. Read here for the training jobs (lightning_xpu/commands/job.py, under
scripts/common/job.sh) and for the site validation job (`lightning-xpu validate --site-job`)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from lightning_xpu.environments.errors import LaunchError
from lightning_xpu.environments.inputs import whole_number
from lightning_xpu.environments.launch import node_file_hosts

DATE_STAMP = "%Y%m%d-%H%M%S"  # a report's name outside a job


def submit_directory(environ: Mapping[str, str]) -> tuple[Path, str]:
    """The directory the job was submitted from, and where that came from. PBS Pro starts a job in $HOME and names
    the submit directory PBS_O_WORKDIR; Slurm starts it in the submit directory. Debian's Torque wrapper over
    Slurm (slurm-wlm-torque) sets no PBS_O_WORKDIR: Slurm's then. scripts/common/job.sh enters the same
    directory before it loads the environment (a relative setup script is found there)."""
    if environ.get("PBS_O_WORKDIR"):
        return Path(environ["PBS_O_WORKDIR"]), "PBS_O_WORKDIR, set by the scheduler"
    if environ.get("SLURM_SUBMIT_DIR"):
        return Path(environ["SLURM_SUBMIT_DIR"]), "SLURM_SUBMIT_DIR: PBS_O_WORKDIR is not set"
    return current_directory(environ), "the current directory: no scheduler"


def current_directory(environ: Mapping[str, str]) -> Path:
    """The working directory as the shell names it ($PWD, symbolic links kept) where PWD is this directory."""
    pwd = environ.get("PWD", "")
    try:
        if pwd and os.path.samefile(pwd, "."):
            return Path(pwd)
    except OSError:
        pass
    return Path.cwd()


def node_count(environ: Mapping[str, str]) -> tuple[int, str]:
    """The allocation's nodes, and where that came from: the distinct hosts of PBS_NODEFILE, else
    SLURM_JOB_NUM_NODES, else 1 (no scheduler). LaunchError, naming the variable, for one that cannot be read."""
    if environ.get("PBS_NODEFILE"):
        hosts = node_file_hosts(environ["PBS_NODEFILE"])
        if not hosts:
            raise LaunchError(f"the PBS node file PBS_NODEFILE={environ['PBS_NODEFILE']} lists no host: run the job"
                              " under PBS, or unset PBS_NODEFILE")
        return len(hosts), "PBS_NODEFILE"
    if environ.get("SLURM_JOB_NUM_NODES"):
        nodes = whole_number("SLURM_JOB_NUM_NODES", environ["SLURM_JOB_NUM_NODES"], 1)
        return nodes, "SLURM_JOB_NUM_NODES: PBS_NODEFILE is not set"
    return 1, "no scheduler"


def job_stamp(environ: Mapping[str, str], outside: str = "") -> str:
    """The job's id without a PBS server suffix (123.aurora-pbsadmin -> 123); outside a job OUTSIDE, else the date
    and time."""
    job = environ.get("SLURM_JOB_ID") or environ.get("PBS_JOBID") or outside or time.strftime(DATE_STAMP)
    return job.split(".")[0]
