"""The install lock: flock on <prefix>/.locks/<tag>.lock, a file this installer never unlinks.

If someone deletes it anyway, the lock is still exclusive: a run checks that it locked the file now at that path,
and waits for any other install of the tag whose lease is live (that one still holds the deleted file).

The driver opens the lock file (it must hold the descriptor for the whole run) and passes its number; a lock on
it taken here stays with the driver's open file when this process ends. When the file at the path was replaced
while we waited, `lock` exits with RELOCK and the driver opens the new one and calls again. Holding the lock,
the driver creates its install lease and takes the lease's shared flock (so the lease is held from the moment it
exists), then calls `locked`.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import time

from lxpu_admin.install.cleanup import remove_leftovers
from lxpu_admin.install.leases import host, other_installer, say_distrusted, take_install_lease
from lxpu_admin.install.links import check_links
from lxpu_admin.install.state import State, fail, quote, say

RELOCK = 75


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read(fd: int) -> str:
    """The holder's line, read through our own descriptor of the lock file."""
    try:
        return os.pread(fd, 4096, 0).decode(errors="replace").rstrip("\n")
    except OSError:
        return ""


def lock(state: State, again: bool) -> int:
    lockfile = f"{state.prefix}/.locks/{state.tag}.lock"
    timeout = state.lock_timeout
    since = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    if not again:
        say(f"+ flock {quote(lockfile)} (wait up to {timeout} s)")
        state.lock_t0 = int(time.time())
    if state.dry:
        # Read-only: what would be repaired or removed is printed, nothing is done.
        check_links(state)
        remove_leftovers(state)
        return 0
    fd = state.lock_fd
    assert fd is not None, "the driver opens the lock file first"
    if not _try_lock(fd):
        # The holder writes its line right after taking the lock: give it a moment if it is not there yet.
        holder = ""
        for _ in range(10):
            holder = _read(fd)
            if holder.startswith("pid"):
                break
            time.sleep(0.2)
        holder = holder or "unknown holder"
        say(f"another install of {state.tag} holds {lockfile}: {holder}; waiting up to {timeout} s")
        deadline = time.monotonic() + timeout
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise fail(state, f"another install of {state.tag} ({holder}) still holds {lockfile} after {timeout} "
                                  "s: wait for it to finish or raise --lock-timeout")
            time.sleep(0.1)
    locked, now_there = os.fstat(fd), _stat(lockfile)
    if now_there is None or (locked.st_dev, locked.st_ino) != now_there:
        say(f"the lock file {lockfile} was replaced while we waited: locking the new one")
        return RELOCK
    said = False
    t0 = state.lock_t0 if state.lock_t0 is not None else int(time.time())
    while True:
        other = other_installer(state)
        if other is None:
            break
        if int(time.time()) - t0 >= timeout:
            raise fail(state, f"another install of {state.tag} ({other}) still runs after {timeout} s although its "
                              f"lock file {lockfile} was deleted: wait for it to finish or raise --lock-timeout")
        if not said:
            say(f"another install of {state.tag} holds no lock file but is still running ({other}): its lock file "
                f"{lockfile} was deleted; waiting for it up to {timeout} s")
        said = True
        time.sleep(1)
    # Written through the locked descriptor: never through whatever the path is now.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {state.pid} host {host()} since {since}\n".encode(), 0)
    return 0


def open_lock_file(path: str) -> int:
    """The lock file, opened read-write without truncating (the holder's line stays readable) and never through a
    link. Mode 0600: an account that could open it could also hold its flock, and stop every install of the tag."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    info = os.fstat(fd)
    if info.st_uid == os.geteuid() and info.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def locked(state: State) -> None:
    """Under the lock, once the driver holds its lease file: the lease, then the links, then the leftovers."""
    take_install_lease(state)
    say_distrusted(state)
    check_links(state)
    remove_leftovers(state)


def _stat(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino
