"""The services ci/services starts really work: Slurm runs (concurrent, multi-task) jobs, start is
idempotent and resumes a drained node, both MPI launchers start ranks, Lmod initialises.

Jobs are judged by what they wrote, never by exit codes alone: a misconfigured Slurm records jobs
that never ran as COMPLETED.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ci.ci_helpers import REPO, require_env_path, run_script


def slurm(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def submit(tmp_path: Path, name: str, body: str, *options: str) -> str:
    """sbatch a job that runs `body` under bash; return its id."""
    job_id = slurm(
        "sbatch", "--parsable", "-t", "5", "-J", f"lxpu-ci-{name}",
        "-o", str(tmp_path / f"{name}.out"), *options, "--wrap", body,
    )  # fmt: skip
    # Never `-Q` with --parsable: it swallows the id, and `scontrol show job ""` lists every job.
    assert job_id.isdigit(), f"sbatch printed {job_id!r}, not a job id"
    return job_id


def wait_for_job(job_id: str, limit_s: float = 120) -> str:
    """Poll until the job leaves the queue (faster than sbatch --wait); return its final state."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        info = slurm("scontrol", "show", "job", job_id)
        state = info.split("JobState=", 1)[1].split()[0]
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], check=False)
    pytest.fail(f"job {job_id} still queued or running after {limit_s} s")


def rank_lines(path: Path) -> list[str]:
    return sorted(line for line in path.read_text().splitlines() if line.startswith("rank="))


@pytest.mark.slurm
def test_status_reports_a_usable_node(slurm_cluster: str) -> None:
    assert slurm("sinfo", "-h", "-n", slurm_cluster, "-o", "%T") in ("idle", "mixed", "allocated")
    assert slurm("sinfo", "-h", "-o", "%P") == "pvc9*"


def slurm_config() -> dict[str, str]:
    """`scontrol show config` as a dict."""
    config: dict[str, str] = {}
    for line in slurm("scontrol", "show", "config").splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            config[key.strip()] = value.strip()
    return config


def controller_pid_and_conf_mtime() -> tuple[str, int]:
    config = slurm_config()
    pid = Path(config["SlurmctldPidFile"]).read_text().strip()
    return pid, Path(config["SLURM_CONF"]).stat().st_mtime_ns


@pytest.mark.slurm
def test_the_cluster_runs_on_its_own_configuration_and_never_on_etc_slurm(slurm_cluster: str) -> None:
    """The suite's Slurm is private (issue 28): the daemons and every command read ci/lib.sh's ci_slurm_conf,
    which ci/test.sh exports as SLURM_CONF; the machine's /etc/slurm is neither read nor written."""
    ours = subprocess.run(["bash", "-c", 'source ci/lib.sh && ci_slurm_conf'], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    assert not ours.startswith("/etc/") and os.environ.get("SLURM_CONF") == ours
    config = slurm_config()
    assert config["SLURM_CONF"] == ours
    for daemon in ("SlurmctldPidFile", "SlurmdPidFile"):
        pid = Path(config[daemon]).read_text().strip()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv[argv.index(b"-f") + 1].decode() == ours, argv


@pytest.mark.slurm
def test_start_when_healthy_restarts_nothing(slurm_cluster: str) -> None:
    before = controller_pid_and_conf_mtime()
    result = run_script("ci/services/slurm.sh", "start")
    assert result.returncode == 0, result.stderr
    assert "Slurm already running" in result.stderr
    assert controller_pid_and_conf_mtime() == before


@pytest.mark.slurm
def test_start_resumes_a_drained_node(slurm_cluster: str) -> None:
    slurm("scontrol", "update", f"nodename={slurm_cluster}", "state=drain", "reason=lxpu-ci-test")
    try:
        assert slurm("sinfo", "-h", "-n", slurm_cluster, "-o", "%T").startswith("drain")
        result = run_script("ci/services/slurm.sh", "start")
        assert result.returncode == 0, result.stderr
        assert "is drained: resuming it" in result.stderr or "is draining: resuming it" in result.stderr
        assert slurm("sinfo", "-h", "-n", slurm_cluster, "-o", "%T") in ("idle", "mixed", "allocated")
    finally:  # never leave the shared node drained, whatever failed above
        if slurm("sinfo", "-h", "-n", slurm_cluster, "-o", "%T").startswith("drain"):
            slurm("scontrol", "update", f"nodename={slurm_cluster}", "state=resume")


@pytest.mark.slurm
def test_batch_job_runs_two_tasks_with_srun(slurm_cluster: str, tmp_path: Path) -> None:
    job = submit(
        tmp_path, "two-tasks",
        "srun bash -c 'echo rank=$SLURM_PROCID of $SLURM_NTASKS on $(hostname -s)'",
        "--ntasks-per-node=2",
    )  # fmt: skip
    assert wait_for_job(job) == "COMPLETED"
    assert rank_lines(tmp_path / "two-tasks.out") == [
        f"rank=0 of 2 on {slurm_cluster}",
        f"rank=1 of 2 on {slurm_cluster}",
    ]


@pytest.mark.slurm
def test_srun_pmi2_sets_mpi_rank_variables(slurm_cluster: str) -> None:
    out = slurm(
        "timeout", "60", "srun", "--mpi=pmi2", "-n", "2", "bash", "-c", "echo rank=$PMI_RANK/$PMI_SIZE"
    )
    assert sorted(out.splitlines()) == ["rank=0/2", "rank=1/2"]


@pytest.mark.slurm
def test_two_ddp_sized_jobs_run_at_the_same_time(slurm_cluster: str, tmp_path: Path) -> None:
    # Each 2-task job signals that it started, then waits for the other one: both finish only if the
    # node (2 real cores) takes both at once, which the advertised CPUs are for.
    def body(me: str, other: str) -> str:
        mine, theirs = shlex.quote(str(tmp_path / me)), shlex.quote(str(tmp_path / other))
        wait = f"for i in $(seq 600); do [ -e {theirs} ] && break; sleep 0.1; done; [ -e {theirs} ]"
        return f"touch {mine}; {wait} && srun bash -c 'echo rank=$SLURM_PROCID'"

    jobs = [
        submit(tmp_path, "a", body("a.started", "b.started"), "--ntasks-per-node=2"),
        submit(tmp_path, "b", body("b.started", "a.started"), "--ntasks-per-node=2"),
    ]
    assert [wait_for_job(job) for job in jobs] == ["COMPLETED", "COMPLETED"]
    for name in ("a", "b"):
        assert rank_lines(tmp_path / f"{name}.out") == ["rank=0", "rank=1"]


@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param("LXPU_MPICH_MPIEXEC", marks=pytest.mark.mpi),
        pytest.param("LXPU_IMPI_MPIEXEC", marks=pytest.mark.impi),
    ],
)
def test_mpiexec_starts_two_ranks(launcher: str) -> None:
    mpiexec = require_env_path(launcher)
    # One write per rank: with PYTHONUNBUFFERED, print() writes the text and its newline separately and
    # Hydra interleaves the ranks' pieces.
    code = "import os; os.write(1, f\"rank={os.environ['PMI_RANK']}/{os.environ['PMI_SIZE']}\\n\".encode())"
    result = subprocess.run(
        ["timeout", "60", str(mpiexec), "-n", "2", sys.executable, "-c", code],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == ["rank=0/2", "rank=1/2"]


@pytest.mark.impi
def test_intel_mpiexec_is_not_on_the_default_path() -> None:
    impi = require_env_path("LXPU_IMPI_MPIEXEC")
    found = subprocess.run(["bash", "-c", "command -v mpiexec"], capture_output=True, text=True, check=False)
    assert Path(found.stdout.strip()).resolve() != impi.resolve()


@pytest.mark.lmod
def test_lmod_initialises_under_strict_bash() -> None:
    init = require_env_path("LXPU_LMOD_INIT")
    script = f"set -euo pipefail; source {shlex.quote(str(init))}; module --version 2>&1; module list 2>&1"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "Modules based on Lua" in result.stdout
