"""The free-space check, and what a full disk is called wherever it happens.

What the rebuild really needs: nothing is deleted before the new build is complete, so the new build's full size
in bytes AND files (home and project quotas are often in files) must fit next to what exists. The size of the
published build (recorded at publish, share/lightning-xpu/size) is the estimate, never less than the variant's
default. A run that will build nothing (the published build has these inputs) needs no space: the check step then
leaves the check to the first build step (a no-op on a full disk still succeeds).

A disk that fills up anyway (another user, a quota) fails the step it hits, with one reason that names disk space
and the file system: `disk_full_reason` (an OSError or a child's output that says ENOSPC or EDQUOT) and
`explain_failure` (any failure while a file system the install writes to is full), from lxpu_admin/envside/diskfull.py,
whose words the engine's children that run on the environment's interpreter (pack) use too.
"""

from __future__ import annotations

import json
import os
import re

from lxpu_admin.envside.diskfull import disk_full_reason, free_bytes, is_disk_full, mount_point, nearly_full
from lxpu_admin.install.state import State, command_output, fail, say

# The disk-full words are re-exported: the engine's modules import them from here.
__all__ = [
    "check_space", "check_space_unless_noop", "disk_full_reason", "explain_failure", "free_bytes", "is_disk_full",
    "mount_point", "published_inputs",
]  # fmt: skip

GIB_KIB = 1048576


def explain_failure(state: State, reason: str) -> str:
    """A failure's reason, naming disk space when the failure was a full disk: already said (unchanged), or the
    failing program said ENOSPC/EDQUOT, or a file system the install writes to is (nearly) full now: the prefix's,
    the uv cache's, the temporary directory's (the first full one is named; the prefix's by default)."""
    if not state.prefix or "disk full" in reason or "disk quota exceeded" in reason:
        return reason
    cache = getattr(state.installer, "uv_cache", "") if state.installer is not None else ""
    places = [state.prefix, *([cache] if cache else []), os.environ.get("TMPDIR") or "/tmp"]
    full = next((place for place in places if nearly_full(place)), "")
    if full or is_disk_full(reason):
        return f"{reason}; {disk_full_reason(full or state.prefix, reason)}"
    return reason


def published_inputs(state: State) -> str:
    """The inputs hash of the published build's manifest ("" when none can be read)."""
    try:
        with open(f"{state.prefix}/{state.tag}/manifest.json") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return ""
    return str(manifest.get("inputs_hash", "")) if manifest.get("status") == "installed" else ""


def check_space_unless_noop(state: State) -> None:
    """The check step's space check, unless the published build has these inputs (the run will most likely build
    nothing); the lock step decides, and the first build step checks then (`state.space_checked`)."""
    if not state.force and state.inputs_hash and published_inputs(state) == state.inputs_hash:
        say("disk:        not checked: the published build has these inputs, so nothing will be built (a rebuild "
            "checks before it starts)")
        return
    check_space(state)


def _df(flag: str, path: str) -> list[str]:
    """The numbers line of `df -P<flag> PATH`."""
    lines = command_output("df", f"-P{flag}", path)[1].splitlines()
    return lines[1].split() if len(lines) > 1 else []


def check_space(state: State) -> None:
    """Room for a whole new build under the prefix, in bytes and in files; once per run."""
    if state.space_checked:
        return
    state.space_checked = True
    need_gib, need_inodes = (3, 40000) if state.variant == "cpu" else (15, 100000)
    if state.base_python:
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
    say(f"disk:        {free_kib // GIB_KIB} GiB and {free_inodes or '?'} inodes free under {path}; {need_gib} GiB and "
        f"{need_inodes} files needed ({basis})")
    if free_kib < need_gib * GIB_KIB:
        raise fail(state, f"only {free_kib // GIB_KIB} GiB free under {path}, {need_gib} GiB needed: free space "
                          "(--prune removes unused builds) or pick another --prefix (LIGHTNING_XPU_MIN_FREE_GIB "
                          "overrides the check)")
    # File systems without an inode limit report 0 (or -) inodes.
    if total_inodes.isdigit() and int(total_inodes) > 0 and free_inodes.isdigit():
        if int(free_inodes) < need_inodes:
            raise fail(state, f"only {free_inodes} free inodes (files) under {path}, {need_inodes} needed: free files "
                              "(--prune removes unused builds) or pick another --prefix "
                              "(LIGHTNING_XPU_MIN_FREE_INODES overrides the check)")
