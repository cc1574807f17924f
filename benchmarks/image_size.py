#!/usr/bin/env python3
"""A build as a tree against the same build as one SquashFS image (issue 30): files, bytes, and the time to write
the image.

The tree: every entry under the build (regular files, directories, links: each one an inode and a metadata
operation to reach on a shared file system), the bytes of its regular files and what `du` says it occupies. The
image: `mksquashfs` of the same tree into one file (zstd level 3, 1 MiB blocks by default, as CSCS's uenv images;
`--comp`, `--level`, `--block-size` to compare), its bytes, and the seconds it took. Where the build already holds
a packed image (share/lightning-xpu/pack/pack.env), its format and bytes are listed too.

    python benchmarks/image_size.py --root "$PREFIX/2.13-cpu" [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import print_table, write_json


def tree_figures(root: Path) -> dict[str, int]:
    """Entries by kind and bytes of a tree, without following links."""
    files = directories = links = size = 0
    for top, names, filenames in os.walk(root):
        directories += 1
        for name in (*names, *filenames):
            path = os.path.join(top, name)
            if os.path.islink(path):
                links += 1
            elif name in filenames:
                files += 1
                size += os.lstat(path).st_size
    disk = subprocess.run(["du", "-sk", str(root)], capture_output=True, text=True, check=True).stdout.split()[0]
    return {"entries": files + directories + links, "files": files, "directories": directories, "links": links,
            "bytes": size, "disk_bytes": int(disk) * 1024}  # fmt: skip


def squashfs_figures(root: Path, dest: Path, comp: str, level: int, block_size: str) -> dict[str, Any]:
    """mksquashfs ROOT into DEST: its bytes and seconds."""
    tool = shutil.which("mksquashfs")
    if tool is None:
        sys.exit("image_size.py: mksquashfs not found: install squashfs-tools (apt-get install squashfs-tools)")
    argv = [tool, str(root), str(dest), "-noappend", "-quiet", "-no-progress", "-comp", comp, "-b", block_size,
            "-processors", str(os.cpu_count() or 1)]  # fmt: skip
    if comp in ("zstd", "gzip"):  # xz and lzo take no level; lz4 takes -Xhc
        argv += ["-Xcompression-level", str(level)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"image_size.py: mksquashfs failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return {"files": 1, "bytes": dest.stat().st_size, "seconds": round(seconds, 2), "compression": comp,
            "level": level, "block_size": block_size}  # fmt: skip


def packed_image(root: Path) -> dict[str, Any] | None:
    """The build's own packed image (pack.env: format, bytes), if it has one."""
    try:
        lines = (root / "share" / "lightning-xpu" / "pack" / "pack.env").read_text().splitlines()
    except OSError:
        return None
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    if fields.get("status") != "ok":
        return None
    return {"format": fields.get("format", "?"), "bytes": int(fields.get("bytes", 0) or 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="the build, <prefix>/<tag> (its links followed)")
    parser.add_argument("--comp", default="zstd", help="mksquashfs -comp (default zstd)")
    parser.add_argument("--level", type=int, default=3, help="compression level (default 3)")
    parser.add_argument("--block-size", default="1M", help="mksquashfs -b (default 1M)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not root.is_dir():
        parser.error(f"--root {args.root} is not a directory: give <prefix>/<tag> of an install")
    tree = tree_figures(root)
    with tempfile.TemporaryDirectory(prefix="lxpu-image-") as tmp:
        image = squashfs_figures(root, Path(tmp) / "env.squashfs", args.comp, args.level, args.block_size)
    packed = packed_image(root)
    results = {"root": str(root), "tree": tree, "squashfs": image, "packed": packed,
               "ratio_bytes_image_over_tree": image["bytes"] / max(tree["bytes"], 1)}  # fmt: skip
    rows = [["tree", tree["entries"], tree["bytes"], f"{tree['files']} files, {tree['directories']} directories, "
             f"{tree['links']} links; du {tree['disk_bytes']} bytes"],
            ["squashfs image", 1, image["bytes"], f"{image['compression']} level {image['level']}, blocks "
             f"{image['block_size']}, written in {image['seconds']} s"]]  # fmt: skip
    if packed:
        rows.append([f"packed image ({packed['format']})", 1, packed["bytes"], "the install's, pack.env"])
    print_table(f"{root}", ["form", "entries", "bytes", "notes"], rows)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
