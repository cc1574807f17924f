"""The free-space check of step 1.

What the rebuild really needs: nothing is deleted before the new build is complete, so the new build's full size
in bytes AND files (home and project quotas are often in files) must fit next to what exists. The size of the
published build (recorded at publish, share/lightning-xpu/size) is the estimate, never less than the variant's
default.
"""

from __future__ import annotations

import os
import re

from lxpu_engine.state import State, command_output, fail, say

GIB_KIB = 1048576


def _df(flag: str, path: str) -> list[str]:
    """The numbers line of `df -P<flag> PATH`."""
    lines = command_output("df", f"-P{flag}", path)[1].splitlines()
    return lines[1].split() if len(lines) > 1 else []


def check_space(state: State) -> None:
    need_gib, need_inodes = (3, 40000) if state["variant"] == "cpu" else (15, 100000)
    if state["base_python"]:
        need_gib, need_inodes = 1, 5000
    basis = "default"
    try:
        with open(f"{state.prefix}/{state.tag}/share/lightning-xpu/size") as handle:
            words = handle.readline().split()
    except OSError:
        words = []
    if len(words) == 2 and all(re.fullmatch(r"[0-9]+", word) for word in words):
        kib, files = int(words[0]), int(words[1])
        basis = f"the published build has {kib // GIB_KIB} GiB in {files} files"
        if kib * 11 // 10 > need_gib * GIB_KIB:
            need_gib = (kib * 11 // 10 + GIB_KIB - 1) // GIB_KIB
        if files * 11 // 10 > need_inodes:
            need_inodes = files * 11 // 10
    need_gib = int(os.environ.get("LIGHTNING_XPU_MIN_FREE_GIB") or need_gib)
    need_inodes = int(os.environ.get("LIGHTNING_XPU_MIN_FREE_INODES") or need_inodes)
    path = state.prefix
    while not os.path.exists(path):
        path = os.path.dirname(path)
    blocks, inodes = _df("k", path), _df("i", path)
    free_kib = int(blocks[3]) if len(blocks) > 3 and blocks[3].isdigit() else 0
    total_inodes = inodes[1] if len(inodes) > 3 else ""
    free_inodes = inodes[3] if len(inodes) > 3 else ""
    say(f"disk:        {free_kib // GIB_KIB} GiB and {free_inodes or '?'} inodes free under {path}; {need_gib} GiB and {need_inodes} files needed ({basis})")  # noqa: E501
    if free_kib < need_gib * GIB_KIB:
        raise fail(state, f"only {free_kib // GIB_KIB} GiB free under {path}, {need_gib} GiB needed: free space (--prune removes unused builds) or pick another --prefix (LIGHTNING_XPU_MIN_FREE_GIB overrides the check)")  # noqa: E501
    # File systems without an inode limit report 0 (or -) inodes.
    if total_inodes.isdigit() and int(total_inodes) > 0 and free_inodes.isdigit():
        if int(free_inodes) < need_inodes:
            raise fail(state, f"only {free_inodes} free inodes (files) under {path}, {need_inodes} needed: free files (--prune removes unused builds) or pick another --prefix (LIGHTNING_XPU_MIN_FREE_INODES overrides the check)")  # noqa: E501
