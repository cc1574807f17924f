"""`lightning-xpu-admin verify [--prefix DIR] [TAG|BUILD ...]`: whether each build of a prefix still holds what it
was published with. Changes nothing.

Per build, one line: its file-hash record (share/lightning-xpu/RECORD, lxpu_admin/envside/filerecord.py) must be the one
manifest.json names by sha256, and every file of the build must match it (none changed, missing or added); and
the build must still be sealed: no write bit, no hard link to another path (a cache), no file of another account.
Without a TAG every build in DIR/.envs is checked; without --prefix, the build the shell has loaded
(LIGHTNING_XPU_ROOT, set by `module load` and the setup script). Exit status: 0 every build matches, 1 one does not
(or cannot be checked), 2 bad input.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from lxpu_admin.envside import filerecord
from lxpu_admin.envside.manifest import AFTER_RECORD, RECORD
from lxpu_admin.install.builds import split_build

PROG = "lightning-xpu-admin verify"
FIX = "rebuild it (the install job with --force) or roll back (--rollback), and find out who changed it"


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def builds_in(prefix: Path, wanted: list[str]) -> list[str]:
    """The builds of .envs (real directories, not links or leftovers) that WANTED names, by tag or by build; all
    of them when WANTED is empty."""
    envs = prefix / ".envs"
    names = sorted(p.name for p in envs.iterdir() if not p.name.startswith(".") and p.is_dir() and not p.is_symlink())
    return [name for name in names if not wanted or name in wanted or split_build(name)[0] in wanted]


def role(prefix: Path, build: str) -> str:
    """" (published)" or " (rollback)" when the tag's link or its published build's record names BUILD."""
    link = prefix / split_build(build)[0]
    if not link.is_symlink():
        return ""
    published = os.readlink(link)
    if published == f".envs/{build}":
        return " (published)"
    try:
        previous = (prefix / published / "share" / "lightning-xpu" / "previous-build").read_text().strip()
    except OSError:
        return ""
    return " (rollback)" if previous == build else ""


def problems(build: Path) -> tuple[list[str], int]:
    """What is wrong with one build (empty: it matches its record and is sealed), and how many files were
    checked."""
    try:
        files = json.loads((build / "manifest.json").read_text())["files"]
    except (OSError, ValueError):
        return ["no whole manifest.json: cannot be checked"], 0
    except KeyError:
        return ["no file-hash record (built before builds recorded their files): cannot be checked; rebuild it "
                "(the install job with --force)"], 0  # fmt: skip
    record = build / files.get("record", RECORD)
    try:
        actual = filerecord.sha256_of(str(record))
    except OSError:
        return [f"its record {files.get('record', RECORD)} is missing"], 0
    if actual != files.get("sha256"):
        return [f"its record {files.get('record', RECORD)} is not the one manifest.json names (sha256 differs)"], 0
    found = []
    differences = filerecord.verify(str(build), str(record), files.get("not_recorded", AFTER_RECORD))
    if differences:
        found.append(differences.summary())
    writable, linked, foreign = filerecord.unsealed(str(build))
    for what, paths in (("writable", writable), ("hard-linked to another path", linked),
                        ("owned by another account", foreign)):  # fmt: skip
        if paths:
            more = f" and {len(paths) - filerecord.SHOWN} more" if len(paths) > filerecord.SHOWN else ""
            found.append(f"{len(paths)} {what} ({', '.join(paths[:filerecord.SHOWN])}{more})")
    return found, differences.checked


def check(prefix: Path, build: str) -> bool:
    """Print one line for BUILD; True when it matches."""
    start = time.monotonic()
    found, checked = problems(prefix / ".envs" / build)
    took = f"{time.monotonic() - start:.1f} s"
    if found:
        print(f"{build}{role(prefix, build)}: DOES NOT MATCH its record: {'; '.join(found)} ({took})")
        return False
    print(f"{build}{role(prefix, build)}: ok, {checked} files match its record, read-only ({took})")
    return True


def parse(argv: list[str]) -> tuple[str | None, list[str]] | str:
    """(--prefix, the tags or builds), or the error."""
    prefix, wanted = None, []
    words = iter(argv)
    for word in words:
        if word == "--prefix":
            prefix = next(words, "")
            if not prefix:
                return "--prefix needs a directory"
        elif word.startswith("--prefix="):
            prefix = word.split("=", 1)[1]
        elif word.startswith("-"):
            return f"unknown option '{word}' (verify [--prefix DIR] [TAG|BUILD ...])"
        else:
            wanted.append(word)
    return prefix, wanted


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    parsed = parse(argv)
    if isinstance(parsed, str):
        return _error(parsed)
    prefix, wanted = parsed
    if prefix is None:
        loaded = os.environ.get("LIGHTNING_XPU_ROOT", "")
        if not loaded:
            return _error("verify needs --prefix DIR (the install prefix), or a loaded lightning-xpu module")
        root = Path(loaded)
        prefix, wanted = str(root.parent.parent), [root.name]
    root = Path(os.path.expanduser(prefix))
    if not (root / ".envs").is_dir():
        return _error(f"--prefix {root}: no builds there (no .envs): check --prefix")
    builds = builds_in(root, wanted)
    if not builds:
        return _error(f"no build of {' '.join(wanted)} in {root / '.envs'}: check the tag (lightning-xpu-admin status)")
    bad = [build for build in builds if not check(root, build)]
    if bad:
        print(f"{len(bad)} of {len(builds)} build(s) do not match their records ({' '.join(bad)}): {FIX}")
        return 1
    print(f"{len(builds)} build(s) match their records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
