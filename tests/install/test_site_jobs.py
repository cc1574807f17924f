"""The site training job scripts run for real here, on CPU, unmodified (issue 14, item 6).

- Dawn: every scripts/dawn/train_*.sbatch under `sbatch` on the CI Slurm. Options on the sbatch command line
  (which win over the script's #SBATCH lines) fit it to this one-node cluster without GPUs: no gres, one node,
  one CPU per task, at most 2 ranks per node.
- Aurora: scripts/aurora/train_*.pbs submitted with `qsub` from Debian's slurm-wlm-torque, a Torque-style
  wrapper over Slurm (NOT PBS Pro), PALS's mpiexec played by tests/pals_standin.py, together with the Aurora
  install job (a dry run). (The same scripts under `bash` with PALS's variables: tests/docs/test_site_job_docs.py.)

How the ranks get their environment: tests/site_jobs.py. About 60 s in all, most of it the Dawn jobs, which run
at the same time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import install_harness as h
import pytest

from tests.conftest import require_service
from tests.site_jobs import (
    ACCOUNT,
    AURORA_SCRIPTS,
    CI_RANKS,
    DAWN_SCRIPTS,
    JOB_TIMEOUT_S,
    REPO,
    TOY_FIT_DIR,
    assert_one_ddp_run,
    aurora_shape,
    header_value,
    job_env,
    pals_bin,
    scontrol,
    site_setup,
    work_directory,
)

# ---- Dawn: sbatch + srun, and Intel MPI's mpirun ------------------------------------------------------------


@dataclass
class DawnJob:
    script: Path
    ranks: int
    work: Path
    job_id: str
    output: str
    profiled: bool


@pytest.fixture(scope="module")
def dawn_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DawnJob]:
    """Every Dawn job script submitted at once, then waited for. (The qsub tests below keep paths without spaces:
    the Torque wrapper passes its arguments to sbatch through an unquoted shell command.)"""
    require_service("Slurm", h.slurm_up(), "start it: bash ci/services/slurm.sh start")
    impi = h.mpiexec("impi")
    if any("mpirun" in script.read_text() for script in DAWN_SCRIPTS):
        require_service("Intel MPI", impi is not None, "set LXPU_IMPI_MPIEXEC (bash ci/services/install.sh)")
    root = tmp_path_factory.mktemp("dawn") / "with space"  # paths with spaces must work
    # Intel MPI's bin after the base venv's: mpirun from there, python from the base venv.
    setup = site_setup(root / "setup dir", "dawn", [str(Path(impi).parent)] if impi else [])
    submitted: list[tuple[Path, int, Path, str, bool]] = []
    profiling = False
    for script in DAWN_SCRIPTS:
        ranks = min(int(header_value(script, r"--ntasks-per-node=(\d+)")), CI_RANKS)
        profile = ranks > 1 and not profiling  # profile rank 1 of one multi-rank job
        profiling = profiling or profile
        work = work_directory(root / f"{script.stem} work")
        command = [
            "sbatch", "--parsable", f"--account={ACCOUNT}", "--gres=none", "--nodes=1", "--oversubscribe",
            "--cpus-per-task=1", f"--ntasks-per-node={ranks}", "--time=10", str(script),
            "--epochs", "1", *(["--profile-rank", "1"] if profile else []),
        ]  # fmt: skip
        result = subprocess.run(command, cwd=work, env=job_env(setup), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        submitted.append((script, ranks, work, result.stdout.strip().split(";")[0], profile))
    jobs = {}
    for script, ranks, work, job_id, profile in submitted:
        h.wait_for_slurm_job(job_id, JOB_TIMEOUT_S)
        name = header_value(script, r"--job-name=(\S+)")
        output = work / f"{name}-{job_id}.out"  # the script's own --output=%x-%j.out
        jobs[script.name] = DawnJob(script, ranks, work, job_id, output.read_text() if output.exists() else "", profile)
    return jobs


@pytest.mark.slurm
@pytest.mark.parametrize("script", [path.name for path in DAWN_SCRIPTS])
def test_dawn_job_script_trains_under_sbatch(dawn_jobs: dict[str, DawnJob], script: str) -> None:
    job = dawn_jobs[script]
    assert "device check passed (cpu): GPU available: False" in job.output, job.output[-4000:]
    assert f"working directory: {job.work} (from SLURM_SUBMIT_DIR" in job.output
    assert "threads: 1 cores per rank, OMP_NUM_THREADS=1" in job.output
    assert f"--devices {job.ranks} --num-nodes 1 --epochs 1" in job.output
    reports = assert_one_ddp_run(job.work, job.ranks)
    mpirun = "mpirun" in job.script.read_text()
    for report in reports:
        launch = report["launch_environment"]
        # Under mpirun every rank sees the batch step's SLURM_PROCID=0; the ranks come from Intel MPI's variables.
        assert ("MPI_LOCALRANKID" in launch) == mpirun, launch
        if not mpirun:
            assert launch["SLURM_PROCID"] == str(report["global_rank"])


@pytest.mark.slurm
def test_one_rank_is_profiled_and_its_trace_can_be_read(dawn_jobs: dict[str, DawnJob]) -> None:
    (job,) = [job for job in dawn_jobs.values() if job.profiled]
    traces = sorted((job.work / "profile").glob("*.pt.trace.json"))
    assert traces and all("rank1" in trace.name for trace in traces), list((job.work / "profile").iterdir())
    assert not [path for path in (job.work / "profile").iterdir() if "rank0" in path.name]
    summary = subprocess.run(
        [sys.executable, str(TOY_FIT_DIR / "trace_summary.py"), str(traces[0]), "--top", "500"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    # A DDP rank's trace: its operators, and the gradient all-reduce of DDP among them.
    assert "CPU operators (top " in summary and "aten::" in summary and "c10d::allreduce_" in summary, summary


# ---- Aurora: bash with PALS's variables ---------------------------------------------------------------------


# ---- Aurora: qsub through Debian's Torque wrapper over Slurm ------------------------------------------------


def qsub(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["qsub", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def require_qsub() -> None:
    require_service("Slurm", h.slurm_up(), "start it: bash ci/services/slurm.sh start")
    require_service("qsub", shutil.which("qsub") is not None, "install slurm-wlm-torque: bash ci/services/install.sh")


def partition() -> str:
    out = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=30).stdout.split()
    return out[0]


@pytest.mark.slurm
def test_aurora_training_job_under_qsub_of_the_torque_wrapper(tmp_path: Path) -> None:
    require_qsub()
    (script,) = [path for path in AURORA_SCRIPTS if aurora_shape(path)[:2] == (1, 1)]
    work = work_directory(tmp_path / "work")
    env = job_env(
        site_setup(tmp_path, "aurora"),
        PATH=f"{pals_bin(tmp_path / 'bin')}:{os.environ['PATH']}",
        LIGHTNING_XPU_TRAIN_ARGS="--epochs 1",
        LXPU_PALS_STANDIN_PMI_SIZE="1",  # the wrapper gives no PBS_NODEFILE: the world size comes from PMI_SIZE
    )
    queue = header_value(script, r"^#PBS -q (\S+)")
    refused = qsub(["-V", "-A", ACCOUNT, str(script)], work, env)
    if queue != partition():
        # sbatch reads the script's #PBS lines itself: `-q` is honoured as the Slurm partition.
        assert refused.returncode != 0 and "invalid partition" in refused.stdout.lower(), refused.stdout
    else:
        h.wait_for_slurm_job(refused.stdout.strip())
    submitted = qsub(["-V", "-A", ACCOUNT, "-q", partition(), str(script)], work, env)
    job_id = submitted.stdout.strip()
    assert submitted.returncode == 0 and job_id.isdigit(), submitted.stdout + submitted.stderr
    h.wait_for_slurm_job(job_id, JOB_TIMEOUT_S)
    job = scontrol(job_id)
    output_file = work / f"{script.name}.o{job_id}"  # the wrapper's naming, not the PBS job name's
    output = output_file.read_text() if output_file.exists() else ""

    # Honoured by sbatch's own #PBS parsing: -N, -A, -l select (nodes) and walltime.
    assert job["JobName"] == header_value(script, r"^#PBS -N (\S+)")
    assert job["Account"] == ACCOUNT and job["Partition"] == partition()
    assert job["NumNodes"] == header_value(script, r"^#PBS -l select=(\d+)")
    assert job["TimeLimit"] == header_value(script, r"walltime=([\d:]+)")
    # Ignored without a word: -l filesystems (no feature, licence or constraint) and -k doe (output where submitted).
    assert "filesystems" in script.read_text() and job["Features"] == "(null)" and job["Licenses"] == "(null)"
    assert "#PBS -k doe" in script.read_text() and output_file.parent == work
    # Overridden: -j oe joins nothing, the wrapper passes its own -e file.
    assert "#PBS -j oe" in script.read_text() and (work / f"{script.name}.e{job_id}").exists()
    # PBS_O_WORKDIR does not come from the scheduler: the job falls back to Slurm's submit directory.
    assert f"working directory: {work} (from SLURM_SUBMIT_DIR: PBS_O_WORKDIR is not set)" in output, output[-3000:]
    assert "nodes: 1 (from SLURM_JOB_NUM_NODES: PBS_NODEFILE is not set)" in output
    assert "device check passed (cpu)" in output, output[-3000:]
    assert_one_ddp_run(work, 1)


@pytest.mark.slurm
def test_qsub_select_sets_the_node_count(tmp_path: Path) -> None:
    """`qsub -l select=N` wins over a script's own select=: asking for more nodes than this cluster has, every Aurora
    job script stays pending with that many nodes (then cancelled)."""
    require_qsub()
    available = len(subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split())
    nodes = available + 1
    for script in AURORA_SCRIPTS:
        args = ["-A", ACCOUNT, "-q", partition(), "-l", f"select={nodes}", str(script)]
        submitted = qsub(args, tmp_path, job_env(tmp_path / "none"))
        job_id = submitted.stdout.strip()
        assert submitted.returncode == 0 and job_id.isdigit(), submitted.stdout
        try:
            job = scontrol(job_id)
            assert job["NumNodes"].split("-")[0] == str(nodes) and job["JobState"] == "PENDING", job
        finally:
            subprocess.run(["scancel", job_id], check=False, timeout=30)


@pytest.mark.slurm
def test_aurora_install_job_under_qsub_of_the_torque_wrapper(tmp_path: Path) -> None:
    """The install job, unmodified, as a dry run: it must find the repository without PBS_O_WORKDIR."""
    require_qsub()
    job_script = sorted((REPO / "scripts" / "aurora").glob("install_lightning_*.sh"))[-1]
    env = job_env(tmp_path / "none", LIGHTNING_XPU_INSTALL_ARGS=f"--dry-run --prefix {tmp_path / 'prefix'}")
    out, err = tmp_path / "install.out", tmp_path / "install.err"
    # From the clone's root, as docs/aurora.md says; -V because the wrapper splits -v values on spaces.
    submitted = qsub(
        ["-V", "-A", ACCOUNT, "-q", partition(), "-o", str(out), "-e", str(err), str(job_script.relative_to(REPO))],
        REPO,
        env,
    )
    job_id = submitted.stdout.strip()
    assert submitted.returncode == 0 and job_id.isdigit(), submitted.stdout
    h.wait_for_slurm_job(job_id, JOB_TIMEOUT_S)
    output = out.read_text() if out.exists() else ""
    assert f"repository:  {REPO} " in output, output[-3000:] + (err.read_text() if err.exists() else "")
    assert "dry run finished: nothing was changed" in output
    assert not (tmp_path / "prefix").exists()
