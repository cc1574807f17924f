"""Cluster environments chosen by the launcher actually running the processes.

`launch` reads which launcher started the process (srun, MPICH/Intel MPI Hydra, PALS, Open MPI) and its
ranks; `rendezvous` derives the master address and port; `cluster` turns both into Lightning
ClusterEnvironments; `selection` makes Trainer and Fabric choose them. Importing this package imports
neither torch nor Lightning; the classes below are built on first access, for the default namespace
(`lightning` if installed, else `pytorch_lightning`/`lightning_fabric`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["HydraEnvironment", "OpenMPIEnvironment", "PALSEnvironment"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from lightning_xpu._namespaces import default_namespace
        from lightning_xpu.environments.cluster import environment_class_by_name

        return environment_class_by_name(default_namespace(), name)
    raise AttributeError(f"module 'lightning_xpu.environments' has no attribute {name!r}")
