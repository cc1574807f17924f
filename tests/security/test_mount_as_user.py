"""Mount staging is FUSE's unprivileged path (issue 30): a throwaway non-root account runs lightning-xpu-stage
--shell outside a job over a stand-in build that has a real SquashFS image (mksquashfs), and its shell runs from a
squashfuse mount that this account made (the mount table's user_id is its uid), in its private directory; when the
shell ends, the mount and the directory are gone. Without squashfuse on the account's PATH the same command copies
instead, said in one line, and LIGHTNING_XPU_STAGE=mount then runs from the shared build with one warning line.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.security.accounts import SYSTEM_PATH, Accounts

pytestmark = pytest.mark.security

REPO = Path(__file__).resolve().parents[2]
TAG = "2.13-cpu"
# The stand-in interpreter: says which directory it runs from (its own ../, resolved as the kernel sees it).
PYTHON = '#!/bin/sh\necho "python runs from $(cd "$(dirname "$0")/.." && pwd -P)"\n'


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def build(accounts: Accounts, tmp_path: Path) -> Path:
    """A build readable by every account: bin/python, bin/lightning-xpu-stage, and share/lightning-xpu/pack with
    the tar image, the SquashFS image and pack.env, as lxpu_admin/envside/pack.py writes them."""
    root = accounts.base / f"build-{tmp_path.name}"
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "python").write_text(PYTHON)
    (tree / "bin" / "python").chmod(0o755)
    pack = root / "share" / "lightning-xpu" / "pack"
    pack.mkdir(parents=True)
    shutil.copytree(tree / "bin", root / "bin")
    shutil.copy(REPO / "scripts" / "common" / "stage" / "lightning-xpu-stage", root / "bin")
    with tarfile.open(pack / "env.tar.gz", "w:gz") as tar:
        tar.add(tree, arcname=".")
    subprocess.run(["mksquashfs", str(tree), str(pack / "env.squashfs"), "-noappend", "-quiet", "-no-progress"],
                   check=True, capture_output=True)  # fmt: skip
    fields = {
        "status": "ok", "file": "share/lightning-xpu/pack/env.tar.gz", "format": "tar.gz",
        "sha256": _sha256(pack / "env.tar.gz"), "bytes": (pack / "env.tar.gz").stat().st_size,
        "unpacked_bytes": 4096, "base_staged": 1, "libpython": 0, "site": "generic", "tag": TAG, "note": "",
        "squashfs": "share/lightning-xpu/pack/env.squashfs", "squashfs_sha256": _sha256(pack / "env.squashfs"),
        "squashfs_bytes": (pack / "env.squashfs").stat().st_size, "squashfs_note": "",
    }  # fmt: skip
    (pack / "pack.env").write_text("".join(f"{key}={value}\n" for key, value in fields.items()))
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(root)], check=True)
    return root


def _stage(accounts: Accounts, build: Path, stage: str, path: str = SYSTEM_PATH) -> subprocess.CompletedProcess[str]:
    script = (f'eval "$({build}/bin/lightning-xpu-stage --shell)"\n'
              'python\n'
              'echo "root $LIGHTNING_XPU_ROOT"\n'
              'grep -F " $LIGHTNING_XPU_ROOT " /proc/self/mounts || echo "no mount"\n')  # fmt: skip
    # The build's bin/ first, as the module and the setup script put it.
    env = accounts.env(accounts.victim, PATH=f"{build}/bin:{path}", LIGHTNING_XPU_STAGE=stage,
                       LIGHTNING_XPU_ROOT=str(build))
    return accounts.run(accounts.victim, script, env=env, timeout=120)


def _field(output: str, name: str) -> str:
    return next(line.split(" ", 1)[1] for line in output.splitlines() if line.startswith(f"{name} "))


def test_a_non_root_account_mounts_and_the_mount_goes_with_its_shell(accounts: Accounts, build: Path) -> None:
    victim = accounts.victim
    done = _stage(accounts, build, "1")
    assert done.returncode == 0, done.stderr
    root = _field(done.stdout, "root")
    assert root.startswith(f"/tmp/lxpu-{victim.uid}/stage.") and root.endswith(f"/mount.{TAG}"), done.stdout
    assert f"python runs from {root}" in done.stdout, done.stdout
    (mount,) = [line for line in done.stdout.splitlines() if line.split()[1:2] == [root] and "fuse" in line]
    assert mount.split()[2].startswith("fuse.squashfuse"), mount
    assert f"user_id={victim.uid}" in mount, mount  # made by the account itself, not by root
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert line == f"lightning-xpu-stage: mount staging: the image mounted (squashfuse) at {root} on each node", line
    # The shell's EXIT trap unmounted it and removed the job directory; the private directory stays.
    assert root not in Path("/proc/mounts").read_text()
    assert not Path(root).parent.exists(), sorted(Path(root).parent.parent.iterdir())


def test_without_squashfuse_it_copies_and_says_why_in_one_line(accounts: Accounts, build: Path,
                                                                tmp_path: Path) -> None:  # fmt: skip
    tools = accounts.base / f"no-squashfuse-{tmp_path.name}"  # where the account can read it
    tools.mkdir(mode=0o755)
    for directory in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"):
        for command in sorted(Path(directory).iterdir()):
            if not command.name.startswith("squashfuse") and not (tools / command.name).exists():
                (tools / command.name).symlink_to(command)
    done = _stage(accounts, build, "1", path=str(tools))
    root = _field(done.stdout, "root")
    assert root.endswith(f"/stage.{root.split('/stage.')[1].split('/')[0]}/{TAG}"), done.stdout
    assert f"python runs from {root}" in done.stdout and "no mount" in done.stdout, done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"lightning-xpu-stage: copy staging: copied to {root} on each node; not mounted: "
                           "squashfuse not found on PATH"), line  # fmt: skip
    forced = _stage(accounts, build, "mount", path=str(tools))
    assert f"python runs from {build}" in forced.stdout, forced.stdout
    (line,) = forced.stderr.strip().splitlines()
    assert line.startswith(f"lightning-xpu-stage: warning: running from the shared install {build}: "
                           "LIGHTNING_XPU_STAGE=mount, but squashfuse not found on PATH"), line  # fmt: skip
