"""Leases: <prefix>/.leases/<build>@<host>.<job>, recorded by `module load`, the setup script and the install job.

A lease is live while its Slurm/PBS job is queued or running (the scheduler says so), or, outside a scheduler on
its host, while any process holds the shared flock its holder took on the lease file (`held=flock`): the shell that
ran `module load` or the setup script, or the install job, and every child they start inherit it, so a `nohup` job
whose login shell exited keeps its lease. Nothing here reads other users' processes (/proc may hide them:
hidepid=2). A lease from another host without a scheduler is live until its age limit
(LIGHTNING_XPU_LEASE_MAX_AGE_DAYS, 7 days). Key=value lines: build, host, job (slurm:ID, pbs:ID or empty), cluster,
pid, user, created, what (module, setup-script, install), and held=flock once its holder holds the lock.
"""

from __future__ import annotations

import fcntl
import glob
import grp
import os
import pwd
import re
import shutil
import subprocess
import time

from lxpu_engine.setup_lib import host, lease_text, scheduler_job
from lxpu_engine.state import State, command_output, quote, say


def held(path: str) -> bool | None:
    """Does a process hold the lease's shared flock? (None: the file cannot be opened here.) An exclusive lock
    taken and dropped at once tells, without looking at anyone's processes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def pid_exists(pid: str) -> bool:
    """A lease without the flock (an older installer's, or a shell without flock(1)): its process id alone, asked
    with signal 0, which hidepid does not hide (a reused id keeps such a lease live: the safe side)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def slurm_cluster(state: State) -> str:
    """The Slurm cluster this runs in or submits to (empty without Slurm), looked up once per run."""
    if state.cluster_name is None:
        name = os.environ.get("SLURM_CLUSTER_NAME", "")
        if not name and shutil.which("scontrol"):
            done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=False)
            for line in done.stdout.splitlines():
                words = line.split()
                if len(words) >= 3 and words[0] == "ClusterName":
                    name = words[2]
        state.set_cluster(name)
    return state.cluster_name or ""


def read_lease(path: str) -> dict[str, str]:
    """The lease's fields; only whole lines count (a line still being written does not)."""
    try:
        with open(path, errors="replace") as handle:
            lines = handle.read().split("\n")[:-1]
    except OSError:
        return {}
    return dict(line.split("=", 1) if "=" in line else (line, "") for line in lines)


def _days(seconds: int) -> int:
    """Whole days, truncated toward zero as shell arithmetic does."""
    return seconds // 86400 if seconds >= 0 else -(-seconds // 86400)


def lease_live(state: State, path: str) -> tuple[bool, str]:
    """Is the lease live, and why (one line)."""
    lease = read_lease(path)
    lease_host, job, cluster = lease.get("host", ""), lease.get("job", ""), lease.get("cluster", "")
    pid, created = lease.get("pid", ""), lease.get("created", "")
    what = "no scheduler job"
    # A job of another Slurm cluster sharing this file system cannot be asked about here: the age rule below.
    if job.startswith("slurm:") and cluster and cluster != slurm_cluster(state):
        what, job = f"Slurm job {job[6:]} of cluster {cluster}, not this one", ""
    elif job.startswith("slurm:") and not shutil.which("squeue"):
        what, job = f"Slurm job {job[6:]}, no squeue here to ask", ""
    elif job.startswith("pbs:") and not shutil.which("qstat"):
        what, job = f"PBS job {job[4:]}, no qstat here to ask", ""
    if job.startswith("slurm:"):
        job_id = job[6:]
        status, out = command_output("squeue", "-h", "-j", job_id, "-o", "%T")
        if status == 0 and out:
            return True, f"Slurm job {job_id} on {lease_host} ({out})"
        if status == 0 or "Invalid job id" in out:
            return False, f"Slurm job {job_id} has ended"
        return True, f"Slurm job {job_id} on {lease_host} (squeue failed: {out.replace(chr(10), ' ')}; treated as live)"
    if job.startswith("pbs:"):
        job_id = job[4:]
        status, out = command_output("qstat", job_id)
        if status == 0:
            return True, f"PBS job {job_id} on {lease_host}"
        if "Unknown Job" in out or "has finished" in out:
            return False, f"PBS job {job_id} has ended"
        return True, f"PBS job {job_id} on {lease_host} (qstat failed: {out.replace(chr(10), ' ')}; treated as live)"
    if lease_host == host() and re.fullmatch(r"[0-9]+", pid):
        holding = held(path) if lease.get("held") == "flock" else pid_exists(pid)
        if holding:
            return True, f"process {pid} on {lease_host}"
        if holding is not None:
            return False, f"process {pid} on {lease_host} has ended"
        what = "its lease cannot be read here"
    # Another host and no scheduler job: nothing here can see that process. Live until the age limit.
    max_days = os.environ.get("LIGHTNING_XPU_LEASE_MAX_AGE_DAYS") or "7"
    if not re.fullmatch(r"[0-9]+", created):
        try:
            created = str(int(os.stat(path).st_mtime))
        except OSError:
            created = "0"
    age = _days(int(time.time()) - int(created))
    limit = int(max_days) if re.fullmatch(r"[0-9]+", max_days) else 0
    who = f"process {pid or '?'} on {lease_host or '?'} ({what})"
    if age < limit:
        return True, (
            f"{who}: cannot be checked from here, treated as live until {max_days} days old "
            "(LIGHTNING_XPU_LEASE_MAX_AGE_DAYS)"
        )
    return False, f"{who}, older than {max_days} days"


def _files(pattern: str) -> list[str]:
    return sorted(path for path in glob.glob(pattern) if os.path.isfile(path))


def live_leases(state: State, build: str) -> list[str]:
    """The live leases of a build, one description each."""
    found = []
    for path in _files(glob.escape(f"{state.prefix}/.leases/{build}@") + "*"):
        live, why = lease_live(state, path)
        if live:
            found.append(why)
    return found


def remove_stale_leases(state: State) -> None:
    """Remove stale leases of this tag (bookkeeping files, reported as a count). A stale install lease of a build
    that exists and is not the published one stays: it marks a build its install never published (for --prune,
    which removes both)."""
    count = 0
    for path in _files(glob.escape(f"{state.prefix}/.leases/{state.tag}.") + "*@*"):
        if lease_live(state, path)[0]:
            continue
        build, _, holder = os.path.basename(path).partition("@")
        if ".install-" in holder and build != state["current"] and os.path.isdir(f"{state.envs}/{build}"):
            continue
        if state.dry:
            say(f"+ rm {quote(path)} (stale lease)")
            continue
        try:
            os.remove(path)
            count += 1
        except OSError:
            pass
    if count:
        say(f"removed {count} stale lease(s) in {state.prefix}/.leases")


def make_leases_dir(state: State) -> None:
    """Users record leases here (module load, setup script): with --shared-group it is group-writable, setgid and
    sticky (everyone removes only their own), like /tmp for the group."""
    path = f"{state.prefix}/.leases"
    os.makedirs(path, exist_ok=True)
    if state["shared_group"]:
        os.chown(path, -1, grp.getgrnam(state["shared_group"]).gr_gid)
        os.chmod(path, 0o3775)


def take_install_lease(state: State) -> None:
    """The install job's own lease on the build it is making, so that nothing (not even a second install whose
    lock file was deleted) removes a build in flight. The driver made the file (state `lease_file`) and holds its
    shared flock for the whole run (publish.py take_lock); this writes what it says."""
    # The cluster is looked up once, here, and only when a lease names one: `scontrol show config` waits out its
    # message timeout (about 10 s) where no controller answers.
    for path in _files(glob.escape(f"{state.prefix}/.leases/") + "*"):
        if read_lease(path).get("cluster"):
            slurm_cluster(state)
            break
    make_leases_dir(state)
    user = pwd.getpwuid(os.getuid()).pw_name
    with open(state["lease_file"], "w") as handle:
        handle.write(lease_text(state.env_name, scheduler_job()[0], state["pid"], user, "install", held=True))


def drop_install_lease(state: State) -> None:
    if state["lease_file"]:
        try:
            os.remove(state["lease_file"])
        except OSError:
            pass
    state.set("lease_file", "")


def other_installer(state: State) -> str | None:
    """Another install of this tag that still runs although it does not hold the lock (its lock file was
    deleted): its lease's description."""
    own = f"@{host()}.install-{state['pid']}"
    for path in _files(glob.escape(f"{state.prefix}/.leases/{state.tag}.") + "*@*.install-*"):
        if path == state["lease_file"] or path.endswith(own):
            continue
        live, why = lease_live(state, path)
        if live:
            return why
    return None
