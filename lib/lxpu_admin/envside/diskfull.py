"""What a full disk is called wherever it happens: `is_disk_full` (an OSError or a program's output that says
ENOSPC or EDQUOT) and `disk_full_reason` (which, where, what is left, the fix). Standard library only: the engine
(lxpu_admin/install/space.py) and what runs on the new environment's interpreter (pack) use the same words.
"""

from __future__ import annotations

import errno
import os

MIB = 1048576
# ENOSPC and EDQUOT as errno, Python, coreutils and Rust programs (uv, py-rattler) word them.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "os error 28)", "os error 122)")
# A file system with less than this left (or no free inode) is full for the failure messages: ext4 refuses
# delayed allocations with some blocks still free.
NEARLY_FULL_BYTES = 16 * MIB


def is_disk_full(error: BaseException | str) -> bool:
    """An OSError with ENOSPC/EDQUOT, or a program's output that reports one."""
    if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
        return True
    text = error if isinstance(error, str) else str(error)
    return any(words in text for words in DISK_FULL_TEXTS)


def _existing(path: str) -> str:
    path = os.path.abspath(path or "/")
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def mount_point(path: str) -> str:
    """The mount point of the file system PATH (or its nearest existing parent) is on."""
    path = os.path.realpath(_existing(path))
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def free_bytes(path: str) -> tuple[int, int | None]:
    """(bytes this account may still write, free inodes or None where the file system has no inode limit) on the
    file system of PATH; root may use the blocks reserved for it."""
    stats = os.statvfs(_existing(path))
    blocks = stats.f_bfree if os.geteuid() == 0 else stats.f_bavail
    return blocks * stats.f_frsize, (stats.f_favail if stats.f_files > 0 else None)


def nearly_full(path: str) -> bool:
    try:
        space, inodes = free_bytes(path)
    except OSError:
        return False
    return space < NEARLY_FULL_BYTES or inodes == 0


def disk_full_reason(path: str, error: BaseException | str = "", fix: str = "") -> str:
    """The one reason for a full disk or quota under PATH: which, where (the file system's mount point and what is
    left on it now), and the fix (by default: free space there, or another --prefix)."""
    text = error if isinstance(error, str) else str(error)
    quota = "quota" in text or "os error 122)" in text or getattr(error, "errno", 0) == errno.EDQUOT
    what = "disk quota exceeded" if quota else "disk full: no space left"
    try:
        space, inodes = free_bytes(path)
        left = f"{space // MIB} MiB" + (f" and {inodes} inodes" if inodes is not None else "") + " free now"
    except OSError:
        left = "free space unknown"
    fix = fix or "free space there (--prune removes unused builds) or pick another --prefix"
    return f"{what} on the file system of {path} (mounted at {mount_point(path)}; {left}): {fix}"
