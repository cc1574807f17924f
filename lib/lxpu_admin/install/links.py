"""The two links of a tag: <prefix>/<tag> (the published build) and .envs/<tag>.previous (its rollback build).

Every run validates both under the lock before it deletes anything, and repairs them from the manifests (the
newest complete build) or stops and says what it found. .envs/<tag>.previous is derived from the rollback record
inside the published build (share/lightning-xpu/previous-build).
"""

from __future__ import annotations

import grp
import os

from lxpu_admin.install.builds import complete, follow, newest_complete, recorded_previous
from lxpu_admin.install.state import State, fail, run, warn


def set_link(state: State, link: str, target: str) -> None:
    """Replace a symlink atomically (temporary link + rename)."""
    tmp = state.tmp("relink")
    run(state, "ln", "-sfn", target, tmp)
    share_link(state, tmp)
    run(state, "mv", "-T", tmp, link)


def share_link(state: State, link: str) -> None:
    """With --shared-group, a new link is that group's (chgrp -h)."""
    if state.shared_group and not state.dry:
        os.chown(link, -1, grp.getgrnam(state.shared_group).gr_gid, follow_symlinks=False)


def _physical(path: str) -> str:
    return os.path.realpath(path) if os.path.isdir(path) else ""


def check_links(state: State) -> None:
    """Validate <prefix>/<tag> and .previous; repair them or stop. Sets `current` (the published build, or "")."""
    link, envs, tag = f"{state.prefix}/{state.tag}", state.envs, state.tag
    state.current = ""
    newest = newest_complete(state)
    if os.path.islink(link):
        raw = os.readlink(link)
        resolved = follow(link)
        if resolved is not None and os.path.exists(resolved):
            name = os.path.basename(resolved)
            if _physical(os.path.dirname(resolved)) != _physical(envs):
                raise fail(state, f"{link} points to {raw}, outside {envs}: this installer did not make that link; "
                                  f"point it at a build in {envs} (ls {envs}) or move it away, then rerun")
            if not complete(state, name):
                if not (name.startswith(f"{tag}.") and os.access(f"{resolved}/bin/python", os.X_OK)):
                    raise fail(state, f"{link} points to {raw}, which is not a complete build of {tag} (no whole "
                                      f"manifest.json with status installed): point it at a complete build in {envs} "
                                      f"(ls {envs}), or remove the link, then rerun")
                # An environment whose manifest was damaged: it stays published (jobs may use it) until a
                # rebuild replaces it, and is never removed by an install.
                warn(f"the published build {name} has a missing or truncated manifest.json: it is kept; an install "
                     "rebuilds")
            state.current = name
            if raw != f".envs/{name}":
                set_link(state, link, f".envs/{name}")
                state.note(
                    f"repaired {link}: it pointed to {raw}, now to .envs/{name} (the same build, named directly)"
                )
        elif newest:
            set_link(state, link, f".envs/{newest}")
            state.note(f"repaired {link}: it pointed to {raw}, which does not resolve (dangling or a loop); now to "
                       f".envs/{newest}, the newest complete build (from the manifests)")
            state.current = newest
        else:
            run(state, "rm", "-f", link)
            state.note(f"removed the broken link {link} (it pointed to {raw}; no complete build of {tag} exists)")
    elif newest and not os.path.exists(f"{envs}/{tag}.uninstalled"):
        set_link(state, link, f".envs/{newest}")
        state.note(f"repaired {link}: it was missing; now points to .envs/{newest}, the newest complete build (from "
                   "the manifests)")
        state.current = newest
    check_previous(state)


def real_directory(path: str) -> bool:
    """A directory, not a link: never a link this installer made, so never removed or replaced by it."""
    return os.path.isdir(path) and not os.path.islink(path)


def check_previous(state: State, quiet: bool = False) -> None:
    """.envs/<tag>.previous is derived from the rollback record inside the published build."""
    previous, current = f"{state.envs}/{state.tag}.previous", state.current
    if real_directory(previous):
        warn(f"{previous} is a directory, not the link this installer keeps there: it is left as it is (move it away "
             "to get the rollback link back)")
        return
    raw = os.readlink(previous) if os.path.islink(previous) else ""
    expected = ""
    recorded = recorded_previous(state, current) if current else None
    if recorded is not None:
        expected = recorded if complete(state, recorded) else ""
    elif raw:
        resolved = follow(previous)
        name = os.path.basename(resolved) if resolved is not None else ""
        if resolved is not None and name != current and complete(state, name):
            expected = name  # a build from before rollback records: keep what the link says
    if expected and raw != expected:
        set_link(state, previous, expected)
        if not quiet:
            was = f"pointed to {raw}" if raw else "was missing"
            state.note(f"repaired {previous}: it {was}; now {expected}, the rollback build recorded in {current}")
    elif not expected and (os.path.islink(previous) or os.path.exists(previous)):
        run(state, "rm", "-rf", previous)
        if not quiet:
            state.note(f"removed {previous} (it pointed to {raw or 'a non-link'}; {current or 'no build'} records no "
                       "rollback build that exists)")
