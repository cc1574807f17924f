"""Node-local staging (issue 15) without a cluster: lightning-xpu-stage on a small stand-in environment, and the
install engine's packing decisions (lib/lxpu_admin/envside/pack.py) on stand-in environments.

The stand-in environment has what lightning-xpu-stage reads (share/lightning-xpu/pack/pack.env and the image)
and a `python` that reports where it runs from; the real environment is staged and run in the two-host test
(tests/multinode/test_staging.py). Every fallback cause the command names is produced here for real: a missing
or refused image, a hash mismatch, too little space, no sbcast under Slurm, an unwritable directory.
"""

from __future__ import annotations

import hashlib
import io
import os
import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin import paths

pytestmark = pytest.mark.install

REPO = Path(__file__).resolve().parents[2]
STAGE = REPO / "scripts" / "common" / "stage" / "lightning-xpu-stage"
ENGINE = paths.LIB  # what PYTHONPATH holds to find the admin package
TAG = "9.9-cpu"
# The stand-in interpreter: prints the directory it runs from and the variables staging sets (the setup library's
# Python half, run as `python -I -S ...`, gets a real one).
PYTHON = f'#!/bin/sh\n[ "$1" != -I ] || exec {shlex.quote(sys.executable)} "$@"\n' + """\
echo "python-from $(cd "$(dirname "$0")/.." && pwd)"
echo "root $LIGHTNING_XPU_ROOT"
echo "virtual-env ${VIRTUAL_ENV:-}"
echo "shared ${LIGHTNING_XPU_SHARED_ROOT:-}"
"""


@dataclass(frozen=True)
class Shared:
    root: Path
    local: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.root / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "LIGHTNING_XPU_ROOT": str(self.root),
            "VIRTUAL_ENV": str(self.root),
            "LIGHTNING_XPU_STAGE_DIR": str(self.local),
        }
        env.update(extra)
        return env

    def run(self, script: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", script], env=self.env(**extra), capture_output=True, text=True,
                              timeout=60, check=False)

    def pack_env(self) -> Path:
        return self.root / "share" / "lightning-xpu" / "pack" / "pack.env"

    def set_pack(self, **fields: str) -> None:
        lines = dict(line.split("=", 1) for line in self.pack_env().read_text().splitlines())
        lines.update(fields)
        self.pack_env().write_text("".join(f"{k}={v}\n" for k, v in lines.items()))

    def private(self) -> Path:
        """This account's private directory on the node (lightning-xpu-stage --private-dir)."""
        return self.local / f"lxpu-{os.getuid()}"

    def jobdir(self, job: str) -> Path:
        return self.private() / f"stage.{job}"

    def copies(self) -> list[Path]:
        return sorted(self.private().glob("stage.*"))


def _image(python: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text, mode in (("./bin/python", python, 0o755), ("./lib/marker.txt", "staged\n", 0o644)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def shared(tmp_path: Path) -> Shared:
    """A shared install with spaces in its path and a good image."""
    root = tmp_path / "shared prefix" / TAG
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "lightning-xpu-stage").write_bytes(STAGE.read_bytes())
    (root / "bin" / "lightning-xpu-stage").chmod(0o755)
    (root / "bin" / "python").write_text(PYTHON)
    (root / "bin" / "python").chmod(0o755)
    pack = root / "share" / "lightning-xpu" / "pack"
    pack.mkdir(parents=True)
    image = _image(PYTHON)
    (pack / "env.tar.gz").write_bytes(image)
    (pack / "pack.env").write_text(
        "status=ok\nfile=share/lightning-xpu/pack/env.tar.gz\nformat=tar.gz\n"
        f"sha256={hashlib.sha256(image).hexdigest()}\nbytes={len(image)}\nunpacked_bytes=4096\nbase_staged=1\n"
        f"libpython=0\nsite=generic\ntag={TAG}\nnote=\n"
    )
    local = tmp_path / "node-local"
    local.mkdir()
    return Shared(root, local)


def _where(output: str) -> str:
    return next(line.split(" ", 1)[1] for line in output.splitlines() if line.startswith("python-from "))


def test_help() -> None:
    done = subprocess.run([str(STAGE), "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "Usage:" in done.stdout and "--shell" in done.stdout


def test_bad_usage_is_one_line_naming_the_fix(shared: Shared) -> None:
    done = shared.run("lightning-xpu-stage --bogus")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["lightning-xpu-stage: error: unknown argument '--bogus': see --help"]


def test_wrapper_runs_from_the_node_local_copy_and_removes_it(shared: Shared) -> None:
    done = shared.run("lightning-xpu-stage -- python; echo status $?", LIGHTNING_XPU_STAGE_JOB="42")
    assert done.stderr == ""
    copy = shared.jobdir("42") / TAG
    assert _where(done.stdout) == str(copy)
    assert f"root {copy}" in done.stdout and f"virtual-env {copy}" in done.stdout
    assert f"shared {shared.root}" in done.stdout
    assert "status 0" in done.stdout
    assert shared.copies() == []  # the last task of the node removed the copy it made


def test_wrapper_passes_the_exit_status_on(shared: Shared) -> None:
    done = shared.run("lightning-xpu-stage -- sh -c 'exit 7'; echo status $?")
    assert "status 7" in done.stdout


def test_shell_form_switches_the_shell_is_idempotent_and_cleans_up_at_exit(shared: Shared) -> None:
    script = """
        eval "$(lightning-xpu-stage --shell)"
        command -v python
        stamp1=$(stat -c %Y "$LIGHTNING_XPU_ROOT/.lxpu-staged")
        second=$(lightning-xpu-stage --shell)
        case "$second" in *trap*) echo "second sets a trap";; esac
        eval "$second"
        [ "$(stat -c %Y "$LIGHTNING_XPU_ROOT/.lxpu-staged")" = "$stamp1" ] && echo "not unpacked twice"
        python
    """
    done = shared.run(script, LIGHTNING_XPU_STAGE_JOB="7")
    copy = shared.jobdir("7") / TAG
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(copy / "bin" / "python")
    assert "second sets a trap" not in done.stdout and "not unpacked twice" in done.stdout
    assert _where(done.stdout) == str(copy)
    assert shared.copies() == []  # the EXIT trap removed it


def _falls_back(shared: Shared, cause: str, **extra: str) -> None:
    """The wrapper runs the command from the shared install with exactly one warning line naming CAUSE."""
    done = shared.run("lightning-xpu-stage -- python; echo status $?", **extra)
    assert "status 0" in done.stdout, done.stderr
    assert _where(done.stdout) == str(shared.root)
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 1, done.stderr
    assert warnings[0].startswith(f"lightning-xpu-stage: warning: running from the shared install {shared.root}: ")
    assert cause in warnings[0], warnings[0]
    shell = shared.run('eval "$(lightning-xpu-stage --shell)"; python', **extra)
    assert _where(shell.stdout) == str(shared.root) and cause in shell.stderr
    assert not any(path.is_dir() and (path / TAG).exists() for path in shared.copies())


def test_fallback_without_an_image(shared: Shared) -> None:
    shared.pack_env().unlink()
    _falls_back(shared, "no packed image in")


def test_fallback_when_the_install_refused_to_pack(shared: Shared) -> None:
    shared.set_pack(status="refused", note="LIGHTNING_XPU_PACK=0: no image written")
    _falls_back(shared, "LIGHTNING_XPU_PACK=0: no image written")


def test_fallback_on_a_hash_mismatch(shared: Shared) -> None:
    shared.set_pack(sha256="0" * 64)
    _falls_back(shared, "hash mismatch")


def test_fallback_when_the_node_local_directory_has_no_space(shared: Shared) -> None:
    shared.set_pack(unpacked_bytes=str(2**62))
    _falls_back(shared, "no space in")


def test_fallback_when_the_node_local_directory_cannot_be_made(shared: Shared, tmp_path: Path) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory\n")
    _falls_back(shared, "cannot create", LIGHTNING_XPU_STAGE_DIR=str(blocker))


def test_fallback_under_slurm_without_sbcast(shared: Shared, tmp_path: Path) -> None:
    bin_dir = tmp_path / "no-sbcast"
    bin_dir.mkdir()
    for tool in ("bash", "sh", "cat", "dirname", "basename", "id", "hostname", "uname", "sed", "grep", "mkdir", "stat"):
        for where in ("/usr/bin", "/bin"):
            if os.path.exists(f"{where}/{tool}"):
                os.symlink(f"{where}/{tool}", bin_dir / tool)
                break
    env_path = f"{shared.root / 'bin'}:{bin_dir}"
    done = shared.run('eval "$(lightning-xpu-stage --shell)"; python', PATH=env_path, SLURM_JOB_ID="99")
    assert _where(done.stdout) == str(shared.root)
    assert done.stderr.strip().splitlines() == [
        f"lightning-xpu-stage: warning: running from the shared install {shared.root}: "
        "sbcast not found on PATH (Slurm's file broadcast)"
    ]


def test_pbs_unpacks_once_per_node_with_mpiexec_and_names_copper_on_aurora(shared: Shared, tmp_path: Path) -> None:
    # A stand-in mpiexec that records its arguments and runs the command here (this machine is the one node).
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    log = tmp_path / "mpiexec.args"
    (fake / "mpiexec").write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(log))}\nshift 4\nexec "$@"\n')
    (fake / "mpiexec").chmod(0o755)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x1000c0s0b0n0\nx1000c0s0b0n0\n")
    shared.set_pack(site="aurora")
    extra = {"PATH": f"{shared.root / 'bin'}:{fake}:/usr/local/bin:/usr/bin:/bin", "PBS_JOBID": "8.aurora-pbs",
             "PBS_NODEFILE": str(nodefile)}
    done = shared.run('eval "$(lightning-xpu-stage --shell)"; python', **extra)
    copy = shared.jobdir("8.aurora-pbs") / TAG
    assert _where(done.stdout) == str(copy), done.stderr
    assert log.read_text().splitlines()[0].startswith("-n 1 -ppn 1 ")  # one rank per node: one node here
    assert "Copper" in done.stderr and "warning" not in done.stderr
    assert shared.copies() == []  # the EXIT trap removed the copies (mpiexec -ppn 1 again)


def _fake_pbs(tmp_path: Path) -> dict[str, str]:
    """A PBS job on one node, with a stand-in mpiexec that runs the command here."""
    fake = tmp_path / "fake-bin"
    fake.mkdir(exist_ok=True)
    (fake / "mpiexec").write_text('#!/bin/sh\nshift 4\nexec "$@"\n')
    (fake / "mpiexec").chmod(0o755)
    (tmp_path / "nodefile").write_text("n0\n")
    return {"PBS_JOBID": "9.pbs", "PBS_NODEFILE": str(tmp_path / "nodefile"),
            "PATH": f"{fake}:/usr/local/bin:/usr/bin:/bin"}


def test_a_failed_unpack_on_the_nodes_is_named_in_the_one_warning(shared: Shared, tmp_path: Path) -> None:
    """The nodes' own failure is what the warning names, not the cleanup after it."""
    shared.set_pack(sha256="0" * 64)
    pbs = _fake_pbs(tmp_path)
    pbs["PATH"] = f"{shared.root / 'bin'}:{pbs['PATH']}"
    done = shared.run('eval "$(lightning-xpu-stage --shell)"; python', **pbs)
    assert _where(done.stdout) == str(shared.root), done.stderr
    (warning,) = done.stderr.strip().splitlines()
    assert warning.startswith(f"lightning-xpu-stage: warning: running from the shared install {shared.root}: ")
    assert "hash mismatch" in warning, warning
    assert shared.copies() == []


@pytest.mark.parametrize("entry", ["setup script", "module"])
def test_stage_1_stages_inside_a_job_and_says_why_not_outside(entry: str, shared: Shared, tmp_path: Path) -> None:
    """The setup script and modulefile the install writes switch to the copy by themselves."""
    tag = h.TAG
    prefix = shared.root.parent
    shared.root.rename(prefix / tag)
    root = prefix / tag
    for name in ("lightning-xpu-site.sh", "lightning-xpu-site-modules.txt"):
        (root / name).write_text("")
    Shared(root, shared.local).set_pack(tag=tag)
    h.write_tag_files(prefix)
    h.add_shared_code(prefix)  # the code both call
    load = h.load_line(entry, prefix, tag)
    env = {"HOME": os.environ.get("HOME", "/root"), "LIGHTNING_XPU_STAGE_DIR": str(shared.local),
           "LIGHTNING_XPU_STAGE": "1", **_fake_pbs(tmp_path)}
    done = subprocess.run(["bash", "-c", f"{load}; python; echo unstaged-root $LIGHTNING_XPU_SHARED_ROOT"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    copy = shared.jobdir("9.pbs") / tag
    assert _where(done.stdout) == str(copy), done.stdout + done.stderr
    assert f"unstaged-root {root}" in done.stdout
    assert shared.copies() == []
    # Outside a job (no SLURM_JOB_ID, no PBS_JOBID): the shared environment, and one line saying why.
    outside = {key: value for key, value in env.items() if key not in ("PBS_JOBID", "PBS_NODEFILE")}
    done = subprocess.run(["bash", "-c", f"{load}; python"], env=outside, capture_output=True, text=True,
                          timeout=60, check=False)
    assert _where(done.stdout) == str(root), done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if "nothing staged" in line]
    assert len(said) == 1 and "outside a Slurm or PBS job" in said[0], done.stderr
    assert shared.copies() == []


def test_leftovers_of_ended_jobs_are_removed_and_live_ones_kept(shared: Shared) -> None:
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    old = shared.jobdir(f"local-{dead}")
    live = shared.jobdir(f"local-{os.getpid()}")
    for path in (old, live):
        (path / TAG).mkdir(parents=True)
        past = time.time() - 600
        os.utime(path, (past, past))
    done = shared.run("lightning-xpu-stage -- python", LIGHTNING_XPU_STAGE_JOB="5")
    assert done.returncode == 0, done.stderr
    assert not old.exists() and live.exists()


# ---- the engine's packing decisions ----------------------------------------------------------------------------

def _refusal(env_dir: Path) -> str:
    done = subprocess.run([sys.executable, "-B", "-m", "lxpu_admin.envside.pack", "refusal", str(env_dir)],
                          capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ENGINE)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_pack_refuses_other_kinds_with_one_line(tmp_path: Path) -> None:
    assert "only venvs (python -m venv, uv venv) and conda environments" in _refusal(tmp_path)


def test_pack_takes_a_conda_environment_without_conda_pack(tmp_path: Path) -> None:
    # Issue 30: a conda build is packed (and staged) as it is; neither conda nor conda-pack is needed.
    (tmp_path / "conda-meta").mkdir()
    assert _refusal(tmp_path) == ""


def test_pack_refuses_a_venv_whose_pth_names_its_own_path(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert _refusal(tmp_path) == ""
    (site / "editable.pth").write_text(f"{tmp_path}/src\n")
    assert "editable.pth names the environment's absolute path" in _refusal(tmp_path)


# ---- the private directory (issue 27): one helper for every per-user node-local path ---------------------------

def test_private_dir_is_made_private_and_reused(shared: Shared) -> None:
    first = shared.run("lightning-xpu-stage --private-dir cache")
    assert (first.returncode, first.stderr) == (0, ""), first.stderr
    assert first.stdout == f"{shared.private() / 'cache'}\n"
    for path in (shared.private(), shared.private() / "cache"):
        info = path.lstat()
        assert (info.st_uid, info.st_mode & 0o7777) == (os.getuid(), 0o700), path
    again = shared.run("umask 000; lightning-xpu-stage --private-dir cache")
    assert (again.returncode, again.stdout) == (0, first.stdout), again.stderr


def test_private_dir_needs_one_plain_name(shared: Shared) -> None:
    for name in ("../escape", "a/b", ".."):
        done = shared.run(f"lightning-xpu-stage --private-dir {shlex.quote(name)}")
        assert done.returncode == 2 and "--private-dir needs one NAME" in done.stderr, done.stderr


# What stands at <node-local>/lxpu-<uid> (made as root: the owner is what the kernel says), and what the one
# refusal line says about it besides its path.
NOBODY = 65534


def _owner_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "UNKNOWN"


def _squat(private: Path, tmp_path: Path, case: str) -> str:
    me = f"{_owner_name(os.getuid())} (uid {os.getuid()})"
    if case == "symlink":
        (tmp_path / "elsewhere").mkdir()
        private.symlink_to(tmp_path / "elsewhere")
        return f"it is a symbolic link owned by {me}, not a directory; remove it (rm -rf -- {private})"
    private.mkdir()
    if case == "another owner":
        os.chown(private, NOBODY, NOBODY)
        return f"it is owned by {_owner_name(NOBODY)} (uid {NOBODY}), not by you; another account made it"
    private.chmod(0o777)
    return f"it is owned by {me} with mode 0777: other accounts may write into it; remove it"


@pytest.mark.parametrize("case", ["symlink", "another owner", "writable by others"])
def test_a_private_dir_that_fails_a_check_is_refused_in_one_line(shared: Shared, tmp_path: Path, case: str) -> None:
    said = f"refusing {shared.private()}: " + _squat(shared.private(), tmp_path, case)
    done = shared.run("lightning-xpu-stage --private-dir cache")
    assert (done.returncode, done.stdout) == (1, ""), done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"lightning-xpu-stage: error: {said}"), line
    # Staging falls back to the shared install with that line, and never writes through it.
    _falls_back(shared, said, LIGHTNING_XPU_STAGE_JOB="3")
    if case == "symlink":
        assert list((tmp_path / "elsewhere").iterdir()) == []
    status = shared.run("lightning-xpu-stage --status", LIGHTNING_XPU_STAGE_JOB="3")
    assert f"copy:        {shared.jobdir('3') / TAG} ({said}" in status.stdout, status.stdout


def test_a_parent_others_can_rename_in_is_refused(shared: Shared) -> None:
    """A node-local directory that other accounts may write and that is not sticky (unlike /tmp): they could
    replace lxpu-<uid> after it is checked."""
    shared.local.chmod(0o777)
    said = f"refusing {shared.local}: {shared.local} (mode 0777) is writable by other accounts and not sticky"
    _falls_back(shared, said)
    shared.local.chmod(0o1777)
    done = shared.run("lightning-xpu-stage -- python", LIGHTNING_XPU_STAGE_JOB="4")
    assert _where(done.stdout) == str(shared.jobdir("4") / TAG), done.stderr
