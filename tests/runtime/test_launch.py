"""Real 2-process DDP fits on CPU (gloo) with lightning_xpu imported, one per launcher: MPICH and Intel MPI
`mpiexec` (no mpi4py), `srun` inside an `sbatch` job, and `mpiexec` inside an `sbatch` job (the launch unpatched
Lightning takes for srun); Lightning's own launch, checked alike by `check_ddp_fit`, is test_real_ddp.py's. Every
rank runs scripts/common/toy_fit.py; the checks read the reports the ranks write, never only exit codes (a
misconfigured Slurm records failed jobs as COMPLETED).

Then one launch per launcher of a user's script with more ranks per node than devices (devices=1 and the default,
no strategy): refused in every rank under MPICH and Intel MPI `mpiexec`; under `srun` off XPU, plain Lightning's
behaviour (the rest of that rule is unit-tested in test_launch_refusals.py).

Last, `salloc` then `srun` (a job Slurm names `interactive`): one training of one world, and a plain `python` in
the same allocation still launched by Lightning.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lightning_xpu.environments.rendezvous import main_port
from tests.conftest import require_service
from tests.runtime.launches import without_launch_variables

REPO = Path(__file__).resolve().parents[2]
SAMPLES = 64
LAUNCH_SECONDS = 180  # `timeout` around every launch
JOB_SECONDS = 300  # a Slurm job, queueing included
# Which variable holds the rank the launcher gave, per launcher.
LAUNCHER_RANK = {"srun": "SLURM_PROCID", "mpich": "PMI_RANK", "impi": "PMI_RANK"}


def _toy_fit() -> Path:
    # LXPU_TOY_FIT: a copy of the toy fit while scripts/common/ is not in this checkout.
    path = Path(os.environ.get("LXPU_TOY_FIT") or REPO / "scripts" / "common" / "toy_fit.py")
    if not path.is_file():
        pytest.fail(f"{path} is missing: the toy fit comes from scripts/common/toy_fit.py (or set LXPU_TOY_FIT)")
    return path


def _fit_command(out: Path) -> list[str]:
    return [sys.executable, str(_toy_fit()), "--out", str(out), "--accelerator", "cpu", "--devices", "2",
            "--strategy", "ddp", "--samples", str(SAMPLES), "--import-lightning-xpu"]


def _rank_environment(**extra: str) -> dict[str, str]:
    """The environment of a launch: ours minus any launcher's variables, the repository importable."""
    env = without_launch_variables(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _mpiexec(launcher: str) -> str:
    if launcher == "mpich":
        path = os.environ.get("LXPU_MPICH_MPIEXEC") or shutil.which("mpiexec.mpich") or "/usr/bin/mpiexec.mpich"
        require_service("mpi", os.access(path, os.X_OK), f"no MPICH mpiexec at {path}: run bash ci/services/install.sh")
    else:
        path = os.environ.get("LXPU_IMPI_MPIEXEC", "")
        require_service("impi", bool(path) and os.access(path, os.X_OK),
                        f"LXPU_IMPI_MPIEXEC={path!r} is not Intel MPI's mpiexec (pip install impi-rt; see ci/)")
    return path


def _run(command: list[str], env: dict[str, str]) -> str:
    """Run a launch under `timeout`; return its combined output (the exit status is checked by the caller)."""
    process = subprocess.run(["timeout", "-k", "10", str(LAUNCH_SECONDS), *command], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return f"$ {shlex.join(command)}\n(exit {process.returncode})\n{process.stdout}"


def check_ddp_fit(out: Path, output: str, environment: str, launcher: str | None) -> list[dict[str, Any]]:
    """Two distinct ranks of one world of 2, disjoint data shards, gradients really all-reduced."""
    reports = [json.loads(path.read_text()) for path in sorted(out.glob("rank-*.json"))]
    assert len(reports) == 2, f"expected 2 rank reports in {out}, got {len(reports)}\n{output}"
    assert sorted(report["global_rank"] for report in reports) == [0, 1], output
    assert sorted(report["local_rank"] for report in reports) == [0, 1], output
    assert [report["world_size"] for report in reports] == [2, 2], output
    assert [report["node_rank"] for report in reports] == [0, 0], output
    assert {report["cluster_environment"] for report in reports} == {environment}, output
    assert all(report["lightning_xpu_imported"] for report in reports)
    if launcher is not None:  # each rank is the one the launcher started, not a child it spawned
        variable = LAUNCHER_RANK[launcher]
        assert all(report["launch_environment"][variable] == str(report["global_rank"]) for report in reports)
    shards = [set(report["data_indices"]) for report in reports]
    assert all(shards) and not shards[0] & shards[1], f"ranks read overlapping data: {shards}"
    assert shards[0] | shards[1] == set(range(SAMPLES))
    assert len({report["initial_weights_sha256"] for report in reports}) == 1
    final = {report["final_weights_sha256"] for report in reports}
    assert len(final) == 1, "final weights differ between ranks: gradients were not all-reduced"
    assert final != {reports[0]["initial_weights_sha256"]}, "the weights did not change"
    assert len({(report["master_addr"], report["master_port"]) for report in reports}) == 1
    return reports


@pytest.mark.parametrize("launcher", [pytest.param("mpich", marks=pytest.mark.mpi),
                                      pytest.param("impi", marks=pytest.mark.impi)])
def test_ddp_fit_launched_by_mpiexec_without_mpi4py(launcher: str, tmp_path: Path) -> None:
    mpiexec = _mpiexec(launcher)
    out = tmp_path / "out"
    port = _free_port()
    output = _run([mpiexec, "-n", "2", *_fit_command(out)], _rank_environment(MASTER_PORT=str(port)))
    reports = check_ddp_fit(out, output, "HydraEnvironment", launcher)
    assert (reports[0]["master_addr"], reports[0]["master_port"]) == ("127.0.0.1", port)


# ---- inside an sbatch job -------------------------------------------------------------------------------


def _require_slurm() -> None:
    ready = False
    if shutil.which("sbatch") and shutil.which("sinfo"):
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30).stdout
        ready = any(state in ("idle", "mixed", "allocated") for state in states.split())
    require_service("slurm", ready, "no usable Slurm node: bash ci/services/slurm.sh start")


def _job_state(job_id: str) -> str:
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30)
    for field in shown.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return "GONE"  # purged from the controller: long finished


def _run_job(script: Path, env: dict[str, str], log: Path) -> str:
    """Submit `script` for one node and 2 tasks, wait for it to end; return its job id."""
    submitted = subprocess.run(
        ["sbatch", "--parsable", "-p", "pvc9", "-N", "1", "--ntasks-per-node=2", "-t", "5", "-J", script.stem,
         "-o", str(log), str(script)],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert submitted.returncode == 0, f"sbatch failed: {submitted.stderr}"
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + JOB_SECONDS
    while _job_state(job_id) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=30)
            pytest.fail(f"job {job_id} did not end within {JOB_SECONDS} s\n{log.read_text() if log.exists() else ''}")
        time.sleep(1)
    return job_id


def srun_job(tmp_path: Path, command: list[str], env: dict[str, str]) -> str:
    """`srun command` as the whole of a one-node, 2-task `sbatch` job; the job's state and output once it ended."""
    _require_slurm()
    script = tmp_path / "lxpu-srun.sh"
    script.write_text("#!/usr/bin/env bash\nset -euo pipefail\n"
                      f"exec timeout -k 10 {LAUNCH_SECONDS} srun --kill-on-bad-exit=1 {shlex.join(command)}\n")
    log = tmp_path / "job.log"
    job_id = _run_job(script, env, log)
    return f"job {job_id} ({_job_state(job_id)}):\n{log.read_text() if log.exists() else '(no output)'}"


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("launcher", "environment"),
    [("srun", "SLURMEnvironment"),
     pytest.param("mpich", "HydraEnvironment", marks=pytest.mark.mpi),
     pytest.param("impi", "HydraEnvironment", marks=pytest.mark.impi)],
)
def test_ddp_fit_in_an_sbatch_job(launcher: str, environment: str, tmp_path: Path) -> None:
    """srun is Lightning's own case; mpiexec in sbatch is the trap. No MASTER_PORT: the derived one is used."""
    _require_slurm()
    start = ["srun", "--kill-on-bad-exit=1"] if launcher == "srun" else [_mpiexec(launcher), "-n", "2"]
    out = tmp_path / "out"
    script = tmp_path / f"lxpu-launch-{launcher}.sh"
    script.write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\n"
        f"exec timeout -k 10 {LAUNCH_SECONDS} {shlex.join([*start, *_fit_command(out)])}\n"
    )
    log = tmp_path / "job.log"
    job_id = _run_job(script, _rank_environment(), log)
    output = f"job {job_id} ({_job_state(job_id)}):\n{log.read_text() if log.exists() else '(no output)'}"
    reports = check_ddp_fit(out, output, environment, launcher)
    if launcher != "srun":
        derived = main_port({"SLURM_JOB_ID": job_id})
        assert (reports[0]["master_addr"], reports[0]["master_port"]) == ("127.0.0.1", derived), output


# ---- a launch that does not fit the script is refused (or, srun off XPU, left to Lightning) --------------

# A user's script without a strategy: `devices` from argv ("default": not passed), Lightning's default
# checkpointing into its own folder. Prints what it ran.
USER_FIT = """
import sys
import lightning_xpu  # what our environments' autoload hook does
import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

out, devices = sys.argv[1], sys.argv[2]

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

arguments = {} if devices == "default" else {"devices": int(devices)}
trainer = pl.Trainer(max_epochs=1, default_root_dir=out, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, **arguments)
trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
print("fitted", trainer.global_rank, trainer.world_size, type(trainer.strategy).__name__)
"""
DEVICE_ARGUMENTS = ("1", "default")
# Every rank runs the script once per devices argument, its output and exit status kept per rank.
PER_RANK = """rank=${PMI_RANK:-${SLURM_PROCID:-x}}
for devices in "${@:4}"; do
  "$1" "$2" "$3/$devices-rank$rank" "$devices" >"$3/$devices-rank$rank.log" 2>&1
  echo $? >"$3/$devices-rank$rank.rc"
done
"""


def _per_rank_command(tmp_path: Path) -> list[str]:
    fit = tmp_path / "train.py"
    fit.write_text(USER_FIT)
    out = tmp_path / "runs"
    out.mkdir()
    return ["bash", "-c", PER_RANK, "per-rank", sys.executable, str(fit), str(out), *DEVICE_ARGUMENTS]


def _rank_results(tmp_path: Path, devices: str, context: str) -> list[tuple[int, str]]:
    """(exit status, output) of rank 0 and rank 1 for one devices argument."""
    results = []
    for rank in (0, 1):
        rc = tmp_path / "runs" / f"{devices}-rank{rank}.rc"
        assert rc.is_file(), f"rank {rank} did not run the script with devices={devices}\n{context}"
        log = (tmp_path / "runs" / f"{devices}-rank{rank}.log").read_text()
        results.append((int(rc.read_text()), log))
    return results


@pytest.mark.parametrize("launcher", [pytest.param("mpich", marks=pytest.mark.mpi),
                                      pytest.param("impi", marks=pytest.mark.impi)])
def test_mpiexec_with_more_ranks_than_devices_is_refused_in_every_rank(launcher: str, tmp_path: Path) -> None:
    """`mpiexec -n 2 python train.py` with devices=1 or the default: every rank stops before training, local
    rank 0 prints the one documented line (docs/xpu-guide.md), nothing is trained or checkpointed."""
    output = _run([_mpiexec(launcher), "-n", "2", *_per_rank_command(tmp_path)], _rank_environment())
    line = ("LaunchError: MPICH/Intel MPI mpiexec started 2 ranks on this node, but the Trainer uses 1 device per"
            " node (devices=1): set `devices=2`, or start 1 rank per node (-ppn 1)")
    assert f"\n{line}\n" in (REPO / "docs" / "xpu-guide.md").read_text(), "the guide shows another line"
    for devices in DEVICE_ARGUMENTS:
        (rc0, log0), (rc1, log1) = _rank_results(tmp_path, devices, output)
        assert (rc0, rc1) == (1, 1), f"devices={devices}:\n{log0}\n{log1}"
        assert [text for text in log0.splitlines() if "Error" in text] == [line], log0
        assert "Error" not in log1 and "Traceback" not in log1, log1
        assert "fitted" not in log0 + log1
    assert not list((tmp_path / "runs").rglob("*.ckpt")), "a refused launch wrote a checkpoint"


@pytest.mark.slurm
def test_srun_with_more_tasks_than_devices_off_xpu_runs_as_plain_lightning(tmp_path: Path) -> None:
    """Off XPU srun keeps Lightning's behaviour (docs/xpu-guide.md): one independent single-device training per
    task, each world of 1. On XPU the same launch is refused (test_launch_refusals.py, simulated)."""
    output = srun_job(tmp_path, _per_rank_command(tmp_path), _rank_environment())
    for devices in DEVICE_ARGUMENTS:
        for rank, (rc, text) in enumerate(_rank_results(tmp_path, devices, output)):
            assert rc == 0, f"devices={devices}, rank {rank}:\n{text}"
            assert "fitted 0 1 SingleDeviceStrategy" in text, text  # its own world of 1, as rank 0
            assert list((tmp_path / "runs" / f"{devices}-rank{rank}").rglob("*.ckpt")), text


# ---- srun in a job named `interactive` (every salloc job): one training, not one per task ------------------------

# A README-style script with Lightning's default logging and checkpointing into OUT: each process that trains
# records its rank, world size, cluster environment and the job's name.
SALLOC_FIT = """
import os, sys
from pathlib import Path
import lightning_xpu  # what our environments' autoload hook does
import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

out, devices = Path(sys.argv[1]), int(sys.argv[2])

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

trainer = pl.Trainer(accelerator="cpu", devices=devices, strategy="ddp", max_epochs=1, default_root_dir=out,
                     logger=CSVLogger(out), enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4))
environment = type(trainer.strategy.cluster_environment).__name__
(out / f"fitted-{os.getpid()}").write_text(
    f"{trainer.global_rank} {trainer.world_size} {environment} {os.environ.get('SLURM_JOB_NAME')}")
"""


def _one_training(out: Path, environment: str, context: str) -> None:
    """One world of 2 ranks trained once: one CSV version, one checkpoint (no `-v1`), two fitted processes."""
    fitted = sorted(path.read_text() for path in out.glob("fitted-*"))
    assert fitted == [f"0 2 {environment} interactive", f"1 2 {environment} interactive"], f"{fitted}\n{context}"
    versions = sorted(path.name for path in (out / "lightning_logs").iterdir())
    assert versions == ["version_0"], f"{versions}\n{context}"
    checkpoints = sorted(path.name for path in out.rglob("*.ckpt"))
    assert len(checkpoints) == 1 and "-v1" not in checkpoints[0], f"{checkpoints}\n{context}"


@pytest.mark.slurm
def test_salloc_then_srun_trains_once_and_plain_python_still_uses_lightnings_launcher(tmp_path: Path) -> None:
    """Slurm names an salloc job `interactive`, which unpatched Lightning reads as "not srun": `srun python
    train.py --devices 2` in it ran LightningEnvironment in each task, two worlds of 2 (issue 29). srun's tasks
    are the ranks whatever the job is called; a plain `python train.py` in the same allocation (no step, as
    docs/dawn.md tells interactive users) still has Lightning start its processes."""
    _require_slurm()
    fit = tmp_path / "train.py"
    fit.write_text(SALLOC_FIT)
    python, srun_out, plain_out = sys.executable, tmp_path / "srun", tmp_path / "plain"
    steps = (f"srun --kill-on-bad-exit=1 {shlex.join([python, str(fit), str(srun_out), '2'])}; echo srun exit $?;"
             f" {shlex.join([python, str(fit), str(plain_out), '2'])}; echo plain exit $?")
    command = ["salloc", "-p", "pvc9", "--nodes=1", "--ntasks-per-node=2", "-t", "5",
               "timeout", "-k", "10", str(LAUNCH_SECONDS), "bash", "-c", steps]
    done = subprocess.run(command, env=_rank_environment(), cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=JOB_SECONDS + LAUNCH_SECONDS, start_new_session=True)
    output = f"$ {shlex.join(command)}\n(exit {done.returncode})\n{done.stdout[-6000:]}"
    assert done.returncode == 0 and "srun exit 0" in done.stdout and "plain exit 0" in done.stdout, output
    _one_training(srun_out, "SLURMEnvironment", output)
    _one_training(plain_out, "LightningEnvironment", output)
