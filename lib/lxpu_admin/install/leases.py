"""Leases: <prefix>/.leases/<build>@<host>.<job>, recorded by `module load`, the setup script and the install job.

A lease is live while any process holds the shared flock its holder took on the lease file, whatever the scheduler
says: the shell that ran `module load` or the setup script, or the install job, and every child they start inherit
it, so a `nohup` or `setsid` process that outlived its shell, or its Slurm job (proctrack/linuxproc loses such
processes), keeps its lease. Otherwise it is live while its Slurm/PBS job is queued or running (the scheduler says
so), or, outside a scheduler on its host, while its process runs. Nothing here reads other users' processes (/proc
may hide them: hidepid=2). A lease from another host without a scheduler is live until its age limit
(LIGHTNING_XPU_LEASE_MAX_AGE_DAYS, 7 days). Key=value lines: build, host, job (slurm:ID, pbs:ID or empty), cluster,
pid, user, created, what (module, setup-script, kernel, install), and held=flock once its holder holds the lock.

A member of a --shared-group writes .leases, so a lease's text is believed only as far as it can hurt no one: who
wrote it is its file's owner (never user=), its age counts from the oldest of created=, its mtime and its ctime (a
created= in the future is not believed), and an install lease counts only when its file belongs to an account
that installs into the prefix (its owner, or root). Leases are read without following links or blocking, and the
install's own lease is created exclusively under a random name (new_install_lease)."""

from __future__ import annotations

import fcntl
import glob
import grp
import os
import pwd
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass

from lxpu_admin.envside.setup_lib import create_unpredictable, host, lease_text, scheduler_job
from lxpu_admin.install.state import State, command_output, fail, quote, say

_MAX_LEASE = 65536  # a lease is a few short lines; more is not read
_CLOCK_SLACK = 60  # seconds a host's clock may be ahead of the file server's


@dataclass(frozen=True)
class LeaseFile:
    """What a lease says, and what its file says about it (only the file's metadata is believed, never its text,
    about who wrote it and when: any member of a --shared-group may write any text there)."""

    fields: dict[str, str]
    uid: int  # the file's owner: who wrote it
    since: int  # when it was made, as far as can be trusted: the oldest of created=, its mtime and its ctime
    held: bool | None  # a process holds its flock (None: the file cannot be opened here)

    @property
    def created(self) -> int | None:
        created = self.fields.get("created", "")
        return int(created) if re.fullmatch(r"[0-9]{1,12}", created) else None


def inspect(path: str) -> LeaseFile | None:
    """The lease at PATH, read without following a link and without blocking (a FIFO planted there is no lease);
    None when the entry is not a regular file of one link. Whether a process holds its shared flock: an exclusive
    lock taken and dropped at once tells, without looking at anyone's processes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError:
        return _unreadable(path)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        # A hard link is no lease either: it could be another account's file (where fs.protected_hardlinks is off).
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return None
        text = os.read(fd, _MAX_LEASE).decode(errors="replace")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holding = False
        except BlockingIOError:
            holding = True
    finally:
        os.close(fd)
    return LeaseFile(_fields(text), info.st_uid, _since(_fields(text), info), holding)


def _unreadable(path: str) -> LeaseFile | None:
    """A lease this account may not open: only its metadata counts (the age rule)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        return None
    return LeaseFile({}, info.st_uid, _since({}, info), None)


def _fields(text: str) -> dict[str, str]:
    """Key=value lines; only whole lines count (a line still being written does not)."""
    lines = text.split("\n")[:-1]
    return dict(line.split("=", 1) if "=" in line else (line, "") for line in lines)


def _since(fields: dict[str, str], info: os.stat_result) -> int:
    """A created= after the file's mtime, or after now, is not believed: the oldest of created=, the mtime and the
    ctime (which no user can set, and which is never later than now)."""
    times = [int(info.st_mtime), int(info.st_ctime)]
    created = fields.get("created", "")
    if re.fullmatch(r"[0-9]{1,12}", created):
        times.append(int(created))
    return min(times)


def read_lease(path: str) -> dict[str, str]:
    """The lease's fields (empty when it is no regular file or cannot be read)."""
    lease = inspect(path)
    return lease.fields if lease is not None else {}


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


def pid_of_another(pid: str, uid: int) -> bool:
    """The process is visible here and belongs to another account than the lease file's: not that lease's process
    (a lease naming pid 1 would otherwise keep a build forever). Hidden processes (hidepid) are not judged."""
    try:
        return os.stat(f"/proc/{int(pid)}").st_uid not in (uid, 0)
    except (OSError, ValueError, OverflowError):
        return False


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


def _days(seconds: int) -> int:
    """Whole days, truncated toward zero as shell arithmetic does."""
    return seconds // 86400 if seconds >= 0 else -(-seconds // 86400)


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def lease_owner(lease: LeaseFile) -> str:
    """Who wrote the lease: its file's owner (never its user= line: anyone can write any text, or none)."""
    return _name(lease.uid)


def is_install_lease(path: str, lease: LeaseFile) -> bool:
    return ".install-" in os.path.basename(path).partition("@")[2] or lease.fields.get("what") == "install"


def installers(state: State) -> tuple[int, ...]:
    """The accounts that may install into the prefix: its owner, and root."""
    try:
        return tuple(sorted({os.stat(state.prefix).st_uid, 0}))
    except OSError:
        return (os.geteuid(), 0)


def forged(state: State, path: str, lease: LeaseFile) -> str:
    """Why an install lease is not believed (empty when it is): only the accounts that may install here write
    install leases; a member of the shared group can write any file in .leases."""
    if not is_install_lease(path, lease) or lease.uid in installers(state):
        return ""
    owners = " or ".join(_name(uid) for uid in installers(state))
    return (f"ignored the install lease {path}: its file belongs to {lease_owner(lease)}, not to {owners}, the only "
            f"accounts that install into {state.prefix}; it holds nothing (remove it: rm {quote(path)})")


def lease_live(state: State, path: str) -> tuple[bool, str]:
    """Is the lease live, and why (one line). A process that holds its flock keeps it live, whatever the
    scheduler says (with proctrack/linuxproc, a nohup or setsid process outlives its ended job)."""
    lease = inspect(path)
    if lease is None:
        return False, f"{path} is not a regular file: not a lease"
    why_not = forged(state, path, lease)
    if why_not:
        return False, why_not
    live, why = _job_or_process(state, lease)
    if lease.held and not live:
        return True, (f"a process still holds its flock, although {why} "
                      "(something it started still runs: nohup, setsid, a child of a killed job)")
    return live, why


def _job_or_process(state: State, lease: LeaseFile) -> tuple[bool, str]:
    """Lease liveness from its scheduler job, or its process on this host, or its age."""
    fields = lease.fields
    lease_host, job, cluster = fields.get("host", ""), fields.get("job", ""), fields.get("cluster", "")
    pid = fields.get("pid", "")
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
        if lease.held is not None and fields.get("held") == "flock":
            holding: bool | None = lease.held
        elif pid_of_another(pid, lease.uid):
            return False, f"process {pid} on {lease_host} is not {lease_owner(lease)}'s, who wrote the lease"
        else:
            holding = pid_exists(pid)
        if holding:
            return True, f"process {pid} on {lease_host}"
        if holding is not None:
            return False, f"process {pid} on {lease_host} has ended"
        what = "its lease cannot be read here"
    # Another host and no scheduler job: nothing here can see that process. Live until the age limit.
    max_days = os.environ.get("LIGHTNING_XPU_LEASE_MAX_AGE_DAYS") or "7"
    age = _days(int(time.time()) - lease.since)
    limit = int(max_days) if re.fullmatch(r"[0-9]+", max_days) else 0
    who = f"process {pid or '?'} on {lease_host or '?'} ({what})"
    if age < limit:
        return True, (
            f"{who}: cannot be checked from here, treated as live until {max_days} days old "
            "(LIGHTNING_XPU_LEASE_MAX_AGE_DAYS)"
        )
    return False, f"{who}, older than {max_days} days"


def lease_files(pattern: str) -> list[str]:
    """Regular files only, judged without following links: a link planted in .leases is never a lease."""
    found = []
    for path in glob.glob(pattern):
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                found.append(path)
        except OSError:
            pass
    return sorted(found)


def live_leases(state: State, build: str) -> list[str]:
    """The live leases of a build, one description each."""
    found = []
    for path in lease_files(glob.escape(f"{state.prefix}/.leases/{build}@") + "*"):
        live, why = lease_live(state, path)
        if live:
            found.append(why)
    return found


def install_leases(state: State, build: str) -> list[str]:
    """The install leases of a build that an account that installs here wrote (forged ones mark nothing)."""
    found = []
    for path in lease_files(glob.escape(f"{state.prefix}/.leases/{build}@") + "*.install-*"):
        lease = inspect(path)
        if lease is not None and not forged(state, path, lease):
            found.append(path)
    return found


def say_distrusted(state: State) -> None:
    """One line per lease of this tag that is not believed as written: a forged install lease (ignored), a
    created= in the future (its age counts from its file's time). Under the lock, once per run."""
    for path in lease_files(glob.escape(f"{state.prefix}/.leases/{state.tag}.") + "*@*"):
        lease = inspect(path)
        if lease is None:
            continue
        why_not = forged(state, path, lease)
        if why_not:
            say(why_not)
        elif lease.created is not None and lease.created > lease.since + _CLOCK_SLACK:
            say(f"the lease {path} says created={lease.created}, later than its file was written: its age counts "
                f"from {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(lease.since))}, when it was")


def remove_stale_leases(state: State) -> None:
    """Remove stale leases of this tag (bookkeeping files, reported as a count). A stale install lease of a build
    that exists and is not the published one stays: it marks a build its install never published (for --prune,
    which removes both). Forged install leases are stale."""
    count = 0
    for path in lease_files(glob.escape(f"{state.prefix}/.leases/{state.tag}.") + "*@*"):
        if lease_live(state, path)[0]:
            continue
        build = os.path.basename(path).partition("@")[0]
        unpublished = build != state.current and os.path.isdir(f"{state.envs}/{build}")
        if unpublished and path in install_leases(state, build):
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
    sticky (everyone removes only their own), like /tmp for the group. Its owner and mode are set through a
    descriptor of the directory itself, never through a path that could be a link."""
    path = f"{state.prefix}/.leases"
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise fail(state, f"{path} is not a directory ({exc.strerror}): this installer makes it; move it away, then "
                          "rerun") from None
    try:
        if state.shared_group:
            os.fchown(fd, -1, grp.getgrnam(state.shared_group).gr_gid)
            os.fchmod(fd, 0o3775)
    finally:
        os.close(fd)


def new_install_lease(state: State) -> tuple[int, str]:
    """Create the install's own lease file: exclusively, never through a link, under a name no one can predict
    (a random part: the run's pid and time are public, in logs/) and so cannot plant anything at beforehand in the
    group-writable .leases. Returns its descriptor (shared flock held: the lease is live from the moment it
    exists) and its path."""
    make_leases_dir(state)
    # The random part before .install-<pid>: cleanup's `*.install-<pid>` globs still find a killed run's.
    try:
        fd, path = create_unpredictable(
            lambda random: f"{state.prefix}/.leases/{state.env_name}@{host()}.{random}.install-{state.pid}")
    except FileExistsError:
        raise fail(state, f"could not create a lease in {state.prefix}/.leases: 8 random names were all taken; remove "
                          "what is not a lease there, then rerun") from None
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd, path


def take_install_lease(state: State) -> None:
    """The install job's own lease on the build it is making, so that nothing (not even a second install whose
    lock file was deleted) removes a build in flight. The driver made the file (new_install_lease) and holds its
    shared flock for the whole run (publish.py take_lock); this writes what it says, through that descriptor."""
    # The cluster is looked up once, here, and only when a lease names one: `scontrol show config` waits out its
    # message timeout (about 10 s) where no controller answers.
    for path in lease_files(glob.escape(f"{state.prefix}/.leases/") + "*"):
        if read_lease(path).get("cluster"):
            slurm_cluster(state)
            break
    assert state.lease_fd is not None, "the driver creates the lease first"
    user = pwd.getpwuid(os.getuid()).pw_name
    text = lease_text(state.env_name, scheduler_job()[0], str(state.pid), user, "install", held=True)
    os.write(state.lease_fd, text.encode())


def drop_install_lease(state: State) -> None:
    if state.lease_file:
        try:
            os.remove(state.lease_file)
        except OSError:
            pass
    state.lease_file = ""


def other_installer(state: State) -> str | None:
    """Another install of this tag that still runs although it does not hold the lock (its lock file was
    deleted): its lease's description. Forged install leases are not installs, and neither is a lease of this host
    whose install process has ended: what holds it is a process that install left running (an orphaned compileall
    after `scancel --batch --signal=KILL`), which keeps its build (lxpu_admin/install/cleanup.py) but runs no
    install."""
    for path in lease_files(glob.escape(f"{state.prefix}/.leases/{state.tag}.") + "*@*.install-*"):
        if path == state.lease_file:
            continue
        live, why = lease_live(state, path)
        fields = read_lease(path)
        pid = fields.get("pid", "")
        if fields.get("host") == host() and re.fullmatch(r"[0-9]+", pid) and not pid_exists(pid):
            continue
        if live:
            return why
    return None
