"""Trainer and Fabric choose the cluster environment of the launcher that actually started the process.

Unpatched Lightning asks the scheduler instead: under `mpiexec` inside an `sbatch` job it picks
SLURMEnvironment (every rank reads the batch script's SLURM_PROCID=0: EADDRINUSE, then a hang), and under
`mpiexec` without mpi4py it picks LightningEnvironment, so every rank spawns its own world. These patches apply
on every device, CPU and CUDA included, because Lightning gets this wrong on all of them.

Order kept: a cluster environment the user passed wins; TorchElastic keeps its priority (and LSF's jsrun,
which Lightning also reads right); then the launcher evidence (`launch.mpi_launcher`) picks ours; otherwise
Lightning's original choice runs untouched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.environments.cluster import environment_class
from lightning_xpu.environments.launch import MPI_LAUNCHERS, detect_launcher, mpi_launcher

_CHOOSER = "_choose_and_init_cluster_environment"


def _choose_by_launcher(namespace: Namespace) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    environments: Any = namespace.fabric_module("plugins.environments")

    # torchrun and LSF's jsrun are launchers Lightning reads right (jsrun also sets OMPI_COMM_WORLD_*).
    lightnings_own = (environments.TorchElasticEnvironment, environments.LSFEnvironment)

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def choose(self: Any) -> Any:
            user_choice = isinstance(getattr(self, "_cluster_environment_flag", None), environments.ClusterEnvironment)
            if user_choice or any(environment.detect() for environment in lightnings_own):
                return original(self)
            launcher = mpi_launcher(os.environ)
            if launcher is None:
                return original(self)
            return environment_class(namespace, launcher)()

        return choose

    return make


def _unless_mpi_launched(answer: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """SLURMEnvironment's srun checks: under an MPI launcher srun did not start us, whatever SLURM_* says."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def check(*args: Any, **kwargs: Any) -> Any:
            if detect_launcher(os.environ) in MPI_LAUNCHERS:
                return answer
            return original(*args, **kwargs)

        return check

    return make


def apply_fabric(namespace: Namespace) -> None:
    slurm = namespace.fabric_module("plugins.environments.slurm").SLURMEnvironment
    # detect() is also asked outside the connector (the Trainer's checkpoint connector, at fit).
    wrap(slurm, "detect", _unless_mpi_launched(False))
    # "srun is available but not used" would misfire under mpiexec on a machine with Slurm installed.
    wrap(slurm, "_validate_srun_used", _unless_mpi_launched(None))
    wrap(namespace.fabric_module("connector")._Connector, _CHOOSER, _choose_by_launcher(namespace))


def apply_pytorch(namespace: Namespace) -> None:
    connector = namespace.pytorch_module("trainer.connectors.accelerator_connector")._AcceleratorConnector
    wrap(connector, _CHOOSER, _choose_by_launcher(namespace))
