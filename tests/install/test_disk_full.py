"""A full disk (issue 27, Why 6): every failure path survives it, ends with the install's last line naming disk
space and where, and removes what the run made; pack never records a degraded image as ok.

Every ENOSPC here is the kernel's: a small tmpfs (`size=`) mounted for the test, filled or too small for what the
step writes. The install runs over the small prebuilt environment (LXPU_TEST_PREBUILT); a test pause
(LXPU_TEST_PAUSE_AT) only places the moment the disk fills. Needs root (mount), as CI runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin import paths

pytestmark = pytest.mark.install

ENGINE = paths.LIB  # what PYTHONPATH holds to find the admin package

Mount = Callable[[Path, str], Path]


@pytest.fixture
def small_fs() -> Iterator[Mount]:
    """mount(dir, size): a tmpfs of that size at dir (made), unmounted after the test whatever happened."""
    h.require(os.geteuid() == 0, "root (the tests mount a small file system)")
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "lxpu-test-full", str(where)],
                       check=True)  # fmt: skip
        mounted.append(where)
        return where

    try:
        yield mount
    finally:
        for where in reversed(mounted):
            if subprocess.run(["umount", str(where)], check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path) -> Path:
    """Write zeros into where/filler until the file system says ENOSPC."""
    filler = where / "filler"
    with filler.open("wb") as out:
        block = b"\0" * 65536
        try:
            while True:
                out.write(block)
                out.flush()
        except OSError as exc:
            assert exc.errno == 28, exc
    return filler


def last_line(output: str) -> str:
    return [line for line in output.splitlines() if line.strip()][-1]


@pytest.fixture(scope="module")
def prebuilt(source_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return h.make_prebuilt_env(tmp_path_factory.mktemp("prebuilt") / "env", source_repo)


def prebuilt_job(install_job: Path, source_repo: Path, prebuilt: Path, prefix: Path, output: Path,
                 **env: str) -> subprocess.Popen[bytes]:  # fmt: skip
    return h.start_job(install_job, *h.prebuilt_args(source_repo), prefix=prefix, output=output,
                       env=h.job_env(LXPU_TEST_PREBUILT=str(prebuilt), **env))  # fmt: skip


def test_disk_full_after_the_smoke_job_fails_cleanly_and_the_next_run_rebuilds(
    install_job: Path, source_repo: Path, prebuilt: Path, small_fs: Mount, tmp_path: Path
) -> None:
    disk = small_fs(tmp_path / "small disk", "48m")
    prefix = disk / "pre fix"
    pause, output = tmp_path / "pause", tmp_path / "job.out"
    pause.touch()
    # The smoke job has passed (its smoke.json is in the build), the manifest is written: the disk fills just
    # before publishing writes the rollback record.
    job = prebuilt_job(install_job, source_repo, prebuilt, prefix, output, LIGHTNING_XPU_MIN_FREE_GIB="0",
                       LXPU_TEST_PAUSE_AT="record", LXPU_TEST_PAUSE_FILE=str(pause))  # fmt: skip
    try:
        h.wait_for_text(output, "test pause before record ", job, timeout=120)
        (build,) = (prefix / ".envs").glob(f"{h.TAG}.2*")
        assert (build / "share" / "lightning-xpu" / "smoke.json").is_file()
        filler = fill(disk)
        pause.unlink()
        assert job.wait(timeout=120) == 1, output.read_text()
    finally:
        if job.poll() is None:
            h.kill_group(job)
    out = output.read_text()
    assert "Traceback" not in out, out
    last = last_line(out)
    assert f"lightning-xpu {h.TAG}: FAILED at step " in last and "publish" in last, out
    assert f"disk full: no space left on the file system of {prefix} (mounted at {disk};" in last
    # What the run made is gone: the unpublished build and its install lease; the smoke result is kept by the log.
    assert not build.exists() and not list((prefix / ".envs").glob(f"{h.TAG}.*")), out
    assert not list((prefix / ".leases").glob("*")), list((prefix / ".leases").iterdir())
    (log,) = (prefix / "logs").glob(f"install-{h.TAG}-2*.log")
    assert last_line(log.read_text()) == last, "the log does not end with the last line"
    assert json.loads(log.with_suffix(".smoke.json").read_text())["ok"] is True
    # With room again, the next run builds and publishes (nothing was left to make it say "nothing changed").
    filler.unlink()
    again = h.run_job(install_job, *h.prebuilt_args(source_repo), prefix=prefix,
                      env=h.job_env(LXPU_TEST_PREBUILT=str(prebuilt), LIGHTNING_XPU_MIN_FREE_GIB="0"))  # fmt: skip
    assert again.returncode == 0 and "installed" in again.last_line, again.output
    assert "leftover" not in again.output


def test_disk_full_in_the_conda_layer_names_disk_space_not_the_channels(small_fs: Mount, tmp_path: Path) -> None:
    """py-rattler links the layer into a new prefix on a file system too small for Python: the one error line names
    disk space and the file system, not the conda channels, and nothing is left at the build's path."""
    built = subprocess.run([sys.executable, str(h.REPO / "ci" / "conda_channel.py")], capture_output=True, text=True,
                           check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr
    channel = built.stdout.strip()
    python_version = (Path(channel.removeprefix("file://")) / "python.txt").read_text().strip()
    root = tmp_path / "pre fix"
    envs = small_fs(root / ".envs", "140m")
    env = envs / f"{h.TAG}.20260101T000000-1"
    done = subprocess.run(
        [sys.executable, "-B", "-m", "lxpu_admin.install.conda_layer", "create", str(env), f"--python={python_version}",
         f"--channel={channel}"],
        env={**os.environ, "PYTHONPATH": str(ENGINE)}, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    # 140 MiB holds this run's own copy of py-rattler (83 MB unpacked) but not the packages too, so py-rattler's
    # install is what fills it here ("py-rattler install failed: disk full ..."); where a smaller disk fills
    # earlier it is "the conda layer could not be written: disk full ...": either way one line naming disk space.
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert ": disk full: no space left on the file system of " in done.stderr, done.stderr
    assert f"(mounted at {envs};" in done.stderr and "conda channels" not in done.stderr, done.stderr
    assert not env.exists() and not list(envs.glob(".tmp.*")), sorted(envs.iterdir())



@pytest.mark.parametrize("full", ["image directory", "check directory"])
def test_disk_full_in_pack_fails_the_image_never_a_degraded_one_as_ok(full: str, small_fs: Mount,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    """On main, the image with the base interpreter hit ENOSPC, the smaller one without it fit, and pack.env said
    status=ok: a degraded image, silently. Now the image fails with the file system named and nothing is left."""
    check = tmp_path / "check"
    if full == "image directory":
        disk = small_fs(tmp_path / "small disk", "4m")
        env = h.stand_in_venv(disk / "env")
        check.mkdir()
    else:
        env = h.stand_in_venv(tmp_path / "env")
        disk = small_fs(check, "8m")
    done = subprocess.run(
        [str(env / "bin" / "python"), "-B", "-m", "lxpu_admin.envside.pack", "make", str(env), h.SITE, h.TAG],
        env={**os.environ, "PYTHONPATH": str(ENGINE), "LIGHTNING_XPU_PACK": "1",
             "LIGHTNING_XPU_PACK_CHECK_DIR": str(check)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    errors = [line for line in out.splitlines() if line.startswith("ERROR: ")]
    assert len(errors) == 1 and errors[0].startswith("ERROR: no packed image: disk full: no space left"), out
    assert f"(mounted at {disk};" in errors[0] and "Traceback" not in out, out
    pack = env / "share" / "lightning-xpu" / "pack"
    fields = dict(line.split("=", 1) for line in (pack / "pack.env").read_text().splitlines())
    assert fields["status"] == "failed" and fields["note"] == errors[0].removeprefix("ERROR: no packed image: ")
    assert not list(pack.glob("env.tar.*")) and not list(pack.glob(".*")), list(pack.iterdir())
    assert not list(check.iterdir())


def test_a_noop_rerun_needs_no_free_space(install_job: Path, source_repo: Path, prebuilt: Path, small_fs: Mount,
                                          tmp_path: Path) -> None:  # fmt: skip
    """A 64 MiB file system holds an install over the prebuilt environment, but not the 1 GiB step 1 asks of a
    rebuild: the rerun with the same inputs builds nothing and succeeds; --force is stopped at step 1."""
    prefix = small_fs(tmp_path / "small disk", "64m") / "pre fix"
    env = h.job_env(LXPU_TEST_PREBUILT=str(prebuilt))
    first = h.run_job(install_job, *h.prebuilt_args(source_repo), prefix=prefix,
                      env={**env, "LIGHTNING_XPU_MIN_FREE_GIB": "0"})  # fmt: skip
    assert first.returncode == 0, first.output
    again = h.run_job(install_job, *h.prebuilt_args(source_repo), prefix=prefix, env=env)
    assert again.returncode == 0 and "already installed with these inputs: nothing changed" in again.last_line, (
        again.output)
    assert "disk:        not checked: the published build has these inputs" in again.output
    forced = h.run_job(install_job, *h.prebuilt_args(source_repo), "--force", prefix=prefix, env=env)
    assert forced.returncode == 1 and "FAILED at step [1/" in forced.last_line, forced.output
    assert f"GiB free under {prefix}, 1 GiB needed" in forced.last_line
