"""Creating each rank's process group on Intel GPUs.

Around the strategy method that calls `_init_dist_connection` (on XPU only):
- before: the rank's own XPU becomes the current device. The accelerator normally did this already; a collective
  issued on the wrong device runs on xpu:0 and can hang, so the order must not depend on which accelerator object
  the strategy holds. Then oneCCL, beneath XCCL and ccl alike, is given the rank's place on its node where the
  launch does not give it (see `lightning_xpu.environments.oneccl`): under Lightning's own launcher, torchrun or
  srun, `CCL_PROCESS_LAUNCHER=none` with `CCL_LOCAL_RANK`/`CCL_LOCAL_SIZE`; a site's `pmix`/`mpi` settings are
  replaced only where they cannot work, with one line in the log of rank 0. XCCL sets none of these itself
  (intel/torch-xpu-ops `src/xccl`@release/2.8..release/2.14). Under MPI and PALS launchers the site's settings stay.
  On ccl also the rank's `LOCAL_RANK`/`LOCAL_WORLD_SIZE`: the bindings rewrite the `CCL_*` place from them, or
  from the global rank and world size when one is missing (intel/torch-ccl `src/ProcessGroupCCL.cpp`
  @v2.5.0+xpu..v2.8.0+xpu), which is wrong on a second node.
  On ccl the bindings are imported (IPEX first) and their XPU part checked to be loaded (see backend.py), also for
  an explicit `process_group_backend="ccl"`.
- after: the gloo group for objects on ccl (see collectives.py).

`device_id`: Lightning >= 2.5.5 binds the process group to the root device; on XPU it is dropped, for every
strategy. On XCCL a bound group makes DeviceMesh split it for each mesh dimension (PyTorch 2.12+:
torch/distributed/device_mesh.py@v2.12.0 gates the split on `torch.accelerator.is_available()`, earlier releases on
CUDA), and ProcessGroupXCCL cannot split (no `supportsSplitting` in intel/torch-xpu-ops release/2.12-2.14;
pytorch#186548): FSDP's and ModelParallel's meshes, and a user's `init_device_mesh` under DDP, would fail. On
oneCCL's "ccl", its PyTorch (<= 2.7) accepted only CUDA devices there (pytorch#143735). Nothing needs the binding:
barriers pass the rank's device (collectives.py), object collectives use the current device, which is set before
the group is created.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch

from lightning_xpu.device import is_xpu_device
from lightning_xpu.environments.oneccl import oneccl_settings
from lightning_xpu.strategies.backend import CCL, XCCL, import_oneccl_bindings
from lightning_xpu.strategies.collectives import open_object_group

log = logging.getLogger(__name__)


def set_oneccl_launch(local_rank: int, local_size: int, global_rank: int, bindings: bool = False) -> None:
    """Write the `CCL_*` values oneCCL needs for this rank into `os.environ` (with `bindings`, for `ccl`, also what
    the bindings rewrite them from); rank 0 says what it replaced."""
    settings = oneccl_settings(os.environ, local_rank, local_size, bindings)
    os.environ.update(settings.set)
    if settings.replaced and global_rank == 0:
        log.warning(settings.describe())


def around_process_group_init(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps the strategy method that creates the process group."""

    def setup(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_xpu_device(self.root_device):
            return original(self, *args, **kwargs)
        backend = self._get_process_group_backend()  # raises the clear error before anything else happens
        torch.xpu.set_device(self.root_device)
        if backend == CCL:
            import_oneccl_bindings()  # also for an explicit "ccl": IPEX first, and its XPU part really loaded
        if backend in (CCL, XCCL):
            set_oneccl_launch(self.local_rank, self.num_processes, self.global_rank, bindings=backend == CCL)
        result = original(self, *args, **kwargs)
        open_object_group(self)
        return result

    return setup


def unbind_xpu_device(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a strategy module's `_init_dist_connection(cluster_environment, backend, ..., device_id=...)`: drops an
    XPU `device_id` (see the module docstring)."""

    def _init_dist_connection(*args: Any, **kwargs: Any) -> Any:
        if is_xpu_device(kwargs.get("device_id")):
            kwargs.pop("device_id")
        return original(*args, **kwargs)

    return _init_dist_connection
