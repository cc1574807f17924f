"""The rendered job scripts as jobs: the install job runs under real Slurm (`sbatch`, from Slurm's spool
copy) with a stub engine, and the smoke job finds an install and calls its smoke.py with the right options
(fake install tree whose bin/python is a stub that prints its arguments)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fake_install import make_install
from recipe_helpers import ENGINE, Rendered, bash, require, run_render

STUB_ENGINE = (
    "lxpu_main() {\n"
    '  echo "stub engine: $LXPU_VERSION $LXPU_SITE $LXPU_PYTHON_cpu $LXPU_LOCK_cpu from $LXPU_SOURCE"\n'
    '  echo "args: $*"\n'
    '  echo "running from: $0"\n'
    "}\n"
)


def _slurm_up() -> bool:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    done = subprocess.run(
        ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False, timeout=30
    )
    return any(state.strip("*~#") in ("idle", "mixed", "allocated") for state in done.stdout.split())


@pytest.mark.slurm
def test_install_job_runs_under_sbatch(temp_recipes: Path) -> None:
    require(_slurm_up(), "a running Slurm cluster (sinfo reports no idle/mixed/allocated node)")
    engine = temp_recipes / ENGINE
    contract = next(
        line for line in engine.read_text().splitlines() if line.startswith("LXPU_ENGINE_CONTRACT=")
    )
    # shellcheck clean, as render (which refuses what check refuses) wants every hand-written shell file
    lint = "#!/usr/bin/env bash\n# shellcheck disable=SC2034,SC2154  # read by the job; set by the job\n"
    engine.write_text(lint + contract + "\n" + STUB_ENGINE)
    out = temp_recipes / "out"
    done = run_render("render", "--torch", "2.13", "--site", "generic", "--out", str(out), repo=temp_recipes)
    assert done.returncode == 0, done.stderr
    jobs = out / "scripts/generic"
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--wait",
            "--chdir",
            str(jobs),
            str(jobs / "install_lightning_2.13.sh"),
            "--dry-run",
        ],
        cwd=jobs,  # the submit directory: the spool copy finds the repository (and its engine) from there
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    log = (jobs / f"lxpu-install-2.13-{job_id}.log").read_text()
    assert f"stub engine: 2.13 generic 3.11 recipes/locks/2.13-cpu.txt from {temp_recipes.resolve()}\n" in log
    assert "args: --dry-run\n" in log
    assert f"running from: {jobs}" not in log  # Slurm runs its own spool copy: the job must not need $0


def test_smoke_job_calls_smoke_py(rendered: Rendered, tmp_path: Path) -> None:
    prefix = tmp_path / "pre fix"
    install = make_install(rendered, prefix, "2.13-cpu", "generic", False)
    smoke = rendered.path("scripts/generic/smoke_lightning_2.13.sh")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = bash(f'bash "{smoke}" --prefix "{prefix}" --json "{tmp_path}/r.json"', env)
    assert done.returncode == 0, done.stderr
    root = install.build  # the one build <prefix>/2.13-cpu points to when the smoke job starts
    assert done.stdout.splitlines()[-1] == "fake-python"
    assert f"lightning-xpu 2.13-cpu at {root}; report: {tmp_path}/r.json" in done.stdout


def test_smoke_job_options_reach_smoke_py(rendered: Rendered, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    builds = {}
    for tag in ("2.13", "2.13-cpu"):
        install = make_install(rendered, prefix, tag, "dawn", False)
        python = install.root / "bin/python"
        python.write_text('#!/bin/sh\necho "python $*"\n')
        builds[tag] = install.build
    smoke = rendered.path("scripts/dawn/smoke_lightning_2.13.sh")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    xpu = bash(f'bash "{smoke}" --prefix "{prefix}" --json j.json', env)
    assert (
        xpu.stdout.splitlines()[-1]
        == f"python {builds['2.13']}/share/lightning-xpu/smoke.py --json j.json --require-xpu"
    )
    cpu = bash(f'bash "{smoke}" --prefix="{prefix}" --variant cpu --json j.json', env)
    assert (
        cpu.stdout.splitlines()[-1] == f"python {builds['2.13-cpu']}/share/lightning-xpu/smoke.py --json j.json"
    )


def test_smoke_job_without_an_install_says_what_to_do(rendered: Rendered, tmp_path: Path) -> None:
    smoke = rendered.path("scripts/generic/smoke_lightning_2.13.sh")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = bash(f'bash "{smoke}" --variant auto', env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"smoke_lightning_2.13.sh: no install of lightning-xpu 2.13-cpu under {tmp_path}/lightning-xpu (no "
        f"{tmp_path}/lightning-xpu/lightning-setup-2.13-cpu.sh): run install_lightning_2.13.sh --variant cpu "
        "first, or give --prefix"
    )
    bad = bash(f'bash "{smoke}" --variant rocm', env)
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        == "smoke_lightning_2.13.sh: unknown variant 'rocm' (this version has: xpu, cpu, cuda, auto)"
    )
    assert bash(f'bash "{smoke}" --help', env).stdout.startswith("Usage: smoke_lightning_2.13.sh")
