"""Helpers for running the site training job scripts (scripts/<site>/train_*) on CPU, shared by
tests/docs/test_site_job_docs.py (bash runs) and tests/install/test_site_jobs.py (sbatch and qsub runs).

The ranks run this interpreter (CI's base venv) with the repository on PYTHONPATH and the site's [env] from
recipes/sites/<site>.toml, through a setup script (LIGHTNING_XPU_SETUP): the cheap path, no install. The script
is named like a CPU build's (`-cpu.sh`), so the job's device check expects the CPU, and passes only when the
Trainer's banner was in the log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

from tests.runtime.launches import without_prefixes

REPO = Path(__file__).resolve().parents[1]
TOY_FIT_DIR = REPO / "scripts" / "common"
DAWN_SCRIPTS = sorted((REPO / "scripts" / "dawn").glob("train_*.sbatch"))
AURORA_SCRIPTS = sorted((REPO / "scripts" / "aurora").glob("train_*.pbs"))
CI_RANKS = 2  # at most this many ranks per job on a 2-core machine
ACCOUNT = "lxpu-test"
JOB_TIMEOUT_S = 300


def site_setup(directory: Path, site: str, extra_path: list[str] | None = None) -> Path:
    """A setup script standing in for an install's: base venv first on PATH, this repository importable, and the
    site's environment exactly as its profile sets it."""
    env = tomllib.loads((REPO / "recipes" / "sites" / f"{site}.toml").read_text()).get("env", {})
    path = [str(Path(sys.executable).parent), *(extra_path or [])]
    lines = [f"export PATH={':'.join(path)}:\"$PATH\"", f"export PYTHONPATH={str(REPO)!r}"]
    lines += [f"export {name}={setting['value']!r}" for name, setting in env.items()]
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / f"lightning-setup-test-{site}-cpu.sh"
    script.write_text("\n".join(lines) + "\n")
    return script


def work_directory(directory: Path) -> Path:
    """A user's directory with a train.py: the toy fit (copied beside it), reporting each rank into ranks/."""
    directory.mkdir(parents=True)
    shutil.copy(TOY_FIT_DIR / "toy_fit.py", directory / "toy_fit.py")
    (directory / "train.py").write_text(
        "import sys\n"
        "import toy_fit\n"
        'sys.exit(toy_fit.main(["--out", "ranks", "--import-lightning-xpu", "--samples", "32", *sys.argv[1:]]))\n'
    )
    return directory


def job_env(setup: Path, **extra: str) -> dict[str, str]:
    env = without_prefixes(os.environ, "LIGHTNING_XPU_", "SLURM_", "PBS_", "PALS_")
    env.update(LIGHTNING_XPU_SETUP=str(setup), LIGHTNING_XPU_REPO=str(REPO), OMP_NUM_THREADS="1", **extra)
    return env


def rank_reports(work: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted((work / "ranks").glob("rank-*.json"))]


def assert_one_ddp_run(work: Path, ranks: int) -> list[dict]:
    reports = rank_reports(work)
    assert sorted(report["global_rank"] for report in reports) == list(range(ranks)), reports
    assert {report["world_size"] for report in reports} == {ranks}
    assert len({report["final_weights_sha256"] for report in reports}) == 1, "ranks ended with different weights"
    assert reports[0]["final_weights_sha256"] != reports[0]["initial_weights_sha256"], "nothing was trained"
    return reports


def header_value(script: Path, pattern: str) -> str:
    found = re.search(pattern, script.read_text(), re.MULTILINE)
    assert found, f"{script.name}: no header matching {pattern}"
    return found[1]


def scontrol(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def pals_bin(directory: Path) -> Path:
    """A bin directory whose `mpiexec` is the PALS stand-in."""
    directory.mkdir(parents=True, exist_ok=True)
    launcher = directory / "mpiexec"
    launcher.write_text(
        f'#!/bin/sh\nexec {sys.executable!r} {str(Path(__file__).with_name("pals_standin.py"))!r} "$@"\n'
    )
    launcher.chmod(0o755)
    return directory


def aurora_shape(script: Path) -> tuple[int, int, list[str]]:
    """(nodes from select=, ranks per node from --ppn, CPU_BIND list entries) of an Aurora job script."""
    nodes = int(header_value(script, r"^#PBS -l select=(\d+)"))
    ranks = int(header_value(script, r"--ppn (\d+)"))
    binding = header_value(script, r"^CPU_BIND=(\S+)").split("list:", 1)[1].split(":")
    return nodes, ranks, binding


