"""Node-local staging on two real hosts (issue 15): an `sbatch -N 2` job loads the install job's module with
LIGHTNING_XPU_STAGE=copy, which broadcasts the packed image with sbcast and unpacks it on each host's own node-local
directory (ci/multinode/up.sh bind-mounts a private one per host at the same path); then the 4-rank DDP toy fit
runs from those copies, every rank under strace.

Asserted: the install's manifest records the image and its sha256; on both hosts the ranks' Python executable
and Lightning's module files lie under that host's node-local directory (the probe reads the host's mount table:
the directory is that host's private one); the fit is correct (the same checks as the other two-host runs); the
metadata operations on the shared prefix and base interpreter per node, staging included, are within the goal
(benchmarks/metadata_ops.py counts them); the copies lie in the job user's private directory on each host
(lxpu-<uid>, issue 27), which alone stays after the job, empty and mode 0700.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from multinode_checks import rank_problems, read_reports
from multinode_cluster import Cluster, RankEnvironment, submit_and_wait

from benchmarks.metadata_ops import GOAL_PER_NODE, Classifier, count, parse_trace
from tests.conftest import require_service

pytestmark = pytest.mark.multinode

RANKS_PER_HOST = 2
SAMPLES = 32
LAUNCH_TIMEOUT_S = 200
STRACE = "strace -f -qq -y -e trace=%file"

# One task per host: where this host's Python and Lightning come from, and which directory backs the node-local
# mount point (field 4 of /proc/self/mountinfo: the bind mount's source within its file system).
PROBE = r"""
import json, os, socket, sys
import lightning, lightning_xpu
local = os.environ["LIGHTNING_XPU_STAGE_DIR"]
source = None
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if fields[4] == local:
        source = fields[3]
out = {"host": socket.gethostname(), "executable": sys.executable, "prefix": sys.prefix,
       "lightning": lightning.__file__, "lightning_xpu": lightning_xpu.__file__, "mount_source": source}
open(os.path.join(sys.argv[1], "probe-" + socket.gethostname() + ".json"), "w").write(json.dumps(out))
"""


def staging_job(directory: Path, environment: RankEnvironment, node_local: Path) -> Path:
    traces = directory / "traces"
    traces.mkdir()
    (directory / "probe.py").write_text(PROBE)
    fit = shlex.join([
        "--out", str(directory / "ranks"), "--accelerator", "cpu", "--strategy", "ddp",
        "--devices", str(RANKS_PER_HOST), "--num-nodes", "2", "--samples", str(SAMPLES), *environment.toy_fit_args,
    ])
    rank = (f'exec {STRACE} -o {shlex.quote(str(traces))}/rank-$SLURM_PROCID.trace '
            f'"$LIGHTNING_XPU_ROOT/bin/python" "$LIGHTNING_XPU_ROOT/share/lightning-xpu/toy_fit.py" {fit}')
    script = directory / "job.sh"
    script.write_text("\n".join([
        "#!/usr/bin/env bash",
        "set -euo pipefail",
        "export OMP_NUM_THREADS=1 LIGHTNING_XPU_STAGE=copy",  # copy mode (mount mode: test_mount_staging.py)
        f"export LIGHTNING_XPU_STAGE_DIR={shlex.quote(str(node_local))}",
        f"export LIGHTNING_XPU_STAGE_STRACE={shlex.quote(str(traces))}",
        *environment.setup_lines,
        'echo "shared-root ${LIGHTNING_XPU_SHARED_ROOT:-none}"',
        'echo "staged-root $LIGHTNING_XPU_ROOT"',
        f"srun --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1 python {directory / 'probe.py'} "
        f"{shlex.quote(str(directory))}",
        f"timeout --kill-after=10 {LAUNCH_TIMEOUT_S} srun --kill-on-bad-exit=1 bash -c {shlex.quote(rank)}",
        "",
    ]))
    return script


def base_prefix(shared_root: str) -> str:
    return subprocess.run([f"{shared_root}/bin/python", "-c", "import sys; print(sys.base_prefix)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_ddp_from_node_local_copies_staged_with_sbcast(
    cluster: Cluster, rank_environment: RankEnvironment, tmp_path: Path
) -> None:
    require_service("install", bool(os.environ.get("LXPU_MULTINODE_MODULE")),
                    "staging needs the install job's environment: set LXPU_MULTINODE_MODULE and "
                    "LXPU_MULTINODE_MODULEPATH (bash ci/test.sh --stage multinode does)")
    # The common mount point; each host's own directory behind it is <it>.<host> (ci/multinode/lib.sh).
    node_local = cluster.state_dir / "node-local"
    job = submit_and_wait(cluster, staging_job(tmp_path, rank_environment, node_local),
                          "--nodes=2", f"--ntasks-per-node={RANKS_PER_HOST}")
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), f"{job.describe()}\n{cluster.log_tails()}"
    assert "lightning-xpu-stage: warning" not in job.output, job.describe()
    lines = dict(line.split(" ", 1) for line in job.output.splitlines() if line.startswith(("shared-root", "staged")))
    shared_root, staged_root = lines["shared-root"], lines["staged-root"]
    # In this account's private directory on the node (issue 27): <node-local>/lxpu-<uid>/stage.<job id>/<tag>.
    private = f"{node_local}/lxpu-{os.getuid()}"
    assert staged_root.startswith(f"{private}/stage.{job.job_id}/"), job.describe()
    # The image the install job packed, its sha256 in manifest.json.
    pack = json.loads(Path(shared_root, "manifest.json").read_text())["pack"]
    assert pack["status"] == "ok" and pack["base"]["staged"], pack
    assert hashlib.sha256(Path(shared_root, pack["file"]).read_bytes()).hexdigest() == pack["sha256"]

    # Where each host's ranks import from: its own node-local directory.
    for host in cluster.nodes:
        probe = json.loads((tmp_path / f"probe-{host.name}.json").read_text())
        assert probe["mount_source"] is not None and probe["mount_source"].endswith(f"node-local.{host.name}"), probe
        assert probe["prefix"] == staged_root, probe
        for field in ("executable", "lightning", "lightning_xpu"):
            assert probe[field].startswith(staged_root + "/"), (host.name, field, probe[field])

    reports, problems = read_reports(tmp_path / "ranks")
    problems += rank_problems(reports, cluster.nodes, RANKS_PER_HOST, SAMPLES)
    assert problems == [], job.describe()

    # Metadata operations per node on the shared prefix and base interpreter: the ranks' and the unpack's.
    classifier = Classifier.build([shared_root, Path(shared_root).parent], [base_prefix(shared_root)], tmp_path,
                                  [node_local])
    per_node: dict[str, dict[str, int]] = {}
    counted_paths: dict[str, list[tuple[str, int]]] = {}  # which shared paths, should the goal be missed
    for rank, report in sorted(reports.items()):
        trace = tmp_path / "traces" / f"rank-{rank}.trace"
        calls = parse_trace(trace.read_text(errors="replace").splitlines())
        executed = next(path for syscall, path in calls if syscall == "execve")
        imported = [path for _, path in calls if path.endswith("/lightning/__init__.py")]
        assert executed.startswith(staged_root + "/") and imported, (rank, executed, imported[:3])
        assert all(path.startswith(staged_root + "/") for path in imported), (rank, imported)
        counted = count(trace, classifier)
        assert counted["by_class"]["staged"] > 1000, counted  # the ranks were traced, and ran from the copy
        node = per_node.setdefault(report["hostname"], {"ranks": 0, "unpack": 0})
        node["ranks"] += counted["shared"]
        counted_paths[f"rank {rank}"] = counted["top_shared_paths"]
    for host in cluster.nodes:
        unpack = tmp_path / "traces" / f"unpack-{host.name}.trace"
        assert unpack.exists(), f"no trace of the unpack on {host.name}: {job.describe()}"
        counted = count(unpack, classifier)
        per_node[host.name]["unpack"] = counted["shared"]
        counted_paths[f"unpack on {host.name}"] = counted["top_shared_paths"]
    print(f"shared-file-system metadata operations per node (goal <= {GOAL_PER_NODE}): {per_node}")
    for host, figures in per_node.items():
        assert figures["ranks"] + figures["unpack"] <= GOAL_PER_NODE, (host, figures, counted_paths)

    # Cleaned up on every node at the end of the job: only the private directory stays, private (while it is there,
    # no other account can take its name on that node), holding at most the node-local compile caches (cache.<build>,
    # kept for the next job on that node on purpose: docs/xpu-guide.md).
    for host in cluster.nodes:
        local = Path(f"{node_local}.{host.name}")
        left = sorted(p.name for p in local.iterdir())
        assert left == [f"lxpu-{os.getuid()}"], (host.name, left)
        kept = local / left[0]
        staged = [p for p in kept.iterdir() if not p.name.startswith("cache.")]
        assert staged == [] and kept.lstat().st_mode & 0o7777 == 0o700, (host.name, staged)
