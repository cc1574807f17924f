"""What killed or failed runs leave behind, and the logs.

Under the lock, a run removes incomplete builds of killed runs (an install lease of theirs is left, and stale) that
no live lease holds, and temporary files of killed runs. Complete builds are never removed here, nor anything a
link points to, nor an incomplete build no install left a lease on (damaged by hand, or from an older installer:
said). Complete builds go only through --prune and --uninstall (lxpu_admin/install/admin.py).
"""

from __future__ import annotations

import errno
import glob
import os
import shutil

from lxpu_admin.install.builds import builds, complete, follow, reached_publishing, recorded_previous
from lxpu_admin.install.leases import drop_install_lease, install_leases, lease_live, live_leases
from lxpu_admin.install.state import State, remove_quietly, run, say


def remove_build(state: State, name: str) -> None:
    """Remove a build: first renamed out of the builds (one atomic rename), then deleted, so a kill half-way leaves
    no half-deleted tree under a build's name (which the manifest would still call complete), only a
    .removing.<build> the next run removes."""
    trash = f"{state.envs}/.removing.{name}"
    run(state, "mv", "-T", f"{state.envs}/{name}", trash)
    run(state, "chmod", "-R", "u+w", trash)  # a published build is read-only, even to its owner
    run(state, "rm", "-rf", trash)




def unpublished(state: State, name: str) -> bool:
    """A complete build an install left with its (stale) install lease, a build its install never got to publish:
    a finished install drops its lease, and a run removes the stale install leases of its published build only."""
    leases = install_leases(state, name)
    return bool(leases) and not any(lease_live(state, path)[0] for path in leases)


def _reclaim(state: State, paths: list[str], what: str) -> int:
    for path in paths:
        say(f"removing leftover {path} ({what})")
        run(state, "chmod", "-R", "u+w", path)  # a build killed while being removed is read-only
        run(state, "rm", "-rf", path)
    return len(paths)


def _dead_run_trees(state: State, pattern: str) -> list[str]:
    """Temporary trees named <...>.<pid> whose install (a lease .install-<pid> on any tag) no longer runs."""
    found = []
    for path in sorted(glob.glob(pattern)):
        pid = path.rsplit(".", 1)[-1]
        if pid == str(state.pid):
            continue
        leases = glob.glob(glob.escape(f"{state.prefix}/.leases/") + f"*.install-{pid}")
        if not any(lease_live(state, lease)[0] for lease in leases):
            found.append(path)
    return found


def remove_leftovers(state: State) -> int:
    """Remove what killed runs left; returns how many complete builds nothing links to were kept."""
    envs, tag = state.envs, state.tag
    if not os.path.isdir(envs):
        return 0
    trees = _reclaim(state, sorted(glob.glob(glob.escape(f"{envs}/.removing.{tag}.") + "*")), "a build a killed run "
                                                                                              "was removing")
    trees += _reclaim(state, _dead_run_trees(state, glob.escape(f"{state.prefix}/.tools/.tmp.uv-") + "*"), "the uv "
                                                                                                           "bootstrap "
                                                                                                           "of a "
                                                                                                           "killed run")
    if trees:
        state.note(f"removed {trees} half-removed or temporary tree(s) of killed runs", quietly=True)
    resolved = follow(f"{envs}/{tag}.previous")
    previous = os.path.basename(resolved) if resolved is not None else ""
    own = state.tmp("")
    temporary = 0
    for path in sorted(glob.glob(glob.escape(f"{envs}/.tmp.{tag}.") + "*")):
        if path.startswith(own):
            continue
        say(f"removing leftover {path} (a temporary file of a killed run)")
        run(state, "rm", "-rf", path)
        temporary += 1
    if temporary:
        state.note(f"removed {temporary} temporary file(s) of a killed run", quietly=True)
    kept = 0
    rollback = recorded_previous(state, state.current) if state.current else None
    for name in builds(state):
        if name in (state.current, previous, rollback, state.env_name):
            continue
        if complete(state, name):
            kept += 1
            if unpublished(state, name):
                say(f"keeping the complete build {envs}/{name}: a killed install never published it (--prune removes "
                    "it)")
            continue
        leases = live_leases(state, name)
        if leases:
            say(f"keeping the incomplete build {envs}/{name}: in use or in flight ({'; '.join(leases)})")
            continue
        if not install_leases(state, name) and _skeleton(f"{envs}/{name}"):
            say(f"removing leftover {envs}/{name} (directories a process of a killed run re-created after its build "
                "was removed: no file in it but bytecode caches, and no lease holds it)")
            remove_build(state, name)
            state.note(f"removed the leftover {name} of a killed run", quietly=True)
            continue
        if not install_leases(state, name):
            say(f"keeping the incomplete build {envs}/{name}: no whole manifest.json, but no install of this tag left "
                "it (remove it by hand if nothing uses it)")
            continue
        if reached_publishing(state, name):
            # Its install got past the manifest (a kill after the publishing rename leaves its install lease): it
            # was complete, and jobs or a rollback record may use it; its manifest was damaged since.
            say(f"keeping the build {envs}/{name}: its install reached publishing, but its manifest.json is damaged "
                "now (remove it by hand if nothing uses it)")
            continue
        say(f"removing leftover {envs}/{name} (an incomplete build of a killed run; no lease holds it)")
        remove_build(state, name)
        run(state, "rm", "-f", *sorted(glob.glob(glob.escape(f"{state.prefix}/.leases/{name}@") + "*")))
        state.note(f"removed the leftover {name} of a killed run", quietly=True)
    return kept


def _skeleton(path: str) -> bool:
    """Only directories and bytecode caches: what a process of a killed run (an orphaned compileall) re-creates
    after its build was removed. Nothing in it can be lost."""
    for root, _dirs, files in os.walk(path):
        if files and os.path.basename(root) != "__pycache__":
            return False
    return True


def cleanup_failed_build(state: State) -> None:
    """A failed or interrupted build removes its own staging environment, temporary files and lease (a kill -9
    cannot: the next run does). It must work on a full disk (the likeliest reason it runs): it writes nothing but
    the smoke job's result, moved out of the build (no new space) next to the log, and a failure there is one line."""
    remove_quietly(*glob.glob(glob.escape(state.tmp("")) + "*"))
    env, link = state.env, f"{state.prefix}/{state.tag}"
    published = os.path.islink(link) and os.readlink(link) == f".envs/{state.env_name}"
    if env and not state.published and os.path.isdir(env) and not published:
        keep_smoke_result(state, f"{env}/share/lightning-xpu/smoke.json")
        say(f"removing the unpublished build {env}")
        remove_quietly(env)
    drop_install_lease(state)


def keep_smoke_result(state: State, smoke: str) -> None:
    """The smoke job's result goes next to the log (logs/<log name>.smoke.json): moved, where the log is on the
    build's file system (as it is in a prefix), else copied."""
    if not os.path.isfile(smoke) or not state.log:
        return
    kept = state.log.removesuffix(".log") + ".smoke.json"
    try:
        try:
            os.replace(smoke, kept)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.copy(smoke, kept)
    except OSError as exc:
        say(f"the smoke job's result {smoke} is not kept next to the log: {exc}")


def finish(state: State, status: int) -> None:
    """The very end of every run (the log is closed): the install's own lease goes; a run that changed nothing
    keeps its log as logs/install-<tag>-noop.log, replacing the previous one, so logs/ does not grow per no-op
    run; other runs keep the newest LIGHTNING_XPU_KEEP_LOGS (default 30) logs of the tag."""
    drop_install_lease(state)
    log = state.log
    if not log or not os.path.isfile(log):
        return
    logs = f"{state.prefix}/logs"
    if status == 0 and state.noop and not state.notes:
        try:
            os.replace(log, f"{logs}/install-{state.tag}-noop.log")
        except OSError as exc:  # a rename needs no space, but a full directory block may: the log stays as it is
            say(f"the log {log} keeps its name: {exc}")
        return
    keep = os.environ.get("LIGHTNING_XPU_KEEP_LOGS") or "30"
    keep_n = int(keep) if keep.isascii() and keep.isdigit() else 30
    pattern = glob.escape(f"{logs}/install-{state.tag}-") + "[0-9]*.log"
    for old in sorted(glob.glob(pattern), key=os.fsencode, reverse=True)[keep_n:]:
        for path in (old, old.removesuffix(".log") + ".smoke.json"):
            try:
                os.remove(path)
            except OSError:
                pass
