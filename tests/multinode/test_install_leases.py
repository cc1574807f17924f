"""Never delete what is in use, across hosts (issue 12): a job on node1 runs `torchrun` from the install's module
while the install job rebuilds twice on node2 (the default run and --force) and prunes. The job's lease (Slurm
job id, host node1) is checked with squeue from node2, and the job ends with the build it started with.

It needs the install the multinode stage makes (LXPU_MULTINODE_MODULE, LXPU_MULTINODE_MODULEPATH). The rebuilds
publish a small prebuilt environment (LXPU_TEST_PREBUILT, tests/install/install_harness.py); afterwards two
--rollback and one --prune put the prefix back as it was.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest
from multinode_cluster import REPO, Cluster, submit, submit_and_wait, wait_for_job

from tests.conftest import require_service
from tests.install import install_harness as h

pytestmark = pytest.mark.multinode

JOB = REPO / "scripts" / h.SITE / f"install_lightning_{h.VERSION}.sh"


def test_job_on_one_host_keeps_its_build_while_the_other_host_rebuilds(cluster: Cluster, tmp_path: Path) -> None:
    module = os.environ.get("LXPU_MULTINODE_MODULE", "")
    modulepath = os.environ.get("LXPU_MULTINODE_MODULEPATH", "")
    require_service("install", bool(module and modulepath), "LXPU_MULTINODE_MODULE(PATH) name no install")
    prefix = Path(modulepath).parent
    tag = module.rsplit("/", 1)[-1]
    original = Path(os.path.realpath(prefix / tag)).name
    prebuilt = h.make_prebuilt_env(tmp_path / "prebuilt", REPO)
    out = tmp_path / "ranks"
    out.mkdir()
    (tmp_path / "worker.py").write_text(h.TORCHRUN_WORKER)
    job = tmp_path / "job.sh"
    job.write_text(
        "#!/bin/bash\nset -euo pipefail\nexport OMP_NUM_THREADS=1\n"
        f"source {shlex.quote(h.LMOD_INIT)}\nmodule use {shlex.quote(modulepath)}\nmodule load {shlex.quote(module)}\n"
        f"torchrun --standalone --nproc_per_node=2 {shlex.quote(str(tmp_path / 'worker.py'))} {shlex.quote(str(out))}\n"
    )
    install = ["bash", str(JOB), "--prefix", str(prefix), *h.prebuilt_args(REPO)]
    rebuild = tmp_path / "rebuild.sh"
    rebuild.write_text(
        "#!/bin/bash\nset -euo pipefail\nexport OMP_NUM_THREADS=1\n"
        f"export LXPU_TEST_PREBUILT={shlex.quote(str(prebuilt))}\n"
        + "".join(f"{shlex.join([*install, *args])}\n" for args in ([], ["--force"], ["--prune", "--keep", "0"]))
    )
    job_id = submit(cluster, job, "-w", "node1", "-N", "1", "-n", "1", "--cpus-per-task=2")
    try:
        deadline = time.monotonic() + 240
        while len(list(out.glob("ready-*"))) < 2:
            assert time.monotonic() < deadline, f"the torchrun workers did not start: {job.with_suffix('.out')}"
            time.sleep(0.5)
        executable = (out / "ready-0").read_text()
        assert f"/.envs/{original}/bin/python" in executable
        rebuilt = submit_and_wait(cluster, rebuild, "-w", "node2", "-N", "1", "-n", "1")
        assert rebuilt.state == "COMPLETED", rebuilt.describe()
        assert Path(os.path.realpath(prefix / tag)).name != original, rebuilt.describe()
        assert f"keeping {original}: in use: Slurm job {job_id} on node1" in rebuilt.output, rebuilt.describe()
        (out / "go").touch()
        ran = wait_for_job(cluster, job_id, job.with_suffix(".out"))
        assert ran.state == "COMPLETED", ran.describe()
    finally:
        (out / "go").touch()
        cluster.client("scancel", job_id)
        for _ in range(2):  # back along the rollback records, never past the original build
            if Path(os.path.realpath(prefix / tag)).name != original:
                h.run_job(JOB, *h.prebuilt_args(REPO), "--rollback", prefix=prefix)
        h.run_job(JOB, *h.prebuilt_args(REPO), "--prune", "--keep", "0", prefix=prefix)
    h.assert_torchrun_workers(out, executable)
    assert Path(os.path.realpath(prefix / tag)).name == original
