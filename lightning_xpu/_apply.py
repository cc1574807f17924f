"""Applies every patch to a Lightning namespace, once. Each patch module offers `apply_fabric(ns)` and/or
`apply_pytorch(ns)`; the order below is the order Lightning consults them.

A patch module that fails (a Lightning module it needs is gone) is recorded, not raised: `import lightning` must
keep working off XPU whatever a new Lightning release moved. `lightning_xpu.versions` reports it.
"""

from __future__ import annotations

import importlib

from lightning_xpu._namespaces import Namespace, imported_namespaces, namespaces_for
from lightning_xpu._patching import patching_by, record
from lightning_xpu._startup import DISABLE_VARIABLE as DISABLE_VARIABLE
from lightning_xpu._startup import disabled as disabled

# Modules holding `apply_fabric(namespace)`; applied to lightning.fabric and lightning_fabric.
# One module per line (merge-friendly). fabric_cli stays last: importing Fabric's cli module freezes its
# `--strategy` choices from the registry.
FABRIC_PATCHES: tuple[str, ...] = (
    "lightning_xpu.registration",
    "lightning_xpu.connector",
    "lightning_xpu.strategies",
    "lightning_xpu.environments.selection",
    "lightning_xpu.throughput",
    "lightning_xpu.rng",
    "lightning_xpu.memory",
    "lightning_xpu.fabric_cli",
)
# Modules holding `apply_pytorch(namespace)`; applied to lightning.pytorch and pytorch_lightning.
PYTORCH_PATCHES: tuple[str, ...] = (
    "lightning_xpu.registration",
    "lightning_xpu.connector",
    "lightning_xpu.strategies",
    "lightning_xpu.environments.selection",
    "lightning_xpu.trainer",
    "lightning_xpu.profiler",
    "lightning_xpu.throughput",
    "lightning_xpu.rng",
    "lightning_xpu.memory",
    "lightning_xpu.strategies.comm_hooks",
)

_done: set[tuple[str, str]] = set()


def _run(module_name: str, function: str, namespace: Namespace, package: str) -> None:
    with patching_by(module_name):
        try:
            getattr(importlib.import_module(module_name), function)(namespace)
        except Exception as error:  # recorded; versions.py warns about it when XPU is selected
            failure = f"{module_name}.{function} failed: {type(error).__name__}: {error}"
            record(package, f"<{module_name}>", False, failure)


def apply(namespace: Namespace) -> None:
    if disabled():
        return
    if ("fabric", namespace.fabric) not in _done:
        _done.add(("fabric", namespace.fabric))
        for name in FABRIC_PATCHES:
            _run(name, "apply_fabric", namespace, namespace.fabric)
    if namespace.pytorch is not None and ("pytorch", namespace.pytorch) not in _done:
        _done.add(("pytorch", namespace.pytorch))
        for name in PYTORCH_PATCHES:
            _run(name, "apply_pytorch", namespace, namespace.pytorch)


def apply_for_top_level(top_level: str) -> None:
    for namespace in namespaces_for(top_level):
        apply(namespace)


def apply_to_imported() -> None:
    for namespace in imported_namespaces():
        apply(namespace)
