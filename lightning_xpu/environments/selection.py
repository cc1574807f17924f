"""Trainer and Fabric choose the cluster environment of the launcher that actually started the process.

Unpatched Lightning asks the scheduler instead: under `mpiexec` inside an `sbatch` job it picks
SLURMEnvironment (every rank reads the batch script's SLURM_PROCID=0: EADDRINUSE, then a hang), and under
`mpiexec` without mpi4py it picks LightningEnvironment, so every rank spawns its own world. These patches apply
on every device, CPU and CUDA included, because Lightning gets this wrong on all of them.

Unpatched Lightning also ignores `srun` in a job named `interactive` or `bash` (`_is_slurm_interactive_mode` in
lightning/fabric/plugins/environments/slurm.py@2.6.6, the names its docs give to start processes oneself), and Slurm
names every `salloc` job `interactive`: `salloc --ntasks-per-node=2 srun python train.py --devices 2` then runs
LightningEnvironment in each task, and each task spawns its own world of 2, two trainings writing `-v1`
checkpoints. An srun step of several tasks is one rank per task whatever the job is called: where Lightning finds
no launcher there, SLURMEnvironment is chosen (without auto-requeue: Slurm requeues batch jobs only) and the launch
must fit the arguments, on every device. A plain `python train.py` in the `salloc` shell has no step, and a
one-task step is left to Lightning likewise (`launch.srun_launcher`): Lightning's own launcher starts the processes.

Order kept: a cluster environment the user passed wins; TorchElastic keeps its priority (and LSF's jsrun,
which Lightning also reads right); then the launcher evidence (`launch.mpi_launcher`) picks ours; otherwise
Lightning's original choice runs, replaced only by SLURMEnvironment where it found nothing under srun.

Two refusals, both one-line `LaunchError`s raised while the Trainer or Fabric is built (before any work):
- a malformed launch variable, whatever the launcher (`inputs.check_launch_variables`);
- a launch that does not fit the arguments: more (or fewer) ranks per node than the Trainer or Fabric uses,
  for every strategy including the default single-device one, which plain Lightning never checks (so
  `mpiexec -n 2` with `devices=1` would run two independent trainings). Under our MPI environments this holds
  on every device; under srun on XPU, and on every device where the job's name made Lightning ignore srun (its
  `validate_settings` skips such a job); otherwise off XPU srun keeps Lightning's behaviour (its
  `validate_settings` at fit for DDP, independent runs for a single device).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.accelerator import is_xpu_accelerator
from lightning_xpu.environments.cluster import _LaunchedEnvironmentMethods, environment_class
from lightning_xpu.environments.inputs import check_launch_variables
from lightning_xpu.environments.launch import (
    LAUNCHER_WORDS,
    MPI_LAUNCHERS,
    SRUN,
    LaunchMismatch,
    detect_launcher,
    launch_ranks,
    mismatch,
    mpi_launcher,
    srun_launcher,
)

_CHOOSER = "_choose_and_init_cluster_environment"


def _choose_by_launcher(namespace: Namespace) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    environments: Any = namespace.fabric_module("plugins.environments")

    # torchrun and LSF's jsrun are launchers Lightning reads right (jsrun also sets OMPI_COMM_WORLD_*).
    lightnings_own = (environments.TorchElasticEnvironment, environments.LSFEnvironment)

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def choose(self: Any) -> Any:
            check_launch_variables(os.environ)
            user_choice = isinstance(getattr(self, "_cluster_environment_flag", None), environments.ClusterEnvironment)
            if user_choice or any(environment.detect() for environment in lightnings_own):
                return original(self)
            launcher = mpi_launcher(os.environ)
            if launcher is not None:
                return environment_class(namespace, launcher)()
            chosen = original(self)
            if type(chosen) is environments.LightningEnvironment and srun_launcher(os.environ):
                # Lightning found no launcher although srun started several tasks: a job named interactive/bash.
                return environments.SLURMEnvironment(auto_requeue=False)
            return chosen

        return choose

    return make


def _launcher_that_must_fit(connector: Any, slurm: type) -> str | None:
    """The launcher whose ranks the connector's arguments must describe, or None where Lightning decides."""
    environment = connector.cluster_environment
    if isinstance(environment, _LaunchedEnvironmentMethods):
        return environment.launcher
    if isinstance(environment, slurm) and detect_launcher(os.environ) == SRUN:
        # Lightning's own check (validate_settings, DDP only) stands off XPU, except where Lightning does not read
        # this job as an srun launch (named interactive/bash): it skips its check there.
        return SRUN if is_xpu_accelerator(connector.accelerator) or not slurm.detect() else None
    return None


def _refuse_a_launch_that_does_not_fit(
    namespace: Namespace, user: str, launchers: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`launchers`: the strategies.launchers.subprocess_script module of the connector's package; its launcher
    is the one that runs in ranks someone else started (the others spawn or fork their own)."""
    slurm = namespace.fabric_module("plugins.environments").SLURMEnvironment
    fits = launchers._SubprocessScriptLauncher

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def lazy_init_strategy(self: Any) -> None:
            original(self)
            launcher = _launcher_that_must_fit(self, slurm)
            if launcher is None:
                return
            ranks = launch_ranks(launcher, os.environ)
            strategy = self.strategy
            if strategy.launcher is not None and not isinstance(strategy.launcher, fits):
                raise LaunchMismatch(
                    f"{LAUNCHER_WORDS[launcher]} started the ranks, but {user} was given a strategy that"
                    f" starts processes itself ({type(strategy).__name__}): use strategy='ddp'",
                    ranks.local_rank,
                )
            devices = getattr(strategy, "parallel_devices", None)
            problem = mismatch(launcher, ranks, len(devices) if devices else 1, getattr(strategy, "num_nodes", 1),
                               user)
            if problem:
                raise LaunchMismatch(problem, ranks.local_rank)

        return lazy_init_strategy

    return make


def _unless_launched_by(launchers: tuple[str, ...], answer: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """SLURMEnvironment's srun checks, answered from the launch evidence where one of `launchers` started us."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def check(*args: Any, **kwargs: Any) -> Any:
            if detect_launcher(os.environ) in launchers:
                return answer
            return original(*args, **kwargs)

        return check

    return make


def apply_fabric(namespace: Namespace) -> None:
    slurm = namespace.fabric_module("plugins.environments.slurm").SLURMEnvironment
    # detect(): under an MPI launcher srun did not start us, whatever SLURM_* says. It is also asked outside the
    # connector (the Trainer's checkpoint connector, at fit).
    wrap(slurm, "detect", _unless_launched_by(MPI_LAUNCHERS, False))
    # "srun is available but not used" would misfire under mpiexec on a machine with Slurm installed, and under
    # srun itself in a job named interactive/bash.
    wrap(slurm, "_validate_srun_used", _unless_launched_by((*MPI_LAUNCHERS, SRUN), None))
    wrap(namespace.fabric_module("connector")._Connector, _CHOOSER, _choose_by_launcher(namespace))
    wrap(namespace.fabric_module("connector")._Connector, "_lazy_init_strategy",
         _refuse_a_launch_that_does_not_fit(namespace, "Fabric",
                                            namespace.fabric_module("strategies.launchers.subprocess_script")))


def apply_pytorch(namespace: Namespace) -> None:
    connector = namespace.pytorch_module("trainer.connectors.accelerator_connector")._AcceleratorConnector
    wrap(connector, _CHOOSER, _choose_by_launcher(namespace))
    launchers = namespace.pytorch_module("strategies.launchers.subprocess_script")
    wrap(connector, "_lazy_init_strategy", _refuse_a_launch_that_does_not_fit(namespace, "the Trainer", launchers))
