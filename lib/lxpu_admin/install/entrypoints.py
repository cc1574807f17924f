"""The entry points of a tag: its setup script and modulefile, the shared code they call (the modulefile body next to
the modulefiles, the setup library next to the setup scripts; one of each for every tag of the prefix, each
checking the contract its callers were written for), and the site's validation job. Identical for every build of
a tag (they resolve <prefix>/<tag>): written by temporary file + rename, and left untouched when unchanged."""

from __future__ import annotations

import glob
import grp
import os
import re
from pathlib import Path

from lxpu_admin.install.moduledefault import newest_xpu_tag, shown_tags, with_default
from lxpu_admin.install.state import State, fail, quote, say, warn
from lxpu_admin.install.tagfiles import (
    MODULE_DIR,
    MODULEFILE_BODY,
    SETUP_HELPER,
    SETUP_HELPER_NAME,
    SETUP_LIBRARY,
    SETUP_LIBRARY_NAME,
    VALIDATION_LIBRARY_NAME,
    TagData,
    modulefile_name,
    setup_name,
    site_job_current,
    tag_files_current,
    write_atomic,
    write_site_validation_job,
    write_tag_files,
)


def tag_entry_points(state: State) -> tuple[str, str]:
    """The tag's setup script and modulefile in the prefix."""
    return f"{state.prefix}/{setup_name(state.tag)}", f"{state.prefix}/{modulefile_name(state.tag)}"


def _shared_code(state: State) -> dict[str, str]:
    """Each shared file in the prefix -> its source in the repository."""
    return {f"{state.prefix}/{SETUP_LIBRARY_NAME}": f"{state.source}/{SETUP_LIBRARY}",
            f"{state.prefix}/{SETUP_HELPER_NAME}": f"{state.source}/{SETUP_HELPER}",
            f"{state.prefix}/{MODULEFILE_BODY}": f"{state.source}/{MODULEFILE_BODY}"}  # fmt: skip


def share_permissions(state: State, *paths: str, tree: bool = False, read_only: bool = False) -> None:
    """Never world-writable, whatever the wheels' file modes were; with --shared-group: that group, read-only.
    READ_ONLY (a build about to be published): no write bit for anyone, its owner included, so that nothing writes
    into a published build by accident (lxpu_admin/envside/filerecord.py records what it holds)."""
    group = state.shared_group
    if read_only:  # the build made read-only before it is published: printed by the dry and the real run alike
        say(f"+ {f'chgrp {group} and ' if group else ''}chmod {'-R' if tree else '--'} {'g+rX,' if group else ''}a-w: "
            f"{quote(*paths)}")
    if state.dry:
        return
    gid = grp.getgrnam(group).gr_gid if group else -1
    for top in paths:
        for path in _walk(top) if tree else [top]:
            info = os.lstat(path)
            if os.path.islink(path):
                if group:
                    os.chown(path, -1, gid, follow_symlinks=False)
                continue
            mode = info.st_mode & 0o7777 & ~(0o222 if read_only else 0o002)
            if group:
                os.chown(path, -1, gid)
                executable = os.path.isdir(path) or info.st_mode & 0o111
                mode = (mode | 0o040 | (0o010 if executable else 0)) & ~0o020
            if mode != info.st_mode & 0o7777:
                os.chmod(path, mode)


def _walk(top: str) -> list[str]:
    found = [top]
    for root, dirs, files in os.walk(top):
        found += [os.path.join(root, name) for name in (*dirs, *files)]
    return found


def set_modulefile_hidden(state: State, hidden: bool) -> None:
    """Hide the tag's modulefile from `module avail` (Lmod's hide_version, in the .modulerc.lua of the prefix's
    modulefiles/lightning-xpu), or show it again. --uninstall keeps the modulefile of a tag whose builds are still
    in use, hidden: Lmod unloads a module by running its file again, and when the file is gone it drops the module
    silently and leaves every variable the load set."""
    path = f"{state.prefix}/{MODULE_DIR}/.modulerc.lua"
    line = f'hide_version("lightning-xpu/{state.tag}")'
    lines = _modulerc_lines(path)
    wanted = [other for other in lines if other != line] + ([line] if hidden else [])
    if wanted != lines:
        say(f"+ {'hide' if hidden else 'show'} lightning-xpu/{state.tag} in {quote(path)}")
    _write_modulerc(state, path, lines, _default_marked(state, path, wanted))


def set_module_default(state: State, published: str = "") -> None:
    """Mark the newest shown xpu tag (with PUBLISHED, whose modulefile is being written) as the default of a bare
    `module load lightning-xpu` (lxpu_admin/install/moduledefault.py)."""
    path = f"{state.prefix}/{MODULE_DIR}/.modulerc.lua"
    lines = _modulerc_lines(path)
    _write_modulerc(state, path, lines, _default_marked(state, path, lines, published))


def _modulerc_lines(path: str) -> list[str]:
    try:
        with open(path) as handle:
            return handle.read().splitlines()
    except FileNotFoundError:
        return []


def _default_marked(state: State, path: str, lines: list[str], published: str = "") -> list[str]:
    tag = newest_xpu_tag(shown_tags(Path(state.prefix, MODULE_DIR), lines, published))
    marked = with_default(lines, tag)
    if marked != lines:
        say(f"+ default of a bare module load: {f'lightning-xpu/{tag}' if tag else 'Lmod picks'} in {quote(path)}")
    return marked


def _write_modulerc(state: State, path: str, lines: list[str], wanted: list[str]) -> None:
    if wanted == lines or state.dry:
        return
    if wanted:
        write_atomic(Path(path), "".join(f"{other}\n" for other in wanted), 0o644)
        share_permissions(state, path)
    else:
        os.remove(path)


def write_entry_points(state: State) -> None:
    setup, modulefile = tag_entry_points(state)
    set_modulefile_hidden(state, False)
    for target, source in _shared_code(state).items():
        say(f"+ write {quote(target)}")
        if not state.dry:
            write_atomic(Path(target), Path(source).read_text(), 0o644)
    for path in (setup, modulefile, f"{state.prefix}/validate_lightning.sh"):
        say(f"+ write {quote(path)}")
    if state.dry:
        set_module_default(state, state.tag)
        return
    try:
        write_tag_files(Path(state.prefix), TagData.from_mapping(state.variant_data))
    except (OSError, ValueError) as exc:
        raise fail(state, f"could not write {setup} and {modulefile}: {exc}") from None
    try:
        job = write_site_validation_job(Path(state.prefix), state.data["validation"])
    except (OSError, ValueError) as exc:
        raise fail(state, f"could not write {state.prefix}/validate_lightning.sh: {exc}") from None
    set_module_default(state, state.tag)
    share_permissions(state, f"{state.prefix}/modulefiles", tree=True)
    share_permissions(state, setup, f"{state.prefix}/{SETUP_LIBRARY_NAME}",
                      f"{state.prefix}/{SETUP_HELPER_NAME}", state.envs,
                      f"{state.prefix}/logs", str(job), f"{state.prefix}/{VALIDATION_LIBRARY_NAME}")  # fmt: skip
    if state.log:
        share_permissions(state, state.log)
    warn_other_contracts(state)


def entry_points_current(state: State) -> bool:
    setup, modulefile = tag_entry_points(state)
    if not (os.path.isfile(setup) and os.path.isfile(modulefile)):
        return False
    if not (tag_files_current(Path(state.prefix), TagData.from_mapping(state.variant_data))
            and site_job_current(Path(state.prefix), state.data["validation"])):  # fmt: skip
        return False
    for target, source in _shared_code(state).items():
        try:
            if Path(target).read_bytes() != Path(source).read_bytes():
                return False
        except OSError:
            return False
    return True


def _contract(path: str, pattern: str) -> str:
    try:
        with open(path) as handle:
            match = re.search(pattern, handle.read(), re.MULTILINE)
    except OSError:
        return ""
    return match.group(1) if match else ""


def warn_other_contracts(state: State) -> None:
    """The body and library just written serve every tag of the prefix: name the tags whose modulefile or setup
    script (installed from another checkout) was written for another contract, and so now stops with that
    message."""
    body = _contract(f"{state.source}/{MODULEFILE_BODY}", r"^local CONTRACT = ([0-9]+)$")
    lib = _contract(f"{state.source}/{SETUP_LIBRARY}", r"^  local contract=([0-9]+)$")
    modules = glob.glob(glob.escape(os.path.dirname(f"{state.prefix}/{MODULEFILE_BODY}")) + "/*.lua")
    scripts = glob.glob(glob.escape(state.prefix) + "/lightning-setup-*.sh")
    stale = []
    for path in sorted(modules) + sorted(scripts):
        if path.endswith(".lua"):
            want, have = _contract(path, r"^  contract = ([0-9]+),$"), body
        else:
            want, have = _contract(path, r"^\. .* ([0-9]+) [^ ]* [^ ]* [^ ]*$"), lib
        if want and want != have:
            stale.append(os.path.basename(path))
    if stale:
        warn(f"{', '.join(stale)} in {state.prefix} came from another checkout and need the modulefile body or setup "
             "library it replaced: rerun their install jobs from this checkout")
