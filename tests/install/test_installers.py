"""uv is the install job's default installer; pip is the fallback, by choice or where uv cannot be had.

The session's good install (conftest.py) is the README's command, so it runs on uv. These tests check where its
packages came from, build the same environment with `--installer pip`, and make uv impossible to have.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin.envside import uv_sources

pytestmark = pytest.mark.install

TOOLS_LOCK = h.REPO / "recipes" / "tools" / "install-tools.txt"
# The environment's own pip installing the lock (not the pip that bootstraps uv).
LOCK_BY_PIP = r"/bin/python -m pip --disable-pip-version-check --no-input install --require-hashes"


def _manifest(prefix: Path) -> dict:
    return json.loads((prefix / h.TAG / "manifest.json").read_text())


def _versions(manifest: dict) -> dict[str, str]:
    return {p["name"].lower().replace("_", "-"): p["version"] for p in manifest["packages"]}


def _find_links_dirs() -> list[Path]:
    """The directories this machine's pip configuration lists as find-links, read as the engine reads them."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    settings = uv_sources.settings_from_config(uv_sources.parse_config_list(listed.stdout))
    return [Path(s[2].removeprefix("file://")) for s in settings if s[:2] == ("arg", "--find-links")]


def test_default_install_ran_on_uv_and_torch_came_from_the_local_file_with_the_locks_hash(
    good_install: h.GoodInstall,
) -> None:
    manifest = good_install.manifest
    pinned_uv = re.search(r"^uv==(\S+)", TOOLS_LOCK.read_text(), re.MULTILINE)
    assert pinned_uv
    assert manifest["installer"] == {"name": "uv", "version": pinned_uv.group(1), "why": "default"}
    torch = next(p for p in manifest["packages"] if p["name"] == "torch")
    local = [w for d in _find_links_dirs() for w in d.glob(f"torch-{torch['version']}-*.whl")]
    assert local, "this machine's pip configuration has no local torch wheel: the test needs the machine's setup"
    local_hashes = {hashlib.sha256(w.read_bytes()).hexdigest() for w in local}
    lock = Path(manifest["sources"]["lock_file"]).read_text()
    torch_entry = re.search(r"^torch==(\S+)((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)", lock, re.MULTILINE)
    assert torch_entry and torch_entry.group(1) == torch["version"] == "2.13.0+cpu"
    assert torch["sha256"] in local_hashes, "torch's recorded hash is not the local file's"
    assert torch["sha256"] in torch_entry.group(2), "torch's recorded hash is not the lock's"
    log = good_install.log.read_text()
    uv_lock = r"/uv pip install .*--require-hashes .*-r .*requirements\.txt"
    assert re.search(uv_lock, h.commands(log)), "the lock went through uv"
    # uv ran from the run's own copy, unpacked from a wheel the lock lists, which the tool cache keeps; the copy is
    # gone with the run.
    (kept,) = (good_install.prefix / ".cache" / "uv" / "lightning-xpu-tools").glob(f"uv-{pinned_uv.group(1)}-*")
    (wheel,) = kept.glob("*.whl")
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() in TOOLS_LOCK.read_text()
    assert not list(good_install.prefix.glob(".envs/.tmp.*")) and not (good_install.prefix / ".tools").exists()


def test_a_uv_build_shares_no_inode_with_the_cache_and_is_read_only(good_install: h.GoodInstall) -> None:
    """Not one hard link into uv's cache (uv's default on Linux): a changed cache file changed every build."""
    assert "(link mode copy)" in good_install.log.read_text()
    h.assert_sealed(good_install.prefix)


def test_pip_installer_builds_the_same_environment(
    install_job: Path, source_repo: Path, good_install: h.GoodInstall, tmp_path: Path
) -> None:
    prefix = tmp_path / "pip prefix"
    result = h.run_job(install_job, "--source", str(source_repo), *h.PIP_SOURCE, "--installer", "pip", prefix=prefix)
    assert result.returncode == 0, result.output[-3000:]
    manifest = _manifest(prefix)
    assert manifest["installer"]["name"] == "pip" and manifest["installer"]["why"] == "--installer pip"
    assert re.search(LOCK_BY_PIP, h.commands(result.log_text))
    assert not (prefix / ".tools").exists(), "--installer pip must not bootstrap uv"
    h.assert_sealed(prefix)
    uv_versions = _versions(good_install.manifest)
    assert _versions(manifest) == uv_versions
    # Both record each package's hash, pip from its report, uv from the lock: the same files.
    hashes = {p["name"]: p.get("sha256") for p in manifest["packages"] if p["name"] != "lightning-xpu"}
    uv_hashes = {p["name"]: p.get("sha256") for p in good_install.manifest["packages"]
                 if p["name"] != "lightning-xpu"}
    assert {n: v for n, v in hashes.items() if uv_hashes.get(n)} == {n: v for n, v in uv_hashes.items() if v}


def test_falls_back_to_pip_and_says_so_where_uv_cannot_be_had(
    install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    """A pip constraint that no uv release meets: pip refuses to fetch uv, as on a site with no uv wheel."""
    constraints = tmp_path / "no-uv.txt"
    constraints.write_text("uv==0.0.0\n")
    prefix, output = tmp_path / "fallback prefix", tmp_path / "job.out"
    job = h.start_job(install_job, "--source", str(source_repo), *h.PIP_SOURCE, prefix=prefix, output=output,
                      env=h.job_env(PIP_CONSTRAINT=str(constraints)))
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and job.poll() is None:
            if re.search(LOCK_BY_PIP, h.commands(output.read_text())):
                break
            time.sleep(0.5)
        text = output.read_text()
        fallback = r"^note: uv could not be had \(Cannot install uv==.*\): installing with pip instead$"
        assert re.search(fallback, text, re.MULTILINE), text
        assert re.search(r"^installer: pip .*\(uv could not be had", text, re.MULTILINE), text
        assert re.search(LOCK_BY_PIP, h.commands(text)), "the lock did not go to pip"
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=120)
    assert not (prefix / ".tools" / "uv").exists()
    assert not (prefix / h.TAG).exists(), "an interrupted first install publishes nothing"


def test_a_new_prefix_takes_uv_from_a_warm_cache_without_pip(
    install_job: Path, source_repo: Path, good_install: h.GoodInstall, tmp_path: Path
) -> None:
    """The good install bootstrapped uv with pip and kept it in its uv cache (lxpu_admin/install/toolcache.py); another
    prefix sharing that cache copies it from there: no pip bootstrap (the job is stopped once uv is set up)."""
    cache = good_install.prefix / ".cache" / "uv"
    kept = list((cache / "lightning-xpu-tools").glob("uv-*"))
    assert len(kept) == 1, f"the good install kept no uv in its cache {cache}"
    prefix, output = tmp_path / "second prefix", tmp_path / "job.out"
    job = h.start_job(install_job, "--source", str(source_repo), *h.PIP_SOURCE, prefix=prefix, output=output,
                      env=h.job_env(LIGHTNING_XPU_UV_CACHE_DIR=str(cache)))
    try:
        h.wait_for_text(output, "installer: uv, cache", job, timeout=300)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=120)
    text = output.read_text()
    assert f"from the cache, {kept[0]} (each wheel's sha256 checked against" in text, text
    assert "bootstrapping uv" not in text and "pip download" not in text, text


def test_the_tool_cache_is_keyed_by_the_lock_checked_before_every_use_and_never_fails_an_install(
    tmp_path: Path,
) -> None:
    from lxpu_admin.install import toolcache

    wheel = tmp_path / "tool-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tool-1.0.data/scripts/tool", "#!/bin/sh\necho tool 1.0\n")
        archive.writestr("tool/__init__.py", "")
    lock = tmp_path / "tools.txt"
    lock.write_text(f"tool==1.0 --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n")
    cache = tmp_path / "cache"
    first = toolcache.entry(str(cache), "tool", "1.0", str(lock))
    assert toolcache.entry("", "tool", "1.0", str(lock)) == "", "no cache, no entry"
    toolcache.keep([str(wheel)], first)
    lines: list[str] = []
    assert toolcache.provide("tool", "1.0", str(lock), str(cache), str(tmp_path / "copy"), sys.executable, [],
                             lines.append) == ""  # fmt: skip
    assert any(f"from the cache, {first}" in line for line in lines), lines
    assert os.access(tmp_path / "copy" / "bin" / "tool", os.X_OK) and (tmp_path / "copy" / "tool").is_dir()
    # A kept wheel whose sha256 the lock does not list is never unpacked: pip is asked again (and here finds none).
    kept = Path(first) / wheel.name
    kept.write_bytes(kept.read_bytes() + b"\0")
    lines.clear()
    why = toolcache.provide("tool", "1.0", str(lock), str(cache), str(tmp_path / "again"), sys.executable,
                            ["--no-index", "--find-links", str(tmp_path / "none")], lines.append)  # fmt: skip
    assert why and not (tmp_path / "again").exists(), (why, lines)
    assert any("is not what" in line and "not used" in line for line in lines), lines
    # Another hash in the lock: another entry.
    lock.write_text("tool==1.0 --hash=sha256:" + "b" * 64 + "\n")
    assert toolcache.entry(str(cache), "tool", "1.0", str(lock)) != first
    # A cache that cannot be written: the install goes on without it.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would go")
    toolcache.keep([str(wheel)], toolcache.entry(str(blocked), "tool", "1.0", str(lock)))
    assert blocked.is_file()
