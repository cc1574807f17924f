"""Building a Trainer or a Fabric in either namespace, and calling a connector method as Lightning wrote it."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from lightning_xpu._patching import original_of

# (api, package): the Trainer and Fabric of both namespaces.
APIS = [
    pytest.param("trainer", "lightning.pytorch", id="lightning.pytorch"),
    pytest.param("trainer", "pytorch_lightning", id="pytorch_lightning"),
    pytest.param("fabric", "lightning.fabric", id="lightning.fabric"),
    pytest.param("fabric", "lightning_fabric", id="lightning_fabric"),
]
TRAINERS = [api for api in APIS if api.values[0] == "trainer"]


@dataclass
class Built:
    accelerator: Any
    strategy: Any
    precision: Any
    connector: Any
    owner: Any  # the Trainer or the Fabric


def build(api: str, package: str, **kwargs: Any) -> Built:
    """`Trainer(**kwargs)` or `Fabric(**kwargs)` from `package`, and what its connector chose."""
    module = importlib.import_module(package)
    if api == "trainer":
        quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                 "enable_model_summary": False}
        trainer = module.Trainer(**{**quiet, **kwargs})
        connector = trainer._accelerator_connector
        return Built(trainer.accelerator, trainer.strategy, trainer.precision_plugin, connector, trainer)
    fabric = module.Fabric(**kwargs)
    connector = fabric._connector
    return Built(connector.accelerator, connector.strategy, connector.precision, connector, fabric)


def connector_module(api: str, package: str) -> Any:
    relative = "trainer.connectors.accelerator_connector" if api == "trainer" else "connector"
    return importlib.import_module(f"{package}.{relative}")


def unpatched(connector: Any, name: str) -> Callable[..., Any]:
    """`connector.name` as Lightning wrote it (bound to `connector` unless it is a staticmethod)."""
    cls = type(connector)
    function = original_of(cls, name)
    if isinstance(inspect.getattr_static(cls, name), staticmethod):
        return function
    return functools.partial(function, connector)


def strategies(package: str) -> Any:
    return importlib.import_module(f"{package}.strategies")
