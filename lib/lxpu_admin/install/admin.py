"""--prune, --uninstall and --rollback: they run under the install lock, after the links were validated (and
repaired). Complete builds are removed only here, and never the published one, its rollback build or one with a
live lease.
"""

from __future__ import annotations

import datetime
import os
import time

from lxpu_admin.envside.setup_lib import write_file
from lxpu_admin.install.builds import builds, complete, reached_publishing, recorded_previous, size_of
from lxpu_admin.install.cleanup import install_leases, remove_build, unpublished
from lxpu_admin.install.entrypoints import set_modulefile_hidden, tag_entry_points
from lxpu_admin.install.leases import live_leases, remove_stale_leases
from lxpu_admin.install.links import check_previous, real_directory, set_link
from lxpu_admin.install.state import State, bad_input, fail, run, say, warn


def validate_action(state: State) -> None:
    """The admin actions' options (parsed by the driver): bad input before anything is written."""
    limited, action = state.keep is not None or state.older_than is not None, state.action
    if action == "prune":
        if not limited:
            raise bad_input(state, "--prune needs --keep N (keep the N newest builds) or --older-than DAYS: see --help")
    elif limited:
        raise bad_input(state, "--keep and --older-than go with --prune: add --prune")
    if action != "install" and state.force:
        raise bad_input(state, f"--force rebuilds: it does not go with --{action}")
    prefix, tag = state.prefix, state.tag
    if action == "rollback" and not os.path.isdir(prefix):
        raise bad_input(state, f"--rollback: {prefix} does not exist, so nothing is installed there: check --prefix")
    if action == "uninstall" and not _anything_installed(state):
        raise bad_input(
            state,
            f"--uninstall: nothing is installed as {tag} in {prefix} (no link, build, setup script or modulefile): "
            "check --prefix and --variant",
        )


def _anything_installed(state: State) -> bool:
    """Whether the tag has anything in the prefix that --uninstall would remove."""
    prefix, tag = state.prefix, state.tag
    paths = [f"{prefix}/{tag}", *tag_entry_points(state)]
    if any(os.path.lexists(path) for path in paths):
        return True
    envs = f"{prefix}/.envs"
    return os.path.isdir(envs) and any(name.startswith(f"{tag}.") for name in os.listdir(envs))


def _protected(state: State, name: str) -> str:
    """Why a build must stay (published, rollback, in use); empty when it may go."""
    current = state.current
    if name == current:
        return f"published as {state.prefix}/{state.tag}"
    previous = recorded_previous(state, current) or ""
    if previous and name == previous:
        return "the rollback build"
    leases = live_leases(state, name)
    return f"in use: {'; '.join(leases)}" if leases else ""


def _remove_unprotected(state: State) -> tuple[list[str], list[str]]:
    """Remove every complete build of the tag except the published one, its rollback build, those with a live
    lease and those --keep or --older-than keep. Returns (removed, kept with why)."""
    keep, older_than = state.keep, state.older_than
    cutoff = int(time.time()) - older_than * 86400 if older_than is not None else None
    removed: list[str] = []
    kept: list[str] = []
    remove_stale_leases(state)
    n = 0
    for name in builds(state):
        if not complete(state, name):
            continue  # incomplete: in flight (leased), or a leftover (removed under the lock)
        if unpublished(state, name) and not _protected(state, name):
            say(f"removing {state.envs}/{name} ({size_of(state, name)}): a killed install never published it")
            remove_build(state, name)
            run(state, "rm", "-f", *install_leases(state, name))
            removed.append(name)
            continue
        n += 1
        why = ""
        if keep is not None and n <= keep:
            why = f"one of the {keep} newest"
        elif cutoff is not None and int(os.stat(f"{state.envs}/{name}/manifest.json").st_mtime) > cutoff:
            why = f"younger than {older_than} days"
        why = why or _protected(state, name)
        if why:
            say(f"keeping {name}: {why}")
            kept.append(f"{name} ({why})")
        else:
            say(f"removing {state.envs}/{name} ({size_of(state, name)})")
            remove_build(state, name)
            removed.append(name)
    return removed, kept


def _drop_uninstalled_modulefile(state: State) -> None:
    """The modulefile --uninstall kept (hidden) for the shells that had loaded it goes with the tag's last build."""
    if os.path.lexists(f"{state.prefix}/{state.tag}") or builds(state):
        return
    run(state, "rm", "-f", tag_entry_points(state)[1])
    set_modulefile_hidden(state, False)


def prune(state: State) -> str:
    removed, kept = _remove_unprotected(state)
    _drop_uninstalled_modulefile(state)
    result = f"pruned: removed {len(removed)} build(s)" + (f" ({' '.join(removed)})" if removed else "")
    return result + f"; kept {len(kept)}" + (f": {', '.join(kept)}" if kept else "")


def uninstall(state: State) -> str:
    marker = f"{state.envs}/{state.tag}.uninstalled"
    # New loads stop first; jobs that loaded a build keep it through their lease.
    setup = tag_entry_points(state)[0]
    links = [f"{state.prefix}/{state.tag}", f"{state.envs}/{state.tag}.previous"]
    # The modulefile stays, hidden, while a build is kept for the shells and jobs that use it: `module unload` runs
    # it again to undo the load (a missing file leaves every variable set). The last build's removal removes it.
    set_modulefile_hidden(state, True)
    run(state, "rm", "-f", setup, *[link for link in links if not real_directory(link)])
    state.current = ""
    removed, kept = _remove_unprotected(state)
    if not kept:
        _drop_uninstalled_modulefile(state)
    entry = "setup script, modulefile and links removed" if not kept else (
        "setup script and links removed, modulefile hidden until its last build goes")
    result = f"uninstalled ({entry}; removed {len(removed)} build(s)"
    if not kept:
        if not state.dry and os.path.lexists(marker):
            os.remove(marker)
        return result + ")"
    # Marks the tag as removed, so no run repairs its link to a build kept only for running jobs.
    say(f"+ write {marker}")
    if not state.dry:
        write_file(marker, datetime.datetime.now().astimezone().isoformat(timespec="seconds") + "\n")
    return (
        f"{result}; kept {len(kept)} in use: {', '.join(kept)}; --prune --keep 0 removes them once their jobs have "
        "ended)"
    )


def rollback(state: State) -> str:
    source = state.current
    if not source:
        raise fail(state, f"no published build of {state.tag} in {state.prefix} to roll back from")
    target = recorded_previous(state, source) or ""
    if not target:
        raise fail(state, f"{source} records no rollback build (it was the first build of {state.tag} here): nothing "
                          "to roll back to")
    if not complete(state, target):
        if not reached_publishing(state, target):
            raise fail(state, f"the rollback build {target} recorded in {source} is gone or incomplete: nothing to "
                              "roll back to")
        # It was published (a kill right after its publishing rename) and damaged since: kept, as a published
        # build with a damaged manifest is (lxpu_admin/install/links.py), until an install rebuilds.
        warn(f"the rollback build {target} has a missing or truncated manifest.json: rolling back to it all the same "
             "(it was published before); the next install rebuilds")
    set_link(state, f"{state.prefix}/{state.tag}", f".envs/{target}")
    state.current = target
    check_previous(state, quiet=True)
    return (
        f"rolled back {state.prefix}/{state.tag} from .envs/{source} to .envs/{target} ({source} is kept for jobs "
        "that use it; --prune removes it once unused)"
    )


ACTIONS = {"prune": prune, "uninstall": uninstall, "rollback": rollback}


def admin_action(state: State) -> None:
    result = ACTIONS[state.action](state)
    if state.dry:
        result = f"dry run, nothing was changed; it would have: {result}"
    state.result = result
