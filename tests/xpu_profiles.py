"""THE fact table of what real PyTorch XPU stacks do, version by version (test-only; nothing here runs on XPU).

Each `Fact` row is one behaviour: a torch version range (a `packaging` specifier), the value for that range, the
source it was read from (`file@tag`, or an upstream thread), the torch attributes it models (`touches`, dotted
below `torch.`) and whether the value was read from that release (`verified=False`: inferred, see `note`).
`tests/xpu_simulation.py` turns a profile (`simulated_xpu(torch="2.7")`) into behaviour from these rows only; a
runtime access to a `torch.xpu`/`torch.distributed`/`torch.backends` attribute that no row `touches` fails the test.
The research summary these rows come from: shared/research/xpu-reality.md (table rows #1-#12 are cited as R1-R12).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

ABSENT = "absent"  # value of a fact whose attribute does not exist in that release


@dataclass(frozen=True)
class Fact:
    name: str
    versions: str  # packaging specifier over the torch release, e.g. ">=2.5,<2.8"
    value: Any
    source: str
    touches: tuple[str, ...] = ()
    verified: bool = True
    note: str = ""

    def covers(self, torch_version: str) -> bool:
        return Version(torch_version) in SpecifierSet(self.versions)


XPU_INIT = "torch/xpu/__init__.py"
RANDOM = "torch/xpu/random.py"
C10D = "torch/distributed/distributed_c10d.py"

FACTS: tuple[Fact, ...] = (
    # ---- R1: counting devices, fork poisoning, the bad-fork state ------------------------------------------------
    Fact("count_poisons_fork", ">=2.5,<2.12", "always",
         f"torch/csrc/xpu/Module.cpp@v2.5.1 (poison_fork in getDeviceCount); {XPU_INIT}@v2.11.0", ("xpu.device_count",
         "xpu.is_available")),
    Fact("count_poisons_fork", ">=2.13", "unless-pyzes",
         f"{XPU_INIT}@v2.13.0 (device_count: _device_count_zes first; 'will NOT poison fork if Level Zero Sysman"
         " discovery succeeds')", ("xpu.device_count", "xpu.is_available", "xpu._device_count_zes")),
    Fact("bad_fork_error", ">=2.5",
         "Cannot re-initialize XPU in forked subprocess. To use XPU with multiprocessing, you must use the 'spawn'"
         " start method", f"{XPU_INIT}@v2.13.0 (_lazy_init)", ("xpu._is_in_bad_fork",)),
    Fact("initialized_in_bad_fork", ">=2.5", False, f"{XPU_INIT}@v2.13.0 (is_initialized: `_initialized and not"
         " _is_in_bad_fork()`)", ("xpu.is_initialized",)),
    # Calls that run _lazy_init(): they start the XPU runtime (and poison fork), and raise in a bad fork.
    Fact("initialising_calls", ">=2.5",
         ("set_device", "current_device", "get_device_properties", "get_device_name", "synchronize",
          "get_rng_state", "get_rng_state_all", "Stream"),
         f"{XPU_INIT}@v2.13.0, {RANDOM}@v2.13.0 (get_rng_state: `_lazy_init()`), R2",
         ("xpu.set_device", "xpu.current_device", "xpu.get_device_properties", "xpu.get_device_name",
          "xpu.synchronize", "xpu.get_rng_state", "xpu.get_rng_state_all", "xpu.Stream", "xpu.stream")),
    # Calls queued by _lazy_call until initialisation: they never raise in a bad fork.
    Fact("deferred_calls", ">=2.5", ("set_rng_state", "set_rng_state_all", "manual_seed", "manual_seed_all"),
         f"{RANDOM}@v2.13.0 (_lazy_call)", ("xpu.set_rng_state", "xpu.set_rng_state_all", "xpu.manual_seed",
                                             "xpu.manual_seed_all")),
    Fact("manual_seed_skips_bad_fork", ">=2.5", True, "torch/random.py@v2.13.0 (manual_seed: `if not"
         " torch.xpu._is_in_bad_fork(): torch.xpu.manual_seed_all(seed)`)", ("xpu._is_in_bad_fork",)),
    # empty_cache / memory_stats do nothing before initialisation (so nothing in a bad fork) ...
    Fact("memory_calls_need_init", ">=2.5", False, "torch/xpu/memory.py@v2.13.0 (empty_cache: `if"
         " is_initialized()`; memory_stats_as_nested_dict returns {} when not initialised)",
         ("xpu.empty_cache", "xpu.memory_stats"), verified=False, note="read in 2.13 only; assumed for 2.5-2.12"),
    # ... unless IPEX replaced them (R12). Whether IPEX's versions initialise XPU is not verified: modelled as they do.
    Fact("ipex_replaces_memory_calls", ">=2.5,<2.8", True, "intel/intel-extension-for-pytorch frontend.py"
         "@v2.5.10+xpu..v2.7.10+xpu (R12)", ("xpu.empty_cache", "xpu.memory_stats"), verified=False,
         note="replacement verified; its behaviour before initialisation is not, so it is modelled as initialising"),
    Fact("ipex_replaces_memory_calls", ">=2.8", False, "intel/intel-extension-for-pytorch@v2.8.10+xpu (the last"
         " release; nothing replaced from 2.8 on is known)", verified=False, note="no IPEX read for 2.8"),
    # ---- R8: is_xccl_available ----------------------------------------------------------------------------------
    Fact("is_xccl_available", "<2.6", ABSENT, "torch/distributed/__init__.py@v2.5.1",
         ("distributed.is_xccl_available",)),
    Fact("is_xccl_available", ">=2.6,<2.8", False, "intel/torch-xpu-ops@release/2.6 (no XCCL), @release/2.7 (USE_XCCL"
         " off)", ("distributed.is_xccl_available",)),
    Fact("is_xccl_available", ">=2.8", True, "intel/torch-xpu-ops@release/2.8 (XCCL built in XPU wheels)",
         ("distributed.is_xccl_available",)),
    # ---- R7: Backend names and init_process_group(device_id=...) --------------------------------------------------
    Fact("backend_xccl_name", "<2.6", False, f"{C10D}@v2.5.1 (Backend has no XCCL)",
         ("distributed.Backend", "distributed.Backend.backend_list", "distributed.Backend.default_device_backend_map")),
    Fact("backend_xccl_name", ">=2.6", True, f"{C10D}@v2.13.0 (Backend.XCCL, backend_list, default map xpu->xccl)",
         ("distributed.Backend", "distributed.Backend.backend_list", "distributed.Backend.default_device_backend_map"),
         verified=False, note="2.13 read (and checked against the installed torch); 2.6-2.12 assumed the same"),
    Fact("device_id_rule", "<2.7", "cuda-only", f"{C10D}@v2.5.1/v2.6.0 (ValueError for a non-CUDA device_id)",
         ("distributed.init_process_group",)),
    Fact("device_id_rule", "==2.7.*", "not-cpu", f"{C10D}@v2.7.0 (rejects only a CPU device_id)",
         ("distributed.init_process_group",)),
    Fact("device_id_rule", ">=2.8", "accelerator", f"{C10D}@v2.13.0 (type must be the compiled accelerator's,"
         " with an index below torch.accelerator.device_count())", ("distributed.init_process_group",)),
    # ---- R11: DeviceMesh over a process group bound to a device --------------------------------------------------
    Fact("mesh_splits_bound_group", "<2.13", False, "torch/distributed/device_mesh.py@v2.7.0..v2.11.0 (splitting"
         " gated on torch.cuda.is_available())", ("distributed.device_mesh.init_device_mesh",)),
    Fact("mesh_splits_bound_group", ">=2.13", True, "torch/distributed/device_mesh.py@v2.13.0 (a bound group is"
         " split; ProcessGroupXCCL cannot split: pytorch/pytorch#186548@2026-06, intel/torch-xpu-ops#5385)",
         ("distributed.device_mesh.init_device_mesh",)),
    # ---- R4: ShardedGradScaler ---------------------------------------------------------------------------------
    Fact("sharded_scaler_xpu", "<2.6", False, "torch/distributed/fsdp/sharded_grad_scaler.py@v2.5.1"
         " (_is_supported_device lacks 'xpu': scale() asserts)", ("distributed.fsdp",
         "distributed.fsdp.sharded_grad_scaler._is_supported_device")),
    Fact("sharded_scaler_xpu", ">=2.6", True, "torch/distributed/fsdp/sharded_grad_scaler.py@v2.6.0..v2.13.0",
         ("distributed.fsdp", "distributed.fsdp.sharded_grad_scaler._is_supported_device")),
    # ---- R3: oneCCL bindings ------------------------------------------------------------------------------------
    Fact("oneccl_needs_ipex_first", "<2.8", True, "intel/torch-ccl README and src/gpu/CMakeLists.txt"
         "@v2.5.0+xpu..v2.7.0+xpu; oneccl_bindings_for_pytorch/__init__.py (prints 'CCL doesn't work for XPU"
         " device' when lib/liboneccl_bindings_for_pytorch_xpu.so fails to load)"),
    Fact("oneccl_needs_ipex_first", ">=2.8", False, "intel/torch-ccl README@v2.8.0+xpu (no IPEX requirement)"),
    # ---- R5: the TF32 switch XPU matmuls follow ---------------------------------------------------------------
    Fact("onednn_allow_tf32", "<2.6", ABSENT, "torch/backends/mkldnn/__init__.py@v2.5.1",
         ("backends.mkldnn", "backends.mkldnn.allow_tf32")),
    Fact("onednn_allow_tf32", ">=2.6", "switch", "torch/backends/mkldnn/__init__.py@v2.8.0..v2.13.0; XPU matmul"
         " reads it from pytorch#144240 (2.7); eager XPU still reads it in 2026 (pytorch#187948,"
         " intel/torch-xpu-ops#4919)", ("backends.mkldnn", "backends.mkldnn.allow_tf32"), verified=False,
         note="2.6/2.7: from the PRs (pytorch#137570 conv, #144240 matmul), not read from the wheels"),
    Fact("onednn_fp32_precision_api", "<2.9", ABSENT, "torch/backends/mkldnn/__init__.py@v2.8.0",
         ("backends.mkldnn.matmul",)),
    Fact("onednn_fp32_precision_api", ">=2.9", "present", "torch/backends/mkldnn/__init__.py@v2.13.0 (matmul ="
         " _FP32Precision('mkldnn', 'matmul')); pytorch#157520", ("backends.mkldnn.matmul",
         "backends.mkldnn.matmul.fp32_precision"), verified=False, note="2.9-2.12 from the PR"),
    Fact("mixed_precision_api_raises", "<2.9", False, "torch/backends/mkldnn/__init__.py@v2.8.0 (no fp32_precision"
         " API before 2.9: nothing to mix)"),
    Fact("mixed_precision_api_raises", ">=2.13", True, "torch/__init__.py@v2.13.0 (measured here: after"
         " `torch.backends.mkldnn.matmul.fp32_precision = 'tf32'`, get_float32_matmul_precision() raises"
         " RuntimeError)", verified=True, note="2.9-2.12 not verified"),
    # ---- R6: gpu_eu_count ---------------------------------------------------------------------------------------
    Fact("eu_count_default", ">=2.5", 512, "c10/xpu/XPUDeviceProp.h@v2.5.1..v2.15.0 (gpu_eu_count filled with"
         " 512 when the device lacks the aspect)", ("xpu.get_device_properties",)),
    # ---- R10: the profiler ------------------------------------------------------------------------------------
    Fact("profiler_xpu_activity", ">=2.5", "pti-builds-only", "torch/profiler@v2.5.1..v2.13.0"
         " (ProfilerActivity.XPU always exists; in supported_activities() only with Kineto/PTI)"),
)

# What the package assumes and the research verified in every release 2.5-2.15 ("Verified as the package assumes",
# xpu-reality.md): attributes the runtime may touch without a behaviour row of its own.
VERIFIED_AS_ASSUMED = Fact(
    "verified_api", ">=2.5", True, "xpu-reality.md 'Verified as the package assumes' (torch 2.5.1-2.15.0 sources)",
    ("xpu.set_device", "xpu.synchronize", "xpu.empty_cache", "xpu.memory_stats", "xpu.Stream", "xpu.stream",
     "xpu.get_device_name", "xpu.get_device_properties", "xpu.get_rng_state_all", "xpu.set_rng_state_all",
     "xpu.is_initialized", "xpu.manual_seed_all", "xpu.device_count", "xpu.is_available",
     "distributed.is_available", "distributed.is_initialized", "distributed.get_backend", "distributed.new_group",
     "distributed.barrier", "distributed.broadcast_object_list", "distributed.destroy_process_group",
     "distributed.group", "distributed.group.WORLD", "distributed.device_mesh",
     "distributed.device_mesh.init_device_mesh", "distributed.fsdp.sharded_grad_scaler",
     "distributed.fsdp.sharded_grad_scaler.ShardedGradScaler", "distributed.ProcessGroupGloo",
     "distributed.Backend.register_backend"),
)

MODELLED: frozenset[str] = frozenset(t for row in (*FACTS, VERIFIED_AS_ASSUMED) for t in row.touches)


def is_modelled(path: str) -> bool:
    """`path` (dotted below `torch.`) is modelled, or is a namespace on the way to a modelled attribute."""
    return path in MODELLED or any(name.startswith(path + ".") for name in MODELLED)


class UnknownFact(LookupError):
    pass


def fact(name: str, torch_version: str) -> Any:
    rows = [row for row in FACTS if row.name == name and row.covers(torch_version)]
    if len(rows) != 1:
        known = sorted({row.versions for row in FACTS if row.name == name})
        raise UnknownFact(f"no single row for {name!r} at torch {torch_version} (rows: {known}): add one with its"
                          " source to tests/xpu_profiles.py")
    return rows[0].value


def fact_names() -> list[str]:
    return sorted({row.name for row in FACTS})


@dataclass(frozen=True)
class Profile:
    """One simulated XPU stack. `pyzes`: Level Zero Sysman counting works; `ipex`: IPEX is installed; `pti`: the
    build has the Kineto/PTI tracer."""

    torch: str
    pyzes: bool = False
    ipex: bool = False
    pti: bool = True

    def __post_init__(self) -> None:
        for name in fact_names():  # every fact must be known for this release: fail at once, naming the gap
            fact(name, self.torch)

    def fact(self, name: str) -> Any:
        return fact(name, self.torch)

    @property
    def count_poisons_fork(self) -> bool:
        rule = self.fact("count_poisons_fork")
        return rule == "always" or (rule == "unless-pyzes" and not self.pyzes)

    def as_env(self) -> str:
        """The value of `LXPU_SIM_PROFILE` giving this profile to launched ranks (tests/bootstrap)."""
        flags = [name for name in ("pyzes", "ipex") if getattr(self, name)] + ([] if self.pti else ["no-pti"])
        return ",".join([self.torch, *flags])

    @classmethod
    def from_env(cls, text: str) -> Profile:
        version, *flags = [part.strip() for part in text.split(",") if part.strip()]
        unknown = set(flags) - {"pyzes", "ipex", "no-pti"}
        if unknown:
            raise ValueError(f"LXPU_SIM_PROFILE={text!r}: unknown flags {sorted(unknown)}; use pyzes, ipex, no-pti")
        return cls(version, pyzes="pyzes" in flags, ipex="ipex" in flags, pti="no-pti" not in flags)


# The releases XPU unit tests run against on the newest Lightning (issue 11): the first of each behaviour era.
PROFILE_GRID = ("2.5", "2.7", "2.8", "2.13")
NEWEST_PROFILE = PROFILE_GRID[-1]


def check_device_id(profile: Profile, device_id: Any, accelerator: str | None, accelerator_count: int) -> None:
    """`init_process_group(device_id=...)` validation of `profile`'s release (R7); raises ValueError like torch."""
    import torch

    if device_id is None:
        return
    rule = profile.fact("device_id_rule")
    if isinstance(device_id, int):
        if rule != "accelerator" or accelerator is None:
            raise ValueError("device_id is an int, but no accelerator support is found from the current compilation.")
        device_id = torch.device(accelerator, device_id)
    if rule == "cuda-only" and device_id.type != "cuda":
        raise ValueError(f"init_process_group device_id must be a CUDA device on torch {profile.torch}: {device_id}")
    if rule == "not-cpu" and device_id.type == "cpu":
        raise ValueError("init_process_group device_id parameter must be an accelerator")
    if rule != "accelerator":
        return
    if device_id.type != "cpu":
        if accelerator is None or device_id.type != accelerator:
            raise ValueError(f"device_id {device_id} does not match the current compilation's accelerator support:"
                             f" {accelerator}.")
        if device_id.index is None:
            raise ValueError("Please use a device_id with index.")
        if device_id.index >= accelerator_count:
            raise ValueError(f"device_id {device_id} is out of range. Please use a device index less than the number"
                             f" of accelerators available: {accelerator_count}.")
    if device_id.index is None or device_id.type == "cpu":
        raise ValueError("init_process_group device_id parameter must be an accelerator with an index")


def newest_lightning_in(venv_dir: str | None) -> Version | None:
    """The newest Lightning among the CI venvs (`LXPU_VENV_DIR`, one directory per version), else None."""
    if not venv_dir or not Path(venv_dir).is_dir():
        return None
    versions = [Version(p.name) for p in Path(venv_dir).iterdir() if re.fullmatch(r"\d+(\.\d+)*", p.name)]
    return max(versions, default=None)


def profiles_for_this_run() -> tuple[str, ...]:
    """The torch profiles XPU unit tests run against here: the grid on the newest Lightning of the CI venvs (or
    when `LXPU_SIM_GRID=1`), none elsewhere (older Lightning venvs keep the default simulation, to hold CI time)."""
    from importlib.metadata import PackageNotFoundError, version

    if os.environ.get("LXPU_SIM_GRID") == "1":
        return PROFILE_GRID
    newest = newest_lightning_in(os.environ.get("LXPU_VENV_DIR"))
    try:
        installed = Version(version("lightning"))
    except PackageNotFoundError:
        try:
            installed = Version(version("pytorch-lightning"))
        except PackageNotFoundError:
            return ()
    return PROFILE_GRID if newest is None or installed >= newest else ()
