"""Helpers for the install tests: build the install job, a repository copy, run jobs, load installs.

The install job is the real one, freshly rendered by ``recipes/render.py render`` for 2.13/generic (so it
carries the engine of this checkout, whatever the committed renders say).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_service

REPO = Path(__file__).resolve().parents[2]
VERSION = "2.13"
SITE = "generic"
TAG = "2.13-cpu"
LMOD_INIT = os.environ.get("LXPU_LMOD_INIT", "/usr/share/lmod/lmod/init/bash")
# The machine's own pip configuration finds the local torch; never isolate pip from it.
PIP_SOURCE = ("--pip-source", "system")
JOB_TIMEOUT_S = 900
# The engine's step count, read from the engine (one place for it): steps are "[n/N] name ...".
from lxpu_admin.install.steps import INSTALL_STEPS  # noqa: E402  # the declared step list numbers the steps

STEP_TOTAL = len(INSTALL_STEPS)
# The shared code the thin modulefiles and setup scripts call, where the install job writes it in the prefix (the
# names from the engine's lxpu_admin/install/tagfiles.py, their one place).
from lxpu_admin.install.tagfiles import (  # noqa: E402
    MODULEFILE_BODY,
    SETUP_HELPER,
    SETUP_HELPER_NAME,
    SETUP_LIBRARY,
    SETUP_LIBRARY_NAME,
)


def commands(output: str) -> str:
    """The commands a run printed (its "+ " lines), one a line, each as the words a shell reads from it (the install
    prints them shell-quoted, shlex.quote): what tests match command fragments against, whatever the paths hold."""
    lines = []
    for line in output.splitlines():
        if line.startswith("+ "):
            try:
                lines.append(" ".join(shlex.split(line[2:])))
            except ValueError:  # a "+ " line in words, not a command
                lines.append(line[2:])
    return "\n".join(lines)


def add_shared_code(prefix: Path) -> None:
    """The modulefile body and setup library of the repository, where the install job writes them in a prefix."""
    (prefix / MODULEFILE_BODY).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / MODULEFILE_BODY, prefix / MODULEFILE_BODY)
    shutil.copy(REPO / SETUP_LIBRARY, prefix / SETUP_LIBRARY_NAME)
    shutil.copy(REPO / SETUP_HELPER, prefix / SETUP_HELPER_NAME)


def require(available: bool, what: str) -> None:
    """Skip when `what` is missing, or fail when CI demands every service (LXPU_REQUIRE_SERVICES=1)."""
    require_service(what, available, "missing")


def slurm_up() -> bool:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20).stdout
    except subprocess.TimeoutExpired:
        return False
    return any(state.strip().rstrip("*") in ("idle", "mixed", "allocated") for state in out.splitlines())


def lmod_available() -> bool:
    return Path(LMOD_INIT).is_file()


def mpiexec(kind: str) -> str | None:
    if kind == "mpich":
        path = os.environ.get("LXPU_MPICH_MPIEXEC") or shutil.which("mpiexec.mpich")
    else:
        path = os.environ.get("LXPU_IMPI_MPIEXEC")
    return path if path and os.access(path, os.X_OK) else None


def base_python() -> str:
    """A Python that already has torch and Lightning (CI's base venv): fast installs via --base-python."""
    return os.environ.get("LXPU_PYTHON", sys.executable)


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the install job and the repository ----


def build_install_job(dest: Path) -> Path:
    """Render the install job for 2.13/generic into dest."""
    renderer = REPO / "recipes" / "render.py"
    if not renderer.is_file():
        pytest.fail("recipes/render.py is missing: the install tests render the real install job with it")
    out = dest / "render"
    subprocess.run(
        [sys.executable, str(renderer), "render", "--torch", VERSION, "--site", SITE, "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    (job,) = out.rglob(f"install_lightning_{VERSION}.sh")
    return job


def make_source(dest: Path) -> Path:
    """A git-committed copy of what the install job reads from the repository."""
    if not (REPO / "lightning_xpu" / "__init__.py").is_file():
        pytest.fail("lightning_xpu/ is missing from the repository: the install job installs it from there")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, dest / name)
    copied = ("lightning_xpu", "bin", "lib", "scripts/common", "modulefiles", "recipes/locks", "recipes/tools")
    copied += ("recipes/rendered",)
    for name in copied:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, dest / name, ignore=ignore)
    if not (dest / MODULEFILE_BODY).is_file():
        pytest.fail(f"{MODULEFILE_BODY} is missing from the repository: the install job writes it into the prefix")
    (dest / "scripts" / SITE).mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(dest), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "test copy"], check=True)
    return dest


def commit_of(source: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def job_env(**overrides: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    # No packed image (about a minute per install here): packing and staging are tested by
    # tests/install/test_stage.py and, on the install CI's multinode stage builds, tests/multinode/test_staging.py.
    env.setdefault("LIGHTNING_XPU_PACK", "0")
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


# ---- running install jobs ----


@dataclass
class GoodInstall:
    """The session's good install (tests/install/conftest.py)."""

    prefix: Path
    job: Path
    source: Path
    log: Path
    output: str
    via: str  # "sbatch" or "bash"
    manifest: dict[str, Any]  # as published by that install (later tests republish the prefix)


@dataclass
class JobResult:
    returncode: int
    output: str
    log: Path | None

    @property
    def log_text(self) -> str:
        return self.log.read_text() if self.log else ""

    @property
    def last_line(self) -> str:
        lines = [line for line in self.log_text.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def published_manifest(prefix: Path) -> dict[str, Any]:
    """The manifest of the build <prefix>/<TAG> points to ({} when nothing is published)."""
    path = prefix / TAG / "manifest.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def logs_of(prefix: Path) -> set[Path]:
    return set((prefix / "logs").glob(f"install-{TAG}-*.log"))


def noop_log(prefix: Path) -> Path:
    """The one log that runs which changed nothing share (each replaces the last: lxpu_admin/install/cleanup.py)."""
    return prefix / "logs" / f"install-{TAG}-noop.log"


def log_times(prefix: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in logs_of(prefix)}


def new_log(prefix: Path, before: set[Path] | dict[Path, int]) -> Path | None:
    """The log a run wrote: a new file, or (given log_times) the no-op log it replaced."""
    times = before if isinstance(before, dict) else {}
    created = sorted(
        path for path, mtime in log_times(prefix).items() if path not in before or times.get(path, mtime) != mtime
    )
    assert len(created) <= 1, f"one run wrote several logs: {created}"
    return created[0] if created else None


def run_job(job: Path, *args: str, prefix: Path, env: dict[str, str] | None = None) -> JobResult:
    before = log_times(prefix)
    proc = subprocess.run(
        ["bash", str(job), "--prefix", str(prefix), *args],
        env=env or job_env(),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        start_new_session=True,
    )
    return JobResult(proc.returncode, proc.stdout + proc.stderr, new_log(prefix, before))


def start_job(job: Path, *args: str, prefix: Path, output: Path, env: dict[str, str] | None = None) -> Any:
    """Start an install job in its own process group, output to a file."""
    handle = output.open("w")
    return subprocess.Popen(
        ["bash", str(job), "--prefix", str(prefix), *args],
        env=env or job_env(),
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_text(path: Path, text: str, proc: Any, timeout: float = JOB_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(
                f"job exited ({proc.returncode}) before printing {text!r}:\n{path.read_text()}"
            )
        time.sleep(0.2)
    raise AssertionError(f"{text!r} did not appear in {path} within {timeout} s")


def kill_group(proc: Any) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


# ---- using an install ----


def bash(
    script: str, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], env=env or job_env(), capture_output=True, text=True, timeout=timeout
    )


def q(path: Path | str) -> str:
    """Quote for bash."""
    return "'" + str(path).replace("'", "'\\''") + "'"


def with_module(prefix: Path, commands: str) -> str:
    return (
        "set -euo pipefail\n"
        f"source {q(LMOD_INIT)}\n"
        f"module use {q(prefix / 'modulefiles')}\n"
        f"module load lightning-xpu/{TAG}\n"
        f"{commands}\n"
    )


def load_line(entry: str, prefix: Path, tag: str) -> str:
    """The shell line that loads `tag` from `prefix` by `entry` ("module": real Lmod; "setup script")."""
    if entry != "module":
        return f"source {q(prefix / f'lightning-setup-{tag}.sh')}"
    lmod = os.environ.get("LXPU_LMOD_INIT", "/usr/share/lmod/lmod/init/bash")
    from tests.conftest import require_service

    require_service("lmod", os.path.isfile(lmod), f"no Lmod at {lmod}: run bash ci/services/install.sh")
    return f"source {q(lmod)}; module use {q(prefix / 'modulefiles')}; module load lightning-xpu/{tag}"


def with_setup_script(prefix: Path, commands: str) -> str:
    return f"set -euo pipefail\nsource {q(prefix / f'lightning-setup-{TAG}.sh')}\n{commands}\n"


def toy_fit_command(out: Path, *args: str) -> str:
    extra = " ".join(q(arg) for arg in args)
    return f'python "$LIGHTNING_XPU_ROOT/share/lightning-xpu/toy_fit.py" --out {q(out)} {extra}'


def rank_reports(out: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(out.glob("rank-*.json"))]


def assert_ddp_reports(reports: list[dict[str, Any]], world_size: int = 2) -> None:
    """Distinct ranks, one world, disjoint data shards, gradients really all-reduced."""
    assert sorted(r["global_rank"] for r in reports) == list(range(world_size)), reports
    assert {r["world_size"] for r in reports} == {world_size}
    shards = [set(r["data_indices"]) for r in reports]
    assert all(shards) and not set.intersection(*shards), "ranks trained on overlapping samples"
    finals = {r["final_weights_sha256"] for r in reports}
    assert len(finals) == 1, "ranks ended with different weights"
    assert finals != {reports[0]["initial_weights_sha256"]}, "weights never changed"
    assert all(r["lightning_xpu_imported"] for r in reports), "the autoload hook did not load lightning_xpu"


# ---- snapshots: proof that a failed run changed nothing ----


@dataclass(frozen=True)
class Snapshot:
    target: str
    manifest: bytes
    entry_points: dict[str, tuple[bytes, int]]
    visible: tuple[str, ...]


def entry_point_paths(prefix: Path) -> list[Path]:
    """The setup script and modulefile, and the shared code they call."""
    return [
        prefix / f"lightning-setup-{TAG}.sh",
        prefix / "modulefiles" / "lightning-xpu" / f"{TAG}.lua",
        prefix / SETUP_LIBRARY_NAME,
        prefix / SETUP_HELPER_NAME,
        prefix / MODULEFILE_BODY,
    ]


def visible_entries(prefix: Path) -> tuple[str, ...]:
    """What users see: the prefix's top level and the module directory (temp files would show here)."""
    names: Iterable[Path] = [*prefix.iterdir(), *(prefix / "modulefiles" / "lightning-xpu").iterdir()]
    return tuple(sorted(str(path.relative_to(prefix)) for path in names if path.name != "logs"))


def snapshot(prefix: Path) -> Snapshot:
    return Snapshot(
        target=os.readlink(prefix / TAG),
        manifest=(prefix / TAG / "manifest.json").read_bytes(),
        entry_points={str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in entry_point_paths(prefix)},
        visible=visible_entries(prefix),
    )


def assert_install_works(prefix: Path, tmp: Path) -> None:
    """The published install loads (module and setup script) and runs the toy fit."""
    require(lmod_available(), "Lmod")
    out = tmp / "toy-fit-after"
    result = bash(with_module(prefix, toy_fit_command(out, "--accelerator", "cpu", "--devices", "1")))
    assert result.returncode == 0, result.stdout + result.stderr
    (report,) = rank_reports(out)
    assert report["device"] == "cpu" and report["lightning_xpu_imported"] is True
    assert report["final_weights_sha256"] != report["initial_weights_sha256"]
    result = bash(with_setup_script(prefix, 'python -c "import lightning_xpu, sys; print(sys.prefix)"'))
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).resolve() == (prefix / TAG).resolve()


def assert_unchanged(prefix: Path, before: Snapshot, tmp: Path) -> None:
    after = snapshot(prefix)
    assert after.target == before.target, "the published install changed"
    assert after.manifest == before.manifest
    assert after.entry_points == before.entry_points, "setup script or modulefile was rewritten"
    assert after.visible == before.visible, "something new is visible in the prefix"
    assert_install_works(prefix, tmp)


def env_dirs(prefix: Path) -> list[str]:
    envs = prefix / ".envs"
    return (
        sorted(p.name for p in envs.iterdir() if p.is_dir() and not p.is_symlink()) if envs.is_dir() else []
    )


def published_build(prefix: Path) -> Path:
    """<prefix>/.envs/<build>: what <prefix>/<tag> points to, and what module load and the setup script give."""
    return prefix / ".envs" / Path(os.readlink(prefix / TAG)).name


def build_complete(build: Path) -> bool:
    """A complete build: a whole manifest with status installed (what lxpu_admin/install/builds.py calls complete)."""
    try:
        manifest = json.loads((build / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(manifest.get("status") == "installed")


ADMIN = REPO / "bin" / "lightning-xpu-admin"


def pinned_uv(prefix: Path, dest: Path) -> Path:
    """The pinned uv a real install of PREFIX used: unpacked into DEST from the wheel its tool cache keeps (checked
    against the lock; lxpu_admin/install/toolcache.py). An install keeps no uv of its own in the prefix."""
    from lxpu_admin.install import toolcache

    lock = REPO / "recipes" / "tools" / "install-tools.txt"
    version = toolcache.pinned_version(str(lock), "uv")
    assert version, f"{lock} pins no uv"
    if not (dest / "bin" / "uv").is_file():
        why = toolcache.provide("uv", version, str(lock), str(prefix / ".cache" / "uv"), str(dest), sys.executable,
                                [], lambda line: None)  # fmt: skip
        assert not why, why
    return dest / "bin" / "uv"


def verify_builds(prefix: Path, *names: str) -> subprocess.CompletedProcess[str]:
    """`lightning-xpu-admin verify --prefix PREFIX NAMES...` (lxpu_admin/install/verify.py), output captured."""
    return subprocess.run([str(ADMIN), "verify", "--prefix", str(prefix), *names], capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip


def assert_sealed(prefix: Path) -> None:
    """The published build shares no inode with any other path (a cache), every file and directory of it is the
    installing account's and has no write bit, and it matches its file-hash record (issue 27)."""
    build = published_build(prefix)
    linked = subprocess.run(["find", str(build), "-type", "f", "-links", "+1"], capture_output=True, text=True,
                            check=True).stdout.split()  # fmt: skip
    assert not linked, f"{len(linked)} file(s) of {build} share their inode with another path: {linked[:5]}"
    writable = subprocess.run(["find", str(build), "!", "-type", "l", "-perm", "/222"], capture_output=True,
                              text=True, check=True).stdout.split()  # fmt: skip
    assert not writable, f"{len(writable)} path(s) of {build} are writable: {writable[:5]}"
    foreign = subprocess.run(["find", str(build), "!", "-user", str(os.geteuid())], capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    assert not foreign, f"{len(foreign)} path(s) of {build} belong to another account: {foreign[:5]}"
    verified = verify_builds(prefix, build.name)
    assert verified.returncode == 0 and f"{build.name} (published): ok" in verified.stdout, verified


def kept_env_dirs(prefix: Path) -> list[str]:
    """The builds a finished run keeps: every complete build (only --prune and --uninstall remove them)."""
    return [name for name in env_dirs(prefix) if build_complete(prefix / ".envs" / name)]


def wait_for_slurm_job(job_id: str, timeout: float = JOB_TIMEOUT_S) -> str:
    """Poll until the job leaves the queue; returns its final state (never trusted alone)."""
    deadline = time.monotonic() + timeout
    state = "UNKNOWN"
    while time.monotonic() < deadline:
        out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
        for field in out.split():
            if field.startswith("JobState="):
                state = field.split("=", 1)[1]
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "UNKNOWN"):
            return state
        time.sleep(1)
    subprocess.run(["scancel", job_id], check=False)
    raise AssertionError(f"Slurm job {job_id} did not finish within {timeout} s (last state {state})")


def wait_for_slurm_text(job_id: str, output: Path, text: str, timeout: float = JOB_TIMEOUT_S) -> None:
    """Poll a running job's output file until text appears; fail if the job ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if output.exists() and text in output.read_text(errors="replace"):
            return
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
        if out.strip() not in ("PENDING", "RUNNING", "CONFIGURING"):
            if text in output.read_text(errors="replace"):
                return
            raise AssertionError(f"job {job_id} ended ({out.strip()!r}) before printing {text!r}")
        time.sleep(0.5)
    raise AssertionError(f"{text!r} did not appear in {output} within {timeout} s")


# ---- a small prebuilt environment: fault tests that need no real install ----


def make_prebuilt_env(dest: Path, source: Path, base: str | None = None) -> Path:
    """A small environment with what the build steps of the install leave, for LXPU_TEST_PREBUILT
    (lxpu_admin/install/testhooks.py).

    A venv without pip over the base Python (which has torch and Lightning; a .pth file makes its packages
    visible, as --base-python does), lightning_xpu from the repository copy through a .pth file, the autoload
    hook, the site files and a passing smoke result. It loads and runs like a real build, in a fraction of a
    second and a few hundred kilobytes; the install job copies it into each new build.
    """
    base = base or base_python()
    subprocess.run([base, "-m", "venv", "--without-pip", "--system-site-packages", str(dest)], check=True)
    python = dest / "bin" / "python"
    version = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    base_sites = subprocess.run(
        [base, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    site_packages = dest / "lib" / f"python{version}" / "site-packages"
    (site_packages / "_lightning_xpu_base.pth").write_text(base_sites)
    (site_packages / "_lightning_xpu_source.pth").write_text(f"{source}\n")
    (site_packages / "lightning_xpu-autoload.pth").write_text(
        'import sys; any(hasattr(f, "find_spec") and f.find_spec("lightning_xpu", None) for f in sys.meta_path)'
        ' and __import__("lightning_xpu._autoload")\n'
    )
    (dest / "lightning-xpu-site.sh").write_text("")
    (dest / "lightning-xpu-site-modules.txt").write_text("")
    share = dest / "share" / "lightning-xpu"
    share.mkdir(parents=True)
    shutil.copy2(source / "scripts" / "common" / "toy_fit.py", share / "toy_fit.py")
    (share / "bytecompile-failures.txt").write_text("")
    smoke = {"ok": True, "level": "smoke",
             "checks": [{"name": "prebuilt", "status": "pass", "reason": "LXPU_TEST_PREBUILT: no smoke job ran",
                         "seconds": 0.0}]}
    (share / "smoke.json").write_text(json.dumps(smoke))
    return dest


def laid_out_prefix(prefix: Path, source: Path = REPO, uv: Path | None = None) -> Path:
    """PREFIX laid out as an install leaves it, over the prebuilt environment (no install job runs): the build under
    .envs, <prefix>/<tag> a link to it (a user layer belongs to a prefix and records its build), the pins and the
    guard in front of its pip and uv (the install's hook step, which keeps the install's pinned UV in the build), the
    tag's modulefile and setup script and the shared code. Returns the build."""
    from lxpu_admin.envside import pins

    root = make_prebuilt_env(prefix / ".envs" / f"{TAG}.20260101T000000-1", source)
    (prefix / TAG).symlink_to(f".envs/{root.name}")
    kept_uv = ["--uv", str(uv)] if uv else []
    assert pins.main(["write", str(root), "--python", str(root / "bin" / "python"), *kept_uv]) == 0
    write_tag_files(prefix)
    add_shared_code(prefix)
    return root


def rewrite_site_job(prefix: Path, source: Path) -> None:
    """Write <prefix>/validate_lightning.sh as an install at this place would (lxpu_admin/install/tagfiles.py, fed
    SITE's validation data from the source's rendered recipe data): the job names the prefix it was written for, so a
    copied prefix needs its own (else the next no-op run of the copy restores it)."""
    from lxpu_admin.install.tagfiles import write_site_validation_job

    jobs = json.loads((source / "recipes" / "rendered" / "install-data.json").read_text())["jobs"]
    write_site_validation_job(prefix, jobs[f"{SITE}/{VERSION}"]["validation"])


def prebuilt_args(source: Path, base: str | None = None) -> list[str]:
    """Install-job options that fit the prebuilt environment (made over `base`, default base_python())."""
    return ["--source", str(source), *PIP_SOURCE, "--base-python", base or base_python()]


# ---- a torchrun job that outlives rebuilds ----

# Each rank writes ready-<rank> (its sys.executable), waits for the file "go" (the rebuilds happen meanwhile),
# then imports lazily, starts a subprocess with sys.executable and all-reduces: what a deleted or mixed build
# breaks (ModuleNotFoundError, FileNotFoundError for sys.executable, workers exiting 255).
TORCHRUN_WORKER = """
import os, subprocess, sys, time
from pathlib import Path
out = Path(sys.argv[1])
rank = os.environ["RANK"]
(out / f"ready-{rank}").write_text(sys.executable)
while not (out / "go").exists():
    time.sleep(0.2)
import importlib
importlib.import_module("lightning.pytorch.loggers.csv_logs")  # a lazy import, after the rebuilds
import torch, torch.distributed as dist
child = subprocess.run([sys.executable, "-c", "import lightning_xpu, torch; print(torch.__file__)"],
                       capture_output=True, text=True)
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
(out / f"rank-{rank}").write_text(f"{child.returncode} {int(total.item())} {sys.executable}\\n{child.stderr}")
# Without it, gloo's threads can abort the interpreter at exit (std::terminate), as PyTorch warns.
dist.destroy_process_group()
"""


def assert_torchrun_workers(out: Path, executable: str) -> None:
    """Both ranks ran to the end after the rebuilds, with the interpreter they started with."""
    for rank in ("0", "1"):
        report = (out / f"rank-{rank}").read_text()
        status, total, python = report.split("\n")[0].split(" ", 2)
        assert (status, total, python) == ("0", "2", executable), report


def expected_tag_files(prefix: Path) -> dict[Path, str]:
    """TAG's modulefile and setup script as lxpu_admin/install/tagfiles.py writes them from the recipe's data
    (recipes/matrix.toml through the renderer): what the install must have written into `prefix`."""
    from lxpu_admin.install.tagfiles import TagData, modulefile_text, setup_text
    from lxpu_admin.render.artifacts import Renderer
    from lxpu_admin.render.recipes import load_recipes

    recipes = load_recipes(REPO / "recipes")
    version = recipes.matrix.versions[VERSION]
    variant = next(name for name in version.variants if version.tag(name) == TAG)
    tag = TagData.from_mapping(Renderer(recipes).tag_data(version, variant))
    return {prefix / tag.modulefile_name: modulefile_text(tag), prefix / tag.setup_name: setup_text(tag)}


def write_tag_files(prefix: Path) -> None:
    """TAG's modulefile and setup script written into `prefix` as an install writes them (expected_tag_files)."""
    for path, text in expected_tag_files(prefix).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def add_what_pack_imports(site: Path) -> None:
    """Into SITE (a site-packages): what pack's check imports from the unpacked copy, lightning_xpu (copied) and a
    stand-in `lightning` (the real one needs torch, hundreds of MB)."""
    (site / "lightning").mkdir()
    (site / "lightning" / "__init__.py").write_text('"""A stand-in: pack imports it from the unpacked copy."""\n')
    shutil.copytree(REPO / "lightning_xpu", site / "lightning_xpu", ignore=shutil.ignore_patterns("__pycache__"))


def stand_in_venv(dest: Path) -> Path:
    """A venv of its own (no --system-site-packages, so pack tries the image WITH the base interpreter first) that
    pack can image: add_what_pack_imports."""
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(dest)], check=True)
    (site,) = dest.glob("lib/python3*/site-packages")
    add_what_pack_imports(site)
    return dest
