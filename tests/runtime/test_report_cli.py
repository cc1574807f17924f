"""`lightning-xpu doctor`, `report` and `validate`'s argument handling (in-process; the job runs in
test_report_job.py). Here: the CPU build of PyTorch, no Intel GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lightning_grid import newest_lightning_only

from lightning_xpu.commands.cli import main
from lightning_xpu.validation import FAIL, PASS, SKIP
from lightning_xpu.validation.framework import checks_of
from lightning_xpu.validation.schema import check_report

REPO = Path(__file__).resolve().parents[2]


def test_doctor_prints_the_full_picture(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setenv("ZE_FLAT_DEVICE_HIERARCHY", "FLAT")
    assert main(["doctor", "--json", str(tmp_path / "d.json")]) == 1  # a check failed: XPU is not usable here
    shown = capsys.readouterr().out
    data = json.loads((tmp_path / "d.json").read_text())
    check_report(data)
    checks = {check["name"]: check for check in data["checks"]}
    assert checks["xpu_usable"]["status"] == FAIL
    assert checks["xpu_usable"]["reason"].startswith("XPU cannot be used: PyTorch ")
    assert "doctor" not in checks["xpu_usable"]["reason"]  # no "run the doctor" inside the doctor
    assert checks["xpu_collectives"]["status"] == SKIP and checks["launcher"]["status"] == PASS
    # Hints match the cause: a torch without XPU gets no advice about XPU collectives or PyTorch versions.
    assert "no XPU support" in checks["xpu_collectives"]["reason"] and "PyTorch >=" not in shown
    assert data["environment"]["ZE_FLAT_DEVICE_HIERARCHY"] == "FLAT"
    for text in ("# lightning-xpu doctor report", "| torch_build | cpu |", "| variant |", "| level_zero_loader |",
                 "| `xpu_collectives` | skipped |", "ZE_FLAT_DEVICE_HIERARCHY=FLAT"):
        assert text in shown


def test_doctor_on_a_simulated_xpu_lists_the_devices(simulated_xpu, capsys, monkeypatch) -> None:
    simulated_xpu(devices=2, xccl=True)
    assert main(["doctor"]) == 0
    shown = capsys.readouterr().out
    assert "| `xpu_usable` | passed | 2 XPU device(s): Simulated Intel(R) Data Center GPU Max 1550 |" in shown
    assert "| `xpu_collectives` | passed | xccl: built into PyTorch" in shown
    assert "## Devices" in shown and "| 1 | Simulated Intel(R) Data Center GPU Max 1550 |" in shown


def test_validate_refuses_an_unknown_check(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--only", "bogus,runtime"]) == 2
    assert capsys.readouterr().err.startswith("lightning-xpu validate: unknown check(s) bogus; known: runtime,")
    assert not list(tmp_path.iterdir())


def test_validate_lists_the_checks(capsys) -> None:
    assert main(["validate", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [spec.name for spec in checks_of("site")]


def test_smoke_level_writes_its_report_outside_the_working_directory(tmp_path: Path, capsys, monkeypatch) -> None:
    """`lightning-xpu validate --level smoke` without --json writes into the user's state directory (issue 20: never
    the working directory), JSON only, in the report schema with its level."""
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("LIGHTNING_XPU_VARIANT", "cpu")
    assert main(["validate", "--level", "smoke", "--only", "devices"]) == 0
    assert not list(work.iterdir())
    (written,) = (state / "lightning-xpu").iterdir()
    assert written.name.startswith("smoke-") and written.suffix == ".json"
    data = json.loads(written.read_text())
    check_report(data)
    assert data["level"] == "smoke" and [c["name"] for c in data["checks"]] == ["devices"]
    assert data["checks"][0]["detail"]["summary"] == "no XPU: ran on CPU"
    assert f"report: {written}\n" in capsys.readouterr().out


def test_smoke_level_requires_xpu_for_the_xpu_variant(tmp_path: Path, capsys, monkeypatch) -> None:
    """The variant decides, as the install engine's --require-xpu does: the xpu variant without an XPU fails."""
    monkeypatch.setenv("LIGHTNING_XPU_VARIANT", "xpu")
    assert main(["validate", "--level", "smoke", "--only", "devices", "--json", str(tmp_path / "s.json")]) == 1
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["checks"][0]["reason"] == "no XPU device visible to torch, and --require-xpu was given"
    assert data["notes"] == ["the xpu variant (LIGHTNING_XPU_VARIANT): the fits must run on an XPU device"]


def test_smoke_level_lists_its_own_checks(capsys) -> None:
    assert main(["validate", "--level", "smoke", "--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == [spec.name for spec in checks_of("smoke")] and "fit_ddp" in names and "runtime" not in names
    assert not set(names) & {spec.name for spec in checks_of("site")}  # one framework, two distinct levels


@newest_lightning_only
def test_the_patch_report_and_its_public_function(tmp_path: Path) -> None:
    """Our command line and our function print the same report. Once is enough: the two interpreters test our entry
    points, and what the patches do on each Lightning is tested in-process on every Lightning."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = subprocess.run([sys.executable, "-m", "lightning_xpu", "report"], env=env, capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
    code = "import lightning_xpu; lightning_xpu.report()"
    function = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)
    assert command.returncode == 0 and function.returncode == 0, command.stderr + function.stderr
    assert command.stdout.startswith("lightning_xpu 0.") and function.stdout == command.stdout


def test_the_console_script_is_declared() -> None:
    project = (REPO / "pyproject.toml").read_text()
    assert '\n[project.scripts]\nlightning-xpu = "lightning_xpu.commands.cli:main"\n' in project
    assert '\n"lightning_xpu.validation" = ["schema.json"]\n' in project
