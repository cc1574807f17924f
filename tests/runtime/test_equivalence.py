"""Without XPU, lightning_xpu changes no decision of Lightning's connectors (issue 2, item 9).

Each side runs in a fresh subprocess (`_equivalence_probe.py`) that builds Trainers and Fabrics over a grid of
accelerator/devices/strategy/precision/num_nodes arguments, with and without simulated CUDA, and reports the
accelerator, strategy, devices, launcher, backend, precision plugin and its device, gradient scaler, cluster
environment, the warnings and the log lines, or the error. The unpatched side runs with `LIGHTNING_XPU_DISABLE=1`.
The launch environments are those unpatched Lightning handles correctly: none, torchrun and srun; spawn is the
`ddp_spawn` column of the grid. (mpiexec is left out on purpose: there lightning_xpu deliberately differs.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lightning_grid import newest_lightning_only

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("_equivalence_probe.py")

# Variables by which Lightning (or lightning_xpu) detects a launcher; cleared so each side sees only its launch.
LAUNCH_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "PALS_", "OMPI_", "MPI_", "HYDRA_", "LSB_", "JSM_", "TORCHELASTIC_",
                   "PBS_", "I_MPI_", "LT_")
LAUNCH_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "NODE_RANK",
                "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LIGHTNING_XPU_DISABLE")

LAUNCHES: dict[str, dict[str, str]] = {
    "none": {},
    "torchrun": {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                 "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511",
                 "TORCHELASTIC_RUN_ID": "equivalence"},
    "srun": {"SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
             "SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train.py",
             "SLURM_NODELIST": "node01", "SLURM_JOB_NUM_NODES": "1"},
}
# What each launch's subprocess evaluates (NAMESPACE:SIZE, see the probe): the whole grid once, smaller ones elsewhere.
RUNS = {
    "none": ("lightning:full", "standalone:launch"),
    "torchrun": ("lightning:launch",),
    "srun": ("lightning:launch",),
}
CASES = [(launch, run) for launch, runs in RUNS.items() for run in runs]
# The grid starts 2 x 4 fresh interpreters: once per CI run, on the newest Lightning (the unit stage runs
# tests/runtime in every Lightning venv; the per-version patch set is asserted by test_versions.py there).
pytestmark = newest_lightning_only


def _environment(launch: str, patched: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_PREFIXES) and k not in LAUNCH_NAMES}
    env.update(LAUNCHES[launch])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    if not patched:
        env["LIGHTNING_XPU_DISABLE"] = "1"
    return env


def _probe(launch: str, patched: bool, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(PROBE), *RUNS[launch]], env=_environment(launch, patched), cwd=cwd,
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, f"probe {launch}, patched={patched} failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], dict[str, Any]]:
    """All subprocesses at once (each spends much of its time importing Lightning)."""
    cwd = tmp_path_factory.mktemp("equivalence")
    keys = [(launch, patched) for launch in RUNS for patched in (True, False)]
    with ThreadPoolExecutor(max_workers=len(keys)) as pool:
        results = list(pool.map(lambda key: _probe(*key, cwd), keys))
    return dict(zip(keys, results))


# The one deliberate difference (issue 20, "one error style"): where Lightning finds no gpu backend at all, the same
# exception says why XPU cannot stand in (a CPU build, no device) in one line, after Lightning's message, which stays
# first and unchanged (issue 29: code matching Lightning's text keeps working).
NO_GPU_BACKEND = "No supported gpu backend found!"


def _same_outcome(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    if mine == theirs:
        return True
    error, lightnings = mine.get("error"), theirs.get("error")
    return bool(
        error and lightnings and error[0] == lightnings[0]  # the same exception type
        and lightnings[1] == NO_GPU_BACKEND and error[1].startswith(NO_GPU_BACKEND + " No CUDA, no MPS, and ")
        and {k: v for k, v in mine.items() if k != "error"} == {k: v for k, v in theirs.items() if k != "error"}
    )


def assert_same_choices(patched: dict[str, Any], unpatched: dict[str, Any]) -> None:
    """One probe's run with and without lightning_xpu: the same decision points, each with the same outcome."""
    assert patched["xpu_registered"] and not unpatched["xpu_registered"]  # each side is what it claims
    assert [label for label, _ in patched["points"]] == [label for label, _ in unpatched["points"]]
    differences = [
        f"{label}\n  with lightning_xpu:    {mine}\n  without lightning_xpu: {theirs}"
        for (label, mine), (_, theirs) in zip(patched["points"], unpatched["points"])
        if not _same_outcome(mine, theirs)
    ]
    assert not differences, f"{len(differences)} of {len(patched['points'])} differ:\n" + "\n".join(differences[:5])


@pytest.mark.parametrize(("launch", "run"), CASES)
def test_connector_choices_are_unpatched_lightnings(probes, launch: str, run: str) -> None:
    patched, unpatched = probes[(launch, True)][run], probes[(launch, False)][run]
    assert_same_choices(patched, unpatched)


@pytest.mark.parametrize(("launch", "run"), CASES)
def test_the_grid_reaches_cuda_and_the_launch_environment(probes, launch: str, run: str) -> None:
    """Guards the comparison above against a grid that silently stopped covering CUDA or the launcher."""
    choices = [result["choice"] for _, result in probes[(launch, False)][run]["points"] if "choice" in result]
    assert any(c["accelerator"] == "CUDAAccelerator" and c["root_device"].startswith("cuda") for c in choices)
    if run.endswith(":full"):
        assert any(c["precision"][0] == "MixedPrecision" and c["precision"][2] == "cuda" for c in choices)
    assert any(c["strategy"] == "FSDPStrategy" for c in choices)
    assert any(c["launcher"] and c["launcher"][1] == "spawn" for c in choices)
    expected = {"none": "LightningEnvironment", "torchrun": "TorchElasticEnvironment", "srun": "SLURMEnvironment"}
    assert any(c["cluster_environment"][0] == expected[launch] for c in choices)
