"""`fabric run --accelerator xpu` is accepted and launches one process per XPU device (simulated XPU).

The CLI is driven through click's test runner; torchrun's entry point is replaced by a recorder, so nothing is
launched. The unpatched CLI is shown in a subprocess with LIGHTNING_XPU_DISABLE=1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import torch.distributed.run
from click.testing import CliRunner
from lightning_grid import FABRIC_NAMESPACES

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import STANDALONE_FABRIC, Namespace
from lightning_xpu._patching import original_of


def run_command(main: Any) -> list[str]:
    """`run` since Lightning 2.3, `run model` in 2.2."""
    run = main.commands["run"]
    return ["run", "model"] if "model" in getattr(run, "commands", {}) else ["run"]


def invoke(namespace: Namespace, monkeypatch: pytest.MonkeyPatch, tmp_path, *options: str) -> tuple[Any, list[str]]:
    """Run the Fabric CLI in-process; returns click's result and the arguments torchrun would have received."""
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    launched: list[str] = []
    monkeypatch.setattr(torch.distributed.run, "main", launched.extend)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the CLI exports LT_* variables; keep them in here
    main = namespace.fabric_module("cli")._main
    result = CliRunner().invoke(main, [*run_command(main), *options, str(script)])
    return result, launched


def test_unpatched_cli_rejects_xpu(tmp_path) -> None:
    """Lightning alone (subprocess, LIGHTNING_XPU_DISABLE=1): the `--accelerator` choices have no "xpu".

    Shown in `lightning_fabric` only: `lightning.fabric.cli` is the same code, and its subprocess would import all of
    `lightning` (slow) to show the same thing.
    """
    namespace = STANDALONE_FABRIC
    code = (
        "import sys; from click.testing import CliRunner\n"
        f"from {namespace.fabric}.cli import _main\n"
        "run = ['run', 'model'] if 'model' in getattr(_main.commands['run'], 'commands', {}) else ['run']\n"
        "result = CliRunner().invoke(_main, [*run, '--accelerator', 'xpu', sys.argv[1]])\n"
        "print(result.exit_code, result.output)\n"
    )
    script = tmp_path / "train.py"
    script.write_text("")
    env = {**os.environ, "LIGHTNING_XPU_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-c", code, str(script)], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("2 ")
    assert "Invalid value for '--accelerator'" in out.stdout


@FABRIC_NAMESPACES
def test_cli_launches_one_process_per_xpu(simulated_xpu, namespace: Namespace, monkeypatch, tmp_path) -> None:
    """Simulated XPU (4 devices): `--accelerator xpu --devices 0,2` starts 2 processes told to use XPU."""
    simulated_xpu(devices=4)
    result, launched = invoke(namespace, monkeypatch, tmp_path, "--accelerator", "xpu", "--devices", "0,2")
    assert result.exit_code == 0, result.output
    assert "--nproc_per_node=2" in launched
    assert os.environ["LT_ACCELERATOR"] == "xpu"


@FABRIC_NAMESPACES
@pytest.mark.parametrize(("accelerator", "devices", "expected"), [("xpu", "-1", 4), ("xpu", "auto", 1), ("xpu", "3", 3),
                                                                   ("gpu", "2", 2), ("gpu", "-1", 4)])
def test_process_count_for_xpu(simulated_xpu, namespace: Namespace, accelerator, devices, expected) -> None:
    """Simulated XPU (4 devices, no CUDA): XPU counts follow Lightning's GPU convention; "gpu" means the XPUs."""
    simulated_xpu(devices=4)
    assert namespace.fabric_module("cli")._get_num_processes(accelerator, devices) == expected


@FABRIC_NAMESPACES
@pytest.mark.parametrize(("accelerator", "devices"), [("xpu", "-1"), ("xpu", "0,2"), ("gpu", "2")])
def test_unpatched_process_count_fails_for_xpu(simulated_xpu, namespace: Namespace, accelerator, devices) -> None:
    """Simulated XPU: Lightning alone parses XPU devices as CPU counts and finds no GPU for "gpu"."""
    simulated_xpu(devices=4)
    misconfiguration = namespace.fabric_module("utilities.exceptions").MisconfigurationException
    with pytest.raises((TypeError, misconfiguration)):
        original_of(namespace.fabric_module("cli"), "_get_num_processes")(accelerator, devices)


@FABRIC_NAMESPACES
def test_cli_rejects_missing_xpu_devices(simulated_xpu, namespace: Namespace) -> None:
    simulated_xpu(devices=2)
    with pytest.raises(ValueError, match="only 2 XPU device"):
        namespace.fabric_module("cli")._get_num_processes("xpu", "0,3")


@FABRIC_NAMESPACES
def test_cpu_process_counts_are_unchanged(namespace: Namespace) -> None:
    cli = namespace.fabric_module("cli")
    unpatched = original_of(cli, "_get_num_processes")
    for accelerator, devices in [("cpu", "1"), ("cpu", "3"), (None, "2")]:
        assert cli._get_num_processes(accelerator, devices) == unpatched(accelerator, devices)
    for accelerator, devices in [("gpu", "1"), ("cuda", "1")]:  # no GPU here: both raise the same error
        with pytest.raises(Exception) as patched_error:
            cli._get_num_processes(accelerator, devices)
        with pytest.raises(type(patched_error.value)):
            unpatched(accelerator, devices)


@FABRIC_NAMESPACES
def test_cpu_launch_is_unchanged(namespace: Namespace, monkeypatch, tmp_path) -> None:
    result, launched = invoke(namespace, monkeypatch, tmp_path, "--accelerator", "cpu", "--devices", "2")
    assert result.exit_code == 0, result.output
    assert "--nproc_per_node=2" in launched
    assert os.environ["LT_ACCELERATOR"] == "cpu"
