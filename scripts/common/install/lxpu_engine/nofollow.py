"""Opening files where a link could wait: the install never writes through a link, and never changes the mode of a
path (which could be a link to someone else's file), only of a descriptor it opened itself.

Files in a directory another account can write (the group-writable .leases of a --shared-group prefix) are created
exclusively under a name no one can predict (lxpu_engine/leases.py new_install_lease); files in directories only
the installer writes (logs/, .locks/, a build) are still opened without following a link, so that a link left
there by anyone (a careless `ln -s`, an older tool) changes nothing outside the prefix.
"""

from __future__ import annotations

import os

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_exclusive(path: str, mode: int) -> int:
    """A new file (it must not exist, not even as a link), with exactly MODE whatever the umask; its descriptor."""
    fd = os.open(path, _NEW, mode)
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(path: str, text: str, mode: int = 0o644) -> None:
    """Write TEXT as a new file at PATH (an old file or link there is replaced, never followed): a temporary file
    next to it, made exclusively, then renamed over it."""
    temporary = f"{path}.{os.getpid()}.new"
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    fd = create_exclusive(temporary, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
