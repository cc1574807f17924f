"""The rendered job scripts as jobs: the install job runs under real Slurm (`sbatch`, from Slurm's spool
copy) with a stub install driver.
(The smoke job is `lightning-xpu validate --level smoke`: tests/runtime/test_smoke_*.py.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import ENGINE, MINOR, PLAIN_SITE, load_recipes, require, run_render

STUB_ENGINE = (
    "def main(data, source, argv):\n"
    "    cpu = data['variants']['cpu']\n"
    "    print('stub engine:', data['version'], data['site'], cpu['python'], cpu['lock'], 'from', source)\n"
    "    print('args:', *argv)\n"
    "    return 0\n"
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
    engine.write_text(STUB_ENGINE)
    out = temp_recipes / "out"
    done = run_render("render", "--torch", MINOR, "--site", PLAIN_SITE, "--out", str(out), repo=temp_recipes)
    assert done.returncode == 0, done.stderr
    jobs = out / "scripts" / PLAIN_SITE
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--wait",
            "--chdir",
            str(jobs),
            str(jobs / f"install_lightning_{MINOR}.sh"),
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
    log = (jobs / f"lxpu-install-{MINOR}-{job_id}.log").read_text()
    recipes = load_recipes(temp_recipes / "recipes")
    python, lock = recipes.matrix.version(MINOR).python, recipes.lock_path(MINOR, "cpu")
    lock = recipes.shown(lock) if lock.is_file() else ""
    assert f"stub engine: {MINOR} {PLAIN_SITE} {python} {lock} from {temp_recipes.resolve()}\n" in log
    assert "args: --dry-run\n" in log
