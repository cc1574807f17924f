"""The install's own tools (uv, and py-rattler for the conda layer): their pins, the pip command that bootstraps
them, and the copy kept beside the uv cache, so that a new prefix
with a warm cache copies them instead of bootstrapping them with pip again (pip's start and resolution are about
3.5 s of a 35 s warm install on 2 cores; benchmarks/install_time.py, uv-second-prefix).

Each tool is pinned with hashes in recipes/tools/*.txt and bootstrapped by pip (--require-hashes) into
<prefix>/.tools/<name>-<version> (lxpu_engine/installer.py, lxpu_engine/conda_layer.py). After a bootstrap the
tree is also stored at <uv cache>/lightning-xpu-tools/<name>-<version>-<digest>, the digest of the whole lock file
and of this machine's architecture and C library (pip picks the wheel for those, and a cache may be shared by
x86_64 and aarch64 nodes): a changed pin or hash, or another platform, never reuses a tree. The entry is trusted
as uv trusts the rest of its cache (its unpacked wheels are linked into environments without a second hash
check): only its owner writes there, and an install makes the cache's files not world-writable. Storing is best
effort; a missing or broken entry means a pip bootstrap, as before. `uv cache clean` removes the entries too.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import time

SUBDIR = "lightning-xpu-tools"
# A temporary tree older than this is a killed run's (the copy takes well under a second).
STALE_TMP_S = 3600


def pinned_version(lock: str, name: str) -> str | None:
    """NAME's version in the hashed LOCK (`NAME==VERSION \\`), or None."""
    with open(lock) as handle:
        match = re.search(rf"^{re.escape(name)}==([^\s\\]+)", handle.read(), re.MULTILINE)
    return match.group(1) if match else None


def bootstrap_argv(python: str, target: str, pip_options: list[str], lock: str) -> list[str]:
    """pip installing LOCK's pins into TARGET: pip is the one fetcher trusted to check the lock's hashes."""
    return [python, "-m", "pip", "install", "--no-deps", "--require-hashes", "--target", target,
            "--disable-pip-version-check", "--no-input", "--quiet", "--root-user-action=ignore", *pip_options,
            "-r", lock]  # fmt: skip


def pip_error(out: str) -> str:
    """The first of pip's ERROR lines (its reason), without the prefix; "" when it printed none."""
    return next((line.removeprefix("ERROR: ") for line in out.splitlines() if line.startswith("ERROR:")), "")


def entry(cache_dir: str, name: str, version: str, lock: str) -> str:
    """Where the tree bootstrapped from LOCK is kept in CACHE_DIR ("" without a cache)."""
    if not cache_dir:
        return ""
    with open(lock, "rb") as handle:
        digest = hashlib.sha256(handle.read())
    digest.update(" ".join((platform.machine(), *platform.libc_ver())).encode())
    return f"{cache_dir}/{SUBDIR}/{name}-{version}-{digest.hexdigest()[:16]}"


def take(cached: str, tmp: str) -> bool:
    """Copy the cached tree CACHED to TMP (hard links where the file system allows); False when there is none or the
    copy failed (TMP is then removed)."""
    if not cached or not os.path.isdir(cached):
        return False
    try:
        shutil.copytree(cached, tmp, symlinks=True, copy_function=_link_or_copy)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    return True


def keep(tree: str, cached: str) -> None:
    """Store a freshly bootstrapped TREE as CACHED (a temporary copy, then one rename), unless it is there; never
    fails the install."""
    if not cached or os.path.isdir(cached):
        return
    parent = os.path.dirname(cached)
    tmp = f"{cached}.tmp.{os.getpid()}"
    try:
        os.makedirs(parent, exist_ok=True)
        _drop_stale(parent)
        shutil.copytree(tree, tmp, symlinks=True, copy_function=_link_or_copy)
        os.rename(tmp, cached)
    except OSError:  # no space, no permission, or another install stored it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _drop_stale(parent: str) -> None:
    now = time.time()
    for name in os.listdir(parent):
        path = f"{parent}/{name}"
        if ".tmp." in name and now - os.lstat(path).st_mtime > STALE_TMP_S:
            shutil.rmtree(path, ignore_errors=True)
