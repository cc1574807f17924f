"""A relocatable environment and its packed image, for node-local staging (issue 15).

Run by the install (lxpu_admin/install/build.py) on the new environment's own interpreter:
  relocatable ENV       before the smoke job: script launchers find the interpreter next to themselves, as
                        `uv venv --relocatable` writes them, and activate computes its own path. The smoke job
                        then tests the environment as it will be packed.
  make ENV SITE TAG     in the background while the smoke job runs (the pack step waits for it): writes the image
                        <ENV>/share/lightning-xpu/pack/env.tar.zst (or .tar.gz), checks that it runs from another
                        path, and records the result in pack.env (KEY=value lines that lightning-xpu-stage reads
                        without starting Python) and pack.json (into manifest.json). SIGTERM stops it and
                        everything it started (it leads its own process group).
  refusal ENV           the line why ENV cannot be packed, or nothing.

What the image holds:
  venv (python -m venv or uv venv): the environment, plus the base interpreter (its executable, libpython and
    standard library, without its site-packages), so that nothing is read from the base Python on the shared
    file system either: the unpacked copy is a standalone Python whose prefix is wherever it lies. Not with
    --base-python (the base's own packages, torch included, are part of the environment there): then the image
    is the venv alone and the base interpreter stays shared (manifest: pack.base.staged = false, with why).
  conda: the environment as it is (its interpreter is part of it and finds its prefix relative to its
    executable; script launchers made relocatable as a venv's): neither conda nor conda-pack is needed to stage
    it (issue 30).
  Anything else, or a check that fails: no image, one line why (the install itself still succeeds; jobs run
  from the shared install, and lightning-xpu-stage says why).
  A full disk (the image's directory, or where the check unpacks) is no reason to pack less: the image fails
  (pack.env status=failed, exit 1, one `ERROR: no packed image: disk full ...` line naming the file system and
  the fix) and so does the install, whose next run, once there is room, builds the image again.
LIGHTNING_XPU_PACK=0 skips the image; LIGHTNING_XPU_PACK_FORMAT (tar.zst or tar.gz) picks the compressor;
LIGHTNING_XPU_PACK_CHECK_DIR where the check unpacks.

Beside the tar image, a SquashFS image of the same tree (issue 30), <ENV>/share/lightning-xpu/pack/env.squashfs:
made by mksquashfs from the very copy the check unpacked and ran (so both images hold the same files), mounted on
each node by lightning-xpu-stage's mount mode (squashfuse). Copy mode keeps the tar image: see squashfs_options.
Without mksquashfs, one line says so and the build stages by copying, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn

from lxpu_admin.envside.diskfull import disk_full_reason, is_disk_full

PACK_DIR = Path("share", "lightning-xpu", "pack")
# The script launcher uv writes for relocatable venvs: a shell line that runs the python next to the script.
LAUNCHER = """#!/bin/sh
'''exec' "$(dirname -- "$(realpath -- "$0")")"/'python' "$0" "$@"
' '''
"""
# Run by the unpacked copy: lightning and lightning_xpu must import from it, and with the base interpreter in
# the image every sys.path entry must lie in it (nothing from the base).
CHECK = """
import os
import sys

root, with_base = os.path.realpath(sys.argv[1]), sys.argv[2] == "1"
import lightning  # noqa: E402
import lightning_xpu  # noqa: E402

inside = lambda p: os.path.realpath(p).startswith(root + os.sep)  # noqa: E731
bad = [m.__name__ for m in (lightning, lightning_xpu) if not inside(m.__file__)]
if with_base:
    bad += [p for p in sys.path if p and os.path.exists(p) and not inside(p)]
    bad += [] if inside(sys.base_prefix + os.sep + "x") else [f"sys.base_prefix {sys.base_prefix}"]
if bad:
    sys.exit("not from the copy: " + ", ".join(bad))
print("ok")
"""


def say(line: str) -> None:
    print(line, flush=True)


def warn(line: str) -> None:
    say(f"WARNING: {line}")


def fail(line: str) -> NoReturn:
    say(f"ERROR: {line}")
    sys.exit(1)


def output_of(command: list[str]) -> str:
    """COMMAND's standard output, stripped; empty when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def tree_bytes(path: Path, unit: str = "-sb") -> int:
    """du's size of PATH (-sb: apparent bytes; -sk: KiB on disk), 0 when it cannot say."""
    size = output_of(["du", unit, str(path)]).split("\t")[0]
    return int(size) if size.isdigit() else 0


# ---- relocatable ----------------------------------------------------------------------------------------------

def make_relocatable(env: Path) -> None:
    python = str(env / "bin" / "python")
    fixed = []
    for script in sorted((env / "bin").iterdir()):
        if script.is_symlink() or not script.is_file():
            continue
        head = script.read_bytes()[:4096]
        try:
            lines = head.decode().splitlines(keepends=True)
        except UnicodeDecodeError:
            continue  # a binary
        if not lines:
            continue
        # pip's two forms: "#!<env>/bin/python[X.Y]" and, for paths with spaces, the /bin/sh + "'''exec' ..." form.
        if lines[0].startswith("#!" + python):
            rest = script.read_text()[len(lines[0]):]
        elif lines[0].strip() == "#!/bin/sh" and len(lines) > 2 and lines[1].startswith("'''exec' \"" + python):
            rest = script.read_text()[len(lines[0]) + len(lines[1]) + len(lines[2]):]
        else:
            continue
        mode = script.stat().st_mode
        script.write_text(LAUNCHER + rest)
        os.chmod(script, mode)
        fixed.append(script.name)
    activate = env / "bin" / "activate"
    if activate.is_file():
        text = activate.read_text()
        for quote in ("'", '"'):
            old = f"VIRTUAL_ENV={quote}{env}{quote}"
            if old in text:
                text = text.replace(old, 'VIRTUAL_ENV="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"')
                activate.write_text(text)
                fixed.append("activate")
    say(f"relocatable launchers: {len(fixed)} file(s) in bin/")


# ---- what can be packed ---------------------------------------------------------------------------------------

def refusal(env: Path) -> str:
    """A line why ENV cannot be packed, or nothing."""
    if os.environ.get("LIGHTNING_XPU_PACK", "1") == "0":
        return "LIGHTNING_XPU_PACK=0: no image written"
    if (env / "conda-meta").is_dir():
        return ""
    if not (env / "pyvenv.cfg").is_file():
        return f"only venvs (python -m venv, uv venv) and conda environments can be packed; {env} is neither"
    # A .pth file naming the environment's own path would break in the copy.
    for pth in sorted(env.glob("lib/python*/site-packages/*.pth")):
        if str(env) in pth.read_text(errors="replace"):
            return f"{pth} names the environment's absolute path, which moves with the copy"
    return ""


@dataclass(frozen=True)
class Base:
    """The base interpreter of the running venv: its executable, standard library and libpython (or "")."""

    exe: str
    stdlib: str
    libpython: str


def base_interpreter(env: Path) -> tuple[Base | None, str]:
    """The base interpreter to merge into the image, or None and why it cannot be."""
    if re.search(r"^include-system-site-packages *= *true", (env / "pyvenv.cfg").read_text(errors="replace"), re.M):
        return None, "the environment uses the base Python's own packages (--base-python / --system-site-packages)"
    libpython = ""
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libpython = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("INSTSONAME") or "")
    base = Base(os.path.realpath(getattr(sys, "_base_executable", "") or ""), sysconfig.get_path("stdlib"), libpython)
    if (os.path.isfile(base.exe) and os.access(base.exe, os.X_OK) and os.path.isfile(os.path.join(base.stdlib, "os.py"))
            and (not libpython or os.path.isfile(libpython))):
        return base, ""
    return None, "cannot locate the base Python's executable and standard library"


def squashfs_options() -> list[str]:
    """mksquashfs's compression and block size. zstd level 3 with 1 MiB blocks: measured on a build of this
    project (docs/administrators.md, staging), level 3 writes the image several times faster than mksquashfs's
    default level 15 for an image a few per cent larger, and 1 MiB blocks give a smaller image and fewer reads of
    the shared file system per imported file than the default 128 KiB (squashfuse reads a whole block per miss;
    a rank imports most of what it touches). CSCS's uenv squashes with zstd level 3 as well. gzip where this
    mksquashfs was built without zstd (squashfuse reads both).

    Copy mode keeps the tar image rather than unpacking this one with unsquashfs: the tar image is read once, as
    a stream, and hashed while it unpacks (sbcast'ed or on the shared file system), with tools (tar, zstd) every
    compute node has; unsquashfs needs squashfs-tools on every node and reads the image at random, so it would be
    hashed in a second pass."""
    listed = output_of(["mksquashfs", "-help"]) + subprocess.run(
        ["mksquashfs", "-help"], capture_output=True, text=True, check=False).stderr
    comp = ["-comp", "zstd", "-Xcompression-level", "3"] if "zstd" in listed else ["-comp", "gzip"]
    return [*comp, "-b", "1M", "-noappend", "-no-progress", "-quiet"]


def compressor() -> tuple[str, list[str]]:
    """The format and its compressor: zstd where it exists (several times faster to unpack on every node), else
    gzip (pigz when present); LIGHTNING_XPU_PACK_FORMAT=tar.gz or tar.zst chooses."""
    chosen = os.environ.get("LIGHTNING_XPU_PACK_FORMAT", "") or ("tar.zst" if shutil.which("zstd") else "tar.gz")
    if chosen == "tar.zst":
        return chosen, ["zstd", "-q", "-T0", "-3"]
    if chosen == "tar.gz":
        return chosen, ["pigz" if shutil.which("pigz") else "gzip", "-1"]
    fail(f"LIGHTNING_XPU_PACK_FORMAT must be tar.zst or tar.gz, not '{chosen}'")


# ---- RUNPATHs -------------------------------------------------------------------------------------------------

def rewrite_runpath(path: Path, new: bytes) -> str | None:
    """Rewrite PATH's ELF RUNPATH (or RPATH) to NEW in place; None when done or not needed, else why not."""
    data = bytearray(path.read_bytes())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = next((s for s in sections if s[1] == 6), None)  # SHT_DYNAMIC
    if dynamic is None:
        return None
    strtab = sections[dynamic[6]]  # sh_link: the dynamic string table
    refs, runpath = [], None
    for i in range(dynamic[5] // 16):
        tag, value = struct.unpack_from("<qQ", data, dynamic[4] + i * 16)
        if tag in (1, 14, 15, 29):  # DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH
            refs.append(value)
            if tag in (15, 29):
                runpath = value
    if runpath is None:
        return None
    for sec in sections:
        if sec[1] == 11 and sections[sec[6]] == strtab:  # SHT_DYNSYM names
            refs += [struct.unpack_from("<I", data, sec[4] + j * 24)[0] for j in range(sec[5] // 24)]
    start = strtab[4] + runpath
    end = data.index(b"\0", start)
    if data[start:end] == new:
        return None
    if end - start < len(new) or any(runpath < r <= runpath + (end - start) for r in refs):
        return "its RUNPATH is too short to rewrite in place, or shared with another name"
    data[start:end] = new + b"\0" * (end - start - len(new))
    path.write_bytes(bytes(data))
    return None


def origin_runpath(files: list[Path], new: str) -> bool:
    """The copied interpreter, libpython and the standard library's extension modules name the base's lib/ in
    their RUNPATH (absolute): every library lookup of every rank would probe it on the shared file system first.
    Rewritten in place to NEW (relative to $ORIGIN: the copy's own lib/), where the old string is long enough and
    no other name of the string table points into it; files without a RUNPATH are left alone. Where one cannot
    be rewritten it stays (False), and lightning-xpu-stage puts the copy's lib/ on LD_LIBRARY_PATH (libpython=1
    in pack.env)."""
    kept = []
    for file in files:
        try:
            why = rewrite_runpath(file, new.encode())
        except (OSError, ValueError, struct.error, IndexError) as exc:
            why = str(exc)
        if why:
            kept.append(f"{file}: {why}")
    if not kept:
        return True
    say(f"RUNPATH kept ({'; '.join(kept)[:300]}): the copy's lib/ goes on LD_LIBRARY_PATH when staged")
    return False


# ---- the image ------------------------------------------------------------------------------------------------

FULL_IMAGE_DIR = "free space there and rerun the install (LIGHTNING_XPU_PACK=0 installs without an image)"
FULL_CHECK_DIR = "free space there, or set LIGHTNING_XPU_PACK_CHECK_DIR to a directory with room, and rerun the install"


class DiskFull(Exception):
    """A full disk while the image is made or checked: the image fails, never falls back to a lesser one."""

    def __init__(self, where: str, error: BaseException | str, fix: str) -> None:
        super().__init__(disk_full_reason(where, error, fix))


class Packer:
    """Writes and checks the image of one environment; its last error says why a try did not give one."""

    def __init__(self, env: Path, site: str, tag: str) -> None:
        self.env, self.site, self.tag = env, site, tag
        self.dir = env / PACK_DIR
        self.format = ""
        self.compress: list[str] = []
        self.base: Base | None = None
        self.last_error = ""
        self.runpath_kept = False
        self.unpacked_bytes = 0
        self.squashfs_note = ""  # why there is no SquashFS image, when there is none

    def make(self) -> None:
        """The image, or a line why there is none; a full disk fails it (exit 1) with nothing left behind."""
        try:
            self.make_image()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self.fail_full(disk_full_reason(exc.filename or str(self.dir), exc, FULL_IMAGE_DIR))
        except DiskFull as full:
            self.fail_full(str(full))

    def fail_full(self, reason: str) -> NoReturn:
        shutil.rmtree(self.dir / ".overlay", ignore_errors=True)
        for partial in (self.dir / ".env.tmp", self.dir / ".env.squashfs.tmp", self.dir / "env.squashfs",
                        *self.dir.glob("env.tar.*")):
            partial.unlink(missing_ok=True)
        self.format = ""
        try:
            self.record("failed", reason)
        except OSError:
            pass  # the install fails and removes the environment: the record is for a reader of a kept build only
        fail(f"no packed image: {reason}")

    def make_image(self) -> None:
        why = refusal(self.env)
        if os.environ.get("LIGHTNING_XPU_PACK", "1") == "0":
            say(why)
            self.record("refused", why)
            return
        if why:
            warn(f"no packed image: {why}; jobs run from the shared install")
            self.record("refused", why)
            return
        say(f"+ write an image in {shlex.quote(str(self.dir))}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.format, self.compress = compressor()
        if (self.env / "conda-meta").is_dir():
            # The interpreter is the environment's own: the image is the environment, as it is.
            if self.tar(with_base=False) and self.verify(with_base=False):
                self.finish(base_staged=True, note="")
            else:
                self.give_up(self.last_error or "the packed environment did not run from another path")
            return
        self.base, base_why = base_interpreter(self.env)
        if self.base is not None and self.tar(with_base=True) and self.verify(with_base=True):
            self.finish(base_staged=True, note="")
            return
        base_why = base_why or self.last_error or "the image with the base interpreter did not run"
        say(f"the base interpreter stays shared: {base_why}")
        if self.tar(with_base=False) and self.verify(with_base=False):
            self.finish(base_staged=False, note=base_why)
        else:
            self.give_up(self.last_error or "the packed environment did not run from another path")

    def tar(self, with_base: bool) -> bool:
        """Write the image: the environment, and WITH_BASE the base interpreter merged into it (bin/pythonX.Y a
        copy of the executable instead of a symlink, libpython in lib/, the standard library in lib/pythonX.Y/,
        and no pyvenv.cfg: the copy is then a standalone Python that finds everything relative to its
        executable)."""
        overlay, tmp = self.dir / ".overlay", self.dir / ".env.tmp"
        py = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        # tar's --exclude applies to the names after it, and --anchored keeps "python3.11/site-packages" (the
        # base's) from matching the environment's own ./lib/python3.11/site-packages: the base parts come first.
        members = ["--anchored"]
        self.runpath_kept = False
        shutil.rmtree(overlay, ignore_errors=True)
        tmp.unlink(missing_ok=True)
        try:
            if with_base:
                assert self.base is not None
                members += self.overlay(overlay, py, self.base)
            # The smoke job's result is written meanwhile; it belongs to the manifest, not the image.
            members += ["-C", str(self.env), f"--exclude=./{PACK_DIR}",
                        "--exclude=./share/lightning-xpu/*smoke.json*", "."]
            holds = (f"the environment and the base interpreter {self.base.exe}" if with_base and self.base
                     else "the conda environment, its interpreter included" if (self.env / "conda-meta").is_dir()
                     else "the environment; the base interpreter stays shared")
            image = shlex.quote(str(self.dir / f"env.{self.format}"))
            say(f"+ tar -c ... | {' '.join(self.compress)} > {image} ({holds})")
            status, errors = pipe(["tar", "-c", *members], self.compress, tmp)
        finally:
            shutil.rmtree(overlay, ignore_errors=True)
        if status != 0:
            tmp.unlink(missing_ok=True)
            if is_disk_full(errors):
                raise DiskFull(str(self.dir), errors, FULL_IMAGE_DIR)
            self.last_error = f"tar failed (exit {status})"
            return False
        for old in self.dir.glob("env.tar.*"):
            old.unlink()
        tmp.rename(self.dir / f"env.{self.format}")
        return True

    def overlay(self, overlay: Path, py: str, base: Base) -> list[str]:
        """The base interpreter's files in OVERLAY, RUNPATHs rewritten; tar's members for them."""
        (overlay / "bin").mkdir(parents=True)
        (overlay / "lib" / py).mkdir(parents=True)
        shutil.copy2(base.exe, overlay / "bin" / py)
        # python and python3 name it relatively (uv's venvs link python to the base and python3.X to python).
        (overlay / "bin" / "python").symlink_to(py)
        (overlay / "bin" / "python3").symlink_to(py)
        shutil.copytree(Path(base.stdlib, "lib-dynload"), overlay / "lib" / py / "lib-dynload", symlinks=True)
        done = origin_runpath([overlay / "bin" / py], "$ORIGIN/../lib")
        if base.libpython:
            shutil.copy2(base.libpython, overlay / "lib")
            done = origin_runpath([overlay / "lib" / os.path.basename(base.libpython)], "$ORIGIN") and done
        done = origin_runpath(sorted((overlay / "lib" / py / "lib-dynload").glob("*.so")), "$ORIGIN/../..") and done
        self.runpath_kept = not done
        return ["-C", str(overlay), "./bin", "./lib",
                # The base's standard library as lib/pythonX.Y/ of the copy; its own site-packages stay out (the
                # environment's are the ones wanted), as does its test suite.
                "-C", os.path.dirname(base.stdlib), f"--exclude={py}/site-packages", f"--exclude={py}/dist-packages",
                f"--exclude={py}/test", f"--exclude={py}/lib-dynload",
                f"--transform=flags=r;s,^{py}\\(/\\|$\\),./lib/{py}\\1,", f"{py}/",
                "--exclude=./pyvenv.cfg", f"--exclude=./bin/{py}", "--exclude=./bin/python", "--exclude=./bin/python3"]

    def check_parent(self) -> str:
        """Where the check unpacks: LIGHTNING_XPU_PACK_CHECK_DIR, else /dev/shm (memory: writing the unpacked
        tree, about four times the image, to a disk file system costs several times the rest of the check) when
        it has room for twice the environment, else $TMPDIR or /tmp."""
        if os.environ.get("LIGHTNING_XPU_PACK_CHECK_DIR"):
            return os.environ["LIGHTNING_XPU_PACK_CHECK_DIR"]
        shm = "/dev/shm"
        if os.path.isdir(shm) and os.access(shm, os.W_OK) and output_of(["stat", "-f", "-c", "%T", shm]) == "tmpfs":
            need = tree_bytes(self.env, "-sk")
            stats = os.statvfs(shm)
            if stats.f_bavail * stats.f_frsize // 1024 > 2 * need:
                return shm
        return os.environ.get("TMPDIR") or "/tmp"

    def verify(self, with_base: bool) -> bool:
        """Unpack the image to a temporary directory elsewhere and run Python from there (CHECK)."""
        parent = self.check_parent()
        try:
            tmp = tempfile.mkdtemp(prefix="lxpu-pack-check.", dir=parent)
        except OSError as exc:
            if is_disk_full(exc):
                raise DiskFull(parent, exc, FULL_CHECK_DIR) from None
            self.last_error = f"the unpacked copy did not run: {exc}"
            say(self.last_error)
            return False
        say(f"+ check: unpack to {tmp} and import lightning and lightning_xpu from there")
        self.unpacked_bytes = 0
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        library_path = os.environ.get("LD_LIBRARY_PATH")
        env.update(PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1",
                   LD_LIBRARY_PATH=f"{tmp}/lib" + (f":{library_path}" if library_path else ""))
        try:
            done = subprocess.run(["tar", "-xf", str(self.dir / f"env.{self.format}"), "-C", tmp],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0 and is_disk_full(done.stderr):
                raise DiskFull(parent, done.stderr, FULL_CHECK_DIR)
            if done.returncode == 0:
                self.unpacked_bytes = tree_bytes(Path(tmp))
                self.squash(Path(tmp))  # before the check's Python writes anything there
                # In the copy (the first sys.path entry of `python -` is the working directory: a checkout's
                # lightning_xpu there would be imported instead of the copy's).
                done = subprocess.run([f"{tmp}/bin/python", "-", tmp, "1" if with_base else "0"], input=CHECK,
                                      env=env, capture_output=True, text=True, check=False, cwd=tmp)
        except OSError as exc:
            done = subprocess.CompletedProcess([], 1, "", str(exc))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if done.returncode != 0:
            out = (done.stdout + done.stderr).rstrip("\n").splitlines()
            self.last_error = f"the unpacked copy did not run: {out[-1] if out else ''}"
            say(self.last_error)
            return False
        return True

    def squash(self, tree: Path) -> None:
        """env.squashfs from TREE (the unpacked tar image), or squashfs_note saying why there is none."""
        image, tmp = self.dir / "env.squashfs", self.dir / ".env.squashfs.tmp"
        image.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
        if not shutil.which("mksquashfs"):
            self.squashfs_note = ("mksquashfs not found (install squashfs-tools): no SquashFS image, "
                                  "jobs stage by copying")
            say(self.squashfs_note)
            return
        command = ["mksquashfs", str(tree), str(tmp), *squashfs_options()]
        say(f"+ {shlex.join(command)}")
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            if is_disk_full(done.stdout):
                raise DiskFull(str(self.dir), done.stdout, FULL_IMAGE_DIR)
            lines = done.stdout.strip().splitlines()
            self.squashfs_note = f"mksquashfs failed (exit {done.returncode}): {lines[-1] if lines else ''}"
            say(self.squashfs_note)
            return
        tmp.rename(image)
        self.squashfs_note = ""

    def squashfs_fields(self) -> dict[str, str | int]:
        """pack.env's squashfs_* fields: the image, its sha256 and size, or why there is none."""
        image = self.dir / "env.squashfs"
        if self.squashfs_note or not image.is_file():
            return {"squashfs": "", "squashfs_sha256": "", "squashfs_bytes": 0,
                    "squashfs_note": self.squashfs_note or "no SquashFS image"}
        return {"squashfs": str(PACK_DIR / image.name), "squashfs_sha256": sha256(image),
                "squashfs_bytes": image.stat().st_size, "squashfs_note": ""}

    def record(self, status: str, note: str, base_staged: bool = False) -> None:
        """pack.env (for lightning-xpu-stage, read without Python) and pack.json (for the manifest)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        image = self.dir / f"env.{self.format}"
        sha, size, unpacked = "", 0, 0
        if status == "ok":
            sha, size, unpacked = sha256(image), image.stat().st_size, self.unpacked_bytes
        note = note.replace("\n", " ")
        fields = {
            "status": status, "file": str(PACK_DIR / image.name) if sha else "", "format": self.format,
            "sha256": sha, "bytes": size, "unpacked_bytes": unpacked, "base_staged": int(base_staged),
            "libpython": int(base_staged and self.runpath_kept), "site": self.site, "tag": self.tag, "note": note,
        }
        squashfs = self.squashfs_fields() if status == "ok" else {}
        fields.update(squashfs)
        (self.dir / "pack.env").write_text("".join(f"{key}={value}\n" for key, value in fields.items()))
        record = {
            "status": status, "file": fields["file"] or None, "format": self.format or None, "sha256": sha or None,
            "bytes": size, "unpacked_bytes": unpacked,
            "base": {"staged": base_staged, "why_not": None if base_staged else note} if status == "ok" else None,
            "note": note or None,
            "squashfs": ({"file": squashfs["squashfs"], "sha256": squashfs["squashfs_sha256"],
                          "bytes": squashfs["squashfs_bytes"], "options": squashfs_options()}
                         if squashfs.get("squashfs") else None),
            "squashfs_note": squashfs.get("squashfs_note") or None,
        }
        (self.dir / "pack.json").write_text(json.dumps(record, indent=2))

    def finish(self, base_staged: bool, note: str) -> None:
        self.record("ok", note, base_staged)
        image = self.dir / f"env.{self.format}"
        with_base = ", with the base interpreter" if base_staged else ""
        say(f"image: {image} ({image.stat().st_size // 1048576} MiB{with_base})")
        squashfs = self.dir / "env.squashfs"
        if squashfs.is_file() and not self.squashfs_note:
            say(f"image: {squashfs} ({squashfs.stat().st_size // 1048576} MiB, SquashFS for mount staging)")

    def give_up(self, why: str) -> None:
        for old in (*self.dir.glob("env.tar.*"), *self.dir.glob("env.squashfs")):
            old.unlink()
        warn(f"no packed image: {why}; jobs run from the shared install")
        self.format = ""
        self.record("refused", why)


def pipe(producer: list[str], consumer: list[str], out: Path) -> tuple[int, str]:
    """PRODUCER | CONSUMER > OUT: the exit status of the last that failed (bash's pipefail), 0 when both ran, and
    what both wrote to stderr (shown, and read for a full disk)."""
    errors: list[bytes] = []

    def collect(stream: IO[bytes] | None) -> threading.Thread:
        reader = threading.Thread(target=lambda: errors.append(stream.read() if stream else b""))
        reader.start()
        return reader

    with out.open("wb") as sink:
        try:
            first = subprocess.Popen(producer, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError:
            return 127, ""
        readers = [collect(first.stderr)]
        try:
            second = subprocess.Popen(consumer, stdin=first.stdout, stdout=sink, stderr=subprocess.PIPE)
            readers.append(collect(second.stderr))
        except OSError:
            first.kill()
            second = None
        finally:
            assert first.stdout is not None
            first.stdout.close()
        statuses = [first.wait(), second.wait() if second else 127]
    for reader in readers:
        reader.join()
    text = b"".join(errors).decode(errors="replace")
    if text:
        sys.stdout.write(text)
    return next((s for s in reversed(statuses) if s != 0), 0), text


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lead_own_process_group() -> None:
    """SIGTERM (the engine's, when the install fails or is interrupted) stops this process and everything it
    started (tar, the compressor, the check's Python), then its clean-up runs."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass  # already leading a session: its group is its own

    def stop(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.getpgrp() == os.getpid():  # never the engine's group
            os.killpg(0, signal.SIGTERM)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str]) -> int:
    usage = "usage: python -m lxpu_admin.envside.pack relocatable ENV | make ENV SITE TAG | refusal ENV"
    if argv[:1] == ["relocatable"] and len(argv) == 2:
        make_relocatable(Path(argv[1]))
    elif argv[:1] == ["make"] and len(argv) == 4:
        lead_own_process_group()
        # What it runs (tar, mksquashfs, the check) gets the engine's environment, without PYTHONPATH.
        os.environ.pop("PYTHONPATH", None)
        Packer(Path(argv[1]), argv[2], argv[3]).make()
    elif argv[:1] == ["refusal"] and len(argv) == 2:
        sys.stdout.write(refusal(Path(argv[1])))
    else:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
