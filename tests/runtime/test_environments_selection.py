"""Trainer and Fabric choose the cluster environment of the launcher that started the process, in both
namespaces, on every device; and what unpatched Lightning chooses instead (the upstream bugs).

Launches are simulated by their environment variables (tests/runtime/launches.py); test_launch.py runs the
real launchers.
"""

from __future__ import annotations

import importlib
import os
import socket
import warnings
from typing import Any

import pytest
from lightning_grid import FABRIC_OF, FABRIC_PACKAGES, QUIET, TRAINER_PACKAGES

from lightning_xpu._patching import is_wrapped, original_of
from tests.runtime import launches

TARGETS = [("trainer", module) for module in TRAINER_PACKAGES] + [("fabric", module) for module in FABRIC_PACKAGES]


@pytest.fixture(autouse=True)
def _keep_rank_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fabric's DDP strategy sets the process-wide `rank_zero_only.rank` from the (simulated) launch when it is
    built; put it back afterwards, or later tests would run as rank 1 and lose every rank-zero warning."""
    # Lightning's modules first: importing them gives lightning_utilities' rank_zero_only its rank.
    rank_zero_modules = [f"{fabric}.utilities.rank_zero" for fabric in FABRIC_PACKAGES]
    for name in (*rank_zero_modules, "lightning_utilities.core.rank_zero"):
        rank_zero_only = importlib.import_module(name).rank_zero_only
        monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)


def _environments(module: str) -> Any:
    return importlib.import_module(f"{FABRIC_OF.get(module, module)}.plugins.environments")


def _connector(kind: str, module: str, **kwargs: Any) -> Any:
    """The connector of a Trainer or Fabric built for a 2-process DDP run on CPU (unless overridden)."""
    arguments: dict[str, Any] = {"accelerator": "cpu", "devices": 2, "strategy": "ddp", **kwargs}
    package = importlib.import_module(module)
    if kind == "trainer":
        trainer = package.Trainer(**QUIET, **arguments)
        return trainer._accelerator_connector
    return package.Fabric(**arguments)._connector


def _chosen(kind: str, module: str, **kwargs: Any) -> Any:
    return _connector(kind, module, **kwargs).cluster_environment


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize(
    ("environ", "name", "rank"),
    [
        ({}, "LightningEnvironment", 0),
        (launches.SRUN, "SLURMEnvironment", 1),
        (launches.SRUN_PMI2, "SLURMEnvironment", 1),
        (launches.BATCH, "SLURMEnvironment", 0),  # python in a batch script: Lightning's choice is kept
        (launches.MPICH, "HydraEnvironment", 1),
        (launches.INTEL_MPI, "HydraEnvironment", 1),
        (launches.MPICH_IN_SBATCH, "HydraEnvironment", 1),
        (launches.INTEL_MPI_IN_SBATCH, "HydraEnvironment", 1),
        (launches.OPENMPI, "OpenMPIEnvironment", 1),
        (launches.PALS, "PALSEnvironment", 1),
        (launches.TORCHRUN, "TorchElasticEnvironment", 1),
        ({**launches.MPICH_IN_SBATCH, **launches.TORCHRUN}, "TorchElasticEnvironment", 1),  # torchrun keeps priority
    ],
    ids=["none", "srun", "srun-pmi2", "batch-script", "mpich", "intel-mpi", "mpich-in-sbatch", "intel-mpi-in-sbatch",
         "openmpi", "pals", "torchrun", "torchrun-under-mpiexec"],
)
def test_the_launcher_that_started_the_process_decides(kind, module, environ, name, rank, monkeypatch) -> None:
    launches.launch(monkeypatch, environ)
    env = _chosen(kind, module)
    assert type(env).__name__ == name
    assert isinstance(env, _environments(module).ClusterEnvironment)
    assert env.global_rank() == rank
    if name != "LightningEnvironment":
        assert env.creates_processes_externally and env.world_size() == 2


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_a_cluster_environment_the_user_passed_still_wins(kind, module, monkeypatch) -> None:
    launches.launch(monkeypatch, launches.MPICH_IN_SBATCH)
    mine = _environments(module).LightningEnvironment()
    assert _chosen(kind, module, plugins=[mine]) is mine


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_jsrun_keeps_lightnings_lsf_environment(kind, module, monkeypatch, tmp_path) -> None:
    rank_file = tmp_path / "rankfile"
    rank_file.write_text(f"launchnode\n{socket.gethostname()}\n{socket.gethostname()}\n")
    launches.launch(monkeypatch, {**launches.JSRUN, "LSB_DJOB_RANKFILE": str(rank_file)})
    # LSFEnvironment() exports MASTER_ADDR/PORT; set them through monkeypatch so that they are undone.
    monkeypatch.setenv("MASTER_ADDR", "launchnode")
    monkeypatch.setenv("MASTER_PORT", "29400")
    env = _chosen(kind, module)
    assert type(env).__name__ == "LSFEnvironment" and env.global_rank() == 1


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_a_single_mpi_rank_lets_lightning_start_the_processes(kind, module, monkeypatch) -> None:
    """`mpiexec -n 1` (e.g. to get devices on Aurora): Lightning spawns, as its MPIEnvironment would let it."""
    single = {**launches.MPICH, "PMI_RANK": "0", "PMI_SIZE": "1", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}
    launches.launch(monkeypatch, single)
    env = _chosen(kind, module)
    assert type(env).__name__ == "LightningEnvironment"
    assert not env.creates_processes_externally


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_mpi4py_is_never_asked_under_an_mpi_launcher(kind, module, monkeypatch) -> None:
    """With mpi4py installed, Lightning's MPIEnvironment.detect() initialises MPI and can freeze (#20049)."""
    launches.launch(monkeypatch, launches.MPICH)
    mpi = importlib.import_module(f"{FABRIC_OF.get(module, module)}.plugins.environments.mpi")
    monkeypatch.setattr(mpi, "_MPI4PY_AVAILABLE", True)

    def initialise_mpi() -> bool:
        raise AssertionError("MPIEnvironment.detect() was called: it would initialise MPI")

    monkeypatch.setattr(mpi.MPIEnvironment, "detect", staticmethod(initialise_mpi))
    assert type(_chosen(kind, module)).__name__ == "HydraEnvironment"


def test_the_choice_applies_on_xpu_too(simulated_xpu, monkeypatch) -> None:
    """Simulated XPU: launch detection does not depend on the device."""
    simulated_xpu(devices=2)
    launches.launch(monkeypatch, launches.MPICH_IN_SBATCH)
    env = _chosen("trainer", "lightning.pytorch", accelerator="xpu")
    assert type(env).__name__ == "HydraEnvironment" and env.global_rank() == 1


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_choosing_writes_nothing_into_os_environ(kind, module, monkeypatch) -> None:
    launches.launch(monkeypatch, launches.MPICH_TWO_HOSTS_IN_SBATCH)
    before = dict(os.environ)
    env = _chosen(kind, module, num_nodes=2)
    assert (env.main_address, env.node_rank()) == ("node1", 1)
    assert dict(os.environ) == before


# ---- the upstream bugs each patch fixes -----------------------------------------------------------------


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_unpatched_lightning_takes_mpiexec_in_sbatch_for_srun(kind, module, monkeypatch) -> None:
    """Both ranks read the batch script's SLURM_PROCID=0: two rank 0s, EADDRINUSE, then a hang."""
    launches.launch(monkeypatch, launches.MPICH_IN_SBATCH)  # rank 1
    connector = _connector(kind, module)
    slurm = _environments(module).SLURMEnvironment
    assert is_wrapped(slurm, "detect")
    monkeypatch.setattr(slurm, "detect", staticmethod(original_of(slurm, "detect")))  # Lightning alone
    unpatched = original_of(type(connector), "_choose_and_init_cluster_environment")(connector)
    assert type(unpatched).__name__ == "SLURMEnvironment"
    assert unpatched.global_rank() == 0


@pytest.mark.parametrize(("kind", "module"), TARGETS)
def test_unpatched_lightning_spawns_a_world_per_rank_under_mpiexec_without_mpi4py(kind, module, monkeypatch) -> None:
    launches.launch(monkeypatch, launches.MPICH)  # rank 1
    monkeypatch.setattr(importlib.import_module(f"{FABRIC_OF.get(module, module)}.plugins.environments.mpi"),
                        "_MPI4PY_AVAILABLE", False)
    connector = _connector(kind, module)
    unpatched = original_of(type(connector), "_choose_and_init_cluster_environment")(connector)
    assert type(unpatched).__name__ == "LightningEnvironment"
    assert not unpatched.creates_processes_externally  # this rank would start its own second process
    assert unpatched.global_rank() == 0


@pytest.mark.parametrize("fabric", FABRIC_PACKAGES)
def test_slurm_detect_is_false_under_mpiexec_in_sbatch(fabric, monkeypatch) -> None:
    """The Trainer's checkpoint connector also asks SLURMEnvironment.detect() at fit."""
    launches.launch(monkeypatch, launches.MPICH_IN_SBATCH)
    slurm = _environments(fabric).SLURMEnvironment
    assert original_of(slurm, "detect")() is True  # upstream: any SLURM_NTASKS means srun
    assert slurm.detect() is False
    launches.launch(monkeypatch, launches.SRUN)
    assert slurm.detect() is True


@pytest.mark.parametrize("fabric", FABRIC_PACKAGES)
@pytest.mark.parametrize(("launched", "plain"), [("MPICH", None), ("SALLOC_SRUN", "SALLOC_SHELL")],
                         ids=["mpiexec", "srun-in-an-interactive-job"])
def test_srun_not_used_warning_does_not_misfire(fabric, launched, plain, monkeypatch, tmp_path) -> None:
    """Lightning says to prepend srun on a machine with Slurm installed: under mpiexec, and under srun in a job
    named `interactive` (salloc), where it takes srun for "not used". Where no launcher (or python in the salloc
    shell) started the process, Lightning's warning stays."""
    fake_srun = tmp_path / "srun"
    fake_srun.write_text("#!/bin/sh\n")
    fake_srun.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    launches.launch(monkeypatch, getattr(launches, launched))
    slurm = _environments(fabric).SLURMEnvironment
    with pytest.warns(UserWarning, match="`srun` command is available on your system but is not used"):
        original_of(slurm, "_validate_srun_used")()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slurm._validate_srun_used()
    launches.launch(monkeypatch, getattr(launches, plain) if plain else {})
    with pytest.warns(UserWarning, match="is not used"):
        slurm._validate_srun_used()


# ---- srun in a job named `interactive` or `bash` (every salloc job is `interactive`) ---------------------------


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize("job_name", ["interactive", "bash"])
def test_srun_is_one_rank_per_task_whatever_the_job_is_called(kind, module, job_name, monkeypatch) -> None:
    """`salloc ... srun python train.py --devices 2`: plain Lightning takes these names for "not srun" and each
    task would spawn its own world of 2 (two trainings); the step's tasks are the ranks instead."""
    launches.launch(monkeypatch, {**launches.SALLOC_SRUN, "SLURM_JOB_NAME": job_name})  # rank 1 of 2
    connector = _connector(kind, module)
    env = connector.cluster_environment
    assert type(env) is _environments(module).SLURMEnvironment
    assert (env.global_rank(), env.world_size(), env.local_rank(), env.creates_processes_externally) == (1, 2, 1, True)
    assert env.auto_requeue is False  # Slurm requeues batch jobs only, never an salloc job
    unpatched = original_of(type(connector), "_choose_and_init_cluster_environment")(connector)
    assert type(unpatched).__name__ == "LightningEnvironment" and not unpatched.creates_processes_externally


@pytest.mark.parametrize(("kind", "module"), TARGETS)
@pytest.mark.parametrize("environ", [launches.SALLOC_SHELL, launches.SALLOC_SRUN_ONE_TASK],
                         ids=["salloc-shell", "one-task-step"])
def test_without_a_step_of_several_tasks_lightning_starts_the_processes(kind, module, environ, monkeypatch) -> None:
    """A plain `python train.py` in the salloc shell (docs/dawn.md), or a one-task step: Lightning's own launcher."""
    launches.launch(monkeypatch, environ)
    env = _chosen(kind, module)
    assert type(env).__name__ == "LightningEnvironment" and not env.creates_processes_externally
