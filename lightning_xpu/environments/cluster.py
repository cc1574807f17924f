"""Lightning cluster environments for processes started by an MPI launcher, without mpi4py.

One class per launcher (`HydraEnvironment` for MPICH and Intel MPI, `PALSEnvironment`, `OpenMPIEnvironment`),
built once per Fabric namespace because `lightning.fabric` and `lightning_fabric` have distinct
`ClusterEnvironment` base classes. Every answer is a function of the environment variables (see `launch` and
`rendezvous`); nothing is written into `os.environ`.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from lightning_xpu._namespaced_classes import NamespacedClasses
from lightning_xpu._namespaces import Namespace
from lightning_xpu.environments import rendezvous
from lightning_xpu.environments.launch import (
    HYDRA,
    LAUNCHER_WORDS,
    OPENMPI,
    PALS,
    LaunchMismatch,
    Ranks,
    launch_ranks,
    mismatch,
    mpi_launcher,
)

log = logging.getLogger(__name__)

# Class name per launcher.
_CLASS_NAMES = {HYDRA: "HydraEnvironment", PALS: "PALSEnvironment", OPENMPI: "OpenMPIEnvironment"}


class _LaunchedEnvironmentMethods:
    """The whole ClusterEnvironment API; mixed in front of the namespace's ClusterEnvironment base class."""

    launcher: ClassVar[str]
    _first_slurm_host: ClassVar[Callable[[str], str]]

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        # os.environ itself (not a copy), read at every call as Lightning's own environments do.
        self.environ = environ

    def __getstate__(self) -> dict[str, Any]:
        # os.environ cannot be pickled; a spawned process reads its own.
        return {**self.__dict__, "environ": None if self.environ is os.environ else dict(self.environ)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.environ is None:
            self.environ = os.environ

    def ranks(self) -> Ranks:
        return launch_ranks(self.launcher, self.environ)

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return rendezvous.main_address(self.environ, self.ranks(), type(self)._first_slurm_host)

    @property
    def main_port(self) -> int:
        return rendezvous.main_port(self.environ)

    @classmethod
    def detect(cls) -> bool:
        return mpi_launcher(os.environ) == cls.launcher

    def world_size(self) -> int:
        return self.ranks().world_size

    def set_world_size(self, size: int) -> None:
        log.debug("%s.set_world_size(%s) ignored: the launcher decides the world size.", type(self).__name__, size)

    def global_rank(self) -> int:
        return self.ranks().global_rank

    def set_global_rank(self, rank: int) -> None:
        log.debug("%s.set_global_rank(%s) ignored: the launcher decides the rank.", type(self).__name__, rank)

    def local_rank(self) -> int:
        return self.ranks().local_rank

    def node_rank(self) -> int:
        return self.ranks().node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Lightning's arguments must describe the launch, or ranks would wait for peers that never come."""
        ranks = self.ranks()
        problem = mismatch(self.launcher, ranks, num_devices, num_nodes)
        if problem:
            raise LaunchMismatch(problem, ranks.local_rank)


def _environment_bases(fabric: str) -> tuple[type, ...]:
    return (_LaunchedEnvironmentMethods, importlib.import_module(f"{fabric}.plugins.environments").ClusterEnvironment)


def _environment_attributes(launcher: str) -> Callable[[str], dict[str, Any]]:
    def attributes(fabric: str) -> dict[str, Any]:
        environments: Any = importlib.import_module(f"{fabric}.plugins.environments")
        return {
            "__doc__": f"Processes started by {LAUNCHER_WORDS[launcher]} (no mpi4py needed).",
            "launcher": launcher,
            "_first_slurm_host": staticmethod(environments.SLURMEnvironment.resolve_root_node_address),
        }

    return attributes


# Built per Fabric package, picklable (the ddp_spawn launcher pickles the Trainer with its cluster environment).
_CLASSES = NamespacedClasses(__name__)
for _launcher, _name in _CLASS_NAMES.items():
    _CLASSES.define(_name, _environment_bases, _environment_attributes(_launcher))


def environment_class(namespace: Namespace, launcher: str) -> type:
    """Our ClusterEnvironment for `launcher` (hydra, pals, openmpi) in the namespace's Fabric package."""
    return _CLASSES.get(_CLASS_NAMES[launcher], namespace.fabric)


def environment_class_by_name(namespace: Namespace, name: str) -> type:
    launcher = {class_name: launcher for launcher, class_name in _CLASS_NAMES.items()}[name]
    return environment_class(namespace, launcher)
