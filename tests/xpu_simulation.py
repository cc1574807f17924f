"""The XPU simulation behind the `simulated_xpu` fixture (tests/conftest.py) and its rank bootstrap (tests/bootstrap).

Test-only, pytest-free so that ranks launched by mpiexec/srun/Lightning can apply it at interpreter start. Nothing
here runs on Intel hardware: the CPU build of torch gets its `torch.xpu` device queries patched.

Two modes:
- the default (no `torch=`): today's kind simulation (every query answers, nothing poisons fork, XCCL exists);
- a profile (`torch="2.7"`, ...): behaviour taken only from the fact table in tests/xpu_profiles.py (fork poisoning
  and the bad-fork state, which calls initialise XPU, is_xccl_available, Backend names, device_id rules,
  ShardedGradScaler devices, oneCCL bindings needing IPEX first, the TF32 switches, gpu_eu_count, profiler
  activity), and `torch.xpu`, `torch.distributed` and `torch.backends` become strict namespaces: an access from
  lightning_xpu to an attribute that no table row models is recorded in `sim.unmodelled` (the fixture fails the
  test on it).

In both modes a `ccl` or `xccl` process group checks oneCCL's launch contract (tests/oneccl_launch.py) and fails
with `OneCCLLaunchFailure` where the real runtime beneath would fail or hang; a launched rank's `xccl` group on the
CPU build is gloo underneath.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.abc
import importlib.machinery
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Protocol

import torch

from tests.oneccl_launch import READ_ONECCL, launched_place, oneccl_check, torch_ccl_rewrite
from tests.xpu_profiles import ABSENT, Profile, check_device_id, is_modelled, mask_is_integers, visible_device_count

ONECCL_MODULE = "oneccl_bindings_for_pytorch"
IPEX_MODULE = "intel_extension_for_pytorch"
ONECCL_XPU_LIBRARY = "lib/liboneccl_bindings_for_pytorch_xpu.so"  # what the real bindings load
RUNTIME_PACKAGE = "lightning_xpu"
AFFINITY_MASK = "ZE_AFFINITY_MASK"  # Level Zero's per-process device mask (tests/xpu_profiles.py MASK_FACTS)
SIMULATED_SYCL_VERSION = "20250101"  # torch.version.xpu of a simulated 2.6+ XPU build (a oneAPI compiler date)


class Patcher(Protocol):
    """What the simulation needs of pytest's MonkeyPatch (the bootstrap uses `PermanentPatcher`)."""

    def setattr(self, target: Any, name: str, value: Any, raising: bool = ...) -> None: ...
    def delattr(self, target: Any, name: str, raising: bool = ...) -> None: ...
    def setitem(self, dic: Any, name: Any, value: Any) -> None: ...


class PermanentPatcher:
    """Applies patches for the life of the process (launched ranks: nothing to undo)."""

    def setattr(self, target: Any, name: str, value: Any, raising: bool = True) -> None:
        setattr(target, name, value)

    def delattr(self, target: Any, name: str, raising: bool = True) -> None:
        if hasattr(target, name) or raising:
            delattr(target, name)

    def setitem(self, dic: Any, name: Any, value: Any) -> None:
        dic[name] = value


class StandInXPUStream:
    """Stand-in for `torch.xpu.Stream`, whose CPU-build class refuses to be instantiated."""

    def __init__(self, device: Any = None, priority: int = 0) -> None:
        self.device = device


@dataclass
class SimulatedXPU:
    """What the simulation reports and what the code under test asked of it."""

    devices: int = 2  # the node's devices (tiles, FLAT); a process sees those ZE_AFFINITY_MASK selects
    xccl: bool = True
    fp64: bool = True
    # What get_device_name/get_device_properties report: by default one stack of a Max 1550 (FLAT mode: 512 EUs).
    name: str = "Simulated Intel(R) Data Center GPU Max 1550"
    eu_count: int | None = 512
    oneccl: bool = False
    initialized: bool = False  # whether the XPU runtime has started in this process (torch.xpu.is_initialized)
    current: int = 0
    # One CPU generator per simulated device stands in for its XPU generator (get/set_rng_state_all use them).
    generators: list[torch.Generator] = field(default_factory=list)
    set_device_calls: list[Any] = field(default_factory=list)
    synchronize_calls: int = 0
    empty_cache_calls: int = 0
    # Ordered log shared with `recorded_process_group`, for "X happened before Y" assertions.
    events: list[tuple[str, Any]] = field(default_factory=list)
    # ---- profile mode only ----
    profile: Profile | None = None
    fork_poisoned: bool = False  # a fork handler was registered (counting or initialising did it)
    in_bad_fork: bool = False  # this process was forked after that (torch.xpu._is_in_bad_fork())
    ipex_imported: bool = False
    allow_tf32: bool = False  # torch.backends.mkldnn.allow_tf32 (where the profile has it)
    deferred: list[str] = field(default_factory=list)  # calls queued until initialisation (_lazy_call)
    unmodelled: list[str] = field(default_factory=list)  # runtime accesses no table row models

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 2048}

    def visible_devices(self) -> int:
        """The devices this process sees: `devices` are the node's, `ZE_AFFINITY_MASK` (read at each count, as
        torch does not cache the count before initialisation) selects among them (row affinity_mask_selects)."""
        return visible_device_count(self.devices, os.environ.get(AFFINITY_MASK))


# ---- the fork model (profile mode): a real os.fork child inherits the simulation and, if fork was poisoned, is in
# a bad fork, as torch's pthread_atfork handler makes it (torch/csrc/xpu/Module.cpp).
_ACTIVE: list[SimulatedXPU] = []


def _forked_child() -> None:
    for sim in _ACTIVE:
        if sim.fork_poisoned:
            sim.in_bad_fork = True
            sim.initialized = False


os.register_at_fork(after_in_child=_forked_child)


def active() -> SimulatedXPU | None:
    return _ACTIVE[-1] if _ACTIVE else None


def check_init_process_group(kwargs: dict[str, Any]) -> None:
    """The `device_id` rules of the active profile (row device_id_rule); `recorded_process_group` and the real call
    use it."""
    sim = active()
    if sim is not None and sim.profile is not None:
        check_device_id(sim.profile, kwargs.get("device_id"), "xpu", sim.visible_devices())


def check_oneccl_launch(backend: str | None, kwargs: dict[str, Any]) -> None:
    """oneCCL's launch contract (tests/oneccl_launch.py) for a `ccl` or `xccl` group, in every simulation mode:
    raises OneCCLLaunchFailure where the real runtime beneath would fail or hang. A `ccl` group first rewrites the
    CCL_* place as the bindings' constructor does (row torch_ccl_rewrites_place; always in the default mode), and
    the contract is the one of the profile's bundled oneCCL (row bundled_oneccl)."""
    if backend not in ("ccl", "xccl"):
        return
    world = int(kwargs.get("world_size", -1))
    world = int(os.environ.get("WORLD_SIZE", "1")) if world < 0 else world
    rank = int(kwargs.get("rank", -1))
    rank = int(os.environ.get("RANK", "0")) if rank < 0 else rank
    launch, local_rank, local_size = launched_place(os.environ, rank, world)
    sim = active()
    profile = sim.profile if sim is not None else None
    if backend == "ccl" and (profile is None or profile.fact("torch_ccl_rewrites_place") is True):
        torch_ccl_rewrite(os.environ, rank, world)
    oneccl = READ_ONECCL if profile is None or backend == "ccl" else profile.fact("bundled_oneccl")
    oneccl_check(os.environ, launch, local_rank, local_size, oneccl)


def check_init_device_mesh(bound_device: Any, backend: str | None, mesh_shape: tuple[int, ...]) -> None:
    """Row mesh_splits_bound_group: from 2.12 DeviceMesh splits a process group bound to a device for each mesh
    dimension that does not span the whole world (a 1-D mesh over every rank reuses the default group), and
    ProcessGroupXCCL cannot split."""
    sim = active()
    if sim is None or sim.profile is None or bound_device is None or backend != "xccl":
        return
    world = 1
    for size in mesh_shape:
        world *= size
    if sim.profile.fact("mesh_splits_bound_group") and any(size != world for size in mesh_shape):
        raise RuntimeError("No backend for the parent process group or its backend does not support splitting")


# ---- oneCCL bindings stand-ins --------------------------------------------------------------------------------


def _small_shared_library() -> Path:
    """A harmless real shared object to stand in for the bindings' XPU library (dlopen needs a real file)."""
    folders = [Path(entry) for entry in sys.path if Path(entry).name == "lib-dynload"]
    for folder in folders:
        for candidate in sorted(folder.glob("_json*.so")) + sorted(folder.glob("*.so")):
            return candidate
    raise RuntimeError(f"no shared object under {folders} to stand in for {ONECCL_XPU_LIBRARY}")


_BINDINGS_DIRS: dict[bool, Path] = {}


def _remove_in(pid: int, root: Path) -> None:
    """At exit of the process that made `root` (not of a forked child); a loaded library may lose its file."""
    if os.getpid() == pid:
        shutil.rmtree(root, ignore_errors=True)


def _bindings_dir(xpu_loaded: bool) -> Path:
    """One directory per process for healthy bindings (XPU library loaded) and one for broken ones (never loaded)."""
    if xpu_loaded not in _BINDINGS_DIRS:
        root = Path(tempfile.mkdtemp(prefix=f"lxpu-stand-in-oneccl-{'ok' if xpu_loaded else 'broken'}-"))
        atexit.register(_remove_in, os.getpid(), root)
        library = root / ONECCL_MODULE / ONECCL_XPU_LIBRARY
        library.parent.mkdir(parents=True)
        shutil.copyfile(_small_shared_library(), library)
        if xpu_loaded:
            ctypes.CDLL(str(library))
        _BINDINGS_DIRS[xpu_loaded] = root / ONECCL_MODULE
    return _BINDINGS_DIRS[xpu_loaded]


def stand_in_oneccl_module(xpu_loaded: bool = True) -> ModuleType:
    """Stand-in for Intel's `oneccl_bindings_for_pytorch`: a module whose directory holds its XPU library, loaded
    into this process (healthy) or not (the bindings only printed a warning: row oneccl_needs_ipex_first)."""
    module = ModuleType(ONECCL_MODULE, "STAND-IN for Intel's oneCCL bindings; tests only, no oneCCL inside.")
    module.__file__ = str(_bindings_dir(xpu_loaded) / "__init__.py")
    module.STAND_IN = True  # type: ignore[attr-defined]
    return module


class _ImportModel(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of IPEX and the oneCCL bindings as the profile's release behaves (rows oneccl_needs_ipex_first,
    ipex_replaces_memory_calls)."""

    def __init__(self, sim: SimulatedXPU, ipex_installed: bool, oneccl_installed: bool) -> None:
        self.sim, self.ipex_installed, self.oneccl_installed = sim, ipex_installed, oneccl_installed

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if (fullname == IPEX_MODULE and self.ipex_installed) or (fullname == ONECCL_MODULE and self.oneccl_installed):
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if spec.name == IPEX_MODULE:
            self.sim.ipex_imported = True
            module = ModuleType(IPEX_MODULE, "STAND-IN for Intel Extension for PyTorch (import order only).")
            module.__version__ = "0.0.0+stand-in"  # type: ignore[attr-defined]
            return module
        assert self.sim.profile is not None
        loads = self.sim.ipex_imported or not self.sim.profile.fact("oneccl_needs_ipex_first")
        if not loads:
            print("Warning: Cannot load xpu CCL. CCL doesn't work for XPU device")  # the bindings' own words
        return stand_in_oneccl_module(xpu_loaded=loads)

    def exec_module(self, module: ModuleType) -> None:
        return None


# ---- strict namespaces (profile mode) -------------------------------------------------------------------------


class StrictNamespace:
    """Forwards everything to a real torch module; records lightning_xpu's accesses that no table row models.
    `build`: what lightning_xpu alone sees in place of the CPU build's answer (path -> value), for the questions
    that tell an XPU build from a CPU one; torch itself keeps its CPU build's answers (torch._dynamo asks
    `torch.xpu._is_compiled()` on import and would then reach for XPU functions this build lacks)."""

    __slots__ = ("_strict_build", "_strict_path", "_strict_real", "_strict_record")

    def __init__(self, real: Any, path: str, record: list[str], build: dict[str, Any] | None = None) -> None:
        object.__setattr__(self, "_strict_real", real)
        object.__setattr__(self, "_strict_path", path)
        object.__setattr__(self, "_strict_record", record)
        object.__setattr__(self, "_strict_build", build or {})

    def __getattr__(self, name: str) -> Any:
        path = f"{self._strict_path}.{name}"
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.split(".")[0] == RUNTIME_PACKAGE:
            if not is_modelled(path):
                self._strict_record.append(path)
            if path in self._strict_build:
                return self._strict_build[path]
        value = getattr(self._strict_real, name)
        if isinstance(value, ModuleType):
            return StrictNamespace(value, path, self._strict_record, self._strict_build)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._strict_real, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._strict_real, name)

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]  # what monkeypatch saves and restores
        return vars(self._strict_real)

    def __dir__(self) -> list[str]:
        return dir(self._strict_real)

    def __repr__(self) -> str:
        return f"<strict simulated torch.{self._strict_path}: {self._strict_real!r}>"


# ---- the simulation ---------------------------------------------------------------------------------------------


def simulate_xpu(
    patch: Patcher,
    devices: int = 2,
    xccl: bool | None = None,
    fp64: bool = True,
    oneccl: bool = False,
    name: str = SimulatedXPU.name,
    eu_count: int | None = SimulatedXPU.eu_count,
    torch_version: str | None = None,
    pyzes: bool | None = None,
    ipex: bool = False,
    pti: bool = True,
) -> SimulatedXPU:
    """See the module docstring. With a profile, `xccl` comes from the table and may not be given."""
    profile = None if torch_version is None else Profile(torch_version, pyzes=pyzes, ipex=ipex, pti=pti)
    if profile is not None and xccl is not None:
        raise TypeError(f"xccl is fixed by the torch {torch_version} profile (row is_xccl_available)")
    if profile is None and (pyzes or ipex or not pti):
        raise TypeError("pyzes/ipex/pti describe a profile: pass torch=<version> too")
    xccl_value = profile.fact("is_xccl_available") if profile is not None else (True if xccl is None else xccl)
    sim = SimulatedXPU(devices=devices, xccl=xccl_value is True, fp64=fp64, oneccl=oneccl, name=name,
                       eu_count=eu_count, profile=profile)
    sim.generators = [torch.Generator().manual_seed(1000 + index) for index in range(devices)]
    xpu = torch.xpu

    def lazy_init(call: str) -> None:
        """torch.xpu._lazy_init: start the runtime once; refuse in a bad fork (profile mode)."""
        if profile is None:
            return
        if sim.in_bad_fork:
            raise RuntimeError(profile.fact("bad_fork_error"))
        if not sim.initialized:
            sim.initialized = True
            sim.fork_poisoned = True
            sim.events.append(("xpu_init", call))

    def count() -> int:
        mask = os.environ.get(AFFINITY_MASK)
        if profile is not None and profile.counting_poisons_fork_under(mask):
            sim.fork_poisoned = True
        return sim.visible_devices()

    def is_initialized() -> bool:
        return sim.initialized and not sim.in_bad_fork

    def set_device(device: Any) -> None:
        lazy_init("set_device")
        sim.set_device_calls.append(device)
        sim.events.append(("set_device", device))
        sim.initialized = True  # as the real call starts the XPU runtime
        sim.current = torch.device(device).index if not isinstance(device, int) else device

    def current_device() -> int:
        lazy_init("current_device")
        return sim.current

    def synchronize(device: Any = None) -> None:
        lazy_init("synchronize")
        sim.synchronize_calls += 1

    def ipex_owns_memory_calls() -> bool:
        return profile is not None and sim.ipex_imported and bool(profile.fact("ipex_replaces_memory_calls"))

    def empty_cache() -> None:
        if ipex_owns_memory_calls():
            lazy_init("empty_cache (IPEX)")
        elif profile is not None and not is_initialized():
            return  # torch/xpu/memory.py: nothing to free before initialisation
        sim.empty_cache_calls += 1

    def memory_stats(device: Any = None) -> dict[str, int]:
        if ipex_owns_memory_calls():
            lazy_init("memory_stats (IPEX)")
        elif profile is not None and not is_initialized():
            return {}
        return sim.memory_stats(device)

    def properties(device: Any = None) -> SimpleNamespace:
        lazy_init("get_device_properties")
        if profile is not None:  # row eu_count_default: the field always exists, 512 when the device does not report it
            eus = sim.eu_count if sim.eu_count is not None else profile.fact("eu_count_default")
            extra = {"gpu_eu_count": eus}
        else:
            extra = {} if sim.eu_count is None else {"gpu_eu_count": sim.eu_count}
        return SimpleNamespace(name=sim.name, has_fp64=sim.fp64, total_memory=64 * 2**30,
                               driver_version="simulated", **extra)

    def get_rng_state_all() -> list[torch.Tensor]:
        lazy_init("get_rng_state_all")
        return [g.get_state() for g in sim.generators]

    def get_rng_state(device: Any = "xpu") -> torch.Tensor:
        lazy_init("get_rng_state")
        if isinstance(device, int):
            return sim.generators[device].get_state()
        index = torch.device(device).index
        return sim.generators[sim.current if index is None else index].get_state()

    def deferred(call: str, action: Callable[[], None]) -> None:
        if profile is None or is_initialized():
            action()
        else:
            sim.deferred.append(call)  # torch/xpu/random.py: _lazy_call queues it

    def set_rng_state_all(states: list[torch.Tensor]) -> None:
        def apply() -> None:
            for generator, state in zip(sim.generators, states):
                generator.set_state(state)

        deferred("set_rng_state_all", apply)

    def manual_seed_all(seed: int) -> None:
        def apply() -> None:
            for generator in sim.generators:
                generator.manual_seed(seed)

        deferred("manual_seed_all", apply)

    def stream_class(*args: Any, **kwargs: Any) -> StandInXPUStream:
        lazy_init("Stream")
        return StandInXPUStream(*args, **kwargs)

    @contextlib.contextmanager
    def stream(xpu_stream: Any) -> Iterator[None]:
        sim.events.append(("enter_stream", xpu_stream))
        yield
        sim.events.append(("exit_stream", xpu_stream))

    patch.setattr(xpu, "is_available", lambda: count() > 0)
    patch.setattr(xpu, "is_initialized", is_initialized)
    patch.setattr(xpu, "device_count", count)
    patch.setattr(xpu, "current_device", current_device)
    patch.setattr(xpu, "set_device", set_device)
    patch.setattr(xpu, "synchronize", synchronize)
    patch.setattr(xpu, "empty_cache", empty_cache)
    patch.setattr(xpu, "get_device_properties", properties)
    patch.setattr(xpu, "get_device_name", lambda device=None: properties(device).name)
    patch.setattr(xpu, "memory_stats", memory_stats)
    patch.setattr(xpu, "get_rng_state_all", get_rng_state_all)
    patch.setattr(xpu, "set_rng_state_all", set_rng_state_all)
    patch.setattr(xpu, "Stream", StandInXPUStream if profile is None else stream_class)
    patch.setattr(xpu, "stream", stream)
    # An XPU build with the Kineto/PTI tracer can profile XPU activity (row profiler_xpu_activity).
    supported = set(torch.profiler.supported_activities())
    if pti:
        supported.add(torch.profiler.ProfilerActivity.XPU)
    patch.setattr(torch.profiler, "supported_activities", lambda: set(supported))

    if profile is None:
        # The kind default: counting never poisons fork (as with PyTorch >= 2.13 and working Level Zero Sysman).
        patch.setattr(xpu, "_device_count_zes", sim.visible_devices, raising=False)
        patch.setattr(torch.distributed, "is_xccl_available", lambda: sim.xccl, raising=False)
        patch.setitem(sys.modules, ONECCL_MODULE, stand_in_oneccl_module() if oneccl else None)
        return sim

    _apply_profile(patch, sim, profile, ipex, oneccl, get_rng_state, manual_seed_all)
    return sim


def _apply_profile(patch: Patcher, sim: SimulatedXPU, profile: Profile, ipex: bool, oneccl: bool,
                   get_rng_state: Callable[..., Any], manual_seed_all: Callable[[int], None]) -> None:
    xpu, dist = torch.xpu, torch.distributed
    patch.setattr(xpu, "_is_in_bad_fork", lambda: sim.in_bad_fork)
    patch.setattr(xpu, "get_rng_state", get_rng_state)
    patch.setattr(xpu, "manual_seed_all", manual_seed_all)
    if profile.fact("count_poisons_fork") == "unless-pyzes":  # 2.13+: Sysman counting, -1 when it fails
        def device_count_zes() -> int:  # -1 also for a card.tile mask (row sysman_count_mask)
            usable = profile.pyzes and mask_is_integers(os.environ.get(AFFINITY_MASK))
            return sim.visible_devices() if usable else -1

        patch.setattr(xpu, "_device_count_zes", device_count_zes, raising=False)
    else:
        patch.delattr(xpu, "_device_count_zes", raising=False)

    # Rows is_xccl_available, backend_xccl_name and device_id_rule.
    xccl = profile.fact("is_xccl_available")
    if xccl == ABSENT:
        patch.delattr(dist, "is_xccl_available", raising=False)
    else:
        patch.setattr(dist, "is_xccl_available", lambda: xccl, raising=False)
    backend = dist.Backend
    if not profile.fact("backend_xccl_name"):
        patch.setattr(backend, "backend_list", [name for name in backend.backend_list if name != "xccl"])
        patch.setattr(backend, "default_device_backend_map",
                      {device: name for device, name in backend.default_device_backend_map.items() if device != "xpu"})
        patch.delattr(backend, "XCCL", raising=False)
    real_init = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        check_init_process_group(kwargs)
        backend = args[0] if args else kwargs.get("backend")
        check_oneccl_launch(backend, kwargs)
        if backend == "xccl" and not hasattr(torch._C._distributed_c10d, "ProcessGroupXCCL"):
            # A launched rank on the CPU build: gloo carries the collectives of the simulated XCCL group (not
            # XCCL; it proves nothing about oneCCL beyond the launch contract checked above).
            kwargs.pop("device_id", None)
            args, kwargs = (), {**kwargs, "backend": "gloo"}
        return real_init(*args, **kwargs)

    patch.setattr(dist, "init_process_group", init_process_group)

    # Row sharded_scaler_xpu.
    from torch.distributed.fsdp import sharded_grad_scaler

    if not profile.fact("sharded_scaler_xpu"):
        real_check = sharded_grad_scaler._is_supported_device
        patch.setattr(sharded_grad_scaler, "_is_supported_device",
                      lambda tensor: tensor.device.type != "xpu" and real_check(tensor))

    # Rows version_xpu and xpu_is_compiled: what tells this XPU build from a CPU one.
    if profile.fact("version_xpu") == ABSENT:
        patch.delattr(torch.version, "xpu", raising=False)
    else:
        patch.setattr(torch.version, "xpu", SIMULATED_SYCL_VERSION, raising=False)
    build = {"xpu._is_compiled": lambda: profile.fact("xpu_is_compiled")}  # seen by lightning_xpu only

    # Rows onednn_allow_tf32 and onednn_fp32_precision_api: the TF32 switches of oneDNN.
    mkldnn_class = type(torch.backends.mkldnn)
    if profile.fact("onednn_allow_tf32") == ABSENT:
        patch.delattr(mkldnn_class, "allow_tf32", raising=False)
    else:
        switch = property(lambda self: sim.allow_tf32, lambda self, value: setattr(sim, "allow_tf32", bool(value)))
        patch.setattr(mkldnn_class, "allow_tf32", switch)
    if profile.fact("onednn_fp32_precision_api") == ABSENT:
        patch.delattr(mkldnn_class, "matmul", raising=False)

    # Rows oneccl_needs_ipex_first and ipex_replaces_memory_calls: the import order of IPEX and the bindings.
    model = _ImportModel(sim, ipex_installed=ipex, oneccl_installed=oneccl)
    for module in (ONECCL_MODULE, IPEX_MODULE):
        if module in sys.modules:
            patch.setitem(sys.modules, module, None)
            del sys.modules[module]
    patch.setattr(sys, "meta_path", [model, *sys.meta_path])
    if not ipex:
        patch.setitem(sys.modules, IPEX_MODULE, None)
    if not oneccl:
        patch.setitem(sys.modules, ONECCL_MODULE, None)

    # The fork model, then the strict namespaces.
    patch.setattr(sys.modules[__name__], "_ACTIVE", [*_ACTIVE, sim])
    for attribute in ("xpu", "distributed", "backends"):
        patch.setattr(torch, attribute, StrictNamespace(getattr(torch, attribute), attribute, sim.unmodelled, build))


# ---- launched ranks (tests/bootstrap/sitecustomize.py) ---------------------------------------------------------

PROFILE_VARIABLE, DEVICES_VARIABLE, ONECCL_VARIABLE = "LXPU_SIM_PROFILE", "LXPU_SIM_DEVICES", "LXPU_SIM_ONECCL"
BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"


def bootstrap_env(profile: Profile, base: dict[str, str], devices: int = 2, oneccl: bool = False) -> dict[str, str]:
    """`base` plus what makes every Python process started with it (mpiexec/srun/Lightning ranks) simulate
    `profile`: the bootstrap directory first on PYTHONPATH, then the repository (its sitecustomize imports
    tests.xpu_simulation), and the profile variables."""
    path = os.pathsep.join(filter(None, [str(BOOTSTRAP_DIR), str(BOOTSTRAP_DIR.parents[1]), base.get("PYTHONPATH")]))
    return {**base, "PYTHONPATH": path, PROFILE_VARIABLE: profile.as_env(), DEVICES_VARIABLE: str(devices),
            ONECCL_VARIABLE: "1" if oneccl else "0"}


def bootstrap_from_environment() -> SimulatedXPU | None:
    """Apply the profile named by `LXPU_SIM_PROFILE` to this process for its lifetime (no-op without it)."""
    text = os.environ.get(PROFILE_VARIABLE)
    if not text:
        return None
    profile = Profile.from_env(text)
    return simulate_xpu(PermanentPatcher(), devices=int(os.environ.get(DEVICES_VARIABLE, "2")),
                        oneccl=os.environ.get(ONECCL_VARIABLE) == "1", torch_version=profile.torch,
                        pyzes=profile.pyzes, ipex=profile.ipex, pti=profile.pti)
