"""The validation job for real, on CPU: `lightning-xpu validate` in the base venv (as CI runs it, cpu variant),
its report checked against the committed schema, and the launched checks' worker run as real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_xpu.report import FAIL, PASS, SKIP
from lightning_xpu.report.checks import CHECKS, NO_XPU, Context, run_check
from lightning_xpu.report.schema import check_report

REPO = Path(__file__).resolve().parents[2]
BY_NAME = {spec.name: spec for spec in CHECKS}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "lightning_xpu", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_validate_refuses_an_unknown_check(tmp_path: Path) -> None:
    done = run_cli("validate", "--only", "bogus", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("lightning-xpu validate: unknown check(s) bogus; known: runtime, patches,")
    assert not list(tmp_path.iterdir())


def test_doctor_prints_the_full_picture(tmp_path: Path) -> None:
    done = run_cli("doctor", "--json", str(tmp_path / "d.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "d.json").read_text())
    check_report(data)
    checks = {check["name"]: check for check in data["checks"]}
    assert checks["xpu_usable"]["status"] == FAIL and "CPU build" in checks["xpu_usable"]["reason"]
    assert checks["xpu_collectives"]["status"] == SKIP
    assert checks["launcher"]["reason"].startswith("none: a single process")
    for text in ("| torch | 2.", "| torch_build | cpu |", "| variant |", "| level_zero_loader |", "xpu_collectives"):
        assert text in done.stdout


def test_the_patch_report(tmp_path: Path) -> None:
    done = run_cli("report", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("lightning_xpu 0.")
    code = "import lightning_xpu; lightning_xpu.report()"
    via_function = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)},
                                  capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert via_function.stdout == done.stdout


def test_the_checkpoint_check_for_real_on_cpu(tmp_path: Path) -> None:
    """The worker as real processes: a 2-rank DDP fit (Lightning starts rank 1) saves, a second one resumes."""
    result = run_check(BY_NAME["checkpoint_ddp"], Context("cpu", 2, tmp_path))
    assert (result.status, result.reason) == (PASS, "saved at step 4, resumed there on 2 ranks, trained to 8")


@pytest.mark.mpi
def test_ddp_under_mpiexec_for_real_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mpiexec = os.environ.get("LXPU_MPICH_MPIEXEC", "/usr/bin/mpiexec.mpich")
    from tests.conftest import require_service

    require_service("MPICH", Path(mpiexec).exists(), f"no {mpiexec}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpiexec").write_text(f'#!/bin/sh\nexec "{mpiexec}" "$@"\n')  # Hydra finds its proxy beside it
    (bin_dir / "mpiexec").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("mpiexec") == str(bin_dir / "mpiexec")
    result = run_check(BY_NAME["ddp_mpiexec"], Context("cpu", 2, tmp_path, launchers=("mpiexec",)))
    assert result.status == PASS and result.reason.startswith("2 ranks, DDPStrategy, loss"), result.reason


def run_site_job(site: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "PBS_"))}
    return subprocess.run(["bash", str(REPO / "scripts" / site / "validate_lightning.sh"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_generic_site_job_under_bash_loads_a_setup_script(tmp_path: Path) -> None:
    """The job as a site runs it (cpu variant here): a setup script in a prefix with a space, the report beside."""
    prefix = tmp_path / "my prefix"
    prefix.mkdir()
    bin_dir = Path(sys.executable).parent
    (prefix / "lightning-setup-2.13-cpu.sh").write_text(
        f'export PATH="{bin_dir}:$PATH" PYTHONPATH="{REPO}" LIGHTNING_XPU_VARIANT=cpu\n')
    out = tmp_path / "report dir"
    done = run_site_job("generic", "--prefix", str(prefix), "--tag", "2.13-cpu", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "validation.json").read_text())
    check_report(data)
    assert [check["name"] for check in data["checks"]] == [spec.name for spec in CHECKS]
    statuses = {check["name"]: (check["status"], check["reason"]) for check in data["checks"]}
    for spec in CHECKS:
        if spec.needs_xpu:  # never "passed" without an Intel GPU
            assert statuses[spec.name] == (SKIP, NO_XPU)
    assert statuses["runtime"][0] == PASS
    assert data["versions"]["variant"] == "cpu" and data["versions"]["variant_source"] == "LIGHTNING_XPU_VARIANT"
    assert data["versions"]["torch_build"] == "cpu"
    assert "the cpu variant of lightning-xpu is loaded" in data["notes"][0]
    assert "| `bf16_fit` | skipped | no Intel GPU |" in (out / "validation.md").read_text()
    assert f"validate: {data['summary'][PASS]} passed, 0 failed" in done.stdout
    assert "'Validation report' issue template" in done.stdout


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


@pytest.mark.parametrize("site", ["dawn", "aurora", "generic"])
def test_every_site_job_has_help(site: str, tmp_path: Path) -> None:
    done = run_site_job(site, "--help", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: validate_lightning.sh")
