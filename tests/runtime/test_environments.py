"""Launch detection, ranks, master address and port: pure functions of a launch's environment variables, and
the cluster environments built on them (both Fabric namespaces). No launcher runs here; see test_launch.py."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from lightning_grid import FABRIC_NAMESPACES, newest_lightning_only

from lightning_xpu.environments import rendezvous
from lightning_xpu.environments.cluster import environment_class
from lightning_xpu.environments.launch import (
    HYDRA,
    OPENMPI,
    PALS,
    SRUN,
    LaunchError,
    Ranks,
    detect_launcher,
    launch_ranks,
    mpi_launcher,
)
from tests.runtime import launches


def _first_slurm_host(fabric: str = "lightning.fabric") -> Callable[[str], str]:
    """Lightning's resolver of a Slurm node list, as the cluster environments pass it."""
    return importlib.import_module(f"{fabric}.plugins.environments").SLURMEnvironment.resolve_root_node_address


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        (launches.BATCH, None),  # a batch script without srun: nobody launched ranks, Lightning decides
        (launches.SRUN, SRUN),
        (launches.SRUN_PMI2, SRUN),  # PMI_RANK too, but no MPI_LOCALRANKID and equal to SLURM_PROCID
        (launches.MPICH, HYDRA),
        (launches.INTEL_MPI, HYDRA),
        (launches.MPICH_IN_SBATCH, HYDRA),  # the trap: SLURM_* of the batch script plus a Slurm step
        (launches.INTEL_MPI_IN_SBATCH, HYDRA),
        (launches.OPENMPI, OPENMPI),
        (launches.PALS, PALS),  # PALS also sets PMI_RANK
        (launches.TORCHRUN, None),  # left to Lightning's TorchElasticEnvironment
    ],
    ids=["none", "batch-script", "srun", "srun-pmi2", "mpich", "intel-mpi", "mpich-in-sbatch",
         "intel-mpi-in-sbatch", "openmpi", "pals", "torchrun"],
)
def test_detect_launcher_names_the_launcher_that_started_the_process(environ, expected) -> None:
    assert detect_launcher(environ) == expected


def test_srun_with_a_pmi_rank_of_its_own_is_not_taken_for_srun() -> None:
    """A PMI rank that disagrees with SLURM_PROCID comes from another launcher inside the step."""
    assert detect_launcher({**launches.SRUN, "PMI_RANK": "0"}) is None


@pytest.mark.parametrize(
    ("launcher", "environ", "expected"),
    [
        (HYDRA, launches.MPICH, Ranks(global_rank=1, world_size=2, local_rank=1, local_world_size=2, node_rank=0)),
        (HYDRA, launches.MPICH_IN_SBATCH, Ranks(1, 2, 1, 2, 0)),
        (HYDRA, launches.MPICH_TWO_HOSTS_IN_SBATCH, Ranks(3, 4, 1, 2, 1)),
        (OPENMPI, launches.OPENMPI, Ranks(1, 2, 1, 2, 0)),
        (OPENMPI, {**launches.OPENMPI, "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                   "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, Ranks(2, 4, 0, 2, 1)),
        (PALS, launches.PALS, Ranks(1, 2, 1, 2, 0)),
        # PALS_NODEID is the node index; PALS_LOCAL_SIZE is read before PMI_LOCAL_SIZE.
        (PALS, {**launches.PALS, "PALS_RANKID": "13", "PMI_SIZE": "24", "PALS_LOCAL_RANKID": "1", "PALS_NODEID": "1",
                "PALS_LOCAL_SIZE": "12", "PMI_LOCAL_SIZE": "99"}, Ranks(13, 24, 1, 12, 1)),
    ],
    ids=["mpich", "mpich-in-sbatch", "mpich-two-hosts", "openmpi", "openmpi-two-hosts", "pals", "pals-two-hosts"],
)
def test_launch_ranks_reads_each_launchers_variables(launcher, environ, expected) -> None:
    assert launch_ranks(launcher, environ) == expected


def test_pals_world_size_from_the_node_file_when_pmi_size_is_absent(tmp_path: Path) -> None:
    node_file = tmp_path / "nodefile"
    node_file.write_text("x4000c0s0b0n0\nx4000c0s0b0n0\nx4000c0s1b0n0\nx4000c0s1b0n0\n")  # one line per slot
    environ = {**launches.PALS, "PBS_NODEFILE": str(node_file), "PALS_LOCAL_SIZE": "12"}
    del environ["PMI_SIZE"]
    assert launch_ranks(PALS, environ).world_size == 24
    del environ["PBS_NODEFILE"]
    with pytest.raises(LaunchError, match="neither PMI_SIZE nor PBS_NODEFILE"):
        launch_ranks(PALS, environ)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({**launches.MPICH, "PMI_RANK": "one"}, r"^PMI_RANK='one' is not a whole number of 0 or more: unset it"),
        ({k: v for k, v in launches.MPICH.items() if k != "MPI_LOCALNRANKS"}, "MPI_LOCALNRANKS is not set"),
        ({**launches.MPICH, "PMI_RANK": "2"}, "outside the world of 2 ranks"),
        ({**launches.MPICH, "MPI_LOCALRANKID": "2"}, "outside the 2 ranks of this node"),
        ({**launches.MPICH, "MPI_LOCALNRANKS": "0"}, "MPI_LOCALNRANKS='0' is not a whole number of 1 or more"),
        ({**launches.MPICH, "MPI_LOCALNRANKS": "3", "PMI_SIZE": "2"}, "exceed the world"),
    ],
)
def test_contradictory_launch_variables_fail_with_the_variable_named(environ, message) -> None:
    with pytest.raises(LaunchError, match=message):
        launch_ranks(HYDRA, environ)


def test_a_single_mpi_rank_is_left_to_lightning() -> None:
    """`mpiexec -n 1 python fit.py --devices 2`: Lightning starts the second process itself."""
    single = {**launches.MPICH, "PMI_RANK": "0", "PMI_SIZE": "1", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}
    assert detect_launcher(single) == HYDRA
    assert mpi_launcher(single) is None
    assert mpi_launcher(launches.MPICH) == HYDRA


# ---- master port ------------------------------------------------------------------------------------------


def test_master_port_from_master_port_wins() -> None:
    assert rendezvous.main_port({**launches.MPICH_IN_SBATCH, "MASTER_PORT": "31337"}) == 31337
    with pytest.raises(LaunchError, match="MASTER_PORT='http' is not a port number"):
        rendezvous.main_port({"MASTER_PORT": "http"})
    with pytest.raises(LaunchError, match="not a port number"):
        rendezvous.main_port({"MASTER_PORT": "70000"})


def test_master_port_is_derived_from_the_job_the_same_on_every_rank() -> None:
    rank1 = rendezvous.main_port(launches.MPICH_IN_SBATCH)
    rank0 = rendezvous.main_port({**launches.MPICH_IN_SBATCH, "PMI_RANK": "0", "MPI_LOCALRANKID": "0"})
    assert rank0 == rank1
    assert rendezvous.PORT_RANGE_START <= rank1 < rendezvous.PORT_RANGE_START + rendezvous.PORT_RANGE_SIZE
    other_job = rendezvous.main_port({**launches.MPICH_IN_SBATCH, "SLURM_JOB_ID": "8"})
    assert other_job != rank1  # jobs sharing a node get different ports


def test_master_port_sources_in_order() -> None:
    """Scheduler job id, else the launcher's own launch id, else the documented default (launches.MPICH, no job)."""
    assert rendezvous.main_port(launches.INTEL_MPI_IN_SBATCH) == rendezvous.main_port({"SLURM_JOB_ID": "7"})
    assert rendezvous.main_port(launches.PALS) == rendezvous.main_port({"PBS_JOBID": launches.PALS["PBS_JOBID"]})
    impi = rendezvous.main_port(launches.INTEL_MPI)
    assert impi == rendezvous.main_port({"I_MPI_HYDRA_UUID": launches.INTEL_MPI["I_MPI_HYDRA_UUID"]})
    assert impi != rendezvous.DEFAULT_MAIN_PORT
    assert rendezvous.main_port(launches.OPENMPI) == rendezvous.main_port({"PMIX_NAMESPACE": "prterun-vm-20470@1"})
    assert rendezvous.main_port(launches.MPICH) == rendezvous.DEFAULT_MAIN_PORT == 29500


def test_master_port_does_not_depend_on_the_process() -> None:
    """Ranks are separate interpreters: the derivation must not use Python's per-process salted hash."""
    code = (
        "from lightning_xpu.environments.rendezvous import main_port\n"
        "print(main_port({'SLURM_JOB_ID': '123456'}), main_port({'I_MPI_HYDRA_UUID': 'abc'}))"
    )
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(Path(__file__).parents[2])}).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert outputs.pop().split() == [str(rendezvous.main_port({"SLURM_JOB_ID": "123456"})),
                                     str(rendezvous.main_port({"I_MPI_HYDRA_UUID": "abc"}))]


# ---- master address ---------------------------------------------------------------------------------------


def test_master_address_from_master_addr_wins() -> None:
    environ = {**launches.MPICH_TWO_HOSTS_IN_SBATCH, "MASTER_ADDR": "n7"}
    assert rendezvous.main_address(environ, launch_ranks(HYDRA, environ), _first_slurm_host()) == "n7"


def test_master_address_is_this_host_when_all_ranks_are_local() -> None:
    ranks = launch_ranks(HYDRA, launches.MPICH)
    assert rendezvous.main_address(launches.MPICH, ranks, _first_slurm_host()) == "127.0.0.1"


@pytest.mark.parametrize("fabric", ["lightning.fabric", "lightning_fabric"])
def test_master_address_is_the_first_host_of_the_slurm_allocation(fabric: str) -> None:
    ranks = launch_ranks(HYDRA, launches.MPICH_TWO_HOSTS_IN_SBATCH)
    assert rendezvous.main_address(launches.MPICH_TWO_HOSTS_IN_SBATCH, ranks, _first_slurm_host(fabric)) == "node1"


def test_master_address_is_the_first_host_of_the_pbs_node_file(tmp_path: Path) -> None:
    node_file = tmp_path / "nodefile"
    node_file.write_text("x4000c0s3b0n0.hostmgmt\nx4000c0s3b0n0.hostmgmt\nx4000c0s4b0n0.hostmgmt\n")
    environ = {**launches.PALS, "PBS_NODEFILE": str(node_file), "PALS_RANKID": "3", "PMI_SIZE": "4", "PALS_NODEID": "1"}
    ranks = launch_ranks(PALS, environ)
    assert rendezvous.main_address(environ, ranks, _first_slurm_host()) == "x4000c0s3b0n0.hostmgmt"
    node_file.write_text("")
    with pytest.raises(LaunchError, match="is empty; set MASTER_ADDR"):
        rendezvous.main_address(environ, ranks, _first_slurm_host())
    with pytest.raises(LaunchError, match="cannot read the PBS node file"):
        rendezvous.main_address({**environ, "PBS_NODEFILE": str(tmp_path / "gone")}, ranks, _first_slurm_host())


def test_master_address_of_ranks_on_several_hosts_without_an_allocation_needs_master_addr() -> None:
    environ = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    with pytest.raises(LaunchError, match="set MASTER_ADDR to the host of rank 0"):
        rendezvous.main_address(environ, launch_ranks(HYDRA, environ), _first_slurm_host())


# ---- the cluster environments -----------------------------------------------------------------------------


@FABRIC_NAMESPACES
@pytest.mark.parametrize(
    ("launcher", "environ", "name"),
    [(HYDRA, launches.MPICH_TWO_HOSTS_IN_SBATCH, "HydraEnvironment"), (OPENMPI, launches.OPENMPI, "OpenMPIEnvironment"),
     (PALS, launches.PALS, "PALSEnvironment")],
)
def test_cluster_environment_answers_from_the_launch(namespace, launcher, environ, name) -> None:
    environments = namespace.fabric_module("plugins.environments")
    env = environment_class(namespace, launcher)(environ)
    assert isinstance(env, environments.ClusterEnvironment)
    assert type(env).__name__ == name
    ranks = launch_ranks(launcher, environ)
    assert (env.global_rank(), env.world_size(), env.local_rank(), env.node_rank()) == (
        ranks.global_rank, ranks.world_size, ranks.local_rank, ranks.node_rank)
    assert env.creates_processes_externally
    assert env.main_port == rendezvous.main_port(environ)
    assert env.main_address == rendezvous.main_address(environ, ranks, _first_slurm_host(namespace.fabric))
    env.set_global_rank(0)  # Lightning's DDP calls these; the launcher's numbers stay
    env.set_world_size(99)
    assert (env.global_rank(), env.world_size()) == (ranks.global_rank, ranks.world_size)


@FABRIC_NAMESPACES
def test_cluster_environment_reads_os_environ_and_writes_nothing(namespace, monkeypatch) -> None:
    launches.launch(monkeypatch, launches.MPICH_TWO_HOSTS_IN_SBATCH)
    before = dict(os.environ)
    env = environment_class(namespace, HYDRA)()
    assert type(env).detect()
    assert not environment_class(namespace, PALS).detect()
    assert (env.global_rank(), env.main_address) == (3, "node1")
    env.validate_settings(num_devices=2, num_nodes=2)
    assert dict(os.environ) == before
    monkeypatch.setenv("MASTER_ADDR", "node9")
    assert env.main_address == "node9"


@FABRIC_NAMESPACES
@pytest.mark.parametrize(
    ("environ", "devices", "nodes", "message"),
    [
        (launches.MPICH_TWO_HOSTS_IN_SBATCH, 1, 2, r"set `devices=2`"),
        (launches.MPICH_TWO_HOSTS_IN_SBATCH, 2, 1, r"\(2 per node\), but Lightning has num_nodes=1: set `num_nodes=2`"),
        # ranks dealt round-robin: rank 3 is local rank 0 of its host
        ({**launches.MPICH_TWO_HOSTS_IN_SBATCH, "MPI_LOCALRANKID": "0"}, 2, 2, r"block placement"),
        ({**launches.PALS, "PALS_NODEID": "1"}, 2, 1, r"numbers ranks node by node"),
    ],
    ids=["devices", "num-nodes", "round-robin", "pals-node-id"],
)
def test_validate_settings_rejects_arguments_that_do_not_match_the_launch(
    namespace, environ, devices, nodes, message
) -> None:
    env = environment_class(namespace, detect_launcher(environ))(environ)
    with pytest.raises(ValueError, match=message):
        env.validate_settings(num_devices=devices, num_nodes=nodes)


@newest_lightning_only
def test_classes_are_exported_lazily_for_the_default_namespace() -> None:
    """Once is enough: the interpreter imports no Lightning (the test asserts so), so every Lightning gives the same."""
    code = (
        "import sys, lightning_xpu.environments as e\n"
        "assert 'lightning' not in sys.modules and 'torch' not in sys.modules\n"
        "print(e.HydraEnvironment.__module__, e.PALSEnvironment.__name__, e.OpenMPIEnvironment.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2]).stdout
    assert out.split() == ["lightning_xpu.environments.cluster", "PALSEnvironment", "OpenMPIEnvironment"]
