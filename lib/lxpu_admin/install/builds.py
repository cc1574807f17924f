"""The builds of a tag: <prefix>/.envs/<tag>.<build-id>, which are complete, and the rollback record in each.

The build id's one writer (new_build_id) and one reader (split_build) are here; the runtime, which imports nothing
of the admin package, reads it back with its own pattern (lightning_xpu/install_facts.py _BUILD_ID).

Builds are immutable once published: nothing here writes into a build.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import time

from lxpu_admin.install.state import State


def new_build_id(pid: int) -> str:
    """<YYYYmmddTHHMMSS>-<pid>: unique per host and second, and sorting by build time; never a dot."""
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{pid}"


def split_build(name: str) -> tuple[str, str]:
    """(tag, build id) of a build's name <tag>.<build-id> (the tag may hold dots, the build id none)."""
    tag, _, build_id = name.rpartition(".")
    return tag, build_id


def builds(state: State) -> list[str]:
    """The build directories of this tag (names, newest first: build ids start with the build time)."""
    names = []
    for path in glob.glob(glob.escape(f"{state.envs}/{state.tag}") + ".*"):
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        name = os.path.basename(path)
        tag, build_id = split_build(name)
        if tag == state.tag and build_id not in ("previous", "uninstalled"):
            names.append(name)
    return sorted(names, key=os.fsencode, reverse=True)


def complete(state: State, name: str | None) -> bool:
    """A manifest.json that reads as JSON (not truncated), with status "installed" and this tag.

    The manifest step writes it after the smoke job: a build without it never passed, or was killed before.
    """
    if not name or not os.path.isdir(f"{state.envs}/{name}"):
        return False
    try:
        with open(f"{state.envs}/{name}/manifest.json", "rb") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("status") == "installed" and manifest.get("tag") == state.tag


def newest_complete(state: State) -> str:
    return next((name for name in builds(state) if complete(state, name)), "")


def recorded_previous(state: State, name: str) -> str | None:
    """The rollback build recorded in a build ("" for the first build of a tag; None without a record)."""
    try:
        with open(f"{state.envs}/{name}/share/lightning-xpu/previous-build") as handle:
            return handle.readline().rstrip("\n")
    except OSError:
        return None


def reached_publishing(state: State, name: str) -> bool:
    """Its install wrote the rollback record (publish.py `record`, after the manifest): the build was complete and
    may have been published, whatever its manifest says now. Never a leftover of a build in flight."""
    return recorded_previous(state, name) is not None and os.access(f"{state.envs}/{name}/bin/python", os.X_OK)


def follow(path: str) -> str | None:
    """Follow a chain of symlinks by hand, as the modulefile and setup script do (None: a loop)."""
    for _ in range(8):
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        path = target if target.startswith("/") else f"{path.rsplit('/', 1)[0]}/{target}"
    return None if os.path.islink(path) else path


def size_of(state: State, name: str) -> str:
    done = subprocess.run(["du", "-sh", f"{state.envs}/{name}"], capture_output=True, text=True, check=False)
    return done.stdout.split("\t")[0].strip()
