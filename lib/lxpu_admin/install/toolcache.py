"""The install's own tools (uv, and py-rattler for the conda layer): their pins, the hash-checked wheels kept in the
tool cache beside the uv cache, and the fresh copy of each that one run uses.

Each tool is pinned with hashes in recipes/tools/*.txt. Its wheel is fetched once by pip (`pip download
--require-hashes`: pip is the one fetcher trusted to check the lock's hashes) and kept at
<uv cache>/lightning-xpu-tools/<name>-<version>-<digest>/, the digest of the whole lock file and of this machine's
architecture and C library (pip picks the wheel for those, and a cache may be shared by x86_64 and aarch64 nodes):
a changed pin or hash, or another platform, never reuses an entry. A new prefix with a warm cache then needs no pip
(pip's start and resolution are about 3.5 s of a 35 s warm install on 2 cores; benchmarks/install_time.py).

Nothing in the cache is trusted as it is (issue 27: one inode shared by the tool cache and every prefix let a
`chown -R` of one prefix hand root's uv to another account): before EVERY use each kept wheel's sha256 is checked
against the lock, and a run unpacks its own fresh copy (a few tenths of a second) into a directory of its own
(the install's temporary paths), which it removes at its end. A wheel the lock does not list is never unpacked: the
entry is fetched again. `refusal` refuses a uv cache (and so a tool cache) that another account owns or may write.
"""

from __future__ import annotations

import hashlib
import os
import platform
import pwd
import re
import shutil
import stat
import subprocess
import zipfile
from typing import Callable

SUBDIR = "lightning-xpu-tools"


def pinned_version(lock: str, name: str) -> str | None:
    """NAME's version in the hashed LOCK (`NAME==VERSION \\`), or None."""
    with open(lock) as handle:
        match = re.search(rf"^{re.escape(name)}==([^\s\\]+)", handle.read(), re.MULTILINE)
    return match.group(1) if match else None


def lock_hashes(lock: str) -> set[str]:
    """Every sha256 the hashed LOCK lists (one per wheel it allows)."""
    with open(lock) as handle:
        return set(re.findall(r"--hash=sha256:([0-9a-f]{64})", handle.read()))


def download_argv(python: str, dest: str, pip_options: list[str], lock: str) -> list[str]:
    """pip fetching LOCK's wheels into DEST, checking the lock's hashes."""
    return [python, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:", "--dest", dest,
            "--disable-pip-version-check", "--no-input", "--quiet", *pip_options, "-r", lock]  # fmt: skip


def pip_error(out: str) -> str:
    """The first of pip's ERROR lines (its reason), without the prefix; "" when it printed none."""
    return next((line.removeprefix("ERROR: ") for line in out.splitlines() if line.startswith("ERROR:")), "")


def entry(cache_dir: str, name: str, version: str, lock: str) -> str:
    """Where the wheels of LOCK are kept in CACHE_DIR ("" without a cache)."""
    if not cache_dir:
        return ""
    with open(lock, "rb") as handle:
        digest = hashlib.sha256(handle.read())
    digest.update(" ".join((platform.machine(), *platform.libc_ver())).encode())
    return f"{cache_dir}/{SUBDIR}/{name}-{version}-{digest.hexdigest()[:16]}"


def refusal(cache_dir: str, what: str = "the uv cache",
            setting: str = "LIGHTNING_XPU_UV_CACHE_DIR, default <prefix>/.cache/uv") -> str:  # fmt: skip
    """Why CACHE_DIR (a uv cache, whose lightning-xpu-tools/ is the tool cache) must not be used, as one line
    naming the fix; "" when it may. uv copies what its cache holds into builds without checking it again, so its
    cache, its tool cache and everything directly in them must be this account's and writable by nobody else. A
    cache not yet made is fine (the install makes it)."""
    me = os.geteuid()
    fix = f"use a cache of your own ({setting})"
    for path in _cache_paths(cache_dir):
        info = os.lstat(path)
        if info.st_uid != me:
            return (f"{what} {cache_dir} is not yours: {path} belongs to {_user(info.st_uid)}, who could change "
                    f"what goes into your builds; {fix}")  # fmt: skip
        if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o022:
            return (f"{what} {cache_dir} is writable by other accounts ({path} has mode "
                    f"{stat.S_IMODE(info.st_mode):04o}): chmod go-w {path}, or {fix}")  # fmt: skip
    return ""


def _cache_paths(cache_dir: str) -> list[str]:
    """The cache, what is directly in it, and the tool cache and what is directly in that."""
    paths = []
    for top in (cache_dir, f"{cache_dir}/{SUBDIR}"):
        if os.path.isdir(top) and not os.path.islink(top):
            paths += [top, *(os.path.join(top, name) for name in sorted(os.listdir(top)))]
        elif os.path.lexists(top):
            paths.append(top)
    return paths


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def checked_wheels(directory: str, lock: str, private: str) -> list[str]:
    """Copies in PRIVATE (a new directory of this run) of the wheels in DIRECTORY, when every one of them has a
    sha256 LOCK lists; else [] (and PRIVATE removed). Each wheel is hashed as it is copied, and only the copy is
    unpacked: a wheel changed in the cache after its check never is."""
    if not directory or not os.path.isdir(directory):
        return []
    names = sorted(name for name in os.listdir(directory) if name.endswith(".whl"))
    allowed = lock_hashes(lock)
    os.makedirs(private, exist_ok=True)
    copies = [os.path.join(private, name) for name in names]
    if not names or any(_copy_hashed(os.path.join(directory, name), copy) not in allowed
                        for name, copy in zip(names, copies)):  # fmt: skip
        shutil.rmtree(private, ignore_errors=True)
        return []
    return copies


def _copy_hashed(source: str, target: str) -> str:
    """Copy SOURCE to TARGET; the sha256 of what was copied."""
    digest = hashlib.sha256()
    with open(source, "rb") as data, open(target, "wb") as out:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


def provide(name: str, version: str, lock: str, cache_dir: str, target: str, python: str, pip_options: list[str],
            log: Callable[[str], None]) -> str:  # fmt: skip
    """A fresh copy of LOCK's tool unpacked into TARGET (which must not exist) from wheels whose sha256 the lock
    lists: those kept in CACHE_DIR, else fetched by pip and then kept there. "" when done, else why not (pip's
    reason)."""
    kept = entry(cache_dir, name, version, lock)
    # Beside TARGET, this run's own: a killed run's temporary paths are removed together.
    private, fetched = f"{target}.checked", f"{target}.wheels"
    try:
        wheels = checked_wheels(kept, lock, private)
        if wheels:
            log(f"{name} {version} from the cache, {kept} (each wheel's sha256 checked against {lock})")
            unpack(wheels, target)
            return ""
        if kept and os.path.lexists(kept):
            log(f"WARNING: the cached {name} in {kept} is not what {lock} pins (a wheel's sha256 is not the "
                "lock's): not used; fetching it again")  # fmt: skip
            _remove(kept)
        log(f"bootstrapping {name} {version} (hash-checked, from {lock})")
        shutil.rmtree(fetched, ignore_errors=True)
        argv = download_argv(python, fetched, pip_options, lock)
        log("+ " + " ".join(argv))
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        wheels = checked_wheels(fetched, lock, private)
        if done.returncode != 0 or not wheels:
            return pip_error(done.stdout) or done.stdout.strip()[-300:] or f"pip fetched no wheel that {lock} lists"
        unpack(wheels, target)
        keep(wheels, kept)
    finally:
        shutil.rmtree(fetched, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
    return ""


def unpack(wheels: list[str], target: str) -> None:
    """The wheels' files under TARGET, laid out as `pip install --target` would (a wheel's `*.data/scripts/` in
    bin/, its other `*.data/<kind>/` at the top), executable where the wheel says so; owned by this account."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                parts = info.filename.split("/")
                if info.is_dir() or info.filename.startswith("/") or ".." in parts:
                    continue
                script = len(parts) > 2 and parts[0].endswith(".data") and parts[1] == "scripts"
                if len(parts) > 2 and parts[0].endswith(".data"):
                    parts = (["bin"] if script else []) + parts[2:]
                path = os.path.join(target, *parts)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with archive.open(info) as source, open(path, "wb") as out:
                    shutil.copyfileobj(source, out)
                executable = script or (info.external_attr >> 16) & 0o111
                os.chmod(path, 0o755 if executable else 0o644)


def keep(wheels: list[str], kept: str) -> None:
    """Store checked WHEELS as the entry KEPT (a temporary copy, then one rename); never fails the install."""
    if not kept or os.path.lexists(kept):
        return
    tmp = f"{kept}.tmp.{os.getpid()}"
    try:
        os.makedirs(tmp)
        for wheel in wheels:
            shutil.copyfile(wheel, os.path.join(tmp, os.path.basename(wheel)))
        os.rename(tmp, kept)
    except OSError:  # no space, no permission, or another install stored it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except OSError:
            pass
