"""The SquashFS image of a build (issue 30): lxpu_admin/envside/pack.py, run on a small stand-in venv with the real
mksquashfs, writes env.squashfs from the copy its check unpacked (the base interpreter merged in, the pack directory
left out), records its sha256 and size in pack.env and pack.json (so in manifest.json and the build's RECORD); a
PATH without mksquashfs gives one line and the tar image alone, staged by copying as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin import paths

pytestmark = pytest.mark.install

ENGINE = paths.LIB  # what PYTHONPATH holds to find the admin package



def _pack(env: Path, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env / "bin" / "python"), "-B", "-m", "lxpu_admin.envside.pack", "make", str(env), h.SITE, h.TAG],
        env={**os.environ, "PYTHONPATH": str(ENGINE), "LIGHTNING_XPU_PACK": "1", "PATH": path},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _pack_env(env: Path) -> dict[str, str]:
    text = (env / "share" / "lightning-xpu" / "pack" / "pack.env").read_text()
    return dict(line.split("=", 1) for line in text.splitlines())


def test_the_install_writes_a_squashfs_image_of_the_checked_copy(tmp_path: Path) -> None:
    env = h.stand_in_venv(tmp_path / "env")
    done = _pack(env, os.environ["PATH"])
    assert done.returncode == 0, done.stdout + done.stderr
    fields = _pack_env(env)
    assert fields.get("squashfs"), done.stdout
    image = env / fields["squashfs"]
    assert fields["status"] == "ok" and image.name == "env.squashfs", fields
    assert hashlib.sha256(image.read_bytes()).hexdigest() == fields["squashfs_sha256"], fields
    assert int(fields["squashfs_bytes"]) == image.stat().st_size and fields["squashfs_note"] == "", fields
    record = json.loads((env / "share" / "lightning-xpu" / "pack" / "pack.json").read_text())
    assert record["squashfs"]["sha256"] == fields["squashfs_sha256"], record
    assert record["squashfs"]["options"][:2] == ["-comp", "zstd"] and "1M" in record["squashfs"]["options"], record
    listed = subprocess.run(["unsquashfs", "-s", str(image)], capture_output=True, text=True, check=True).stdout
    assert "Compression zstd" in listed and "Block size 1048576" in listed, listed
    names = subprocess.run(["unsquashfs", "-l", "-d", "", str(image)], capture_output=True, text=True,
                           check=True).stdout.split()  # fmt: skip
    py = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    # The same tree as the tar image: a standalone Python (the base interpreter and its standard library merged
    # in, no pyvenv.cfg), without the pack directory itself.
    assert f"/bin/{py}" in names and f"/lib/{py}/os.py" in names and "/pyvenv.cfg" not in names, names[:20]
    assert f"/lib/{py}/site-packages/lightning_xpu/__init__.py" in names, names[:20]
    assert not any(name.startswith("/share/lightning-xpu/pack") for name in names), names


def test_without_mksquashfs_one_line_and_the_tar_image_alone(tmp_path: Path) -> None:
    env = h.stand_in_venv(tmp_path / "env")
    tools = tmp_path / "bin"
    tools.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin"):
        for command in sorted(Path(directory).iterdir()):
            if command.name != "mksquashfs" and not (tools / command.name).exists():
                (tools / command.name).symlink_to(command)
    done = _pack(env, str(tools))
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith(("mksquashfs", "+ mksquashfs"))]
    assert said == ["mksquashfs not found (install squashfs-tools): no SquashFS image, jobs stage by copying"], said
    fields = _pack_env(env)
    assert fields["status"] == "ok" and fields["file"].endswith("env.tar.zst") and fields["squashfs"] == "", fields
    assert not (env / "share" / "lightning-xpu" / "pack" / "env.squashfs").exists()
