"""Fixtures shared by every test directory.

`simulated_xpu` is the ONE place where an Intel GPU is simulated: no Intel GPU exists on the machines that run
these tests, so code paths that only run on XPU are exercised on the CPU build of torch with `torch.xpu`'s device
queries patched. Nothing here runs on Intel hardware. `simulated_cuda` (with `simulate_cuda`, which the equivalence
grid's subprocesses call directly) is the one simulation of NVIDIA GPUs, for tests that CUDA keeps its behaviour.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from tests.xpu_profiles import ALL_PROFILES, profiles_for_this_run
from tests.xpu_simulation import (
    ONECCL_MODULE,
    SimulatedXPU,
    check_init_device_mesh,
    check_init_process_group,
    check_oneccl_launch,
    simulate_xpu,
    stand_in_oneccl_module,
)


def require_service(name: str, available: bool, why: str) -> None:
    """Skip when a real service is missing locally; fail under CI (`LXPU_REQUIRE_SERVICES=1`)."""
    if available:
        return
    message = f"{name} is not available here: {why}"
    if os.environ.get("LXPU_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " (LXPU_REQUIRE_SERVICES=1: CI must provide it; see ci/)")
    pytest.skip(message)


@pytest.fixture
def tmp_path(tmp_path: Path) -> Iterator[Path]:
    """pytest's tmp_path, made removable when the test ends: installs seal their builds read-only, and pytest's
    removal of a passing test's directory (`tmp_path_retention_policy = "failed"`) skips what it cannot delete."""
    yield tmp_path
    # In Python, not chmod: a test may have emptied PATH. os.walk follows no link to a directory; a tree another
    # account owns is root's to change (CI runs as root), and left as it is elsewhere.
    for root, directories, _files in os.walk(tmp_path):
        for path in [root, *(os.path.join(root, name) for name in directories)]:
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode
                if stat.S_ISDIR(mode) and (mode & 0o700) != 0o700:
                    os.chmod(path, mode | 0o700)


def register_stand_in_ccl_backend() -> None:
    """For real multi-process runs on CPU: a process-group backend named "ccl" that is gloo underneath, so code
    that looks for the ccl backend runs across real processes. It is not oneCCL; it proves nothing about oneCCL."""
    import torch.distributed as dist

    def gloo_named_ccl(store: Any, rank: int, size: int, timeout: Any) -> Any:
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    if "ccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("ccl", gloo_named_ccl, devices=["cpu"])
    sys.modules.setdefault(ONECCL_MODULE, stand_in_oneccl_module())


@pytest.fixture
def simulated_xpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., SimulatedXPU]]:
    """Call it to make this process look like it has Intel GPUs: `sim = simulated_xpu(devices=4, xccl=False)`.

    Patches only device *queries* (availability, runtime started, count, current/set device, name and properties,
    memory stats, cache, synchronize, XCCL availability, RNG states, profiler support) and streams (stand-in
    `torch.xpu.Stream`/`torch.xpu.stream`, entries logged in `sim.events`); tensors still cannot be moved to "xpu"
    on the CPU build. `oneccl=True` makes `import oneccl_bindings_for_pytorch` give a stand-in module;
    `oneccl=False` makes that import fail.

    `torch="2.7"` (with `pyzes=`, `ipex=`, `pti=`) simulates that release faithfully from the fact table
    (tests/xpu_profiles.py; see tests/xpu_simulation.py): fork poisoning and the bad-fork state, is_xccl_available,
    Backend names, device_id rules, ShardedGradScaler devices, the oneCCL/IPEX import order, the TF32 switches,
    gpu_eu_count and profiler activity. Then the test fails if lightning_xpu touched a `torch.xpu`,
    `torch.distributed` or `torch.backends` attribute that no row of the table models.
    """
    made: list[SimulatedXPU] = []

    def simulate(torch: str | None = None, **options: Any) -> SimulatedXPU:
        """Options: devices, xccl, fp64, oneccl, name, eu_count; with `torch=`: pyzes, ipex, pti (see
        `tests.xpu_simulation.simulate_xpu`)."""
        sim = simulate_xpu(monkeypatch, torch_version=torch, **options)
        made.append(sim)
        return sim

    yield simulate
    unmodelled = sorted({path for sim in made for path in sim.unmodelled})
    if unmodelled:
        pytest.fail("lightning_xpu touched " + ", ".join(f"torch.{path}" for path in unmodelled) + ", which no row"
                    " of tests/xpu_profiles.py models: add a row (versions, value, source file@tag) and model it in"
                    " tests/xpu_simulation.py", pytrace=False)


@pytest.fixture
def rank_zero_only_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give Lightning's rank-zero helpers a rank for the test (a Trainer built where Slurm is installed warns)."""
    import importlib.util

    from lightning_utilities.core.rank_zero import rank_zero_only

    # Lightning sets the rank when its rank_zero module is first imported: import it before patching, so undoing
    # the patch restores that rank instead of deleting the attribute under later tests.
    for name in ("lightning.fabric.utilities.rank_zero", "lightning_fabric.utilities.rank_zero"):
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            importlib.import_module(name)
    monkeypatch.setattr(rank_zero_only, "rank", getattr(rank_zero_only, "rank", 0), raising=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`xpu_profile`: the torch releases of the profile grid (tests/xpu_profiles.py `PROFILE_GRID`);
    `every_xpu_profile`: every supported release (`ALL_PROFILES`, for a selection of cheap launch tests). Both on the
    newest Lightning of the CI venvs only; elsewhere tests asking for them (or for `newest_lightning_only`) are
    deselected (older Lightning keeps the default simulation, to hold CI time)."""
    profiles = profiles_for_this_run()
    for name, chosen in (("xpu_profile", profiles), ("every_xpu_profile", profiles_for_this_run(ALL_PROFILES))):
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, chosen or (None,), ids=[f"torch{p}" for p in chosen] or ["off-grid"])
    if "newest_lightning_only" in metafunc.fixturenames:
        metafunc.parametrize("newest_lightning_only", [bool(profiles) or None], ids=["newest-lightning"])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def off_grid(item: pytest.Item) -> bool:
        params = getattr(getattr(item, "callspec", None), "params", {})
        return any(name in params and params[name] is None
                   for name in ("xpu_profile", "every_xpu_profile", "newest_lightning_only"))

    deselected = [item for item in items if off_grid(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not off_grid(item)]


@dataclass
class StandInIPEX:
    """What the stand-in `intel_extension_for_pytorch` module was asked to do."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    copies: bool = False  # True: behave as if inplace were ignored (returns new objects)


@pytest.fixture
def stand_in_ipex(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInIPEX]:
    """A STAND-IN for Intel Extension for PyTorch (`intel_extension_for_pytorch`), inserted into `sys.modules`.

    Not IPEX: its `optimize` records its arguments and, like IPEX's `fuse_update_step`, marks the optimizer as fused
    in place (`optimizer.fused = True`). The real package exists only on PyTorch 2.5-2.10 XPU stacks.
    """
    record = StandInIPEX()

    def optimize(model: Any, dtype: Any = None, optimizer: Any = None, inplace: bool = False, **kwargs: Any) -> Any:
        record.calls.append({"model": model, "optimizer": optimizer, "dtype": dtype, "inplace": inplace, **kwargs})
        if record.copies:
            model, optimizer = copy.deepcopy(model), copy.deepcopy(optimizer)
        if optimizer is not None:
            optimizer.fused = True
        return model if optimizer is None else (model, optimizer)

    module = ModuleType("intel_extension_for_pytorch")
    module.__dict__.update(optimize=optimize, __version__="0.0.0+stand-in")
    monkeypatch.setitem(sys.modules, "intel_extension_for_pytorch", module)
    yield record


_LIGHTNING_CUDA_MODULES = (
    "lightning.fabric.accelerators.cuda",
    "lightning.pytorch.accelerators.cuda",
    "lightning_fabric.accelerators.cuda",
    "pytorch_lightning.accelerators.cuda",
)


def simulate_cuda(setattr_: Callable[[Any, str, Any], None], devices: int = 2) -> None:
    """Make torch and Lightning report `devices` NVIDIA GPUs: device queries only, nothing runs on CUDA.

    `setattr_` is `monkeypatch.setattr` in tests and plain `setattr` in the equivalence grid's subprocesses
    (tests/runtime/_equivalence_probe.py). Lightning counts GPUs through `num_cuda_devices`, imported by name into
    its accelerator modules; those already imported are patched too.
    """
    setattr_(torch.cuda, "is_available", lambda: devices > 0)
    setattr_(torch.cuda, "device_count", lambda: devices)
    for name in _LIGHTNING_CUDA_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "num_cuda_devices"):
            setattr_(module, "num_cuda_devices", lambda: devices)


# Where Lightning decides MPS: MPSAccelerator.is_available, cached (lru_cache) in its fabric module.
_LIGHTNING_MPS_MODULES = ("lightning.fabric.accelerators.mps", "lightning_fabric.accelerators.mps")


def simulate_mps(setattr_: Callable[[Any, str, Any], None]) -> None:
    """Make torch and Lightning see an Apple Silicon Mac's one MPS device: device queries only, nothing runs on MPS.

    No kinder than a real Mac's torch: there `torch.backends.mps.is_available()` and `is_built()` are True,
    `platform.processor()` is "arm", and neither CUDA nor XPU is available (as on this CPU build, left alone).
    Lightning reads exactly those (lightning_fabric/accelerators/mps.py@2.6.6 `MPSAccelerator.is_available`:
    `torch.backends.mps.is_available() and platform.processor() in ("arm", "arm64")`, cached by `lru_cache`,
    which is cleared here) and counts one device (`auto_device_count`). `setattr_` as for `simulate_cuda`.
    """
    import platform

    setattr_(torch.backends.mps, "is_available", lambda: True)
    setattr_(torch.backends.mps, "is_built", lambda: True)
    setattr_(platform, "processor", lambda: "arm")
    for name in _LIGHTNING_MPS_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            module.MPSAccelerator.is_available.cache_clear()


@pytest.fixture
def simulated_cuda(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Call it to make this process look like it has NVIDIA GPUs: `simulated_cuda(2)` (see `simulate_cuda`)."""

    def simulate(devices: int = 2) -> None:
        simulate_cuda(monkeypatch.setattr, devices)

    return simulate


@dataclass
class RecordedProcessGroup:
    """What the code under test asked of `torch.distributed` (see `recorded_process_group`)."""

    events: list[tuple[str, Any]]
    backend: str | None = None
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    new_groups: list[SimpleNamespace] = field(default_factory=list)
    barriers: list[dict[str, Any]] = field(default_factory=list)
    object_broadcasts: list[SimpleNamespace] = field(default_factory=list)
    meshes: list[SimpleNamespace] = field(default_factory=list)
    destroyed: list[Any] = field(default_factory=list)


@pytest.fixture
def recorded_process_group(monkeypatch: pytest.MonkeyPatch) -> Callable[..., RecordedProcessGroup]:
    """Call it to make `torch.distributed` record calls instead of making them (one process, no peers):
    `pg = recorded_process_group(sim.events)`. Covers init_process_group, is_initialized, get_backend, new_group,
    barrier, broadcast_object_list, destroy_process_group and init_device_mesh; restores what a strategy's setup
    writes globally (MASTER_ADDR/PORT, CCL_*, the rank_zero_only rank). A ccl or xccl group fails where oneCCL's
    launch contract is not met (tests/oneccl_launch.py)."""
    import torch.distributed.device_mesh
    from lightning_utilities.core.rank_zero import rank_zero_only

    from lightning_xpu.environments.oneccl import BINDINGS_LOCAL_PLACE, ONECCL_LAUNCH_VARIABLES

    def record(events: list[tuple[str, Any]] | None = None) -> RecordedProcessGroup:
        pg = RecordedProcessGroup(events=[] if events is None else events)

        def init_process_group(backend: str | None = None, **kwargs: Any) -> None:
            check_init_process_group(kwargs)  # the device_id rules of an active torch profile
            check_oneccl_launch(backend, kwargs)  # oneCCL's launch contract beneath ccl and xccl
            pg.backend = backend
            pg.init_kwargs = kwargs
            pg.events.append(("init_process_group", backend))

        def new_group(*args: Any, **kwargs: Any) -> SimpleNamespace:
            group = SimpleNamespace(name=f"recorded-group-{len(pg.new_groups)}", kwargs=kwargs)
            pg.new_groups.append(group)
            pg.events.append(("new_group", kwargs.get("backend")))
            return group

        def barrier(group: Any = None, async_op: bool = False, device_ids: list[int] | None = None) -> None:
            pg.barriers.append({"group": group, "device_ids": device_ids})

        def broadcast_object_list(objects: list[Any], src: int = 0, group: Any = None, device: Any = None) -> None:
            pg.object_broadcasts.append(SimpleNamespace(objects=list(objects), src=src, group=group))

        def init_device_mesh(device_type: str, mesh_shape: tuple[int, ...], **kwargs: Any) -> SimpleNamespace:
            # the rule of an active torch profile
            check_init_device_mesh(pg.init_kwargs.get("device_id"), pg.backend, tuple(mesh_shape))
            mesh = SimpleNamespace(device_type=device_type, mesh_shape=tuple(mesh_shape), kwargs=kwargs)
            pg.meshes.append(mesh)
            return mesh

        monkeypatch.setattr(torch.distributed.device_mesh, "init_device_mesh", init_device_mesh)
        monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
        monkeypatch.setattr(torch.distributed, "is_initialized", lambda: pg.backend is not None)
        monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: pg.backend)
        monkeypatch.setattr(torch.distributed, "new_group", new_group)
        monkeypatch.setattr(torch.distributed, "barrier", barrier)
        monkeypatch.setattr(torch.distributed, "broadcast_object_list", broadcast_object_list)
        monkeypatch.setattr(torch.distributed, "destroy_process_group", lambda group=None: pg.destroyed.append(group))
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "29500")
        for name in ONECCL_LAUNCH_VARIABLES:  # set then deleted: recorded, so what the setup writes is undone
            monkeypatch.setenv(name, "")
            monkeypatch.delenv(name)
        for name in BINDINGS_LOCAL_PLACE:  # launch variables (kept as the test set them), written for ccl
            monkeypatch.setenv(name, os.environ.get(name, ""))
            if not os.environ[name]:
                monkeypatch.delenv(name)
        # Lightning sets the rank once, when it is first imported; importing it first means undoing this patch
        # restores that value instead of deleting an attribute that a later import would no longer set.
        from lightning_xpu._namespaces import LIGHTNING, STANDALONE

        fabric = LIGHTNING.fabric if importlib.util.find_spec("lightning") else STANDALONE.fabric
        importlib.import_module(f"{fabric}.utilities.rank_zero")
        monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)
        return pg

    return record
