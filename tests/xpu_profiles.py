"""THE fact table of what real PyTorch XPU stacks do, version by version (test-only; nothing here runs on XPU).

Each `Fact` row is one behaviour: a torch version range (a `packaging` specifier), the value for that range, the
source it was read from (`file@tag`, or an upstream thread), the torch attributes it models (`touches`, dotted
below `torch.`) and whether the value was read from that release (`verified=False`: inferred, see `note`).
`tests/xpu_simulation.py` turns a profile (`simulated_xpu(torch="2.7")`) into behaviour from these rows only; a
runtime access to a `torch.xpu`/`torch.distributed`/`torch.backends` attribute that no row `touches` fails the test.
The rows were read from the Python sources, `.pyi` stubs and `c10/xpu` headers of the torch wheels 2.5.1, 2.6.0,
2.7.0, 2.8.0, 2.9.0, 2.10.0, 2.11.0, 2.12.0, 2.13.0, 2.14.0 and 2.15.0 on PyPI (a file's Python source is the same in
every build of a release), the intel/torch-xpu-ops release branches, the intel/torch-ccl and
intel/intel-extension-for-pytorch tags, and the upstream issues cited row by row.

The supported releases are the PyTorch minors of recipes/matrix.toml (`SUPPORTED_RELEASES`); every one of them must
build a `Profile` (tests/runtime/test_profiles.py), and none may be newer than `NEWEST_READ`, the newest release the
rows were read from.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ABSENT = "absent"  # value of a fact whose attribute does not exist in that release
MATRIX = Path(__file__).resolve().parents[1] / "recipes" / "matrix.toml"
NEWEST_READ = "2.15"  # the newest torch release whose sources the rows below were read from


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
MESH = "torch/distributed/device_mesh.py"
MKLDNN = "torch/backends/mkldnn/__init__.py"
IPEX = "intel/intel-extension-for-pytorch intel_extension_for_pytorch/xpu/__init__.py"
XCCL_SOURCES = "intel/torch-xpu-ops src/xccl"

# ---- per-rank device masks (issue 18; kept in their own block so that other row changes merge cleanly) ----------
# ZE_AFFINITY_MASK is applied by Level Zero beneath torch: a comma-separated list of device indices or
# <device>.<sub-device> pairs; the selected devices are the only ones the process sees, renumbered from 0 (Level
# Zero specification, core/PROG.rst "Affinity Mask", oneapi-src/level-zero-spec). With ZE_FLAT_DEVICE_HIERARCHY=FLAT
# every tile is a device. ALCF binds each of the 12 ranks of an Aurora node to one tile with
# ZE_AFFINITY_MASK=<card>.<tile> (argonne-lcf/user-guides docs/aurora/node-performance-overview/src/
# gpu_tile_compact.sh@173446f8: gpu_id = (PALS_LOCAL_RANKID / 2) % 6, tile_id = PALS_LOCAL_RANKID % 2).
TILES_PER_CARD = 2  # Data Center GPU Max 1550: two tiles per card (Aurora: 6 cards = 12 tiles per node)
MASK_FACTS = (
    Fact("affinity_mask_selects", ">=2.5", "indices-or-card.tile",
         "Level Zero specification core/PROG.rst@latest ('Affinity Mask',"
         " spec.oneapi.io/level-zero/latest/core/PROG.html#affinity-mask); argonne-lcf/user-guides"
         " docs/aurora/node-performance-overview/src/gpu_tile_compact.sh@173446f8 (card.tile per rank)",
         ("xpu.device_count", "xpu.is_available"), verified=False,
         note="applied by Level Zero, not torch; which entries a FLAT-mode driver accepts was read from the"
              " specification and ALCF's script, not seen on hardware"),
    # torch's Sysman count reads the mask itself: a card.tile entry is not an integer, so _parse_visible_devices
    # returns [] and _device_count_zes -1, and device_count() counts through the runtime (which poisons fork), even
    # where pyzes works.
    Fact("sysman_count_mask", "<2.13", ABSENT, f"{XPU_INIT}@v2.12.0 (no Sysman count: device_count() always counts"
         " through the runtime)"),
    Fact("sysman_count_mask", ">=2.13", "integers-only",
         f"{XPU_INIT}@v2.13.0 (_parse_visible_devices: 'Returns an empty list for unsupported COMPOSITE-style masks"
         " (e.g. \"0.0,0.1\")'; _device_count_zes returns -1 when it is empty)", ("xpu._device_count_zes",),
         verified=False, note="read at v2.13.0; 2.14 and 2.15 assumed unchanged"),
)

# ---- oneCCL beneath the process groups (issue 29; its own block so that other row changes merge cleanly) --------
# The oneCCL each release's XPU wheels bring: the `ccl` bindings' submodule (2.5-2.7), the `oneccl` wheel pinned by
# the torch XPU wheel (2.8+: PYTORCH_EXTRA_INSTALL_REQUIREMENTS of intel/torch-xpu-ops .github/scripts/build.sh).
# tests/oneccl_launch.py keys its launch contract by this version (read from 2021.14 only).
TORCH_CCL_SOURCE = "intel/torch-ccl src/ProcessGroupCCL.cpp"
BUILD_SH = "intel/torch-xpu-ops .github/scripts/build.sh"
ONECCL_FACTS = (
    Fact("bundled_oneccl", "<2.8", "2021.14", "intel/torch-ccl third_party/oneCCL@v2.5.0+xpu..v2.8.0+xpu (submodule"
         " 3afa1bb, oneCCL 2021.14); setup.py package_data lib/*.so* (the wheel carries its libccl)"),
    Fact("bundled_oneccl", "==2.8.*", "2021.15.2", f"{BUILD_SH}@release/2.8 (oneccl==2021.15.2)"),
    Fact("bundled_oneccl", "==2.9.*", "2021.16.1", f"{BUILD_SH}@release/2.9 (oneccl==2021.16.1)"),
    Fact("bundled_oneccl", "==2.10.*", "2021.17.1", f"{BUILD_SH}@release/2.10 (oneccl==2021.17.1)"),
    Fact("bundled_oneccl", ">=2.11,<2.13", "2021.17.2", f"{BUILD_SH}@release/2.11, @release/2.12 (oneccl==2021.17.2)"),
    Fact("bundled_oneccl", "==2.13.*", "2022.0.0", f"{BUILD_SH}@release/2.13 (oneccl==2022.0.0)"),
    Fact("bundled_oneccl", "==2.14.*", "2022.1.2", "docs.vllm.ai getting_started/installation/gpu@latest (XPU: 'after"
         " upgrading to PyTorch 2.14 ... oneccl==2022.1.2'); vllm-project/vllm#56013 (2.14 moves to oneCCL 2022.1.x)",
         verified=False, note=f"downstream sources: {BUILD_SH}@release/2.14 takes the list from PyTorch's"
                              " generate_binary_build_matrix.py, which was not read"),
    Fact("bundled_oneccl", "==2.15.*", "2022.1.2", "intel/torch-xpu-ops@main (no release/2.15 branch read)",
         verified=False, note="assumed as 2.14"),
    # How XCCL creates communicators: oneCCL's C++ API (ccl::create_communicators) or the newer C API
    # (onecclCommInitRank). Whether the C API reads the launch variables is in no readable source (Contract rows).
    Fact("xccl_communicator_api", "<2.8", ABSENT, "intel/torch-xpu-ops@release/2.6, @release/2.7 (no XCCL in the"
         " wheels; row is_xccl_available)"),
    Fact("xccl_communicator_api", ">=2.8,<2.12", "cpp", "intel/torch-xpu-ops src/xccl@release/2.8..release/2.11"
         " (ccl::create_communicator)", verified=False, note="the branches before 2.12 were not re-read for this"
         " row"),
    Fact("xccl_communicator_api", ">=2.12,<2.14", "cpp", "intel/torch-xpu-ops src/xccl/xccl.h@release/2.12 ~71-84,"
         " @release/2.13 ~541-577 (the C API only with USE_CCL_V2=1)"),
    Fact("xccl_communicator_api", "==2.14.*", "c", "intel/torch-xpu-ops src/xccl/ProcessGroupXCCL.cpp@release/2.14"
         " ~630-641 (onecclSetDevice + onecclCommInitRank only)"),
    Fact("xccl_communicator_api", "==2.15.*", "c", "intel/torch-xpu-ops@main (no release/2.15 branch read)",
         verified=False,
         note="assumed as 2.14"),
    # The `ccl` bindings' ProcessGroupCCL constructor rewrites CCL_PROCESS_LAUNCHER/CCL_LOCAL_RANK/CCL_LOCAL_SIZE
    # (tests/oneccl_launch.py torch_ccl_rewrite); no bindings exist after v2.8.0+xpu.
    Fact("torch_ccl_rewrites_place", "<2.9", True, f"{TORCH_CCL_SOURCE}@v2.7.0+xpu ~591-596, ~696-711 (with_mpirun;"
         " setOneCCLEnvVar CCL_PROCESS_LAUNCHER/CCL_LOCAL_RANK/CCL_LOCAL_SIZE); the same at v2.5.0+xpu ~590/695-709,"
         " v2.6.0+xpu ~591/696-710, v2.8.0+xpu ~825/930-944"),
    Fact("torch_ccl_rewrites_place", ">=2.9", ABSENT,
         "intel/torch-ccl@v2.8.0+xpu (the last tag; deprecated, issue #80)"),
)

FACTS: tuple[Fact, ...] = (
    # ---- counting devices, fork poisoning, the bad-fork state -------------------------------------------------
    Fact("count_poisons_fork", ">=2.5,<2.13", "always",
         f"torch/csrc/xpu/Module.cpp@v2.5.1 (poison_fork in getDeviceCount); {XPU_INIT}@v2.5.1..v2.12.0"
         " (device_count calls torch._C._xpu_getDeviceCount, no Sysman path)", ("xpu.device_count",
         "xpu.is_available")),
    Fact("count_poisons_fork", ">=2.13", "unless-pyzes",
         f"{XPU_INIT}@v2.13.0..v2.15.0 (device_count: _device_count_zes first; 'will NOT poison fork if Level Zero"
         " Sysman discovery succeeds')", ("xpu.device_count", "xpu.is_available", "xpu._device_count_zes")),
    # Whether the XPU wheel installs pyzes (so that the Sysman count works out of the box): a profile's default.
    Fact("wheel_requires_pyzes", "<2.13", False, f"{XPU_INIT}@v2.5.1..v2.12.0 (no Sysman path: pyzes unused)"),
    Fact("wheel_requires_pyzes", "==2.13.*", False, f"{XPU_INIT}@v2.13.0 (_device_count_zes uses pyzes when it"
         " imports)", verified=False, note="PyTorch's 2.13 release-notes worksheet lists pytorch/pytorch#185969 and a"
         " Nix package of torch 2.13.0+xpu declares pyzes==0.1.1, but the 2.13 XPU wheel's metadata was not read:"
         " modelled without pyzes (the stricter case, counting poisons fork)"),
    Fact("wheel_requires_pyzes", ">=2.14", True, "pytorch/pytorch .github/scripts/generate_binary_build_matrix.py"
         "@release/2.14 (pyzes==0.1.1 in the XPU wheel's extra install requirements, pytorch/pytorch#185969)",
         verified=False, note="read from the pull request, not from the 2.14/2.15 XPU wheel metadata"),
    Fact("bad_fork_error", ">=2.5",
         "Cannot re-initialize XPU in forked subprocess. To use XPU with multiprocessing, you must use the 'spawn'"
         " start method", f"{XPU_INIT}@v2.5.1..v2.15.0 (_lazy_init)", ("xpu._is_in_bad_fork",)),
    Fact("initialized_in_bad_fork", ">=2.5", False, f"{XPU_INIT}@v2.5.1..v2.15.0 (is_initialized: `_initialized and not"
         " _is_in_bad_fork()`)", ("xpu.is_initialized",)),
    # Calls that run _lazy_init(): they start the XPU runtime (and poison fork), and raise in a bad fork.
    Fact("initialising_calls", ">=2.5",
         ("set_device", "current_device", "get_device_properties", "get_device_name", "synchronize",
          "get_rng_state", "get_rng_state_all", "Stream"),
         f"{XPU_INIT}@v2.5.1..v2.15.0, {RANDOM}@v2.5.1..v2.15.0 (get_rng_state: `_lazy_init()`)",
         ("xpu.set_device", "xpu.current_device", "xpu.get_device_properties", "xpu.get_device_name",
          "xpu.synchronize", "xpu.get_rng_state", "xpu.get_rng_state_all", "xpu.Stream", "xpu.stream")),
    # Calls queued by _lazy_call until initialisation: they never raise in a bad fork.
    Fact("deferred_calls", ">=2.5", ("set_rng_state", "set_rng_state_all", "manual_seed", "manual_seed_all"),
         f"{RANDOM}@v2.5.1..v2.15.0 (_lazy_call)", ("xpu.set_rng_state", "xpu.set_rng_state_all", "xpu.manual_seed",
                                                    "xpu.manual_seed_all")),
    Fact("manual_seed_skips_bad_fork", ">=2.5", True, "torch/random.py@v2.5.1..v2.15.0 (manual_seed: `if not"
         " torch.xpu._is_in_bad_fork(): torch.xpu.manual_seed_all(seed)`)", ("xpu._is_in_bad_fork",)),
    # empty_cache / memory_stats do nothing before initialisation (so nothing in a bad fork) ...
    Fact("memory_calls_need_init", ">=2.5", False, "torch/xpu/memory.py@v2.5.1..v2.15.0 (empty_cache: `if"
         " is_initialized()`; memory_stats_as_nested_dict returns {} when not initialised)",
         ("xpu.empty_cache", "xpu.memory_stats")),
    # ... unless IPEX replaced them. Whether IPEX's versions initialise XPU is not verified: modelled as they do.
    Fact("ipex_replaces_memory_calls", "<2.8", True, f"{IPEX}@v2.5.10+xpu..v2.7.10+xpu (_register_torch_device_module"
         " sets the _register_submodule_white_list names, empty_cache and memory_stats among them, on torch.xpu)",
         ("xpu.empty_cache", "xpu.memory_stats"), verified=False,
         note="replacement verified; IPEX's empty_cache calls its _C._emptyCache() without an is_initialized()"
              " check, whether that initialises XPU is not verified, so it is modelled as initialising"),
    Fact("ipex_replaces_memory_calls", ">=2.8,<2.11", False, f"{IPEX}@v2.8.10+xpu..v2.10.10+xpu (the white list is"
         " empty: only attributes torch.xpu lacks are added, and mem_get_info is black-listed)"),
    Fact("ipex_replaces_memory_calls", ">=2.11", False, "intel/intel-extension-for-pytorch@v2.10.10+xpu (the last"
         " tag; the repository was archived in 2026-03): no IPEX exists for torch 2.11+, so nothing is replaced"),
    # ---- is_xccl_available ----------------------------------------------------------------------------------
    Fact("is_xccl_available", "<2.6", ABSENT, f"{C10D}@v2.5.1, torch/distributed/__init__.py@v2.5.1 (no"
         " is_xccl_available)", ("distributed.is_xccl_available",)),
    Fact("is_xccl_available", ">=2.6,<2.8", False, f"{C10D}@v2.6.0 (is_xccl_available added);"
         " intel/torch-xpu-ops@release/2.6 (no src/xccl), @release/2.7 (option USE_XCCL OFF)",
         ("distributed.is_xccl_available",)),
    Fact("is_xccl_available", ">=2.8,<2.15", True, "intel/torch-xpu-ops@release/2.8..release/2.14 (src/xccl; XCCL"
         " built in XPU wheels)", ("distributed.is_xccl_available",)),
    Fact("is_xccl_available", "==2.15.*", True, f"{C10D}@v2.15.0 (is_xccl_available); intel/torch-xpu-ops@main"
         " 2026-08-22 (src/xccl)", ("distributed.is_xccl_available",), verified=False,
         note="no torch-xpu-ops release/2.15 read: the 2.15 XPU wheel is assumed to keep XCCL"),
    # ---- Backend names and init_process_group(device_id=...) ---------------------------------------------------
    Fact("backend_xccl_name", "<2.6", False, f"{C10D}@v2.5.1 (Backend has no XCCL)",
         ("distributed.Backend", "distributed.Backend.backend_list", "distributed.Backend.default_device_backend_map")),
    Fact("backend_xccl_name", ">=2.6", True, f"{C10D}@v2.6.0..v2.15.0 (Backend.XCCL, in backend_list, default map"
         " xpu -> xccl)", ("distributed.Backend", "distributed.Backend.backend_list",
                           "distributed.Backend.default_device_backend_map")),
    Fact("device_id_rule", "<2.7", "cuda-only", f"{C10D}@v2.5.1/v2.6.0 (ValueError for a non-CUDA device_id)",
         ("distributed.init_process_group",)),
    Fact("device_id_rule", "==2.7.*", "not-cpu", f"{C10D}@v2.7.0 (rejects only a CPU device_id)",
         ("distributed.init_process_group",)),
    Fact("device_id_rule", ">=2.8,<2.15", "accelerator", f"{C10D}@v2.8.0..v2.14.0 (type must be the compiled"
         " accelerator's, with an index below torch.accelerator.device_count(); a CPU device_id is refused)",
         ("distributed.init_process_group",)),
    Fact("device_id_rule", ">=2.15", "accelerator-or-cpu", f"{C10D}@v2.15.0 (as 2.8-2.14, but a CPU device_id with"
         " an index is accepted: _new_process_group_helper checks only the index)",
         ("distributed.init_process_group",)),
    # ---- DeviceMesh over a process group bound to a device -------------------------------------------------------
    Fact("mesh_splits_bound_group", "<2.12", False, f"{MESH}@v2.7.0..v2.11.0 (split_group only when"
         " torch.cuda.is_available()); before 2.7 an XPU group cannot be bound (row device_id_rule)",
         ("distributed.device_mesh.init_device_mesh",)),
    Fact("mesh_splits_bound_group", ">=2.12,<2.15", True, f"{MESH}@v2.12.0..v2.14.0 (a bound group is split when"
         f" torch.accelerator.is_available()); {C10D}@v2.12.0 (split_group raises 'No backend for the parent process"
         f" group or its backend does not support splitting'); {XCCL_SOURCES}@release/2.12..release/2.14 (no"
         " supportsSplitting); pytorch/pytorch#186548, intel/torch-xpu-ops#5385",
         ("distributed.device_mesh.init_device_mesh",)),
    Fact("mesh_splits_bound_group", "==2.15.*", True, f"{MESH}@v2.15.0 (split when"
         f" torch.accelerator.is_available()); {XCCL_SOURCES}@main 2026-08-22 (no supportsSplitting)",
         ("distributed.device_mesh.init_device_mesh",), verified=False,
         note="torch-xpu-ops release/2.15 not read: XCCL is assumed still unable to split"),
    # ---- ShardedGradScaler ---------------------------------------------------------------------------------
    Fact("sharded_scaler_xpu", "<2.6", False, "torch/distributed/fsdp/sharded_grad_scaler.py@v2.5.1"
         " (_is_supported_device lacks 'xpu': scale() asserts)", ("distributed.fsdp",
         "distributed.fsdp.sharded_grad_scaler._is_supported_device")),
    Fact("sharded_scaler_xpu", ">=2.6", True, "torch/distributed/fsdp/sharded_grad_scaler.py@v2.6.0..v2.15.0",
         ("distributed.fsdp", "distributed.fsdp.sharded_grad_scaler._is_supported_device")),
    # ---- oneCCL bindings ------------------------------------------------------------------------------------
    Fact("oneccl_needs_ipex_first", "<2.8", True, "intel/torch-ccl README and src/gpu/CMakeLists.txt"
         "@v2.5.0+xpu..v2.7.0+xpu; oneccl_bindings_for_pytorch/__init__.py (prints 'CCL doesn't work for XPU"
         " device' when lib/liboneccl_bindings_for_pytorch_xpu.so fails to load)"),
    Fact("oneccl_needs_ipex_first", ">=2.8", False, "intel/torch-ccl README@v2.8.0+xpu (no IPEX requirement)"),
    # ---- the TF32 switch XPU matmuls follow (2.5 and 2.6 have none) ---------------------------------------
    Fact("onednn_allow_tf32", "<2.7", ABSENT, f"{MKLDNN}@v2.5.1, @v2.6.0 (no allow_tf32)",
         ("backends.mkldnn", "backends.mkldnn.allow_tf32")),
    Fact("onednn_allow_tf32", ">=2.7", "switch", f"{MKLDNN}@v2.7.0..v2.15.0 (allow_tf32 ="
         " ContextProp(torch._C._get_onednn_allow_tf32, ...)); XPU matmul reads it from pytorch#144240 (2.7); eager"
         " XPU still reads it in 2026 (pytorch#187948, intel/torch-xpu-ops#4919)",
         ("backends.mkldnn", "backends.mkldnn.allow_tf32")),
    Fact("onednn_fp32_precision_api", "<2.9", ABSENT, f"{MKLDNN}@v2.5.1..v2.8.0 (no matmul/_FP32Precision)",
         ("backends.mkldnn.matmul",)),
    Fact("onednn_fp32_precision_api", ">=2.9", "present", f"{MKLDNN}@v2.9.0..v2.15.0 (matmul ="
         " _FP32Precision('mkldnn', 'matmul')); pytorch#157520", ("backends.mkldnn.matmul",
         "backends.mkldnn.matmul.fp32_precision")),
    Fact("mixed_precision_api_raises", "<2.9", False, f"{MKLDNN}@v2.8.0 (no fp32_precision API before 2.9: nothing"
         " to mix)"),
    Fact("mixed_precision_api_raises", ">=2.9,<2.13", True, "torch/__init__.py@v2.9.0..v2.12.0"
         " (get_float32_matmul_precision returns torch._C._get_float32_matmul_precision(), whose check is C++)",
         verified=False, note="the C++ check was not read for 2.9-2.12: modelled as raising, like 2.13"),
    Fact("mixed_precision_api_raises", "==2.13.*", True, "torch/__init__.py@v2.13.0 (measured here: after"
         " `torch.backends.mkldnn.matmul.fp32_precision = 'tf32'`, get_float32_matmul_precision() raises"
         " RuntimeError)"),
    Fact("mixed_precision_api_raises", ">=2.14", True, "torch/__init__.py@v2.14.0, v2.15.0 (the same call into"
         " C++)", verified=False, note="not measured on 2.14/2.15: modelled as raising, like 2.13"),
    # ---- gpu_eu_count ---------------------------------------------------------------------------------------
    Fact("eu_count_default", ">=2.5", 512, "c10/xpu/XPUDeviceProp.h@v2.5.1..v2.15.0 (gpu_eu_count filled with"
         " 512 when the device lacks the aspect)", ("xpu.get_device_properties",)),
    # ---- the profiler ------------------------------------------------------------------------------------
    Fact("profiler_xpu_activity", ">=2.5", "pti-builds-only", "torch/_C/_profiler.pyi@v2.5.1..v2.15.0"
         " (ProfilerActivity.XPU always exists; in supported_activities() only with Kineto/PTI)"),
    *MASK_FACTS,
    *ONECCL_FACTS,
    # ---- telling an XPU build from a CPU one ---------------------------------------------------------------
    Fact("version_xpu", "<2.6", ABSENT, "torch/version.py@v2.5.1 (no xpu attribute; added by pytorch#139466)"),
    Fact("version_xpu", ">=2.6", "sycl-version", "torch/version.py@v2.6.0..v2.15.0 (`xpu: Optional[str]`, set by"
         " XPU builds)"),
    Fact("xpu_is_compiled", ">=2.5", True, f"{XPU_INIT}@v2.5.1..v2.15.0 (_is_compiled returns torch._C._has_xpu)",
         ("xpu._is_compiled",)),
)

# What the package assumes and the sources show in every release 2.5-2.15: attributes the runtime may touch without
# a behaviour row of its own.
VERIFIED_AS_ASSUMED = Fact(
    "verified_api", ">=2.5", True, f"{XPU_INIT}, torch/xpu/memory.py, {RANDOM}, {C10D}, {MESH},"
    " torch/distributed/fsdp/sharded_grad_scaler.py @v2.5.1..v2.15.0",
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
    """One simulated XPU stack. `pyzes`: Level Zero Sysman counting works (default: where the release's wheels
    install pyzes, row wheel_requires_pyzes); `ipex`: IPEX is installed; `pti`: the build has the Kineto/PTI tracer."""

    torch: str
    pyzes: bool | None = None
    ipex: bool = False
    pti: bool = True

    def __post_init__(self) -> None:
        if Version(self.torch) >= Version(_next_minor(NEWEST_READ)):  # open-ended rows say nothing about it
            raise UnknownFact(f"torch {self.torch} is newer than any release the table was read from ({NEWEST_READ}):"
                              " read its sources, then extend the rows and NEWEST_READ in tests/xpu_profiles.py")
        for name in fact_names():  # every fact must be known for this release: fail at once, naming the gap
            fact(name, self.torch)
        if self.pyzes is None:
            object.__setattr__(self, "pyzes", self.fact("wheel_requires_pyzes"))

    def fact(self, name: str) -> Any:
        return fact(name, self.torch)

    @property
    def count_poisons_fork(self) -> bool:
        rule = self.fact("count_poisons_fork")
        return rule == "always" or (rule == "unless-pyzes" and not self.pyzes)

    def counting_poisons_fork_under(self, mask: str | None) -> bool:
        """`count_poisons_fork`, plus a card.tile `ZE_AFFINITY_MASK` defeating the Sysman count (row
        sysman_count_mask)."""
        return self.count_poisons_fork or (self.fact("sysman_count_mask") == "integers-only"
                                           and not mask_is_integers(mask))

    def as_env(self) -> str:
        """The value of `LXPU_SIM_PROFILE` giving this profile to launched ranks (tests/bootstrap)."""
        flags = [name for name in ("pyzes", "ipex") if getattr(self, name)] + ([] if self.pti else ["no-pti"])
        if not self.pyzes and self.fact("wheel_requires_pyzes"):
            flags.append("no-pyzes")
        return ",".join([self.torch, *flags])

    @classmethod
    def from_env(cls, text: str) -> Profile:
        version, *flags = [part.strip() for part in text.split(",") if part.strip()]
        unknown = set(flags) - {"pyzes", "no-pyzes", "ipex", "no-pti"}
        if unknown:
            raise ValueError(f"LXPU_SIM_PROFILE={text!r}: unknown flags {sorted(unknown)}; use pyzes, no-pyzes, ipex,"
                             " no-pti")
        pyzes = True if "pyzes" in flags else (False if "no-pyzes" in flags else None)
        return cls(version, pyzes=pyzes, ipex="ipex" in flags, pti="no-pti" not in flags)


def mask_is_integers(mask: str | None) -> bool:
    """torch's `_parse_visible_devices` (v2.13.0) accepts the mask: unset, or every entry an integer."""
    if mask is None:
        return True
    try:
        [int(entry.strip()) for entry in mask.split(",")]
    except ValueError:
        return False
    return True


def visible_device_count(devices: int, mask: str | None) -> int:
    """How many of a node's `devices` (tiles, FLAT) a process sees under `ZE_AFFINITY_MASK` (row
    affinity_mask_selects): entries `<index>` or `<card>.<tile>`; entries naming no device select nothing."""
    if mask is None or not mask.strip():
        return devices
    selected: set[int] = set()
    for entry in mask.split(","):
        card, dot, tile = entry.strip().partition(".")
        if not card.isdigit() or (dot and not tile.isdigit()):
            continue
        index = int(card) * TILES_PER_CARD + int(tile) if dot else int(card)
        if (not dot or int(tile) < TILES_PER_CARD) and index < devices:
            selected.add(index)
    return len(selected)


def _next_minor(minor: str) -> str:
    major, number = Version(minor).release[:2]
    return f"{major}.{number + 1}"


def supported_releases(matrix: Path = MATRIX) -> tuple[str, ...]:
    """The PyTorch minors lightning-xpu supports: the `[versions."X.Y"]` entries of recipes/matrix.toml, oldest
    first."""
    versions = tomllib.loads(matrix.read_text())["versions"]
    return tuple(sorted(versions, key=Version))


def profile_grid(releases: tuple[str, ...]) -> tuple[str, ...]:
    """The releases run on every CI run: the oldest, the last on oneCCL's "ccl" bindings, the first with XCCL (row
    is_xccl_available) and the newest; each once, oldest first."""
    on_ccl = [version for version in releases if fact("is_xccl_available", version) is not True]
    on_xccl = [version for version in releases if fact("is_xccl_available", version) is True]
    picks = [releases[0], *on_ccl[-1:], *on_xccl[:1], releases[-1]]
    return tuple(sorted(set(picks), key=Version))


def releases_between(oldest: str, newest: str) -> tuple[str, ...]:
    """Every minor release from `oldest` to `newest` (same major)."""
    major, first = Version(oldest).release[:2]
    return tuple(f"{major}.{number}" for number in range(first, Version(newest).release[1] + 1))


# Every supported release (a selection of launch tests runs on each: the `every_xpu_profile` fixture) and the grid
# the XPU unit tests run on (the `xpu_profile` fixture), both on the newest Lightning only (tests/conftest.py).
# A release the matrix supports but nobody read yet (newer than NEWEST_READ) gets no profile: the simulation never
# speaks for it. tests/runtime/test_profiles.py fails until its rows are read; the recipes stage stays usable.
SUPPORTED_RELEASES = supported_releases()
ALL_PROFILES = tuple(version for version in SUPPORTED_RELEASES if Version(version) <= Version(NEWEST_READ))
NEWEST_PROFILE = ALL_PROFILES[-1]
PROFILE_GRID = profile_grid(ALL_PROFILES)
# Every release the rows were read for, from the oldest supported one (a release the matrix adds later is ready).
TABLE_RELEASES = releases_between(SUPPORTED_RELEASES[0], NEWEST_READ)


def check_device_id(profile: Profile, device_id: Any, accelerator: str | None, accelerator_count: int) -> None:
    """`init_process_group(device_id=...)` validation of `profile`'s release (row device_id_rule); raises ValueError
    like torch."""
    import torch

    if device_id is None:
        return
    rule = profile.fact("device_id_rule")
    on_accelerator = rule in ("accelerator", "accelerator-or-cpu")
    if isinstance(device_id, int):
        if not on_accelerator or accelerator is None:
            raise ValueError("device_id is an int, but no accelerator support is found from the current compilation.")
        device_id = torch.device(accelerator, device_id)
    if rule == "cuda-only" and (device_id.type != "cuda" or device_id.index is None):
        raise ValueError(f"init_process_group device_id must be a CUDA device on torch {profile.torch}: {device_id}")
    if on_accelerator and device_id.type != "cpu":
        if accelerator is None or device_id.type != accelerator:
            raise ValueError(f"device_id {device_id} does not match the current compilation's accelerator support:"
                             f" {accelerator}.")
        if device_id.index is None:
            raise ValueError("Please use a device_id with index.")
        if device_id.index >= accelerator_count:
            raise ValueError(f"device_id {device_id} is out of range. Please use a device index less than the number"
                             f" of accelerators available: {accelerator_count}.")
    cpu_allowed = rule == "accelerator-or-cpu"  # 2.15: _new_process_group_helper checks only the index
    if device_id.index is None or (device_id.type == "cpu" and not cpu_allowed):
        raise ValueError("init_process_group device_id parameter must be an accelerator with an index")


def newest_lightning_in(venv_dir: str | None) -> Version | None:
    """The newest Lightning among the CI venvs (`LXPU_VENV_DIR`, one directory per version), else None."""
    if not venv_dir or not Path(venv_dir).is_dir():
        return None
    versions = [Version(p.name) for p in Path(venv_dir).iterdir() if re.fullmatch(r"\d+(\.\d+)*", p.name)]
    return max(versions, default=None)


def profiles_for_this_run(profiles: tuple[str, ...] = PROFILE_GRID) -> tuple[str, ...]:
    """The torch profiles XPU unit tests run against here (`profiles`: the grid, or ALL_PROFILES): all of them on the
    newest Lightning of the CI venvs (or when `LXPU_SIM_GRID=1`), none elsewhere (older Lightning venvs keep the
    default simulation, to hold CI time)."""
    from importlib.metadata import PackageNotFoundError, version

    if os.environ.get("LXPU_SIM_GRID") == "1":
        return profiles
    newest = newest_lightning_in(os.environ.get("LXPU_VENV_DIR"))
    try:
        installed = Version(version("lightning"))
    except PackageNotFoundError:
        try:
            installed = Version(version("pytorch-lightning"))
        except PackageNotFoundError:
            return ()
    return profiles if newest is None or installed >= newest else ()
