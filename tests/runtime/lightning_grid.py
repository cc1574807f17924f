"""The Trainer/Fabric x namespace grid of the runtime tests, in one vocabulary.

- Which Lightning APIs a test runs on: `TRAINER_NAMESPACES`, `FABRIC_NAMESPACES`, `NAMESPACES`, `NAMESPACE_SIDES`
  (pytest parametrize marks over `lightning_xpu._namespaces.Namespace`), `APIS`/`TRAINERS` ((api, package)
  pairs), and the plain lists behind them.
- Building them quietly: `QUIET` (the Trainer arguments that keep a test's output and disk clean), `build`,
  `trainer_on` (a Trainer whose strategy sits on a given, possibly simulated, device).
- Lightning alone: `unpatched` (a connector method as Lightning wrote it).
- Strategies placed on simulated XPUs the way the connector leaves them before setup (`xpu_strategy`,
  `place_on_xpu`, `init_kwargs`), for use with the `simulated_xpu` and `recorded_process_group` fixtures
  (tests/conftest.py).
- `newest_lightning_only`: for subprocess-heavy tests, which run once per CI run (the unit stage runs tests/runtime
  once per Lightning venv).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lightning_xpu import versions
from lightning_xpu._namespaces import LIGHTNING, STANDALONE, STANDALONE_FABRIC, Namespace
from lightning_xpu._patching import original_of
from lightning_xpu.accelerator import fabric_accelerator_class, pytorch_accelerator_class
from lightning_xpu.strategies import FABRIC_STRATEGIES, PYTORCH_STRATEGIES
from lightning_xpu.versions import TESTED_VERSIONS

# ---- which APIs ------------------------------------------------------------------------------------------------


def _installed(namespaces: list[Namespace]) -> list[Namespace]:
    """CI installs both namespaces; a machine outside CI (the CUDA tests) may have only one."""
    tops = [[package.split(".")[0] for package in (ns.pytorch, ns.fabric) if package] for ns in namespaces]
    return [ns for ns, names in zip(namespaces, tops) if all(importlib.util.find_spec(n) is not None for n in names)]


def _lightning_version() -> str:
    for distribution in ("lightning", "pytorch-lightning", "lightning-fabric"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "none"


TRAINER_NAMESPACE_LIST = _installed([LIGHTNING, STANDALONE])
FABRIC_NAMESPACE_LIST = _installed([LIGHTNING, STANDALONE_FABRIC])
TRAINER_PACKAGES = [str(namespace.pytorch) for namespace in TRAINER_NAMESPACE_LIST]
FABRIC_PACKAGES = [namespace.fabric for namespace in FABRIC_NAMESPACE_LIST]
FABRIC_OF = {str(namespace.pytorch): namespace.fabric for namespace in TRAINER_NAMESPACE_LIST}

TRAINER_NAMESPACES = pytest.mark.parametrize("namespace", TRAINER_NAMESPACE_LIST, ids=lambda ns: ns.pytorch)
FABRIC_NAMESPACES = pytest.mark.parametrize("namespace", FABRIC_NAMESPACE_LIST, ids=lambda ns: ns.fabric)
# The namespaces by name: ids "lightning" and "pytorch_lightning".
NAMESPACES = pytest.mark.parametrize(
    "namespace", TRAINER_NAMESPACE_LIST, ids=lambda ns: "lightning" if ns is LIGHTNING else "pytorch_lightning"
)
# Both at once: every strategy test runs on the Trainer and Fabric of both namespaces.
NAMESPACE_SIDES = pytest.mark.parametrize(
    ("namespace", "side"),
    [(ns, side) for ns in TRAINER_NAMESPACE_LIST for side in ("trainer", "fabric")],
    ids=lambda value: value if isinstance(value, str) else ("lightning" if value is LIGHTNING else "pytorch_lightning"),
)

# (api, package): the Trainer and Fabric of both namespaces.
APIS = [
    *(pytest.param("trainer", package, id=package) for package in TRAINER_PACKAGES),
    *(pytest.param("fabric", package, id=package) for package in FABRIC_PACKAGES),
]
TRAINERS = [api for api in APIS if api.values[0] == "trainer"]

# Subprocess-heavy tests run once per CI run, on the newest Lightning CI tests.
ON_NEWEST_LIGHTNING = _lightning_version() == TESTED_VERSIONS[-1]
newest_lightning_only = pytest.mark.skipif(
    not ON_NEWEST_LIGHTNING,
    reason=f"subprocess-heavy: runs once per CI run, on Lightning {TESTED_VERSIONS[-1]}",
)

# ---- building them ---------------------------------------------------------------------------------------------

QUIET: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


@dataclass
class Built:
    accelerator: Any
    strategy: Any
    precision: Any
    connector: Any
    owner: Any  # the Trainer or the Fabric


def build(api: str, package: str, **kwargs: Any) -> Built:
    """`Trainer(**QUIET, **kwargs)` or `Fabric(**kwargs)` from `package`, and what its connector chose."""
    module = importlib.import_module(package)
    if api == "trainer":
        trainer = module.Trainer(**{**QUIET, **kwargs})
        connector = trainer._accelerator_connector
        return Built(trainer.accelerator, trainer.strategy, trainer.precision_plugin, connector, trainer)
    fabric = module.Fabric(**kwargs)
    connector = fabric._connector
    return Built(connector.accelerator, connector.strategy, connector.precision, connector, fabric)


def trainer_on(namespace: Namespace, device: str, **kwargs: Any) -> Any:
    """`Trainer` of `namespace` with a SingleDeviceStrategy on `device` ("xpu:0", "cpu"): the strategy is passed
    explicitly, so tests of patches that look at `root_device` do not depend on how the connector picks it."""
    root = torch.device(device)
    strategy = namespace.pytorch_module("strategies").SingleDeviceStrategy(root)
    return namespace.pytorch_module("").Trainer(
        accelerator=root.type, devices=1, strategy=strategy, **{**QUIET, **kwargs}
    )


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


# ---- strategies on simulated XPUs --------------------------------------------------------------------------------


def package_of(namespace: Namespace, side: str) -> str:
    return str(namespace.pytorch) if side == "trainer" else namespace.fabric


def require_feature(feature: str, package: str) -> None:
    """Skip unless this Lightning has `feature` (lightning_xpu/versions.py FEATURES, where the probes live)."""
    if not versions.probe(feature, package):
        known = versions.FEATURES[feature]
        pytest.skip(f"{package} {versions.installed_version(package)} predates {known.since}: no {known.what}")


def strategy_class(namespace: Namespace, side: str, name: str) -> type:
    if name == "ModelParallelStrategy":
        require_feature("model_parallel", package_of(namespace, side))
    return getattr(strategies(package_of(namespace, side)), name)


def strategy_module(namespace: Namespace, side: str, relative: str) -> Any:
    return namespace.pytorch_module(relative) if side == "trainer" else namespace.fabric_module(relative)


def place_on_xpu(strategy: Any, namespace: Namespace, side: str, devices: int = 2, local_rank: int = 1) -> Any:
    """Give `strategy` what the connector would: our accelerator, xpu:0..N-1 and a LightningEnvironment, here as
    local rank 1 by default, so the rank's device is xpu:1 and anything landing on xpu:0 shows."""
    accelerator_class = pytorch_accelerator_class if side == "trainer" else fabric_accelerator_class
    strategy.accelerator = accelerator_class(namespace)()
    strategy.parallel_devices = [torch.device("xpu", index) for index in range(devices)]
    environment = namespace.fabric_module("plugins.environments").LightningEnvironment()
    environment.local_rank = lambda: local_rank  # instead of the LOCAL_RANK variable
    strategy.cluster_environment = environment
    return strategy


def xpu_strategy(namespace: Namespace, side: str, name: str, devices: int = 2, **kwargs: Any) -> Any:
    """An instance of strategy class `name` at local rank 1 on simulated XPUs, ready for `setup_environment()`
    (ModelParallel gets a no-op parallelize_fn on Fabric and a stand-in LightningModule for the mesh on the
    Trainer)."""
    cls = strategy_class(namespace, side, name)
    if side == "fabric" and name == "ModelParallelStrategy":
        kwargs.setdefault("parallelize_fn", lambda module, device_mesh: module)
    strategy = place_on_xpu(cls(**kwargs), namespace, side, devices)
    if side == "trainer" and name == "ModelParallelStrategy":
        strategy._lightning_module = SimpleNamespace()
    return strategy


def process_group_init_method(side: str, name: str) -> str:
    """The strategy method that creates the process group, as lightning_xpu.strategies knows it."""
    table = PYTORCH_STRATEGIES if side == "trainer" else FABRIC_STRATEGIES
    return next(patch.process_group_init for patch in table if patch.cls == name)


def give_oneccl_its_place(patch: pytest.MonkeyPatch, strategy: Any) -> None:
    """What a user of plain Lightning must export for oneCCL (huggingface/accelerate#2339 does it for Accelerate):
    without it the simulated ccl/xccl group fails (tests/oneccl_launch.py). For tests of Lightning alone that look
    at something else."""
    for variable, value in (("CCL_PROCESS_LAUNCHER", "none"), ("CCL_LOCAL_RANK", str(strategy.local_rank)),
                            ("CCL_LOCAL_SIZE", str(len(strategy.parallel_devices)))):
        patch.setenv(variable, value)


def init_kwargs(strategy: Any, side: str, name: str, pg: Any, unpatched: bool = False) -> dict[str, Any]:
    """The keyword arguments `init_process_group` receives from the strategy's setup: patched, or as Lightning
    alone passes them (its own setup method and its own `_init_dist_connection`)."""
    if not unpatched:
        strategy.setup_environment()
        return pg.init_kwargs
    module = sys.modules[type(strategy).__module__]
    with pytest.MonkeyPatch.context() as local:
        local.setattr(module, "_init_dist_connection", original_of(module, "_init_dist_connection"))
        give_oneccl_its_place(local, strategy)
        original_of(type(strategy), process_group_init_method(side, name))(strategy)
    return pg.init_kwargs
