"""Mount staging on two real hosts (issue 30): `sbatch -N 2` jobs load the install job's module with
LIGHTNING_XPU_STAGE=1 and a user layer (`lightning-xpu user-env`) holding a package of the user's own; each host
mounts the build's SquashFS image and the layer's image with squashfuse (each host of ci/multinode/up.sh runs in a
mount namespace of its own, `unshare --mount`, so a mount made on node1 is node1's alone), and a 4-rank DDP (gloo on
CPU) runs from the mounts.

Asserted: the one line naming the mode; on every rank sys.prefix, sys.executable and torch.__file__ lie on that
host's squashfuse mount and the layer's package comes from the layer's mount (never from $HOME); the gradients DDP
averaged agree on every rank; after the job, on each host, no mount is left (the host's own mount table, read from
its slurmd's /proc entry) and no staged copy (only the private lxpu-<uid> directory stays, empty) — after a job
whose rank failed too. A conda build mounts the same way. Without squashfuse on PATH (a PATH that has every other
system command), the same job copies instead, said in one line, and still takes the layer along.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from multinode_cluster import Cluster, RankEnvironment, submit_and_wait

from tests.conftest import require_service

pytestmark = pytest.mark.multinode

REPO = Path(__file__).resolve().parents[2]
RANKS_PER_HOST = 2
PORT = 29537
MODULE = "lightning-xpu/2.13-cpu"
LAYER_PACKAGE = "lxpu_layer_probe"
MODE_LINE = "lightning-xpu-stage: "

# Every rank: DDP over gloo (one backward pass of a linear model, the averaged gradients gathered), and where its
# interpreter, torch and the layer's package come from, with the file system type of every mount under the
# node-local directory as this rank sees it.
RANK = r"""
import json, os, socket, sys
import torch
import torch.distributed as dist
import lxpu_layer_probe

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                        rank=rank, world_size=world)
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
model(torch.randn(8, 4)).sum().backward()
grad = model.module.weight.grad
gathered = [torch.zeros_like(grad) for _ in range(world)]
dist.all_gather(gathered, grad)
local = os.environ["LIGHTNING_XPU_STAGE_DIR"]
mounts = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if fields[4].startswith(local + "/"):
        mounts[fields[4]] = fields[fields.index("-") + 1]
out = {"rank": rank, "world": world, "host": socket.gethostname(), "prefix": sys.prefix,
       "executable": sys.executable, "torch": torch.__file__, "layer_package": lxpu_layer_probe.__file__,
       "grads_equal": all(torch.equal(g, gathered[0]) for g in gathered), "mounts": mounts}
with open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w") as handle:
    handle.write(json.dumps(out))
dist.barrier()
dist.destroy_process_group()
# Leave without interpreter finalisation. destroy_process_group cannot free this world group: DDP holds it, and so
# do the default arguments of torch/distributed/nn/functional.py (`group=group.WORLD`, bound when DDP imports it
# after init). Gloo's threads then live into finalisation, where a rank of this job once aborted ("terminate called
# without an active exception", pytorch/pytorch#190489). This job's subject is staging, not exit.
sys.stdout.flush()
sys.stderr.flush()
os._exit(3 if os.environ.get("FAIL_RANK") == str(rank) else 0)
"""


def _install_lines(modulepath: Path) -> list[str]:
    lmod_init = os.environ.get("LXPU_LMOD_INIT", "/usr/share/lmod/lmod/init/bash")
    return [f"source {shlex.quote(lmod_init)}", f"module use {shlex.quote(str(modulepath))}", f"module load {MODULE}"]


def _with_layer(modulepath: Path, user_base: Path) -> Path:
    """`lightning-xpu user-env` over the module's build in USER_BASE, with LAYER_PACKAGE in its site-packages;
    returns the layer."""
    script = "\n".join([*_install_lines(modulepath), "lightning-xpu user-env >&2", 'echo "$VIRTUAL_ENV"'])
    made = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False, timeout=600,
                          env={**os.environ, "LIGHTNING_XPU_USER_BASE": str(user_base)})  # fmt: skip
    assert made.returncode == 0, made.stderr
    script = "\n".join([*_install_lines(modulepath), 'echo "$VIRTUAL_ENV"'])
    loaded = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, timeout=600,
                            env={**os.environ, "LIGHTNING_XPU_USER_BASE": str(user_base)})  # fmt: skip
    layer = Path(loaded.stdout.strip().splitlines()[-1])
    assert layer.is_relative_to(user_base), loaded.stdout + loaded.stderr
    (site,) = layer.glob("lib/python3.*/site-packages")
    (site / f"{LAYER_PACKAGE}.py").write_text('"""A package of the user\'s own, in the user layer."""\n')
    return layer


def _job(directory: Path, modulepath: Path, user_base: Path, node_local: Path, *, path: str = "",
         fail_rank: int | None = None) -> Path:  # fmt: skip
    (directory / "rank.py").write_text(RANK)
    ranks = directory / "ranks"
    ranks.mkdir()
    script = directory / "job.sh"
    script.write_text("\n".join([
        "#!/usr/bin/env bash",
        "set -euo pipefail",
        *([f"export PATH={shlex.quote(path)}"] if path else []),
        "export OMP_NUM_THREADS=1 LIGHTNING_XPU_STAGE=1",
        f"export LIGHTNING_XPU_STAGE_DIR={shlex.quote(str(node_local))}",
        f"export LIGHTNING_XPU_USER_BASE={shlex.quote(str(user_base))}",
        *([f"export FAIL_RANK={fail_rank}"] if fail_rank is not None else []),
        *_install_lines(modulepath),
        'echo "shared-root $LIGHTNING_XPU_SHARED_ROOT"',
        'echo "staged-root $LIGHTNING_XPU_ROOT"',
        'echo "staged-layer ${LIGHTNING_XPU_STAGED_LAYER:-none}"',
        'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f"export MASTER_ADDR MASTER_PORT={PORT}",
        f"srun --kill-on-bad-exit=1 --nodes=2 --ntasks={2 * RANKS_PER_HOST} --ntasks-per-node={RANKS_PER_HOST} "
        f"python {shlex.quote(str(directory / 'rank.py'))} {shlex.quote(str(ranks))}",
        "",
    ]))
    return script


def _staged(output: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in output.splitlines() if line.startswith(("shared-root", "staged")))


def _staged_where(job: Any, node_local: Path, root: str, layer: str) -> dict[str, str]:
    """What the job printed of its staging, checked to be ROOT and LAYER in the job's private directory."""
    staged = _staged(job.output)
    private = f"{node_local}/lxpu-{os.getuid()}/stage.{job.job_id}"
    assert staged["staged-root"] == f"{private}/{root}", job.describe()
    assert staged["staged-layer"] == f"{private}/{layer}", job.describe()
    return staged

def _host_mounts(cluster: Cluster, host: str) -> list[str]:
    """The mount points in HOST's own mount namespace (its slurmd's, which every task there inherits)."""
    pid = (cluster.state_dir / "run" / f"slurmd-{host}.pid").read_text().strip()
    return [line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]


def _assert_nothing_left(cluster: Cluster, node_local: Path) -> None:
    """No mount under the node-local directory and no staged copy on any host: only the private directory stays,
    mode 0700, holding at most the node-local compile caches (cache.<build>, kept on the node for the next job on
    purpose: docs/xpu-guide.md). The holders end with the job: waited for a few seconds."""
    deadline = time.monotonic() + 15
    while True:
        left = {}
        for host in cluster.nodes:
            mounts = [m for m in _host_mounts(cluster, host.name) if m.startswith(f"{node_local}/")]
            local = Path(f"{node_local}.{host.name}")
            private = local / f"lxpu-{os.getuid()}"
            kept = private.iterdir() if private.is_dir() else iter(())
            inside = sorted(p.name for p in kept if not p.name.startswith("cache."))
            entries = sorted(p.name for p in local.iterdir())
            if mounts or inside or entries != [private.name]:
                left[host.name] = {"mounts": mounts, "in private dir": inside, "node-local": entries}
            else:
                assert private.lstat().st_mode & 0o7777 == 0o700, (host.name, oct(private.lstat().st_mode))
        if not left:
            return
        assert time.monotonic() < deadline, f"left after the job: {left}"
        time.sleep(0.5)


def _ranks(directory: Path) -> dict[int, dict]:
    reports = {}
    for path in sorted((directory / "ranks").glob("rank-*.json")):
        report = json.loads(path.read_text())
        reports[report["rank"]] = report
    return reports


def _assert_ranks_from(reports: dict[int, dict], cluster: Cluster, staged_root: str, staged_layer: str,
                       fstype: str) -> None:  # fmt: skip
    assert sorted(reports) == list(range(2 * RANKS_PER_HOST)), sorted(reports)
    assert {r["host"] for r in reports.values()} == {h.name for h in cluster.nodes}, reports
    for rank, report in reports.items():
        for field in ("prefix", "executable", "torch"):
            assert (report[field] + "/").startswith(staged_root + "/"), (rank, field, report[field])
        assert report["layer_package"].startswith(staged_layer + "/"), (rank, report["layer_package"])
        assert report["grads_equal"] and report["world"] == 2 * RANKS_PER_HOST, (rank, report)
        mounted = {point: kind for point, kind in report["mounts"].items() if kind.startswith("fuse.squashfuse")}
        if fstype == "squashfuse":
            # The environment and the layer, each its own squashfuse mount on this rank's host.
            assert set(mounted) == {staged_root, staged_layer}, (rank, report["mounts"])
        else:
            assert mounted == {}, (rank, report["mounts"])


@pytest.fixture(scope="module")
def modulepath() -> Path:
    require_service("install", bool(os.environ.get("LXPU_MULTINODE_MODULE")),
                    "mount staging needs the install job's environment: set LXPU_MULTINODE_MODULE and "
                    "LXPU_MULTINODE_MODULEPATH (bash ci/test.sh --stage multinode does)")  # fmt: skip
    assert os.environ["LXPU_MULTINODE_MODULE"] == MODULE, os.environ["LXPU_MULTINODE_MODULE"]
    return Path(os.environ["LXPU_MULTINODE_MODULEPATH"])


@pytest.fixture(scope="module")
def user_base(modulepath: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("user-base")
    _with_layer(modulepath, base)
    return base


@pytest.fixture(scope="module")
def conda_modulepath(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A conda build (--env-manager conda, from CI's local channel: no conda executable, no conda-pack), installed
    as the README says; LXPU_MULTINODE_CONDA_MODULEPATH names one already installed (<prefix>/modulefiles)."""
    if os.environ.get("LXPU_MULTINODE_CONDA_MODULEPATH"):
        yield Path(os.environ["LXPU_MULTINODE_CONDA_MODULEPATH"])
        return
    channel = subprocess.run([sys.executable, str(REPO / "ci" / "conda_channel.py")], capture_output=True,
                             text=True, check=False)  # fmt: skip
    assert channel.returncode == 0, channel.stderr
    prefix = tmp_path_factory.mktemp("conda-build") / "prefix"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "generic" / "install_lightning_2.13.sh"), "--variant", "cpu",
         "--env-manager", "conda", "--conda-channel", channel.stdout.strip(), "--pip-source", "system",
         "--prefix", str(prefix)],
        capture_output=True, text=True, check=False, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    yield prefix / "modulefiles"


def _run(cluster: Cluster, tmp_path: Path, modulepath: Path, user_base: Path, **job: object):
    node_local = cluster.state_dir / "node-local"
    result = submit_and_wait(cluster, _job(tmp_path, modulepath, user_base, node_local, **job),  # type: ignore[arg-type]
                             "--nodes=2", f"--ntasks-per-node={RANKS_PER_HOST}")  # fmt: skip
    return result, node_local


def _mode_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(MODE_LINE)]


def test_ddp_runs_from_squashfs_mounts_with_the_user_layer_and_leaves_nothing(
    cluster: Cluster, rank_environment: RankEnvironment, modulepath: Path, user_base: Path, tmp_path: Path
) -> None:
    job, node_local = _run(cluster, tmp_path, modulepath, user_base)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), f"{job.describe()}\n{cluster.log_tails()}"
    staged = _staged_where(job, node_local, "mount.2.13-cpu", "mount.layer")
    (line,) = _mode_lines(job.output)
    assert line.startswith("lightning-xpu-stage: mount staging: the image mounted (squashfuse)"), line
    # The image the install wrote, recorded in the manifest (and so in the build's RECORD) with its sha256.
    pack = json.loads(Path(staged["shared-root"], "manifest.json").read_text())["pack"]
    assert pack["squashfs"]["file"] == "share/lightning-xpu/pack/env.squashfs", pack
    _assert_ranks_from(_ranks(tmp_path), cluster, staged["staged-root"], staged["staged-layer"], "squashfuse")
    assert not any(str(user_base) in r["layer_package"] for r in _ranks(tmp_path).values())
    _assert_nothing_left(cluster, node_local)


def test_a_failed_rank_still_leaves_no_mount(
    cluster: Cluster, rank_environment: RankEnvironment, modulepath: Path, user_base: Path, tmp_path: Path
) -> None:
    job, node_local = _run(cluster, tmp_path, modulepath, user_base, fail_rank=3)
    assert job.state == "FAILED", job.describe()
    assert len(_ranks(tmp_path)) == 2 * RANKS_PER_HOST, job.describe()  # all ran from the mounts, then one failed
    _assert_nothing_left(cluster, node_local)


def test_without_squashfuse_the_job_copies_and_says_why_in_one_line(
    cluster: Cluster, rank_environment: RankEnvironment, modulepath: Path, user_base: Path, tmp_path: Path
) -> None:
    # A PATH with every command of the system's bin directories but squashfuse's: FUSE unavailable, honestly.
    tools = tmp_path / "no-squashfuse-bin"
    tools.mkdir()
    for directory in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"):
        for command in sorted(Path(directory).iterdir()):
            if not command.name.startswith("squashfuse") and not (tools / command.name).exists():
                (tools / command.name).symlink_to(command)
    job, node_local = _run(cluster, tmp_path, modulepath, user_base, path=str(tools))
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), f"{job.describe()}\n{cluster.log_tails()}"
    staged = _staged_where(job, node_local, "2.13-cpu", "layer")
    (line,) = _mode_lines(job.output)
    assert line.startswith("lightning-xpu-stage: copy staging: copied to ") and "squashfuse not found on PATH" in line
    _assert_ranks_from(_ranks(tmp_path), cluster, staged["staged-root"], staged["staged-layer"], "copy")
    _assert_nothing_left(cluster, node_local)


def test_a_conda_build_mounts_the_same_way(
    cluster: Cluster, rank_environment: RankEnvironment, conda_modulepath: Path, tmp_path: Path
) -> None:
    user_base = tmp_path / "user-base"
    _with_layer(conda_modulepath, user_base)
    job, node_local = _run(cluster, tmp_path, conda_modulepath, user_base)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), f"{job.describe()}\n{cluster.log_tails()}"
    staged = _staged_where(job, node_local, "mount.2.13-cpu", "mount.layer")
    assert Path(staged["shared-root"], "conda-meta").is_dir(), staged
    (line,) = _mode_lines(job.output)
    assert line.startswith("lightning-xpu-stage: mount staging:"), line
    _assert_ranks_from(_ranks(tmp_path), cluster, staged["staged-root"], staged["staged-layer"], "squashfuse")
    _assert_nothing_left(cluster, node_local)
