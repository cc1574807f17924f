"""Publishing: ONE rename of <prefix>/<tag>, and the commands the bash driver (engine.sh) calls.

Operations, in order (each a place where tests kill the job: LXPU_TEST_PAUSE_AT):
  record        write the rollback record and size into the new (not yet visible) build      (`record`)
  entry-points  the driver writes the setup script and modulefile and the shared code they call
  link          a temporary symlink to the new build                                        (`switch`)
  rename        THE publishing rename of that symlink onto <prefix>/<tag>
  previous      derive .envs/<tag>.previous from the record
  cleanup       drop the install's own lease, stale leases and leftovers
The rollback pointer is recorded inside the new build before the rename, so the rename publishes the build and
its rollback together: a kill before "rename" leaves the old build published with its own record; after it, the
new one with its.

Test-only switches (like smoke.py's LIGHTNING_XPU_SMOKE_INJECT_FAILURE): LXPU_TEST_PAUSE_AT=<op> waits before
operation <op> while the file LXPU_TEST_PAUSE_FILE exists (tests kill the job there); LXPU_TEST_FAIL_AT=<op> makes
<op> fail as a full disk would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from lxpu_engine.admin import admin_action, validate_action
from lxpu_engine.builds import complete
from lxpu_engine.cleanup import cleanup_failed_build, finish, remove_leftovers
from lxpu_engine.leases import remove_stale_leases
from lxpu_engine.links import check_previous, share_link
from lxpu_engine.locking import lock, locked
from lxpu_engine.space import check_space
from lxpu_engine.state import State, Stop, fail, run, say


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
    with open(f"{share}/previous-build", "w") as handle:
        handle.write(state["current"] + "\n")
    kib = _du_first(["du", "-sk", env])
    files = _du_first(["du", "-s", "--inodes", env])
    with open(f"{share}/size", "w") as handle:
        handle.write(f"{kib} {files}\n")


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


def main(argv: list[str]) -> int:
    state = State.from_environment()
    command, args = argv[0], argv[1:]
    try:
        if command == "lock":
            return lock(state, again=args == ["again"])
        if command == "complete":
            return 0 if complete(state, args[0]) else 1
        if command == "locked":
            locked(state)
        elif command == "test-hook":
            test_hook(state, args[0])
        elif command == "record":
            record(state)
        elif command == "switch":
            switch(state)
        elif command == "after-publish-failure":
            return after_publish_failure(state, int(args[0]), args[1])
        elif command == "cleanup-failed":
            cleanup_failed_build(state)
        elif command == "finish":
            finish(state, int(args[0]))
        elif command == "check-space":
            check_space(state)
        elif command == "validate-action":
            validate_action(state)
        elif command == "admin":
            admin_action(state)
        else:
            print(f"lxpu_engine.publish: unknown command {command!r}", file=sys.stderr)
            return 2
    except Stop as stop:
        return stop.status
    except OSError as exc:  # a full disk, a permission: one line, as the shell's commands said it
        return fail(state, str(exc)).status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
