"""What Lightning's connectors choose over a grid of arguments, printed as JSON (run by test_equivalence.py).

Usage: python _equivalence_probe.py NAMESPACE:SIZE... (NAMESPACE: lightning|standalone; SIZE: full|launch|mps)

Run in a fresh process per side: the parent sets `LIGHTNING_XPU_DISABLE=1` for the unpatched side and the launch
environment variables (none, torchrun, srun). Both sides import lightning_xpu, so the disabled side shows that the
switch really turns everything off. No XPU here; CUDA is simulated on part of the grid (`simulate_cuda`); SIZE `mps`
simulates an Apple Silicon Mac instead (`simulate_mps`; run it in a process of its own: the simulation stays).
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import re
import sys
import warnings
from typing import Any

from lightning_grid import QUIET

import lightning_xpu  # noqa: F401  (patches the namespaces imported below unless disabled)
from lightning_xpu._namespaces import LIGHTNING, STANDALONE
from tests.conftest import simulate_cuda, simulate_mps

NAMESPACES = {"lightning": (LIGHTNING.pytorch, LIGHTNING.fabric), "standalone": (STANDALONE.pytorch, STANDALONE.fabric)}

ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
DEVICES: tuple[Any, ...] = ("auto", 1, 2, -1, [1], "0,1")
STRATEGIES = ("auto", "ddp", "ddp_spawn", "fsdp", "DDPStrategy(cpu, cpu)", "DDPStrategy(cuda:0, cuda:1)")
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "bf16-true", "16-true")


def grid(size: str) -> list[dict[str, Any]]:
    """Device/strategy choices at the default precision, precision choices, multi-node.

    "full" crosses every argument above; "launch" (for the torchrun/srun environments, where what matters is how
    devices, nodes and strategy meet the launcher) keeps device counts and string strategies only.
    """
    if size == "mps":
        return _mps_grid()
    devices, strategies = (DEVICES, STRATEGIES) if size == "full" else (("auto", 1, 2), STRATEGIES[:4])
    points = [
        {"accelerator": a, "devices": d, "strategy": s}
        for a, d, s in itertools.product(ACCELERATORS, devices, strategies)
    ]
    if size == "full":
        points += [
            {"accelerator": a, "devices": d, "strategy": s, "precision": p}
            for a, d, s, p in itertools.product(ACCELERATORS, ("auto", 1), ("auto", "ddp", "fsdp"), PRECISIONS)
        ]
    return points + [{"accelerator": a, "devices": 2, "num_nodes": 2} for a in ACCELERATORS]


MPS_ACCELERATORS = ("auto", "cpu", "gpu", "mps")


def _mps_grid() -> list[dict[str, Any]]:
    """On a Mac: every accelerator name that can mean MPS, with device counts, string strategies and precisions."""
    points = [
        {"accelerator": a, "devices": d, "strategy": s}
        for a, d, s in itertools.product(MPS_ACCELERATORS, ("auto", 1, 2, -1, [0], "0"), STRATEGIES[:4])
    ]
    points += [
        {"accelerator": a, "devices": 1, "precision": p} for a, p in itertools.product(MPS_ACCELERATORS, PRECISIONS)
    ]
    return points + [{"accelerator": a, "devices": 1, "num_nodes": 2} for a in MPS_ACCELERATORS]


def _strategy(spec: str, package: str) -> Any:
    if not spec.startswith("DDPStrategy("):
        return spec
    import torch

    devices = [torch.device(d.strip()) for d in spec[len("DDPStrategy(") : -1].split(",")]
    return importlib.import_module(f"{package}.strategies").DDPStrategy(parallel_devices=devices)


# The banner line lightning_xpu adds everywhere (issue 14: the log always states the device used); checked in
# tests/runtime/test_trainer.py, left out of the comparison.
ADDED_BANNER_LINE = "lightning_xpu: training on "


def _clean(text: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def _describe(accelerator: Any, strategy: Any, precision: Any, environment: Any) -> dict[str, Any]:
    launcher = getattr(strategy, "launcher", None)
    scaler = getattr(precision, "scaler", None)
    backend = getattr(strategy, "_get_process_group_backend", None)
    return {
        "accelerator": type(accelerator).__name__,
        "strategy": type(strategy).__name__,
        "root_device": str(strategy.root_device),
        "parallel_devices": [str(d) for d in getattr(strategy, "parallel_devices", None) or []],
        "num_nodes": getattr(strategy, "num_nodes", None),
        "launcher": [type(launcher).__name__, getattr(launcher, "_start_method", None)] if launcher else None,
        "backend": backend() if backend else None,
        "precision": [type(precision).__name__, *(getattr(precision, a, None) for a in ("precision", "device"))],
        "scaler": [type(scaler).__name__, getattr(scaler, "_device", None), getattr(scaler, "_enabled", None)],
        "cluster_environment": [
            type(environment).__name__,
            environment.world_size(),
            environment.global_rank(),
            environment.local_rank(),
            environment.node_rank(),
        ],
    }


def _build(api: str, package: str, point: dict[str, Any]) -> dict[str, Any]:
    kwargs = {**point, "strategy": _strategy(point.get("strategy", "auto"), package)}
    if api == "trainer":
        trainer = importlib.import_module(package).Trainer(
            **kwargs, **QUIET
        )
        connector = trainer._accelerator_connector
        return _describe(trainer.accelerator, trainer.strategy, trainer.precision_plugin, connector.cluster_environment)
    connector = importlib.import_module(package).Fabric(**kwargs)._connector
    return _describe(connector.accelerator, connector.strategy, connector.precision, connector.cluster_environment)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not message.startswith(ADDED_BANNER_LINE):  # the one line lightning_xpu adds on every device
            self.lines.append(_clean(message))


def _evaluate(api: str, package: str, point: dict[str, Any], records: _Records) -> dict[str, Any]:
    records.lines = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: dict[str, Any] = {"choice": _build(api, package, point)}
        except Exception as error:  # the same bad input must fail the same way on both sides
            result = {"error": [type(error).__name__, _clean(str(error))]}
    result["warnings"] = [[w.category.__name__, _clean(str(w.message))] for w in caught]
    result["log"] = records.lines
    return result


def _evaluate_namespace(namespace: str, size: str, records: _Records) -> dict[str, Any]:
    pytorch, fabric = NAMESPACES[namespace]
    importlib.import_module(pytorch)
    importlib.import_module(fabric)
    for name in {pytorch.split(".")[0], fabric.split(".")[0], pytorch, fabric}:
        logging.getLogger(name).addHandler(records)
        logging.getLogger(name).setLevel(logging.INFO)
    registry = importlib.import_module(f"{pytorch}.accelerators").AcceleratorRegistry
    out: dict[str, Any] = {"xpu_registered": "xpu" in registry, "points": []}
    for cuda_devices in (0,) if size == "mps" else (0, 2):
        simulate_cuda(setattr, cuda_devices)
        if size == "mps":
            simulate_mps(setattr)
        for point in grid(size):
            for api, package in (("trainer", pytorch), ("fabric", fabric)):
                label = json.dumps({"api": api, "cuda_devices": cuda_devices, **point}, sort_keys=True)
                out["points"].append([label, _evaluate(api, package, point, records)])
    return out


def main(runs: list[str]) -> None:
    """`runs`: NAMESPACE:SIZE items, e.g. `lightning:full standalone:launch`."""
    records = _Records()
    stdout, sys.stdout = sys.stdout, sys.stderr  # only the JSON goes to stdout
    results = {run: _evaluate_namespace(*run.split(":"), records) for run in runs}
    json.dump(results, stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
