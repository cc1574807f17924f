"""ONE file-hash record for a tree: every file with its sha256 and size, written once, verifiable later, as pip's
RECORD (PEP 376 / the wheel spec's RECORD format) and conda's paths.json do. A build's record lists its images too
(share/lightning-xpu/pack: the tar and SquashFS images staging copies or mounts), so `verify` covers them. A user
layer has none of its own: it changes with every `pip install`, and pip writes each package's RECORD in it.

The format is pip's RECORD: CSV lines `path,sha256=<urlsafe base64 without padding>,size`, the path relative to the
tree's root with `/` separators, sorted; the record lists itself with empty hash and size (as pip does). A symbolic
link is `path,symlink=<target>,` (its target is what matters: a replaced link redirects as surely as a changed
file). Directories are not listed: an added or removed directory shows as its added or missing files.

Also here, because every tree the record covers needs them first: `detach` gives every file its own inode owned by
the caller (no hard link into a cache, a copy instead), and `make_read_only` takes every write bit off.

Standard library only, Python 3.9 or newer: it runs on the engine's interpreter and on each environment's own
(`python -m lxpu_admin.envside.manifest`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lxpu_admin.envside.setup_lib import write_file

_BLOCK = 1 << 20
# hashlib releases the GIL while it hashes a block: threads use every core on a large tree.
_THREADS = min(8, os.cpu_count() or 1)
SHOWN = 3  # files named per kind of difference; the rest are counted


@dataclass(frozen=True)
class Entry:
    path: str
    digest: str  # "sha256=..." for a file, "symlink=..." for a link, "" for the record itself
    size: str


@dataclass
class Differences:
    """What a tree has that its record does not say (paths relative to the root, sorted)."""

    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    checked: int = 0

    def __bool__(self) -> bool:
        return bool(self.changed or self.missing or self.added)

    def summary(self) -> str:
        """One line: how many of each kind, naming the first of each."""
        parts = []
        for kind, paths in (("changed", self.changed), ("missing", self.missing), ("added", self.added)):
            if paths:
                more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
                parts.append(f"{len(paths)} {kind} ({', '.join(paths[:SHOWN])}{more})")
        return "; ".join(parts)


def sha256_of(path: str) -> str:
    """A file's sha256, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_digest(hexdigest: str) -> str:
    raw = base64.urlsafe_b64encode(bytes.fromhex(hexdigest)).rstrip(b"=").decode()
    return f"sha256={raw}"


def walk(root: str, exclude: Iterable[str] = ()) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of every file and symbolic link under ROOT, not those in EXCLUDE (relative paths)."""
    skip = set(exclude)
    stack = [""]
    while stack:
        relative = stack.pop()
        with os.scandir(os.path.join(root, relative) if relative else root) as entries:
            for item in entries:
                path = f"{relative}/{item.name}" if relative else item.name
                info = item.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    stack.append(path)
                elif path not in skip:
                    yield path, info


def _entry(root: str, path: str, info: os.stat_result) -> Entry:
    full = os.path.join(root, path)
    if stat.S_ISLNK(info.st_mode):
        return Entry(path, f"symlink={os.readlink(full)}", "")
    return Entry(path, _record_digest(sha256_of(full)), str(info.st_size))


def entries(root: str, exclude: Iterable[str] = ()) -> list[Entry]:
    """The record's entries for the tree as it is now, sorted by path."""
    found = sorted(walk(root, exclude))
    with ThreadPoolExecutor(_THREADS) as pool:
        return list(pool.map(lambda item: _entry(root, *item), found))


def write(root: str, record: str, exclude: Iterable[str] = ()) -> str:
    """Write the record of ROOT at RECORD (a path under ROOT, by one rename), leaving out EXCLUDE (relative paths
    of files that must change after the record is written). Returns the record's own sha256 (hex), which the
    caller keeps elsewhere (a build's manifest.json), so that a record rewritten to match a changed file shows."""
    own = os.path.relpath(record, root)
    rows = [*entries(root, [*exclude, own]), Entry(own, "", "")]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in sorted(rows, key=lambda entry: entry.path):
        writer.writerow((row.path, row.digest, row.size))
    write_file(record, out.getvalue())
    return hashlib.sha256(out.getvalue().encode()).hexdigest()


def read(record: str) -> dict[str, Entry]:
    """The entries of a record, by path."""
    with open(record, newline="") as handle:
        return {row[0]: Entry(*row) for row in csv.reader(handle) if len(row) == 3}


def verify(root: str, record: str, exclude: Iterable[str] = ()) -> Differences:
    """What differs between ROOT and its RECORD. A file whose size differs is changed without being read; every
    other file is hashed."""
    own = os.path.relpath(record, root)
    expected = read(record)
    expected.pop(own, None)
    present = dict(walk(root, [*exclude, own]))
    result = Differences(missing=sorted(set(expected) - set(present)), added=sorted(set(present) - set(expected)))
    both = sorted(set(expected) & set(present))

    def differs(path: str) -> bool:
        want, info = expected[path], present[path]
        if stat.S_ISLNK(info.st_mode) != want.digest.startswith("symlink="):
            return True
        if not stat.S_ISLNK(info.st_mode) and str(info.st_size) != want.size:
            return True
        try:
            return _entry(root, path, info).digest != want.digest
        except OSError:  # gone or unreadable since the walk
            return True

    with ThreadPoolExecutor(_THREADS) as pool:
        result.changed = [path for path, bad in zip(both, pool.map(differs, both)) if bad]
    result.checked = len(both)
    return result


def detach(root: str) -> list[str]:
    """Give every file under ROOT its own inode, owned by the caller: a file with another hard link (into a cache:
    uv's or rattler's, a site conda's pkgs) or another owner is replaced by a copy (a temporary file beside it, then
    one rename). Nothing that changes the copied cache file changes the tree afterwards. Returns the paths copied."""
    copied = []
    me = os.geteuid()
    for path, info in walk(root):
        if stat.S_ISLNK(info.st_mode) or (info.st_nlink == 1 and info.st_uid == me):
            continue
        full = os.path.join(root, path)
        tmp = f"{full}.lxpu-copy.{os.getpid()}"
        shutil.copyfile(full, tmp)
        os.chmod(tmp, stat.S_IMODE(info.st_mode))
        os.replace(tmp, full)
        copied.append(path)
    return copied


def make_read_only(root: str) -> None:
    """No write bit for anyone on any file or directory under ROOT (symbolic links have no mode of their own)."""
    for top, dirs, files in os.walk(root):
        for name in [*files, *dirs]:
            _drop_write(os.path.join(top, name))
    _drop_write(root)


def _drop_write(path: str) -> None:
    info = os.lstat(path)
    if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o222:
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o222)


def unsealed(root: str) -> tuple[list[str], list[str], list[str]]:
    """The paths under ROOT that break immutability: (writable by anyone, hard-linked elsewhere, owned by another
    account than ROOT's owner), each sorted."""
    owner = os.lstat(root).st_uid
    writable, linked, foreign = [], [], []
    for top, _, _ in os.walk(root):  # a writable directory takes new files
        if os.lstat(top).st_mode & 0o222:
            writable.append(os.path.relpath(top, root) + "/")
    for path, info in sorted(walk(root)):
        if stat.S_ISLNK(info.st_mode):
            continue
        if info.st_mode & 0o222:
            writable.append(path)
        if info.st_nlink > 1:
            linked.append(path)
        if info.st_uid != owner:
            foreign.append(path)
    return sorted(writable), linked, foreign
