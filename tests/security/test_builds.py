"""Caches and tools another account could change (issue 27, Why 3): the administrator's (root's) install refuses a
uv cache that another account owns or may write, and never runs a cached uv that another account replaced.

The installs here are root's real install job on the shared install's inputs, with uv (no --base-python), stopped
once uv is set up (the line "installer: uv, cache"): nothing is built.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import signal
import subprocess
from pathlib import Path

import pytest

from tests.install import install_harness as h
from tests.security.accounts import Accounts
from tests.security.conftest import SharedInstall

pytestmark = pytest.mark.security

TOOLS_LOCK = h.REPO / "recipes" / "tools" / "install-tools.txt"
UV_SET_UP = "installer: uv, cache"


def _uv_version() -> str:
    pinned = re.search(r"^uv==(\S+)", TOOLS_LOCK.read_text(), re.MULTILINE)
    assert pinned
    return pinned.group(1)


def _prefix(accounts: Accounts) -> Path:
    return accounts.base / "admin" / f"uv prefix {secrets.token_hex(3)}"


def _install_until_uv(accounts: Accounts, shared_install: SharedInstall, cache: Path, output: Path) -> str:
    """Root's install with CACHE as its uv cache, stopped once uv is set up; its output."""
    job = h.start_job(shared_install.job, "--source", str(shared_install.source), *h.PIP_SOURCE,
                      prefix=_prefix(accounts), output=output,
                      env=h.job_env(LIGHTNING_XPU_UV_CACHE_DIR=str(cache)))  # fmt: skip
    try:
        h.wait_for_text(output, UV_SET_UP, job, timeout=300)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=120)
    return output.read_text()


def _refused(shared_install: SharedInstall, prefix: Path, cache: Path) -> h.JobResult:
    return h.run_job(shared_install.job, "--source", str(shared_install.source), *h.PIP_SOURCE, prefix=prefix,
                     env=h.job_env(LIGHTNING_XPU_UV_CACHE_DIR=str(cache)))  # fmt: skip


def test_a_uv_cache_of_another_account_is_refused(accounts: Accounts, shared_install: SharedInstall) -> None:
    """`LIGHTNING_XPU_UV_CACHE_DIR` on a project file system, owned by a member of the project: uv would copy
    whatever that member put in it into root's build (issue 27: 12,804 of 26,035 files and root's `import torch`)."""
    cache = accounts.private_dir(accounts.attacker, f"attacker cache {secrets.token_hex(3)}")
    prefix = _prefix(accounts)
    result = _refused(shared_install, prefix, cache)
    assert result.returncode == 2, result.output[-3000:]
    assert (f"error: the uv cache {cache} is not yours: {cache} belongs to {accounts.attacker.name}, who could "
            "change what goes into your builds; use a cache of your own (LIGHTNING_XPU_UV_CACHE_DIR") in result.output
    assert not list(cache.iterdir()), "nothing was written into the attacker's cache"
    assert not (prefix / ".envs").exists(), "nothing was built"


def test_a_uv_cache_others_may_write_or_holding_another_accounts_entry_is_refused(
    accounts: Accounts, shared_install: SharedInstall
) -> None:
    shared = accounts.base / "admin" / f"group cache {secrets.token_hex(3)}"
    shared.mkdir()
    os.chown(shared, 0, accounts.gid)
    shared.chmod(0o2775)  # a project directory: the group may write
    result = _refused(shared_install, _prefix(accounts), shared)
    assert result.returncode == 2, result.output[-3000:]
    assert (f"error: the uv cache {shared} is writable by other accounts ({shared} has mode 2775): "
            f"chmod go-w {shared}, or use a cache of your own") in result.output, result.output[-2000:]
    # Root's own cache, once writable: an entry the attacker made there then is refused too.
    shared.chmod(0o755)
    planted = shared / "archive-v0"
    made = accounts.run(accounts.attacker, f"mkdir {h.q(planted)}")
    assert made.returncode != 0, "the cache is no longer writable by the group"
    planted.mkdir()
    os.chown(planted, accounts.attacker.uid, accounts.attacker.gid)
    result = _refused(shared_install, _prefix(accounts), shared)
    assert result.returncode == 2, result.output[-3000:]
    assert f"error: the uv cache {shared} is not yours: {planted} belongs to {accounts.attacker.name}" in result.output


FAKE_UV = """#!/bin/sh
echo "ran as $(id -un)" > {marker}
echo "uv {version}"
"""


def _replace_kept_uv(accounts: Accounts, kept: Path, marker: Path) -> None:
    """As the attacker: replace the kept uv (a wheel here; an unpacked tree before issue 27) with one that writes
    MARKER when run."""
    script = FAKE_UV.format(marker=marker, version=_uv_version())
    wheels = list(kept.glob("*.whl"))
    if wheels:
        fake = (f"import zipfile\nwith zipfile.ZipFile({str(wheels[0])!r}, 'w') as z:\n"
                f"    info = zipfile.ZipInfo('uv-{_uv_version()}.data/scripts/uv')\n"
                f"    info.external_attr = 0o100755 << 16\n    z.writestr(info, {script!r})\n")  # fmt: skip
        done = accounts.run(accounts.attacker, f"python3 -c {h.q(fake)}")
    else:
        done = accounts.run(accounts.attacker, f"printf %s {h.q(script)} > {h.q(kept / 'bin' / 'uv')}")
    assert done.returncode == 0, done.stderr


def test_a_cached_uv_another_account_replaced_is_detected_and_never_run(
    accounts: Accounts, shared_install: SharedInstall, tmp_path: Path
) -> None:
    """A careless `chown -R` handed root's kept uv to a member of the group, who replaced it with a program of its
    own; root's next install must not run it (issue 27: the prefix's uv was one inode with the cache's, and the
    installer only checked that it runs)."""
    cache = accounts.base / "admin" / f"root uv cache {secrets.token_hex(3)}"
    first = _install_until_uv(accounts, shared_install, cache, tmp_path / "first.out")
    assert "bootstrapping uv" in first, first[-2000:]
    (kept,) = (cache / "lightning-xpu-tools").glob(f"uv-{_uv_version()}-*")
    subprocess.run(["chown", "-R", accounts.attacker.name, *map(str, kept.iterdir())], check=True)
    marker = accounts.base / f"uv-ran-{secrets.token_hex(3)}"
    _replace_kept_uv(accounts, kept, marker)

    second = _install_until_uv(accounts, shared_install, cache, tmp_path / "second.out")
    assert not marker.exists(), f"root ran the attacker's uv: {marker.read_text()}"
    lock = shared_install.source / "recipes" / "tools" / "install-tools.txt"
    assert f"WARNING: the cached uv in {kept} is not what {lock} pins" in second, second[-3000:]
    assert "not used; fetching it again" in second and "bootstrapping uv" in second, second[-3000:]
    (wheel,) = kept.glob("*.whl")
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() in TOOLS_LOCK.read_text()
    assert wheel.stat().st_uid == 0, "the fetched wheel is root's own again"
