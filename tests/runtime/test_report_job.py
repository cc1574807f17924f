"""The site validation job for real, on CPU (the cpu variant, as CI runs it): the site script under sbatch on the
CI Slurm, its report checked against the committed schema; bad input; and the launched checks' worker as real
processes under MPICH's mpiexec."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lightning_xpu.validation import PASS, SKIP, checks
from lightning_xpu.validation.checks import NO_XPU, Context
from lightning_xpu.validation.framework import checks_of
from lightning_xpu.validation.schema import check_report
from tests.conftest import require_service
from tests.runtime.launches import without_prefixes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def mpiexec_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """MPICH's mpiexec first on PATH, as `mpiexec` (the name the checks use); returns the launcher for 2 ranks."""
    mpiexec = os.environ.get("LXPU_MPICH_MPIEXEC", "/usr/bin/mpiexec.mpich")
    require_service("MPICH", Path(mpiexec).exists(), f"no {mpiexec}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpiexec").write_text(f'#!/bin/sh\nexec "{mpiexec}" "$@"\n')  # Hydra finds its proxy beside it
    (bin_dir / "mpiexec").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("mpiexec") == str(bin_dir / "mpiexec")
    return ["mpiexec", "-n", "2", "-ppn", "2"]


@pytest.mark.mpi
def test_launched_ddp_and_checkpoint_round_trip_for_real_under_mpiexec(tmp_path: Path, mpiexec_on_path) -> None:
    """The worker of the ddp_* and checkpoint checks, as 2 real ranks started by mpiexec: a DDP fit picks
    HydraEnvironment, trains and saves at step 4; a fresh launch resumes there and trains to 8."""
    context = Context("cpu", 2, tmp_path)
    ckpt = tmp_path / "last.ckpt"
    env = checks._launcher_env(context)
    args = checks._fit_args(context, "ddp", 2, max_steps="4", ckpt_out=str(ckpt))
    saved = checks.run_worker(context, args, launcher=mpiexec_on_path, env=env)
    assert checks.judge_fit(saved, 2, "cpu", "DDP", ("HydraEnvironment",)).startswith("2 ranks, DDPStrategy, loss")
    args = checks._fit_args(context, "ddp", 2, max_steps="8", ckpt_in=str(ckpt))
    resumed = checks.run_worker(context, args, launcher=mpiexec_on_path, env=env)
    assert checks.judge_resume(saved, resumed, 2, "DDP checkpoint") == (
        "saved at step 4, resumed there on 2 ranks, trained to 8")


@pytest.mark.mpi
def test_collectives_worker_for_real_under_mpiexec(tmp_path: Path, mpiexec_on_path: list[str]) -> None:
    """The collectives worker reads its ranks from the launcher (as over 2 nodes) and all-reduces/broadcasts."""
    context = Context("cpu", 2, tmp_path)
    reports = checks.run_worker(context, ["collectives", "--backend", "gloo", "--device", "cpu"],
                                launcher=mpiexec_on_path, env=checks._launcher_env(context))
    assert checks.judge_collectives(reports, 2) == (
        "all-reduce and object broadcast over 2 ranks on 1 host(s), backend gloo")


def write_site_job(site: str, prefix: Path) -> Path:
    """<prefix>/validate_lightning.sh as the install writes it (lxpu_admin/install/tagfiles.py), fed the site's
    validation data from the rendered recipe data (recipes/sites/<site>.toml [validation])."""
    from lxpu_admin.install.tagfiles import write_site_validation_job

    jobs = json.loads((REPO / "recipes" / "rendered" / "install-data.json").read_text())["jobs"]
    data = next(job["validation"] for key, job in jobs.items() if key.startswith(f"{site}/"))
    return write_site_validation_job(prefix, data)


def run_site_job(site: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = without_prefixes(os.environ, "SLURM_", "PBS_")
    env["PYTHONPATH"] = str(REPO)  # a --python must import lightning_xpu: it checks the options past the environment
    job = write_site_job(site, cwd.parent / f"{cwd.name}-prefix")
    return subprocess.run(["bash", str(job), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def wait_for_job(job_id: str, seconds: float = 300) -> tuple[str, str]:
    """(state, exit code) of a Slurm job once it ended (polled each second; `sbatch --wait` polls far slower)."""
    deadline = time.monotonic() + seconds
    while True:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
        fields = dict(field.split("=", 1) for field in shown.stdout.split() if "=" in field)
        state = fields.get("JobState", "GONE")
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
            return state, fields.get("ExitCode", "?")
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=30)
            pytest.fail(f"job {job_id} did not end within {seconds} s")
        time.sleep(1)


@pytest.mark.slurm
def test_the_generic_site_job_under_sbatch(tmp_path: Path) -> None:
    """The job as a site submits it (cpu variant here): sbatch from the prefix the install wrote it into (a prefix
    with a space, holding the install's setup script), the report in the submit directory; every XPU check skipped
    with the reason."""
    require_service("slurm", shutil.which("sbatch") is not None, "no sbatch: bash ci/services/slurm.sh start")
    prefix = tmp_path / "my prefix"
    prefix.mkdir()
    bin_dir = Path(sys.executable).parent
    (prefix / "lightning-setup-2.13-cpu.sh").write_text(
        f'export PATH="{bin_dir}:$PATH" PYTHONPATH="{REPO}" LIGHTNING_XPU_VARIANT=cpu\n')
    submit_dir = prefix
    write_site_job("generic", prefix)
    log = tmp_path / "job.log"
    env = without_prefixes(os.environ, "SLURM_", "PBS_")
    submitted = subprocess.run(["sbatch", "--parsable", "-t", "5", "-o", str(log), "validate_lightning.sh",
                                "--prefix", str(prefix), "--tag", "2.13-cpu"], cwd=submit_dir, env=env,
                               capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    state, exit_code = wait_for_job(job_id)
    output = f"job {job_id} {state} {exit_code}:\n" + (log.read_text() if log.exists() else "(no output)")
    out = submit_dir / f"lightning-xpu-validation-{job_id}"
    try:
        assert (state, exit_code) == ("COMPLETED", "0:0"), output
        data = json.loads((out / "validation.json").read_text())
        markdown = (out / "validation.md").read_text()
        sent = sorted(path.name for path in out.iterdir())  # the picture of the communication check, the bundle
    finally:
        shutil.rmtree(out, ignore_errors=True)
    check_report(data)
    assert [check["name"] for check in data["checks"]] == [spec.name for spec in checks_of("site")]
    statuses = {check["name"]: (check["status"], check["reason"]) for check in data["checks"]}
    for spec in checks_of("site"):
        if spec.needs_xpu:  # never "passed" without an Intel GPU
            assert statuses[spec.name] == (SKIP, NO_XPU)
    assert statuses["runtime"][0] == PASS
    assert statuses["communication"][0] == PASS and statuses["communication"][1].startswith("within a node, 2 ranks")
    assert sent == ["validation-communication.svg", "validation.json", "validation.md", "validation.tar.gz"]
    assert data["versions"]["variant"] == "cpu" and data["versions"]["variant_source"] == "LIGHTNING_XPU_VARIANT"
    assert data["versions"]["torch_build"] == "cpu" and data["environment"]["SLURM_JOB_ID"] == job_id
    assert "the cpu variant of lightning-xpu is loaded" in data["notes"][0]
    assert "| `bf16_fit` | skipped | no Intel GPU |" in markdown
    assert f"validate: {data['summary'][PASS]} passed, 0 failed" in output
    assert "'Validation report' issue template" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give exactly one of --tag (with --prefix), --setup, --module or --python"),
        (("--python", "python3", "--nodes", "3"), "--nodes must be 1 or 2, got '3'"),
        (("--python", "python3", "--devices", "x"), "--devices must be a positive number, got 'x'"),
        (("--setup", "/nonexistent/setup.sh"), "no setup script /nonexistent/setup.sh"),
        (("--tag", "2.13", "--prefix", "/no where"), "no install of lightning-xpu 2.13 under /no where"),
        (("--only",), "--only needs a value"),
    ],
)
def test_site_job_bad_input_gives_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = run_site_job("aurora", *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith(f"validate_lightning.sh: {message}")
    assert len(done.stderr.splitlines()) == 1 and not list(tmp_path.iterdir())


@pytest.mark.parametrize("site", sorted(path.stem for path in (REPO / "recipes" / "sites").glob("*.toml")))
def test_every_site_job_has_help(site: str, tmp_path: Path) -> None:
    done = run_site_job(site, "--help", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: validate_lightning.sh")



def test_site_job_refuses_a_python_without_a_current_lightning_xpu(tmp_path: Path) -> None:
    """One prefix's job serves every tag in it; a Python whose lightning_xpu is missing (here: no site-packages at
    all) or predates the job's hand-over gets one line naming both fixes, not an argparse error."""
    python = tmp_path.parent / f"{tmp_path.name}-python"
    python.write_text('#!/bin/sh\nexec python3 -I -S "$@"\n')
    python.chmod(0o755)
    done = run_site_job("aurora", "--python", str(python), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"validate_lightning.sh: {python} has no lightning_xpu, or one older than this job")
    assert "rerun that tag's install job with --force" in done.stderr and not list(tmp_path.iterdir())
