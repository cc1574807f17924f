"""Issue 31: the Jupyter kernel of an install (`lightning-xpu kernel install`, lightning_xpu/commands/kernel.py),
through the real kernel protocol (jupyter_client starts the kernel from its spec, nbclient runs notebooks in it).

The install is the install tests' prebuilt one (install_harness.laid_out_prefix: torch, Lightning and ipykernel from
the base venv, the repository's setup library and modulefile body). The Jupyter side runs as a Jupyter server does,
without the module loaded: only the kernel spec leads to the install. The simulated XPU is the tests' own
(tests/xpu_simulation.py through the rank bootstrap, bootstrap_env), given to the kernel by its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from tests.install import install_harness as h
from tests.install.test_user_env import _wheel
from tests.xpu_profiles import NEWEST_PROFILE, Profile
from tests.xpu_simulation import bootstrap_env

pytestmark = [pytest.mark.install, pytest.mark.lmod]

ADMIN = h.REPO / "bin" / "lightning-xpu-admin"
CELL_TIMEOUT_S = 300

SETUP = """\
import json, os, sys
import torch
from torch.utils.data import DataLoader, TensorDataset
import lightning.pytorch as pl


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


# The simulated XPU has no memory of its own: tensors placed on "xpu" live on the CPU, and DDP then gets no device
# ids, as for CPU modules (tests/runtime/masked_rank.py).
if os.environ.get("LXPU_SIM_PROFILE"):
    from tests.runtime.masked_rank import XPUOnCPU as placement
    simulated = True
else:
    simulated = False
    from contextlib import nullcontext as placement


def fit(devices):
    trainer = pl.Trainer(accelerator="auto", devices=devices, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    if simulated and hasattr(trainer.strategy, "determine_ddp_device_ids"):
        trainer.strategy.determine_ddp_device_ids = lambda: None
    with placement():
        trainer.fit(Tiny(), data)
    print("FIT " + json.dumps({"devices": str(devices), "device": str(trainer.strategy.root_device),
                               "strategy": type(trainer.strategy).__name__, "steps": trainer.global_step}))
"""


def notebook(*cells: str) -> Any:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])


def text_of(cell: Any) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


def error_of(cell: Any) -> str:
    """The error a cell raised, as the notebook shows it (`Name: message`), '' when it ran through."""
    errors = [output for output in cell.outputs if output.output_type == "error"]
    return f"{errors[0].ename}: {errors[0].evalue}" if errors else ""


def fitted(cell: Any) -> dict[str, Any]:
    lines = [line for line in text_of(cell).splitlines() if line.startswith("FIT ")]
    assert len(lines) == 1, (text_of(cell), error_of(cell))
    return dict(json.loads(lines[0][4:]))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("kernel")
    prefix, home = work / "kernel prefix", work / "home"
    prefix.mkdir()
    home.mkdir()
    h.laid_out_prefix(prefix)
    wheels = work / "wheels"
    wheels.mkdir()
    _wheel(wheels, "lxpu-notebook-demo", "1.0")
    return {"prefix": prefix, "home": home, "wheels": wheels, "work": work}


def user_env(world: dict[str, Path], **extra: str) -> dict[str, str]:
    """A user's environment with nothing of the install in it (what a Jupyter server starts kernels with)."""
    home = world["home"]
    return {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "JUPYTER_DATA_DIR": str(home / "jupyter"),
            "PIP_CONFIG_FILE": os.devnull, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", **extra}


def shell(world: dict[str, Path], script: str, entry: str = "setup script", **extra: str) -> str:
    """SCRIPT in bash after loading the install by ENTRY; its output (it must succeed)."""
    load = h.load_line(entry, world["prefix"], h.TAG)
    done = subprocess.run(["bash", "-c", f"set -euo pipefail\n{load}\n{script}"], env=user_env(world, **extra),
                          cwd=world["home"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def user_kernel(world: dict[str, Path]) -> str:
    """The user's kernel spec of the install, written by the user's one command, and the user's layer with a
    package of theirs."""
    find = f"--no-index --find-links '{world['wheels']}'"
    out = shell(world, f"""
python -m lightning_xpu user-env
source '{world["prefix"]}/lightning-setup-{h.TAG}.sh'
pip install {find} lxpu-notebook-demo >/dev/null
python -m lightning_xpu kernel install
""")
    specs = list((world["home"] / "jupyter" / "kernels").glob("lightning-xpu-*/kernel.json"))
    assert len(specs) == 1, out
    return specs[0].parent.name


def spec_manager(env: dict[str, str]) -> KernelSpecManager:
    """Jupyter's kernel spec lookup with ENV's JUPYTER_DATA_DIR and JUPYTER_PATH (as a server started with it)."""
    manager = KernelSpecManager()
    manager.kernel_dirs = [str(Path(env["JUPYTER_DATA_DIR"]) / "kernels"),
                           *(str(Path(path) / "kernels") for path in env.get("JUPYTER_PATH", "").split(":") if path)]
    return manager


def status(world: dict[str, Path]) -> str:
    done = subprocess.run([str(ADMIN), "status", "--prefix", str(world["prefix"])], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def run_notebook(world: dict[str, Path], name: str, cells: list[str], env: dict[str, str],
                 while_running: Any = None) -> tuple[list[Any], Any]:
    """CELLS in a kernel started from the spec NAME with ENV; each cell's result, and what WHILE_RUNNING returned
    (called with the kernel's pid while the kernel still runs)."""
    nb = notebook(*cells)
    client = NotebookClient(nb, kernel_name=name, timeout=CELL_TIMEOUT_S, allow_errors=True,
                            kernel_manager_class="jupyter_client.manager.KernelManager",
                            resources={"metadata": {"path": str(world["home"])}})
    client.km = client.create_kernel_manager()
    client.km.kernel_spec_manager = spec_manager(env)
    seen = None
    with client.setup_kernel(env=env):
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        if while_running is not None:
            seen = while_running(client.km.provisioner.process.pid)
    return nb.cells, seen


def test_the_kernel_spec_names_the_install_and_starts_through_its_setup_script(world, user_kernel) -> None:
    spec = json.loads((world["home"] / "jupyter" / "kernels" / user_kernel / "kernel.json").read_text())
    assert spec["display_name"] == f"Lightning XPU {h.VERSION} ({h.TAG.partition('-')[2]})"
    assert str(world["prefix"] / f"lightning-setup-{h.TAG}.sh") in spec["argv"]
    listed = shell(world, "python -m lightning_xpu kernel list")
    assert user_kernel in listed and str(world["prefix"]) in listed


def test_a_notebook_fits_in_the_kernel_holding_the_lease_with_the_users_layer(world, user_kernel) -> None:
    """The kernel runs the pinned build with the user's layer, fits with accelerator="auto" (CPU here), and its
    lease is live in `lightning-xpu-admin status` while it runs and gone after shutdown."""
    env = user_env(world)
    build = os.readlink(world["prefix"] / h.TAG).removeprefix(".envs/")
    cells = [
        "import json, os; print(json.dumps([os.environ['LIGHTNING_XPU_ROOT'], os.environ['VIRTUAL_ENV']]))",
        'import lxpu_notebook_demo; print("DEMO", lxpu_notebook_demo.VERSION)',
        SETUP,
        "fit(1)",
        'fit("auto")',
    ]
    cells_run, during = run_notebook(world, user_kernel, cells, env, lambda pid: (pid, status(world)))
    where, demo, _setup, one, auto = cells_run
    layer = world["home"] / ".local" / "lightning-xpu" / h.TAG
    assert json.loads(text_of(where)) == [str(world["prefix"] / ".envs" / build), str(layer)], error_of(where)
    assert text_of(demo).strip() == "DEMO 1.0", error_of(demo)
    assert not error_of(_setup)
    for cell in (one, auto):
        assert fitted(cell)["device"] == "cpu" and fitted(cell)["steps"] == 4, error_of(cell)
    pid, running = during
    kernel_lines = [line for line in running.splitlines() if line.lstrip().startswith("- Jupyter kernel,")]
    assert len(kernel_lines) == 1 and f"pid {pid} " in kernel_lines[0] and "ipykernel_launcher" in kernel_lines[0], \
        running
    assert build in running and "shut that Jupyter kernel down" in running, running
    after = status(world)
    assert "Jupyter kernel" not in after, after


@pytest.mark.parametrize(("profile", "devices"), [(Profile("2.13"), 2), (Profile(NEWEST_PROFILE, pyzes=True), 2),
                                                  (Profile("2.13"), 1)],
                         ids=["2.13-two-tiles", f"{NEWEST_PROFILE}-pyzes-two-tiles", "2.13-one-tile"])
def test_device_choice_in_a_kernel_on_a_simulated_xpu(world, user_kernel, profile, devices) -> None:
    """Trainer(accelerator="auto") with devices=1, "auto" and 2 in a real kernel on a simulated XPU: it trains on
    one XPU, or (several devices, where fork is unsafe or there is one tile) stops in one line naming the fix."""
    env = bootstrap_env(profile, user_env(world), devices=devices)
    # Several devices first: a kernel that used an XPU can no longer fork (its own test: tests/runtime).
    cells_run, _ = run_notebook(world, user_kernel, [SETUP, "fit(2)", "fit(1)", 'fit("auto")'], env)
    _setup, two, one, auto = cells_run
    assert not error_of(_setup), error_of(_setup)
    for cell in (one, auto):
        assert fitted(cell)["device"] == "xpu:0" and fitted(cell)["strategy"] == "SingleDeviceStrategy", \
            error_of(cell)
    said = error_of(two)
    if devices == 1:
        fix = 'only 1 XPU device(s): ask for those (devices=1 or devices="auto").'
        assert "\n" not in said and said.endswith(fix), said
    elif profile.count_poisons_fork:
        assert "\n" not in said and "strategy='ddp_spawn'" in said, said
    else:
        assert fitted(two)["device"] == "xpu:0" and fitted(two)["strategy"] == "DDPStrategy", said


def test_the_prefix_wide_kernel_is_listed_after_module_load_and_gone_after_unload(world) -> None:
    shell(world, "python -m lightning_xpu kernel install --prefix-wide")
    spec = next((world["prefix"] / "share" / "jupyter" / "kernels").glob("lightning-xpu-*/kernel.json"))
    # The Jupyter of the server (the test venv's, outside the install), in a shell that loads the module.
    jupyter = Path(os.environ.get("LXPU_PYTHON", sys.executable)).parent / "jupyter"
    out = shell(world, f"""
echo LOADED; '{jupyter}' kernelspec list
module unload lightning-xpu
echo UNLOADED; '{jupyter}' kernelspec list
""", entry="module", JUPYTER_DATA_DIR=str(world["work"] / "empty-jupyter"))
    loaded, unloaded = out.split("UNLOADED")
    assert spec.parent.name in loaded and str(spec.parent) in loaded, out
    assert spec.parent.name not in unloaded, out


def test_refusals_are_one_line_naming_the_fix(world) -> None:
    outside = subprocess.run([sys.executable, "-m", "lightning_xpu", "kernel", "install"],
                             env={**user_env(world), "PYTHONPATH": str(h.REPO)}, capture_output=True, text=True,
                             timeout=120, check=False)
    assert outside.returncode == 2 and outside.stderr.count("\n") == 1, outside.stderr
    assert "load a lightning-xpu module (or source its setup script) first" in outside.stderr
    out = shell(world, "python -m lightning_xpu kernel uninstall || echo exit $?",
                JUPYTER_DATA_DIR=str(world["work"] / "no-kernels"))
    said = [line for line in out.splitlines() if "kernel uninstall: error:" in line]
    assert len(said) == 1 and "`lightning-xpu kernel list` shows them" in said[0] and "exit 2" in out, out
