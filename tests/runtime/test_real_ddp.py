"""Real two-process runs on CPU with lightning_xpu imported (nothing simulated, gloo underneath).

1. A DDP fit launched by Lightning itself (`strategy="ddp"`, `devices=2`) through scripts/common/toy_fit.py: the
   ranks are distinct, the world has 2 members, each rank reads its own shard, and gradients are really all-reduced
   (identical final weights on both ranks, different from the initial ones): test_launch.py's `check_ddp_fit`, the
   checks of every launcher there.
2. The object path for oneCCL's "ccl" backend (on XPU reached through the strategy's setup): two processes in a
   world whose backend is named "ccl" (a stand-in that is gloo underneath, tests/conftest.py) broadcast objects
   through Lightning's DDPStrategy, which must send them over the gloo side group, not the ccl world.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lightning_grid import TRAINER_PACKAGES, newest_lightning_only

from lightning_xpu.validation.framework import free_port, local_env
from tests.conftest import require_service
from tests.runtime.test_launch import SAMPLES, check_ddp_fit

REPO = Path(__file__).resolve().parents[2]
TOY_FIT = REPO / "scripts" / "common" / "toy_fit.py"
# The top-level package of each namespace, as toy_fit.py --namespace takes it: the first on every Lightning, the
# others (the same code over another package) on the newest only, since each real launch costs minutes in CI.
NAMESPACES = pytest.mark.parametrize("namespace", [
    pytest.param(package.split(".")[0], marks=[] if index == 0 else [newest_lightning_only])
    for index, package in enumerate(TRAINER_PACKAGES)
])


def clean_environment() -> dict[str, str]:
    """Without the variables of outer launchers that would make Lightning think another launcher started these
    processes (the validation checks' local launches drop the same), and with lightning_xpu enabled."""
    environment = local_env(OMP_NUM_THREADS="1")
    environment.pop("LIGHTNING_XPU_DISABLE", None)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return environment


def run_toy_fit(out: Path, namespace: str) -> str:
    """Lightning's own launch of the toy fit in NAMESPACE; its combined output (the caller checks the reports)."""
    require_service("toy_fit", TOY_FIT.is_file(), f"{TOY_FIT.relative_to(REPO)} is missing from this checkout")
    command = [sys.executable, str(TOY_FIT), "--out", str(out), "--accelerator", "cpu", "--devices", "2",
               "--strategy", "ddp", "--namespace", namespace, "--import-lightning-xpu", "--samples", str(SAMPLES),
               "--batch-size", "8", "--epochs", "1", "--seed", "0"]
    done = subprocess.run(command, env=clean_environment(), cwd=out.parent, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"toy_fit failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return f"$ {' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


# The baseline of the launchers of test_launch.py (mpiexec, srun, sbatch), which check every launch alike.
@NAMESPACES
def test_lightning_launched_ddp_fit_all_reduces_gradients(tmp_path: Path, namespace: str) -> None:
    out = tmp_path / "out"
    reports = check_ddp_fit(out, run_toy_fit(out, namespace), "LightningEnvironment", None)

    assert {(report["strategy"], report["device"], report["process_group_backend"]) for report in reports} == {
        ("DDPStrategy", "cpu", "gloo")
    }


OBJECT_WORKER = """
import json, sys
rank, port, out, namespace = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
from tests.conftest import register_stand_in_ccl_backend
register_stand_in_ccl_backend()
import importlib
import lightning_xpu
import torch
import torch.distributed as dist
from lightning_xpu.strategies.collectives import open_object_group

package = "lightning.pytorch" if namespace == "lightning" else namespace
DDPStrategy = importlib.import_module(package + ".strategies").DDPStrategy
dist.init_process_group("ccl", init_method="tcp://127.0.0.1:" + port, rank=rank, world_size=2)
strategy = DDPStrategy(parallel_devices=[torch.device("cpu")] * 2)
open_object_group(strategy)  # what the XPU setup does right after init on ccl
used = []
real_broadcast_object_list = dist.broadcast_object_list
def recording(objects, src=0, group=None, device=None):
    used.append(dist.get_backend(group))
    return real_broadcast_object_list(objects, src, group=group, device=device)
dist.broadcast_object_list = recording
from_0 = strategy.broadcast({"best_model_path": "checkpoints/rank-%d.ckpt" % rank}, src=0)
from_1 = strategy.broadcast("logs/version_%d" % rank, src=1)
with open(out, "w") as handle:
    json.dump({"world_backend": dist.get_backend(), "from_0": from_0, "from_1": from_1, "used": used}, handle)
# Leave together, then tear every group down: a gloo peer exiting mid-teardown can abort the other process.
dist.barrier()
dist.destroy_process_group()
"""


# Once (first namespace, newest Lightning): with the object group open, the patched broadcast calls torch, not
# Lightning; which group each Lightning's strategy broadcasts on is tested in-process on every Lightning
# (test_ddp.py). The real processes show torch's gloo side group carries the objects.
@newest_lightning_only
@NAMESPACES
def test_objects_cross_real_processes_over_the_gloo_group_on_ccl(tmp_path: Path, namespace: str) -> None:
    script = tmp_path / "object_worker.py"
    script.write_text(OBJECT_WORKER)
    port = str(free_port())
    workers = [  # clean_environment() puts the repository on PYTHONPATH, for tests.conftest
        subprocess.Popen([sys.executable, str(script), str(rank), port, str(tmp_path / f"rank-{rank}.json"),
                          namespace], env=clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
        for rank in (0, 1)
    ]
    outputs = []
    try:
        outputs = [worker.communicate(timeout=120)[0] for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    assert [worker.returncode for worker in workers] == [0, 0], "\n".join(output[-3000:] for output in outputs)

    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        assert seen["world_backend"] == "ccl"
        assert seen["from_0"] == {"best_model_path": "checkpoints/rank-0.ckpt"}
        assert seen["from_1"] == "logs/version_1"
        assert seen["used"] == ["gloo", "gloo"]
