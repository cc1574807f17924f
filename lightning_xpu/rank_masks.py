"""Launches whose every rank sees one XPU of its own through `ZE_AFFINITY_MASK` (ALCF's pattern on Aurora).

ALCF binds each of the 12 ranks PALS starts on an Aurora node to one tile with `ZE_AFFINITY_MASK=<card>.<tile>`
(argonne-lcf/user-guides, docs/aurora/node-performance-overview/src/gpu_tile_compact.sh). Level Zero then shows
the rank that tile alone, as xpu:0 (Level Zero specification, "Affinity Mask"). Lightning counts devices with the
accelerator and gives local rank i the device `parallel_devices[i]`, so such a launch looked like 12 ranks on a
machine of one XPU: `devices=12` was refused for lack of devices and `devices=1` for lack of ranks. Here it is what
it is, an N-device-per-node run whose every rank drives its own xpu:0; any other `devices` value gets one line
naming N.

A launch of more ranks on a node than a rank sees XPUs, without such masks, cannot work whatever `devices` says
(two ranks would share a device, or look for one they cannot see): it gets one line about the launch instead.
Pure functions of the environment and of `torch.xpu`'s count; used by the XPU accelerator only, so nothing changes
off XPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lightning_xpu.device import parse_device_indices, xpu_device_count
from lightning_xpu.environments.errors import LaunchMismatch
from lightning_xpu.environments.launch import NodePlace, node_place

AFFINITY_MASK = "ZE_AFFINITY_MASK"
_GPU_TILE_COMPACT = "ZE_AFFINITY_MASK=<card>.<tile> per rank, as ALCF's gpu_tile_compact.sh does"


def masked_launch(environ: Mapping[str, str] = os.environ) -> NodePlace | None:
    """The launch where each of N > 1 ranks on this node sees exactly one XPU through its own ZE_AFFINITY_MASK."""
    if not environ.get(AFFINITY_MASK, "").strip():
        return None
    launch = node_place(environ)
    if launch is None or launch.local_size < 2 or xpu_device_count() != 1:
        return None
    return launch


def crowded_launch(environ: Mapping[str, str] = os.environ) -> tuple[NodePlace, int] | None:
    """A launch of more ranks on this node than this rank sees XPUs (and not one masked XPU per rank), with the
    count seen; None otherwise."""
    launch = node_place(environ)
    if launch is None or launch.local_size < 2 or masked_launch(environ) is not None:
        return None
    visible = xpu_device_count()
    return (launch, visible) if 0 < visible < launch.local_size else None


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def one_device_per_rank(devices: Any, launch: NodePlace, environ: Mapping[str, str] = os.environ) -> list[int]:
    """`devices` as Lightning's device indices in a masked launch: exactly N of them (N = ranks on this node), or
    one line naming N. The indices only count the node's devices: every rank's own device is xpu:0."""
    try:
        indices = parse_device_indices(devices, available=launch.local_size)
    except ValueError:
        indices = None
    if indices is None or len(indices) != launch.local_size:
        raise LaunchMismatch(
            f"{launch.words} started {_plural(launch.local_size, 'rank')} on this node and"
            f" {AFFINITY_MASK}={environ[AFFINITY_MASK]} shows this rank one XPU (its own, as xpu:0), so each rank"
            f" drives one device: set `devices={launch.local_size}` (or devices=\"auto\"), not devices={devices!r}",
            launch.local_rank,
        )
    return indices


def refuse_crowded_launch(launch: NodePlace, visible: int, environ: Mapping[str, str] = os.environ) -> None:
    """One line for a launch that no `devices` value can fit: the fix is in the launch."""
    mask = environ.get(AFFINITY_MASK)
    seen = f" ({AFFINITY_MASK}={mask})" if mask else ""
    raise LaunchMismatch(
        f"{launch.words} started {_plural(launch.local_size, 'rank')} on this node, but this rank sees"
        f" {_plural(visible, 'XPU')}{seen}, so no devices= value fits: start {_plural(visible, 'rank')} per node"
        f" ({launch.option.format(n=visible)}) with devices={visible}, or give each rank one XPU of its own"
        f" ({_GPU_TILE_COMPACT}) with devices={launch.local_size}",
        launch.local_rank,
    )
