"""Steps 2 and 11 of an install (lock, publish) and the admin actions' steps: the lock, the no-op
check, and publishing by ONE rename of <prefix>/<tag>.

Publishing's operations, in order (each a place where tests kill the job: LXPU_TEST_PAUSE_AT):
  record        write the rollback record and size into the new (not yet visible) build      (`record`)
  entry-points  the setup script and modulefile and the shared code they call (lxpu_engine/entrypoints.py)
  link          a temporary symlink to the new build                                        (`switch`)
  rename        THE publishing rename of that symlink onto <prefix>/<tag>
  previous      derive .envs/<tag>.previous from the record
  cleanup       drop the install's own lease, stale leases and leftovers
The rollback pointer is recorded inside the new build before the rename, so the rename publishes the build and
its rollback together: a kill before "rename" leaves the old build published with its own record; after it, the
new one with its.

Test-only switches (like LIGHTNING_XPU_SMOKE_INJECT_FAILURE in lightning_xpu/validation/framework.py):
LXPU_TEST_PAUSE_AT=<op> waits before operation <op> while the file LXPU_TEST_PAUSE_FILE exists (tests kill the job
there); LXPU_TEST_FAIL_AT=<op> makes <op> fail as a full disk would.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from lxpu_engine.admin import admin_action
from lxpu_engine.builds import complete
from lxpu_engine.cleanup import remove_leftovers
from lxpu_engine.entrypoints import entry_points_current, share_permissions, write_entry_points
from lxpu_engine.leases import new_install_lease, remove_stale_leases
from lxpu_engine.links import check_previous, share_link
from lxpu_engine.locking import RELOCK, lock, locked, open_lock_file
from lxpu_engine.setup_lib import write_file
from lxpu_engine.state import State, Stop, fail, run, say, start_step


def test_hook(state: State, op: str) -> None:
    pause_at, fail_at = os.environ.get("LXPU_TEST_PAUSE_AT", ""), os.environ.get("LXPU_TEST_FAIL_AT", "")
    if not (pause_at or fail_at) or state.dry:
        return
    if fail_at == op:
        raise fail(state, f"{op}: No space left on device (injected by LXPU_TEST_FAIL_AT)")
    if pause_at == op:
        pause_file = os.environ.get("LXPU_TEST_PAUSE_FILE", "")
        if not pause_file:
            raise fail(state, "LXPU_TEST_PAUSE_FILE is not set")
        say(f"test pause before {op} (pid {state['pid']}): waiting while {pause_file} exists")
        while os.path.lexists(pause_file):
            time.sleep(0.1)


def record(state: State) -> None:
    """Write the rollback record and the size into the new build (not yet visible to anyone)."""
    test_hook(state, "record")
    say(f"+ record in the new build: rollback build '{state['current'] or 'none'}', size")
    if state.dry:
        return
    share, env = f"{state['env']}/share/lightning-xpu", state["env"]
    write_file(f"{share}/previous-build", state["current"] + "\n")
    kib = _du_first(["du", "-sk", env])
    files = _du_first(["du", "-s", "--inodes", env])
    write_file(f"{share}/size", f"{kib} {files}\n")


def _du_first(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.split("\t")[0].strip()


def switch(state: State) -> None:
    """From the temporary link to the cleanup: THE publishing rename, then what follows it."""
    link, tmp_link = f"{state.prefix}/{state.tag}", state.tmp("link")
    test_hook(state, "link")
    run(state, "ln", "-s", f".envs/{state.env_name}", tmp_link)
    share_link(state, tmp_link)
    test_hook(state, "rename")
    # THE publishing rename: <prefix>/<tag> switches from the old build to the new one atomically.
    run(state, "mv", "-T", tmp_link, link)
    state.set("published", "1")
    if state.dry:
        return
    try:
        os.remove(f"{state.envs}/{state.tag}.uninstalled")
    except FileNotFoundError:
        pass
    test_hook(state, "previous")
    state.set("current", state.env_name)
    check_previous(state, quiet=True)
    test_hook(state, "cleanup")
    kept = remove_leftovers(state)
    remove_stale_leases(state)
    if kept:
        # Complete builds that nothing points to are kept (a job may use them); say how to remove them.
        say(f"kept {kept} older complete build(s) of {state.tag} that nothing links to (jobs may still use them): --prune --keep N removes the unused ones")  # noqa: E501


def after_publish_failure(state: State, status: int, total: str) -> int:
    """After the publishing rename the new build is live: a later failure (a full disk, a signal) is reported as
    what it is, never as FAILED. Prints the last line; returns the exit status to use (0, or the signal's)."""
    reason = state["fail_reason"] or f"exit status {status}"
    say(f"WARNING: {reason} after publishing; the new build is live; rerun the same command to finish the housekeeping")
    say(f"lightning-xpu {state.tag}: installed {state.prefix}/{state.tag} -> .envs/{state.env_name} (housekeeping after publishing failed: {reason}) (total {total} s)")  # noqa: E501
    return status if status > 128 else 0


# ---- step 2: the lock ----


def take_lock(state: State) -> None:
    """The install lock (lxpu_engine/locking.py), held on a descriptor of this process for the whole run, then the
    install's own lease, held from the moment it exists: this process and every command it starts hold its
    shared flock (lxpu_engine/leases.py), which is what tells other runs that it is live."""
    if state.dry:
        lock(state, again=False)
        return
    lockfile = f"{state.prefix}/.locks/{state.tag}.lock"
    os.makedirs(os.path.dirname(lockfile), exist_ok=True)
    again = False
    while True:
        state.lock_fd = open_lock_file(lockfile)
        status = lock(state, again=again)
        if status != RELOCK:
            break
        os.close(state.lock_fd)
        state.lock_fd, again = None, True
    state.lease_fd, lease = new_install_lease(state)
    state.set("lease_file", lease)
    locked(state)


def published_is_current(state: State) -> bool:
    """True when the published install has exactly these inputs."""
    root = f"{state.prefix}/{state.tag}"
    if not os.path.islink(root):
        return False
    if not os.access(f"{root}/bin/python", os.X_OK) or not complete(state, state["current"]):
        say("the published build has no bin/python, or its manifest.json is missing or truncated: rebuilding")
        return False
    try:
        with open(f"{root}/manifest.json") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return False
    return manifest.get("status") == "installed" and manifest.get("inputs_hash") == state.inputs_hash


def lock_or_stop(state: State) -> None:
    """The lock step of an install: take the lock; stop when the published build has these inputs already (a no-op
    run restores the setup script and modulefile when they differ)."""
    take_lock(state)
    if state["force"] == "1" or not published_is_current(state):
        if os.environ.get("LXPU_TEST_PREBUILT"):
            test_prebuilt(state)  # tests only: steps 3-8 from a prebuilt environment
        return
    state.set("noop", "1")
    if state.dry:
        state.set("result", "already installed with these inputs: nothing to do (--force rebuilds)")
    elif entry_points_current(state):
        state.set("result", "already installed with these inputs: nothing changed (--force rebuilds)")
    else:
        write_entry_points(state)
        state.set("result", "already installed with these inputs: setup script, modulefile and validation job restored")
    state.set("env", "")


# ---- step 11: publish ----


def publish_step(state: State) -> None:
    """The record in the new build, the entry points, then THE publishing rename and what follows it."""
    record(state)
    share_permissions(state, state["env"], tree=True, read_only=True)
    if os.environ.get("LXPU_TEST_PAUSE_AT") or os.environ.get("LXPU_TEST_FAIL_AT"):
        test_hook(state, "entry-points")
    write_entry_points(state)
    switch(state)


def admin_step(state: State) -> None:
    """--prune, --uninstall or --rollback (lxpu_engine/admin.py); the build rolled back to is published with this
    checkout's setup script and modulefile."""
    admin_action(state)
    if state["action"] == "rollback" and not entry_points_current(state):
        write_entry_points(state)


def test_prebuilt(state: State) -> None:
    """LXPU_TEST_PREBUILT=DIR (tests only): steps 3 to 8 copy DIR, a small prebuilt environment with the files those
    steps would leave (tests/install/install_harness.py makes it), instead of building; the manifest and publishing
    steps then run as always. The fault tests of publishing, links, locks and logs need no real install."""
    from lxpu_engine.build import write_manifest  # the build steps import this module's neighbours
    from lxpu_engine.steps import EXTRA_TITLES, INSTALL_STEPS

    titles = {key: title for key, title, _ in INSTALL_STEPS}
    prebuilt = os.environ["LXPU_TEST_PREBUILT"]
    start_step(state, EXTRA_TITLES["prebuilt"])
    if not os.path.isdir(prebuilt):
        raise fail(state, f"LXPU_TEST_PREBUILT={prebuilt} is not a directory")
    os.makedirs(state.envs, exist_ok=True)
    run(state, "cp", "-a", prebuilt, state["env"])
    start_step(state, titles["manifest"])
    write_manifest(state)
    start_step(state, titles["publish"])
    publish_step(state)
    state.set("result", f"installed {state.prefix}/{state.tag} -> {os.readlink(f'{state.prefix}/{state.tag}')}")
    raise Stop(0)
