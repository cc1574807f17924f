"""Code finds code by importing it (issue 28): the admin package through bin/lightning-xpu-admin's PYTHONPATH=lib and
pytest's `pythonpath`, the runtime as an installed package. No `sys.path` edits, no loading a file by its path, no
running a file by path where an import does, except the documented loads below, each where importing the package would
do something it must not."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# file -> why it loads a file by path instead of importing a package.
DOCUMENTED_LOADS = {
    "lib/lxpu_admin/render/lightning_range.py": "the runtime's version table, without importing the runtime",
    "lib/lxpu_admin/envside/pins.py": "the environment's pip guard, without importing (and hooking) its runtime",
    "lightning_xpu/commands/userenv.py": "the prefix's own copy of the setup library, which must match that prefix",
}
LOADERS = {"spec_from_file_location", "run_path", "SourceFileLoader"}
PATH_EDITS = {"insert", "append", "extend"}


def python_files() -> list[str]:
    listing = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [path for path in listing.splitlines() if (REPO / path).exists()]


def findings(source: str) -> list[str]:
    """What SOURCE does to find code other than importing it: sys.path edits and by-path loads, one entry each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        target, name = node.func.value, node.func.attr
        is_sys_path = isinstance(target, ast.Attribute) and target.attr == "path" and \
            isinstance(target.value, ast.Name) and target.value.id == "sys"  # fmt: skip
        if is_sys_path and name in PATH_EDITS:
            found.append(f"line {node.lineno}: sys.path.{name}")
        elif name in LOADERS:
            found.append(f"line {node.lineno}: {name}")
    return found


def test_no_code_edits_sys_path_or_loads_files_by_path() -> None:
    offenders = {}
    for path in python_files():
        hits = findings((REPO / path).read_text())
        if hits and path not in DOCUMENTED_LOADS:
            offenders[path] = hits
    assert not offenders, f"import these instead (PYTHONPATH=lib, pytest's pythonpath): {offenders}"


def test_every_documented_load_is_still_needed() -> None:
    """An exception that no longer loads anything by path comes off the list (it must not outlive its reason)."""
    stale = [path for path in DOCUMENTED_LOADS if not findings((REPO / path).read_text())]
    assert not stale, f"remove from DOCUMENTED_LOADS: {stale}"


def test_the_reader_sees_each_kind() -> None:
    source = "\n".join(["import sys, runpy", "sys.path.insert(0, 'x')", "sys.path.append('y')", "runpy.run_path('z')",
                        "import importlib.util as u", "u.spec_from_file_location('m', 'p')",
                        "other.path.insert(0, 'fine')"])  # fmt: skip
    assert findings(source) == ["line 2: sys.path.insert", "line 3: sys.path.append", "line 4: run_path",
                                "line 6: spec_from_file_location"]  # fmt: skip
