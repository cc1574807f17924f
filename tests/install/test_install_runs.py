"""Post-install runs inside the loaded module: a 2-task DDP toy fit under `sbatch` + `srun`, and under
`mpiexec -n 2` of MPICH and of Intel MPI (no mpi4py). The MPI launches rely on lightning_xpu's launch
detection (unpatched Lightning does not see an MPI launch without mpi4py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import install_harness as h
import pytest

from tests.runtime.launches import without_prefixes

pytestmark = [pytest.mark.install, pytest.mark.lmod]

TOY_ARGS = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp")
LAUNCH_TIMEOUT_S = 300


def assert_ran_in_the_install(reports: list[dict], prefix: Path) -> None:
    for report in reports:
        assert Path(report["python"]) == h.published_build(prefix) / "bin" / "python", report["python"]


@pytest.mark.slurm
def test_srun_ddp_inside_the_module(good_prefix: Path, tmp_path: Path) -> None:
    h.require(h.lmod_available(), "Lmod")
    h.require(h.slurm_up(), "the Slurm cluster")
    out = tmp_path / "ranks"
    batch = tmp_path / "toy.sbatch"
    batch.write_text(
        "#!/usr/bin/env bash\n"
        "#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=2\n"
        "#SBATCH --time=10\n#SBATCH --job-name=lxpu-toy-srun\n"
        + h.with_module(good_prefix, "srun --kill-on-bad-exit=1 " + h.toy_fit_command(out, *TOY_ARGS))
    )
    output = tmp_path / "slurm.out"
    submit = subprocess.run(
        ["sbatch", "--parsable", f"--output={output}", str(batch)],
        env=h.job_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    h.wait_for_slurm_job(submit.stdout.strip().split(";")[0], timeout=LAUNCH_TIMEOUT_S)
    reports = h.rank_reports(out)
    assert len(reports) == 2, output.read_text()  # never trust the job state alone
    h.assert_ddp_reports(reports)
    assert {r["cluster_environment"] for r in reports} == {"SLURMEnvironment"}
    assert sorted(int(r["launch_environment"]["SLURM_PROCID"]) for r in reports) == [0, 1]
    assert_ran_in_the_install(reports, good_prefix)


@pytest.mark.parametrize(
    "kind", [pytest.param("mpich", marks=pytest.mark.mpi), pytest.param("impi", marks=pytest.mark.impi)]
)
def test_mpiexec_ddp_inside_the_module(kind: str, good_prefix: Path, tmp_path: Path) -> None:
    h.require(h.lmod_available(), "Lmod")
    launcher = h.mpiexec(kind)
    h.require(launcher is not None, f"{kind} mpiexec")
    out = tmp_path / "ranks"
    # Outside any Slurm job (its variables removed), so the MPI launch is the only launcher in sight.
    env = without_prefixes(h.job_env(), "SLURM_")
    command = f"timeout -k 10 {LAUNCH_TIMEOUT_S} {h.q(str(launcher))} -n 2 " + h.toy_fit_command(
        out, *TOY_ARGS
    )
    result = h.bash(h.with_module(good_prefix, command), env=env, timeout=LAUNCH_TIMEOUT_S + 30)
    reports = h.rank_reports(out)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(reports) == 2, result.stderr[-3000:]
    h.assert_ddp_reports(reports)
    # Each process is one MPI rank: no rank spawned a world of its own.
    for report in reports:
        assert int(report["launch_environment"]["PMI_RANK"]) == report["global_rank"], report
    assert {r["cluster_environment"] for r in reports} != {"LightningEnvironment"}
    assert_ran_in_the_install(reports, good_prefix)
