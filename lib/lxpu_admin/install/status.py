"""`lightning-xpu-admin status --prefix DIR`: the tags published in a prefix, their builds, and what holds each
build (its live leases: lxpu_admin/install/leases.py) with how to release it. Changes nothing.

Per lease: what took it (module load, the setup script, an install), the user, host, Slurm/PBS job, the process it
records and the processes of this host that hold its file open (the flock holders: the shell and what it
started; only those this user may read, /proc may hide the others), then one line saying how to release it.
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from lxpu_admin.install.builds import split_build
from lxpu_admin.install.leases import LeaseFile, host, inspect, lease_files, lease_live, lease_owner
from lxpu_admin.install.state import State

PROG = "lightning-xpu-admin"
_SHOWN_HOLDERS = 4  # processes named per lease; the rest are counted


@dataclass
class Lease:
    path: str
    file: LeaseFile
    why: str  # lease_live's reason, e.g. "process 123 on node1"

    @property
    def fields(self) -> dict[str, str]:
        return self.file.fields


def command_of(pid: str) -> str | None:
    """The command line of a process of this host, where this user may read it."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    words = raw.rstrip(b"\0").split(b"\0")
    return " ".join(word.decode(errors="replace") for word in words)[:80] or None


def open_by(paths: set[str]) -> dict[str, list[str]]:
    """The processes of this host that hold each file open (pids by path), where this user may read their fds."""
    found: dict[str, list[str]] = {path: [] for path in paths}
    for fd_dir in glob.glob("/proc/[0-9]*/fd"):
        pid = fd_dir.split("/")[2]
        try:
            targets = {os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir)}
        except OSError:
            continue
        for path in paths & targets:
            found[path].append(pid)
    return {path: sorted(pids, key=int) for path, pids in found.items()}


def live_leases(prefix: Path) -> tuple[dict[str, list[Lease]], int]:
    """The live leases by build, and how many stale ones the next install or --prune will remove."""
    state = State()  # lease_live caches the Slurm cluster's name there
    state.prefix = str(prefix)
    by_build: dict[str, list[Lease]] = {}
    stale = 0
    for path in lease_files(glob.escape(str(prefix / ".leases")) + "/*@*"):
        live, why = lease_live(state, path)
        lease = inspect(path)
        if not live or lease is None:
            stale += 1
            continue
        # The build its name says: the name is what --prune and the installs look up.
        build = os.path.basename(path).partition("@")[0]
        by_build.setdefault(build, []).append(Lease(os.path.realpath(path), lease, why))
    return by_build, stale


def _process(pid: str) -> str:
    command = command_of(pid)
    return f"pid {pid} ({command})" if command else f"pid {pid}"


def holder_line(lease: Lease, holders: list[str]) -> str:
    """Who holds the lease: what took it, user, host, job, the recorded process, the processes holding it."""
    fields = lease.fields
    what = {"module": "module load", "setup-script": "setup script", "kernel": "Jupyter kernel",
            "install": "install"}.get(
        fields.get("what", ""), fields.get("what") or "lease")
    parts = [what, f"user {_user(lease)}", f"host {fields.get('host') or '?'}"]
    job = fields.get("job", "")
    if job:
        kind, _, job_id = job.partition(":")
        parts.append(f"{'Slurm' if kind == 'slurm' else 'PBS'} job {job_id}")
    here = fields.get("host") == host()
    pid = fields.get("pid", "")
    if pid:
        parts.append(_process(pid) if here else f"pid {pid}")
    others = [p for p in holders if p != pid]
    if others:
        named = ", ".join(_process(p) for p in others[:_SHOWN_HOLDERS])
        more = f" and {len(others) - _SHOWN_HOLDERS} more" if len(others) > _SHOWN_HOLDERS else ""
        parts.append(f"held open by {named}{more}")
    return f"{', '.join(parts)}: live ({lease.why})"


def _user(lease: Lease) -> str:
    """Who took the lease: its file's owner; a user= line that names someone else is shown, never believed."""
    owner, says = lease_owner(lease.file), lease.fields.get("user", "")
    return f"{owner} (its text says {says})" if says and says != owner else owner


def release_line(lease: Lease) -> str:
    """How to release the lease, by what holds it."""
    fields = lease.fields
    job, what, pid = fields.get("job", ""), fields.get("what", ""), fields.get("pid", "?")
    if job.startswith("slurm:"):
        return f"release: it ends with Slurm job {job[6:]} (scancel {job[6:]} ends it now)"
    if job.startswith("pbs:"):
        return f"release: it ends with PBS job {job[4:]} (qdel {job[4:]} ends it now)"
    if what == "install":
        return f"release: it ends with the install (pid {pid} on {fields.get('host') or '?'})"
    if fields.get("held") != "flock":
        return (f"release: it ends with process {pid} on {fields.get('host') or '?'}; once that is gone, "
                f"rm {lease.path}")
    if what == "kernel":
        return f"release: shut that Jupyter kernel down (pid {pid}); processes it started hold it until they end"
    shell = ("`module unload lightning-xpu` in that shell, or leave it (exit)" if what == "module"
             else "leave that shell (exit)")
    return f"release: {shell}; processes started from it (nohup, background jobs) hold it until they end"


def kept_builds(envs: Path) -> list[str]:
    """The build directories in .envs: <tag>.previous is a link to one of them (the rollback), not a build."""
    if not envs.is_dir():
        return []
    return sorted(p.name for p in envs.iterdir() if p.is_dir() and not p.is_symlink())


def report(prefix: Path) -> list[str]:
    """The status lines of a prefix."""
    envs = prefix / ".envs"
    kept = kept_builds(envs)
    links = {p.name: os.readlink(p) for p in prefix.iterdir()
             if p.is_symlink() and os.readlink(p).startswith(".envs/")}
    leases, stale = live_leases(prefix)
    holders = open_by({lease.path for held in leases.values() for lease in held})
    # A leased build whose tag is not published (uninstalled, a job still running) is shown too.
    tags = sorted(set(links) | {split_build(build)[0] for build in leases})
    lines = [] if tags else [f"{prefix}: no tag published"]
    for tag in tags:
        builds = [name for name in kept if name.startswith(f"{tag}.")]
        count = f"{len(builds)} build{'s' if len(builds) != 1 else ''} kept"
        lines.append(f"{tag} -> {links[tag]} ({count})" if tag in links else f"{tag}: not published ({count})")
        for build in sorted(b for b in leases if split_build(b)[0] == tag):
            published = " (published)" if links.get(tag) == f".envs/{build}" else ""
            held = leases[build]
            lines.append(f"  {build}{published}: {len(held)} live lease{'s' if len(held) != 1 else ''}")
            for lease in held:
                lines.append(f"    - {holder_line(lease, holders.get(lease.path, []))}")
                lines.append(f"      {release_line(lease)}")
    if stale:
        lines.append(f"({stale} stale lease{'s' if stale != 1 else ''} in {prefix / '.leases'}: the next install "
                     "or --prune removes them)")
    return lines


def main(argv: list[str]) -> int:
    prefix: str | None = None
    for index, word in enumerate(argv):
        if word == "--prefix" and index + 1 < len(argv):
            prefix = argv[index + 1]
        elif word.startswith("--prefix="):
            prefix = word.split("=", 1)[1]
    if prefix is None:
        print(f"{PROG}: error: status needs --prefix DIR (the install prefix)", file=sys.stderr)
        return 2
    root = Path(os.path.expanduser(prefix))
    if not root.is_dir():
        print(f"{PROG}: error: --prefix {root}: no such directory: nothing is installed there", file=sys.stderr)
        return 2
    print("\n".join(report(root)))
    return 0
