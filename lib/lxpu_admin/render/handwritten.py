"""The code written by hand next to the renders: every shell file under scripts/ (the install engine and its
parts, the staging command, the job library, the site job scripts, the setup library) and the Lua modulefile
body. `check` and `render` refuse one that `bash -n`, shellcheck or `luac -p` rejects, with one line per finding.

shellcheck over every file takes seconds, so a file found clean is remembered by the hash of its path, its content
and shellcheck's version under $XDG_CACHE_HOME/lightning-xpu/ (best effort: a cache that cannot be written only
costs the time). A file is checked with -x in the company of the files it sources, but shellcheck reports only the
file's own findings, so its own content is the key (the lint stage still runs shellcheck on every file).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from .matrix import MODULEFILE_BODY

_SHELL_SUFFIXES = (".sh", ".sbatch", ".pbs")
_SHEBANGS = ("#!/bin/bash", "#!/usr/bin/env bash", "#!/bin/sh", "#!/usr/bin/env sh")
LUA_FILES = (MODULEFILE_BODY,)


def _is_shell(path: Path) -> bool:
    if path.suffix in _SHELL_SUFFIXES:
        return True
    try:
        with path.open("rb") as handle:
            first = handle.readline(64).decode(errors="replace").strip()
    except OSError:
        return False
    return first.startswith(_SHEBANGS)


def shell_files(repo_root: Path, renders: set[str]) -> list[str]:
    """Every hand-written shell file under scripts/ (relative to `repo_root`), `renders` left out."""
    found = []
    for path in sorted((repo_root / "scripts").rglob("*")):
        relative = path.relative_to(repo_root).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and relative not in renders and _is_shell(path):
            found.append(relative)
    return found


def _cache_file(key: str) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "lightning-xpu" / "shellcheck-clean" / key


def _shellcheck(repo_root: Path, files: list[str]) -> list[str]:
    tool = shutil.which("shellcheck")
    if tool is None:
        return ["shellcheck: not found: install it (Debian: apt-get install shellcheck; ci/services/install.sh does)"]
    version = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
    keys = {}
    for relative in files:
        digest = hashlib.sha256(version.encode() + relative.encode() + b"\0" + (repo_root / relative).read_bytes())
        keys[relative] = _cache_file(digest.hexdigest())
    unchecked = [relative for relative in files if not keys[relative].is_file()]
    if not unchecked:
        return []
    done = subprocess.run(
        [tool, "-x", "--format=gcc", *unchecked], cwd=repo_root, capture_output=True, text=True, check=False
    )
    findings = [f"{line.split(':', 1)[0]}: shellcheck: {line.split(':', 1)[1]}" for line in done.stdout.splitlines()]
    if done.returncode != 0 and not findings:
        return [f"shellcheck failed: {(done.stderr.strip().splitlines() or ['no output'])[0]}"]
    flagged = {line.split(":", 1)[0] for line in findings}
    for relative in unchecked:
        if relative not in flagged:
            try:
                keys[relative].parent.mkdir(parents=True, exist_ok=True)
                keys[relative].touch()
            except OSError:
                pass
    return findings


def _luac() -> str | None:
    for name in ("luac", "luac5.4", "luac5.3", "luac5.1"):
        found = shutil.which(name)
        if found:
            return found
    return None


def lua_problems(root: Path, files: list[str]) -> list[str]:
    """`luac -p` on each file (relative to `root`, run from there: luac shortens long paths): one line per file
    that does not compile."""
    luac = _luac()
    if luac is None:
        return ["luac: not found: install Debian's lua5.3 (ci/services/install.sh does)"]
    problems = []
    for relative in files:
        done = subprocess.run([luac, "-p", relative], cwd=root, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["luac -p failed"])[0].removeprefix(f"{luac}: ")
            problems.append(f"{relative}: luac -p: {first}")
    return problems


def problems(repo_root: Path, renders: set[str]) -> list[str]:
    """One line per finding in the hand-written code: bash -n and shellcheck on the shell files, luac -p on the
    modulefile body."""
    shells = shell_files(repo_root, renders)
    found = []
    for relative in shells:
        done = subprocess.run(["bash", "-n", relative], cwd=repo_root, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            found.append(f"{relative}: bash -n: {(done.stderr.strip().splitlines() or ['failed'])[0]}")
    if not found:  # shellcheck of a file bash cannot parse says the same again
        found += _shellcheck(repo_root, shells)
    missing = [f"{relative}: missing" for relative in LUA_FILES if not (repo_root / relative).is_file()]
    return found + missing + lua_problems(repo_root, [r for r in LUA_FILES if (repo_root / r).is_file()])
