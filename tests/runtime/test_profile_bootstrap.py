"""Launched ranks get the same faithful profile as the test that launches them (tests/bootstrap/sitecustomize.py),
through a plain child process and through a real mpiexec (on the newest Lightning of the CI venvs only: the bootstrap
does not depend on Lightning)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.xpu_profiles import Profile
from tests.xpu_simulation import bootstrap_env

REPO = Path(__file__).resolve().parents[2]
RANK = """
import json, os, torch
import torch.distributed as dist
count = torch.xpu.device_count()  # counting poisons fork on 2.7 (row count_poisons_fork)
child = os.fork()
if child == 0:
    try:
        torch.xpu.get_rng_state_all()
        os._exit(0)
    except RuntimeError:
        os._exit(3)  # "Cannot re-initialize XPU in forked subprocess"
_, status = os.waitpid(child, 0)
print(json.dumps({"rank": os.environ.get("PMI_RANK", "0"), "count": count, "xccl": dist.is_xccl_available(),
                  "child_refused_xpu": os.waitstatus_to_exitcode(status) == 3}))
"""
EXPECTED = {"count": 3, "xccl": False, "child_refused_xpu": True}  # torch 2.7: no XCCL in the wheels


def environment() -> dict[str, str]:
    return bootstrap_env(Profile("2.7"), dict(os.environ, PYTHONPATH=str(REPO)), devices=3)


def test_a_launched_process_simulates_the_same_profile(newest_lightning_only: bool) -> None:
    done = subprocess.run([sys.executable, "-c", RANK], env=environment(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"rank": "0", **EXPECTED}


def test_without_a_profile_the_bootstrap_does_nothing(newest_lightning_only: bool) -> None:
    env = environment()
    del env["LXPU_SIM_PROFILE"]
    code = "import sys; print(sorted(name for name in sys.modules if name.startswith('tests')))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.strip() == "[]"  # nothing of the simulation was loaded


@pytest.mark.mpi
def test_mpiexec_ranks_simulate_the_same_profile(newest_lightning_only: bool) -> None:
    mpiexec = os.environ.get("LXPU_MPICH_MPIEXEC", "")
    require_service("MPICH mpiexec", bool(mpiexec) and Path(mpiexec).is_file(), "set LXPU_MPICH_MPIEXEC")
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, "-c", RANK], env=environment(), capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda rank: rank["rank"])
    assert ranks == [{"rank": "0", **EXPECTED}, {"rank": "1", **EXPECTED}]
