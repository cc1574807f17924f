"""The install engine's side of leases, against a member of the shared group (issue 27, What to build 3 and 6, Why 8).

The attacker is a member of the install's group: it may write the group-writable `.leases` of a `--shared-group`
prefix and read the world-readable `logs/`. The administrator (root, the prefix's owner) runs installs, no-op
reruns, `--prune` and `--rollback`. Nothing the attacker plants there may make the administrator's run write
through a link, wait for a forged install, keep a build forever, or remove a build a running process uses; and a
Slurm job's orphan (`nohup`/`setsid` after `scancel --batch --signal=KILL`, with proctrack/linuxproc) keeps the
build it holds.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.install import install_harness as h
from tests.security.accounts import Account, Accounts
from tests.security.conftest import SharedInstall

pytestmark = pytest.mark.security

HOST = os.uname().nodename


@dataclass
class Target:
    """A file another account owns, at which the attacker points links: it must never change."""

    path: Path
    text: str
    mode: int
    uid: int

    def assert_unchanged(self) -> None:
        info = self.path.stat()
        assert self.path.read_text() == self.text, f"{self.path} was written through a planted link"
        assert (info.st_mode & 0o7777, info.st_uid) == (self.mode, self.uid), f"{self.path}'s mode or owner changed"


def _target(path: Path, owner: Account | None) -> Target:
    text = f"{path.name}: nobody but its owner writes this\n"
    path.write_text(text)
    path.chmod(0o644)
    uid = owner.uid if owner else 0
    os.chown(path, uid, owner.gid if owner else 0)
    return Target(path, text, 0o644, uid)


@pytest.fixture
def targets(accounts: Accounts, tmp_path: Path) -> list[Target]:
    """A root-owned file and a file in the victim's private home (a link to it needs no access to it)."""
    tmp_path.chmod(0o755)
    victim = accounts.victim
    return [_target(tmp_path / "root-owned.conf", None), _target(victim.home / "victim-notes", victim)]


def _start_admin(install: SharedInstall, prefix: Path, output: Path, *args: str) -> subprocess.Popen[bytes]:
    """The administrator's install job (root), in the background."""
    env = h.job_env(LXPU_TEST_PREBUILT=str(install.prebuilt))
    return h.start_job(install.job, *h.prebuilt_args(install.source), "--shared-group", install.group, *args,
                       prefix=prefix, output=output, env=env)  # fmt: skip


def _admin(install: SharedInstall, prefix: Path, *args: str) -> h.JobResult:
    return install.run_install(*args, prefix=prefix)


# What the attacker runs: wait for the administrator's new log in logs/, read the run's time and pid from its name
# and plant links at every lease name that run could write (its build is <tag>.<time>-<pid>, made a moment before
# the log), each to one of the targets.
PLANT = r"""
set -u
prefix=$1; shift
before=$(ls "$prefix/logs")
for _ in $(seq 600); do
  new=$(ls "$prefix/logs" | grep -vxF -e "$before" | grep -E '^install-.*-[0-9]{8}T[0-9]{6}-[0-9]+\.log$' | head -1)
  [ -n "$new" ] && break
  sleep 0.05
done
[ -n "$new" ] || { echo "no new log appeared"; exit 1; }
stamp=${new%.log}; pid=${stamp##*-}; stamp=${stamp%-*}; stamp=${stamp##*-}
tag=${new#install-}; tag=${tag%-*-*.log}
seconds=$(date -d "${stamp:0:8} ${stamp:9:2}:${stamp:11:2}:${stamp:13:2}" +%s)
targets=("$@"); i=0
for back in 0 1 2 3; do
  when=$(date -d "@$((seconds - back))" +%Y%m%dT%H%M%S)
  target=${targets[$((back % ${#targets[@]}))]}
  ln -s "$target" "$prefix/.leases/$tag.$when-$pid@$(uname -n).install-$pid" && i=$((i + 1))
done
echo "planted $i links for pid $pid"
"""


@pytest.mark.parametrize("action", ["noop rerun", "--force", "--prune"])
def test_links_planted_at_predicted_lease_names_change_nothing(
    action: str, accounts: Accounts, shared_install: SharedInstall, fresh_prefix: Path, targets: list[Target],
    tmp_path: Path,
) -> None:  # fmt: skip
    """The attacker watches logs/ and plants links where the administrator's run would write its lease; the
    administrator holds the install lock meanwhile (another install of the tag), so the attacker has all the time
    it needs. The run must work and write through none of them."""
    args = {"noop rerun": [], "--force": ["--force"], "--prune": ["--prune", "--keep", "1"]}[action]
    attacker = subprocess.Popen(
        ["runuser", "-u", accounts.attacker.name, "--", "bash", "-c", PLANT, "plant", str(fresh_prefix),
         *(str(target.path) for target in targets)],
        env=accounts.env(accounts.attacker), cwd=accounts.attacker.home, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lock = os.open(fresh_prefix / ".locks" / f"{h.TAG}.lock", os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    output = tmp_path / "admin.out"
    admin = _start_admin(shared_install, fresh_prefix, output, *args)
    try:
        planted, _ = attacker.communicate(timeout=60)
        assert attacker.returncode == 0 and "planted 4 links" in planted, planted
        assert admin.poll() is None, output.read_text()
    finally:
        os.close(lock)  # the administrator's run goes on
        admin.wait(timeout=h.JOB_TIMEOUT_S)
    text = output.read_text()
    assert admin.returncode == 0, text
    for target in targets:
        target.assert_unchanged()
    _loads_for(accounts, accounts.victim, fresh_prefix)


def _loads_for(accounts: Accounts, who: Account, prefix: Path) -> None:
    """The published build loads for a member through the setup script."""
    setup = prefix / f"lightning-setup-{h.TAG}.sh"
    done = accounts.run(who, f'source {h.q(setup)} && python -c "import sys; print(sys.prefix)"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(h.published_build(prefix)), done.stdout


def _as(accounts: Accounts, who: Account, script: str) -> str:
    done = accounts.run(who, f"set -euo pipefail\n{script}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def holders(accounts: Accounts) -> Iterator[list[int]]:
    """Processes the attacker leaves running (killed at the end)."""
    pids: list[int] = []
    yield pids
    for pid in pids:  # each a session leader (setsid): flock and the command it runs
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _forge_install_lease(accounts: Accounts, prefix: Path, build: str, holders: list[int]) -> Path:
    """As the attacker: an install lease of BUILD with any pid, user root, created in ten years, whose flock a
    process of the attacker holds (on main this blocks every install, prune and rollback of the tag)."""
    lease = prefix / ".leases" / f"{build}@{HOST}.install-1"
    future = int(time.time()) + 10 * 365 * 86400
    pid = _as(accounts, accounts.attacker, (
        f"printf 'build={build}\\nhost={HOST}\\njob=\\ncluster=\\npid=1\\nuser=root\\ncreated={future}\\n"
        f"what=install\\nheld=flock\\n' > {h.q(lease)}\n"
        f"setsid flock -s {h.q(lease)} sleep 600 >/dev/null 2>&1 < /dev/null & echo $!"))  # fmt: skip
    holders.append(int(pid))
    deadline = time.monotonic() + 10
    while not _held(lease):
        assert time.monotonic() < deadline, "the attacker's process never took the forged lease's flock"
        time.sleep(0.1)
    return lease


def _held(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _builds(prefix: Path) -> list[str]:
    return sorted(name for name in os.listdir(prefix / ".envs") if name.startswith(f"{h.TAG}.2"))


def _ignored_line(output: str, lease: Path, attacker: Account) -> None:
    lines = [line for line in output.splitlines() if line.startswith(f"ignored the install lease {lease}: ")]
    assert lines, output
    assert f"its file belongs to {attacker.name}, not to root" in lines[0], lines[0]


def test_forged_install_leases_and_future_created_times_hold_nothing(
    accounts: Accounts, shared_install: SharedInstall, fresh_prefix: Path, holders: list[int]
) -> None:
    """A forged install lease (held, any pid, user=root) and a lease whose created= lies in the future: the
    administrator's --prune, --rollback and install still work, and each run names what it ignored in one line."""
    prefix = fresh_prefix
    for _ in range(2):
        result = _admin(shared_install, prefix, "--force")
        assert result.returncode == 0, result.output
    a, b, c = _builds(prefix)  # c published, b its rollback build, a in use by nobody
    assert os.readlink(prefix / h.TAG) == f".envs/{c}"
    forged = _forge_install_lease(accounts, prefix, a, holders)
    # A lease of another host (nothing here can ask about it) that says it was made in ten years; its file was
    # last modified 30 days ago, as far as its owner can say (touch sets the mtime, never the ctime).
    future = prefix / ".leases" / f"{a}@elsewhere.pid-77"
    later = int(time.time()) + 10 * 365 * 86400
    _as(accounts, accounts.attacker, (
        f"printf 'build={a}\\nhost=elsewhere\\njob=\\ncluster=\\npid=77\\nuser=\\ncreated={later}\\n"
        f"what=setup-script\\n' > {h.q(future)}\ntouch -d '30 days ago' {h.q(future)}"))  # fmt: skip

    result = _admin(shared_install, prefix, "--prune", "--keep", "0", "--lock-timeout", "5")
    assert result.returncode == 0, result.output
    _ignored_line(result.output, forged, accounts.attacker)
    assert f"the lease {future} says created=" in result.output, result.output
    assert _builds(prefix) == [b, c], result.output
    assert f"pruned: removed 1 build(s) ({a})" in result.last_line, result.output

    forged = _forge_install_lease(accounts, prefix, c, holders)
    result = _admin(shared_install, prefix, "--rollback", "--lock-timeout", "5")
    assert result.returncode == 0, result.output
    _ignored_line(result.output, forged, accounts.attacker)
    assert os.readlink(prefix / h.TAG) == f".envs/{b}", result.output

    forged = _forge_install_lease(accounts, prefix, b, holders)
    result = _admin(shared_install, prefix, "--force", "--lock-timeout", "5")
    assert result.returncode == 0, result.output
    _ignored_line(result.output, forged, accounts.attacker)
    assert os.readlink(prefix / h.TAG) not in (f".envs/{b}", f".envs/{c}")


def test_status_names_the_file_owner_and_survives_a_planted_fifo(
    accounts: Accounts, fresh_prefix: Path, holders: list[int]
) -> None:
    """`lightning-xpu-admin status` says who took a lease from its file's owner (never its user= line), and a FIFO
    planted in .leases does not make it hang."""
    build = os.readlink(fresh_prefix / h.TAG).removeprefix(".envs/")
    lease = fresh_prefix / ".leases" / f"{build}@{HOST}.pid-2"
    pid = _as(accounts, accounts.attacker, (
        f"mkfifo {h.q(fresh_prefix / '.leases' / f'{build}@{HOST}.fifo')}\n"
        f"printf 'build={build}\\nhost={HOST}\\njob=\\npid=2\\nuser={accounts.victim.name}\\ncreated=1\\n"
        f"what=setup-script\\nheld=flock\\n' > {h.q(lease)}\n"
        f"setsid flock -s {h.q(lease)} sleep 600 >/dev/null 2>&1 < /dev/null & echo $!"))  # fmt: skip
    holders.append(int(pid))
    time.sleep(0.5)
    admin = [str(h.REPO / "bin" / "lightning-xpu-admin"), "status", "--prefix", str(fresh_prefix)]
    done = subprocess.run(admin, env=h.job_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if re.search(r", pid 2\b", line)]
    assert len(lines) == 1, done.stdout
    assert f"user {accounts.attacker.name} (its text says {accounts.victim.name})" in lines[0], done.stdout


def test_a_build_skeleton_a_killed_run_left_is_reclaimed(shared_install: SharedInstall, fresh_prefix: Path) -> None:
    """What an orphaned compileall re-creates after its build was removed (directories and bytecode caches, no
    lease): the next run removes it and says what it was."""
    skeleton = fresh_prefix / ".envs" / f"{h.TAG}.20200101T000000-4242"
    cache = skeleton / "lib" / "python3.11" / "site-packages" / "pkg" / "__pycache__"
    cache.mkdir(parents=True)
    (cache / "mod.cpython-311.pyc").write_bytes(b"\x00" * 16)
    result = _admin(shared_install, fresh_prefix)
    assert result.returncode == 0, result.output
    assert not skeleton.exists(), result.output
    assert f"removing leftover {skeleton} (directories a process of a killed run re-created" in result.output


ORPHAN_JOB = """#!/bin/bash
set -euo pipefail
source {setup}
# A process the job leaves running: nohup and setsid take it out of the batch shell's process group, so that
# proctrack/linuxproc loses it when the batch shell is killed; it keeps the lease's descriptor, and its flock.
setsid nohup python -c 'import time; time.sleep(900)' >/dev/null 2>&1 < /dev/null &
echo "$!" > {pidfile}
echo started
exec sleep 900
"""


def test_an_orphan_of_a_killed_slurm_job_keeps_its_build(
    accounts: Accounts, shared_install: SharedInstall, fresh_prefix: Path, tmp_path: Path
) -> None:
    """A victim's Slurm job sources the setup script and starts a setsid/nohup process; `scancel --batch
    --signal=KILL` ends the job, and Slurm (proctrack/linuxproc) leaves the process running. After two rebuilds,
    `--prune --keep 0` keeps the build while that process lives, and removes it once it is gone."""
    h.require(h.slurm_up(), "Slurm")
    prefix = fresh_prefix
    build = os.readlink(prefix / h.TAG).removeprefix(".envs/")
    work = accounts.private_dir(accounts.victim, f"orphan-{tmp_path.name}")
    pidfile, output = work / "orphan.pid", work / "job.out"
    script = work / "job.sh"
    script.write_text(ORPHAN_JOB.format(setup=h.q(prefix / f"lightning-setup-{h.TAG}.sh"), pidfile=h.q(pidfile)))
    os.chown(script, accounts.victim.uid, accounts.victim.gid)
    submitted = _as(accounts, accounts.victim,
                    f"cd {h.q(work)} && sbatch --parsable --job-name=lxpu-orphan --output={h.q(output)} {h.q(script)}")
    job_id = submitted.strip().split(";")[0]
    orphan = 0
    try:
        h.wait_for_slurm_text(job_id, output, "started", timeout=300)
        orphan = int(pidfile.read_text())
        subprocess.run(["scancel", "--batch", "--signal=KILL", job_id], check=True, timeout=60)
        h.wait_for_slurm_job(job_id, timeout=300)
        time.sleep(1)
        os.kill(orphan, 0)  # Slurm lost it: it still runs, with the lease's flock
        for _ in range(2):
            result = _admin(shared_install, prefix, "--force")
            assert result.returncode == 0, result.output
        result = _admin(shared_install, prefix, "--prune", "--keep", "0")
        assert result.returncode == 0, result.output
        assert (prefix / ".envs" / build).is_dir(), f"--prune removed a build a running process uses:\n{result.output}"
        assert re.search(rf"keeping {re.escape(build)}: in use: a process still holds its flock, although Slurm job "
                         rf"{job_id} has ended", result.output), result.output  # fmt: skip
    finally:
        if orphan:
            os.kill(orphan, signal.SIGKILL)
    time.sleep(0.5)
    result = _admin(shared_install, prefix, "--prune", "--keep", "0")
    assert result.returncode == 0, result.output
    assert not (prefix / ".envs" / build).exists(), result.output
    assert build in result.last_line, result.output


def test_what_a_killed_install_left_running_keeps_its_build_and_stops_no_install(
    shared_install: SharedInstall, fresh_prefix: Path
) -> None:
    """An install under Slurm killed by `scancel --batch --signal=KILL` leaves what it started (a compileall)
    running, holding the install lease's flock, writing into its incomplete build: the next install neither waits
    for it as for an install (its process has ended) nor removes the build under it; once nothing holds the lease,
    the next run removes the build and says what it was."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    build = f"{h.TAG}.20200101T000000-{ended.pid}"
    package = fresh_prefix / ".envs" / build / "lib" / "python3.11" / "site-packages" / "pkg"
    package.mkdir(parents=True)
    (package / "mod.py").write_text("VALUE = 1\n")
    lease = fresh_prefix / ".leases" / f"{build}@{HOST}.0123456789abcdef.install-{ended.pid}"
    lease.write_text(f"build={build}\nhost={HOST}\njob=slurm:999999\ncluster=\npid={ended.pid}\nuser=root\n"
                     f"created={int(time.time())}\nwhat=install\nheld=flock\n")  # fmt: skip
    orphan = subprocess.Popen(["flock", "-s", str(lease), "sleep", "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not _held(lease):
            assert time.monotonic() < deadline, "flock never took the lease"
            time.sleep(0.1)
        result = _admin(shared_install, fresh_prefix, "--lock-timeout", "5")
        assert result.returncode == 0, result.output
        assert (package / "mod.py").is_file(), result.output
        assert (f"keeping the incomplete build {fresh_prefix}/.envs/{build}: in use or in flight (a process still "
                "holds its flock, although Slurm job 999999 has ended") in result.output, result.output  # fmt: skip
    finally:
        os.killpg(orphan.pid, signal.SIGKILL)  # flock and the sleep it started, which holds the lease too
        orphan.wait()
    result = _admin(shared_install, fresh_prefix, "--lock-timeout", "5")
    assert result.returncode == 0, result.output
    assert not (fresh_prefix / ".envs" / build).exists(), result.output
    assert f"removing leftover {fresh_prefix}/.envs/{build} (an incomplete build of a killed run" in result.output
