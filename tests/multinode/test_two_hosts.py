"""DDP across two real hosts (network namespaces, ci/multinode/): srun, MPICH's mpiexec and Intel MPI's mpiexec.

Every run is `sbatch -N 2 --ntasks-per-node=2` with the toy fit at `num_nodes=2, devices=2` (4 CPU ranks,
gloo); the checks (multinode_checks.py) read what each rank reported. The last test forces every rank's node
rank to 0 in the launched ranks (a sitecustomize on their PYTHONPATH, test-side only) and shows the checks catch it.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
from multinode_checks import rank_problems, read_reports
from multinode_cluster import REPO, Cluster, RankEnvironment, submit_and_wait

from tests.conftest import require_service

pytestmark = pytest.mark.multinode

RANKS_PER_HOST = 2
SAMPLES = 64
# A healthy run takes 15-35 s on an idle 2-core machine (several times that under load). A launch-detection
# bug typically hangs (colliding ranks wait for each other): the launcher is stopped before the job's time
# limit so that a failing stage ends soon too.
LAUNCH_TIMEOUT_S = 150

# Test-side only: makes every ClusterEnvironment (Lightning's and any defined later, lightning_xpu's included)
# report node rank 0, the mistake a launcher-detection bug makes.
NODE_RANK_ZERO_SITECUSTOMIZE = '''\
import importlib
import importlib.util


def _node_rank_zero(self):
    return 0


def _force(cls):
    cls.node_rank = _node_rank_zero
    for sub in cls.__subclasses__():
        _force(sub)


def _force_later(cls, **kwargs):
    super(_BASE, cls).__init_subclass__(**kwargs)
    cls.node_rank = _node_rank_zero


for _module in ("lightning.fabric.plugins.environments", "lightning_fabric.plugins.environments"):
    if importlib.util.find_spec(_module.split(".")[0]) is not None:
        _BASE = importlib.import_module(_module).ClusterEnvironment
        _force(_BASE)
        _BASE.__init_subclass__ = classmethod(_force_later)
'''


def ddp_job(
    directory: Path, environment: RankEnvironment, launcher: list[str], extra_setup: tuple[str, ...] = ()
) -> Path:
    """A batch script running the toy fit on 2 hosts x 2 ranks under LAUNCHER; reports go to DIRECTORY/ranks."""
    launch = shlex.join(["timeout", "--kill-after=10", str(LAUNCH_TIMEOUT_S), *launcher])
    fit_args = shlex.join([
        "--out", str(directory / "ranks"), "--accelerator", "cpu", "--strategy", "ddp",
        "--devices", str(RANKS_PER_HOST), "--num-nodes", "2", "--samples", str(SAMPLES), *environment.toy_fit_args,
    ])
    script = directory / "job.sh"
    script.write_text("\n".join([
        "#!/usr/bin/env bash",
        "set -euo pipefail",
        "export OMP_NUM_THREADS=1",
        *environment.setup_lines,
        *extra_setup,
        f'printf "on %s: %s %s %s\\n" "$SLURM_JOB_NODELIST" {shlex.quote(launch)} "$PYTHON" "$TOY_FIT"',
        f'{launch} "$PYTHON" "$TOY_FIT" {fit_args}',
        "",
    ]))
    return script


def run_ddp(cluster: Cluster, directory: Path, environment: RankEnvironment, launcher: list[str],
            extra_setup: tuple[str, ...] = ()) -> list[str]:
    """Run the toy fit and return the problems the checks find (the job itself must complete)."""
    script = ddp_job(directory, environment, launcher, extra_setup)
    job = submit_and_wait(cluster, script, "--nodes=2", f"--ntasks-per-node={RANKS_PER_HOST}")
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), (
        f"{job.describe()}\nranks ran in {environment.description}\n{cluster.log_tails()}"
    )
    reports, problems = read_reports(directory / "ranks")
    problems += rank_problems(reports, cluster.nodes, RANKS_PER_HOST, SAMPLES)
    if problems:
        print(job.describe())  # shown by pytest with the failure
    return problems


def test_hello_job_runs_on_both_hosts_with_their_names_and_addresses(cluster: Cluster, tmp_path: Path) -> None:
    script = tmp_path / "hello.sh"
    script.write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\n"
        "srun --kill-on-bad-exit=1 bash -c "
        "'echo \"task $SLURM_PROCID $(hostname) $(getent hosts \"$(hostname)\" | cut -d\" \" -f1)\"'\n"
    )
    job = submit_and_wait(cluster, script, "--nodes=2", "--ntasks-per-node=1")
    assert job.state == "COMPLETED", job.describe()
    tasks = sorted(line for line in job.output.splitlines() if line.startswith("task "))
    assert tasks == [f"task {i} {host.name} {host.address}" for i, host in enumerate(cluster.nodes)], job.describe()


def test_ddp_launched_by_srun(cluster: Cluster, rank_environment: RankEnvironment, tmp_path: Path) -> None:
    assert run_ddp(cluster, tmp_path, rank_environment, ["srun", "--kill-on-bad-exit=1"]) == []


@pytest.mark.mpi
def test_ddp_launched_by_mpich_mpiexec(cluster: Cluster, rank_environment: RankEnvironment, tmp_path: Path) -> None:
    mpiexec = os.environ.get("LXPU_MPICH_MPIEXEC") or shutil.which("mpiexec.mpich")
    require_service("mpi", mpiexec is not None and os.path.isfile(mpiexec),
                    f"no MPICH launcher ({mpiexec or 'mpiexec.mpich not on PATH'}): run bash ci/services/install.sh")
    launcher = [str(mpiexec), "-n", str(2 * RANKS_PER_HOST), "-ppn", str(RANKS_PER_HOST)]
    assert run_ddp(cluster, tmp_path, rank_environment, launcher) == []


@pytest.mark.impi
def test_ddp_launched_by_intel_mpi_mpiexec(
    cluster: Cluster, rank_environment: RankEnvironment, tmp_path: Path
) -> None:
    mpiexec = Path(os.environ.get("LXPU_IMPI_MPIEXEC", REPO / "build" / "venvs" / "impi" / "bin" / "mpiexec"))
    require_service("impi", mpiexec.is_file(), f"no Intel MPI launcher at {mpiexec}: run bash ci/services/install.sh")
    launcher = [str(mpiexec), "-n", str(2 * RANKS_PER_HOST), "-ppn", str(RANKS_PER_HOST)]
    assert run_ddp(cluster, tmp_path, rank_environment, launcher) == []


def test_node_rank_forced_to_zero_fails_the_checks(
    cluster: Cluster, rank_environment: RankEnvironment, tmp_path: Path
) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NODE_RANK_ZERO_SITECUSTOMIZE)
    inject = (f"export PYTHONPATH={shlex.quote(str(shim))}${{PYTHONPATH:+:$PYTHONPATH}}",)
    problems = run_ddp(cluster, tmp_path, rank_environment, ["srun", "--kill-on-bad-exit=1"], inject)
    # Ranks 2 and 3 run on the second host but now claim node rank 0: exactly those two checks must fail.
    assert problems == [
        "rank 2: node_rank is 0, expected 1",
        "rank 3: node_rank is 0, expected 1",
    ]
