"""The two-host cluster (ci/multinode/) seen from the tests: bringing it up and down, and batch jobs on it.

Jobs are submitted with a minimal, fixed environment: what the ranks run in is set up by the job script
itself (see `RankEnvironment`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_service

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "ci" / "multinode"
# The job's own environment: nothing from the pytest process leaks into the ranks.
CLIENT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
TERMINAL_STATES = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
    "DEADLINE",
}
JOB_WAIT_S = 240


def _harness(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(HARNESS / script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _netns_inodes(names: list[str]) -> set[int]:
    return {os.stat(f"/run/netns/{name}").st_ino for name in names if os.path.exists(f"/run/netns/{name}")}


def _pids_in_netns(inodes: set[int]) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.stat(entry / "ns" / "net").st_ino in inodes:
                    pids.append(int(entry.name))
            except OSError:  # the process ended meanwhile
                continue
    return pids


@dataclass(frozen=True)
class Host:
    name: str
    address: str


@dataclass(frozen=True)
class Cluster:
    """The running two-host cluster as the harness reports it (`status.sh --json`)."""

    controller: Host
    nodes: tuple[Host, ...]
    state_dir: Path

    def client(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (ci/multinode/client.sh)."""
        return subprocess.run(
            ["bash", str(HARNESS / "client.sh"), *args],
            capture_output=True, text=True, timeout=timeout, env=CLIENT_ENV, check=False,
        )

    def log_tails(self, lines: int = 15) -> str:
        tails = []
        for log in sorted((self.state_dir / "log").glob("*.log")):
            tails.append(f"==> {log.name} <==\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(tails)


@dataclass(frozen=True)
class JobResult:
    job_id: str
    state: str
    exit_code: str
    output: str

    def describe(self) -> str:
        tail = "\n".join(self.output.splitlines()[-40:])
        return f"job {self.job_id}: {self.state} exit {self.exit_code}; output tail:\n{tail}"


def require_cluster_tools() -> None:
    missing = [tool for tool in ("ip", "nsenter", "unshare", "slurmctld", "slurmd", "sbatch", "munge")
               if shutil.which(tool) is None]
    require_service("multinode", not missing, f"missing {', '.join(missing)}: run bash ci/services/install.sh")
    require_service("multinode", os.geteuid() == 0, "network namespaces need root: run the tests as root")
    munge_ok = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, check=False).returncode == 0
    require_service("multinode", munge_ok, "munged does not run: bash ci/services/munge.sh start")


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    """ci/multinode/up.sh, then always down.sh, and a check that nothing of the cluster is left."""
    require_cluster_tools()
    up = _harness("up.sh")
    status = json.loads(_harness("status.sh", "--json").stdout)
    namespaces = [info["namespace"] for info in status["hosts"].values()]
    inodes = _netns_inodes(namespaces)
    try:
        assert up.returncode == 0, f"ci/multinode/up.sh failed:\n{up.stderr}"
        assert status["usable"], f"cluster not usable after ci/multinode/up.sh: {status}"
        hosts = {name: Host(name, info["address"]) for name, info in status["hosts"].items()}
        yield Cluster(hosts["ctl"], (hosts["node1"], hosts["node2"]), Path(status["state_dir"]))
    finally:
        down = _harness("down.sh")
        assert down.returncode == 0, f"ci/multinode/down.sh failed:\n{down.stderr}"
        left_namespaces = [name for name in namespaces if os.path.exists(f"/run/netns/{name}")]
        left_pids = _pids_in_netns(inodes)
        assert not left_namespaces and not left_pids, (
            f"teardown left namespaces {left_namespaces} and processes {left_pids}"
        )


def submit_and_wait(cluster: Cluster, script: Path, *sbatch_args: str) -> JobResult:
    """sbatch SCRIPT, wait for the job to end, and return its state and output.

    The state comes from the controller, never only from exit codes: a task launch failure can leave a job
    COMPLETED 0:0 (see the research notes), so callers check what the ranks wrote as well.
    """
    return wait_for_job(cluster, submit(cluster, script, *sbatch_args), script.with_suffix(".out"))


def submit(cluster: Cluster, script: Path, *sbatch_args: str) -> str:
    """sbatch SCRIPT (output to SCRIPT.out); returns the job id at once."""
    output = script.with_suffix(".out")
    submitted = cluster.client(
        "sbatch", "--parsable", f"--chdir={script.parent}", f"--output={output}", "--time=4", *sbatch_args,
        str(script),
    )
    assert submitted.returncode == 0, f"sbatch failed: {submitted.stderr.strip()}"
    return submitted.stdout.strip().split(";")[0]


def wait_for_job(cluster: Cluster, job_id: str, output: Path) -> JobResult:
    """Wait for the job to end; its state comes from the controller."""
    deadline = time.monotonic() + JOB_WAIT_S
    fields: dict[str, str] = {}
    while time.monotonic() < deadline:
        shown = cluster.client("scontrol", "show", "job", "-o", job_id)
        fields = dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)
        if fields.get("JobState") in TERMINAL_STATES:
            break
        time.sleep(0.5)
    else:
        cluster.client("scancel", job_id)
        text = output.read_text(errors="replace") if output.exists() else ""
        pytest.fail(f"job {job_id} still {fields.get('JobState')} after {JOB_WAIT_S} s; output:\n{text}\n"
                    f"{cluster.log_tails()}")
    text = output.read_text(errors="replace") if output.exists() else "(no output file)"
    return JobResult(job_id, fields["JobState"], fields.get("ExitCode", "?"), text)


@dataclass(frozen=True)
class RankEnvironment:
    """What the ranks run in, as lines of the job script.

    The environment the install job builds, loaded through its modulefile, when `LXPU_MULTINODE_MODULE`
    (e.g. `lightning-xpu/2.13-cpu`) and `LXPU_MULTINODE_MODULEPATH` (`<prefix>/modulefiles`) are set; its
    autoload hook must import lightning_xpu. Otherwise the interpreter running pytest, with this repository on
    PYTHONPATH and lightning_xpu imported explicitly by the toy fit (`LXPU_MULTINODE_PYTHON` and
    `LXPU_MULTINODE_TOY_FIT` override the interpreter and the script).
    """

    setup_lines: tuple[str, ...]
    toy_fit_args: tuple[str, ...]
    description: str

    @classmethod
    def from_environment(cls) -> RankEnvironment:
        module = os.environ.get("LXPU_MULTINODE_MODULE")
        if module:
            modulepath = os.environ.get("LXPU_MULTINODE_MODULEPATH", "")
            if not Path(modulepath, f"{module}.lua").is_file():
                pytest.fail(f"LXPU_MULTINODE_MODULE={module} but {modulepath or '(unset)'}/{module}.lua does not "
                            "exist: set LXPU_MULTINODE_MODULEPATH to the install prefix's modulefiles directory")
            lmod_init = os.environ.get("LXPU_LMOD_INIT", "/usr/share/lmod/lmod/init/bash")
            lines = (
                f"source {shlex.quote(lmod_init)}",
                f"module use {shlex.quote(modulepath)}",
                f"module load {shlex.quote(module)}",
                'TOY_FIT="$LIGHTNING_XPU_ROOT/share/lightning-xpu/toy_fit.py"',
                "PYTHON=python",
            )
            return cls(lines, (), f"module {module} from {modulepath}")
        toy_fit = Path(os.environ.get("LXPU_MULTINODE_TOY_FIT", REPO / "scripts" / "common" / "toy_fit.py"))
        if not toy_fit.is_file():
            pytest.fail(f"{toy_fit} is missing: the toy fit comes from scripts/common (or set LXPU_MULTINODE_TOY_FIT)")
        python = Path(os.environ.get("LXPU_MULTINODE_PYTHON", sys.executable))
        lines = (
            f"export PATH={shlex.quote(str(python.parent))}:\"$PATH\"",
            f"export PYTHONPATH={shlex.quote(str(REPO))}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"TOY_FIT={shlex.quote(str(toy_fit))}",
            f"PYTHON={shlex.quote(str(python))}",
        )
        return cls(lines, ("--import-lightning-xpu",), f"{python} with the repository on PYTHONPATH")
