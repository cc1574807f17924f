"""The job scripts' device check (lightning_xpu/commands/job.py, run by scripts/common/job.sh) against the banner
the Trainer really prints: on simulated XPU with accelerator="xpu" and "cpu", and on
this CPU machine without simulation.

If the banner's wording changes, the job scripts would fail every XPU job (or pass a CPU one): this test breaks
first."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightning_grid import TRAINERS, build

import lightning_xpu  # noqa: F401  (applies the patches)

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [api.values[1] for api in TRAINERS]


@pytest.fixture
def banner_file(tmp_path: Path) -> Iterator[Path]:
    """The Trainer's banner lines, as a job log would have them."""
    path = tmp_path / "job.log"
    handler = logging.FileHandler(path)
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "pytorch_lightning")]
    for logger in loggers:
        logger.addHandler(handler)
    yield path
    for logger in loggers:
        logger.removeHandler(handler)
    handler.close()


def check(log: Path, expect: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lightning_xpu.commands.job", "check", str(log)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LIGHTNING_XPU_EXPECT": expect, "LXPU_JOB_NAME": "job"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def verdicts(log: Path) -> dict[str, bool]:
    results = {expect: check(log, expect) for expect in ("xpu", "cpu")}
    for result in results.values():  # one clear line either way
        assert (result.stdout + result.stderr).count("\n") == 1, result.stdout + result.stderr
    return {expect: result.returncode == 0 for expect, result in results.items()}


@pytest.mark.parametrize("package", PACKAGES)
def test_a_fit_on_simulated_xpu_passes_only_the_xpu_check(simulated_xpu, banner_file, package) -> None:
    """Simulated XPU (2 devices), accelerator="xpu"."""
    simulated_xpu(devices=2)
    build("trainer", package, accelerator="xpu", devices=1)
    assert verdicts(banner_file) == {"xpu": True, "cpu": False}
    assert "expected cpu, but the Trainer used an XPU" in check(banner_file, "cpu").stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_a_cpu_fit_on_a_simulated_xpu_machine_fails_the_xpu_check(simulated_xpu, banner_file, package) -> None:
    """Simulated XPU; the Trainer runs on CPU: the job that silently trained the wrong thing."""
    simulated_xpu(devices=2)
    with pytest.warns(Warning, match="XPU available but not used"):
        build("trainer", package, accelerator="cpu")
    assert verdicts(banner_file) == {"xpu": False, "cpu": True}
    assert "the fit did not run on an XPU" in check(banner_file, "xpu").stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_a_cpu_fit_without_xpu_passes_only_the_cpu_check(banner_file, package) -> None:
    build("trainer", package, accelerator="cpu")
    assert verdicts(banner_file) == {"xpu": False, "cpu": True}


def test_a_log_without_banner_fails_both(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("Traceback (most recent call last):\n")
    assert verdicts(log) == {"xpu": False, "cpu": False}
    assert "no Trainer banner" in check(log, "cpu").stderr


def test_a_failed_launch_ends_the_job_with_its_status_before_any_device_check(tmp_path: Path) -> None:
    """The launcher's exit status is the job's (as under the shell's pipefail), a signal as 128 + N."""
    (tmp_path / "train.py").write_text("")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LXPU_JOB_NAME": "job"}
    for launcher, status in ((["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -TERM $$"], 143)):
        done = subprocess.run([sys.executable, "-m", "lightning_xpu.commands.job", "launch", "1", "1", "1", "0",
                               *launcher], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == status and "device check" not in done.stdout + done.stderr, done.stdout
        assert "job: launch: sh -c" in done.stdout and (tmp_path / f"lxpu-train-{os.getpid()}.log").exists()


def test_the_expected_device_comes_from_the_loaded_install_before_the_module_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`module load lightning-xpu` whose default is a -cpu build: the module name says nothing, the install's
    manifest says cpu; outside an install the name decides; LIGHTNING_XPU_EXPECT overrides both."""
    from lightning_xpu.commands.job import expected_device

    for name in ("LIGHTNING_XPU_EXPECT", "LIGHTNING_XPU_VARIANT", "LIGHTNING_XPU_SETUP", "LIGHTNING_XPU_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LIGHTNING_XPU_MODULE", "lightning-xpu/any-cpu")
    assert expected_device() == "cpu"
    monkeypatch.setenv("LIGHTNING_XPU_MODULE", "lightning-xpu")
    assert expected_device() == "xpu"
    (tmp_path / "manifest.json").write_text('{"recipe": {"variant": "cpu"}}')
    monkeypatch.setenv("LIGHTNING_XPU_ROOT", str(tmp_path))
    assert expected_device() == "cpu"
    monkeypatch.setenv("LIGHTNING_XPU_EXPECT", "xpu")
    assert expected_device() == "xpu"
