"""Hashed pip locks: the committed 2.13-cpu lock is well formed and current; `lock` says on one line what it
could not lock and why (an unreachable source here is a closed loopback port and a missing file:// path);
`check` catches a lock whose recipe changed."""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

from lxpu_recipes.locking import stale_locks
from lxpu_recipes.recipes import load_recipes
from recipe_helpers import RECIPES, edit, require, run_render

ENTRY = re.compile(r"^([a-z0-9][a-z0-9._-]*)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", re.MULTILINE)


def test_committed_cpu_lock_is_complete_and_current() -> None:
    text = (RECIPES / "locks/2.13-cpu.txt").read_text()
    entries = {name: version for name, version, _sha in ENTRY.findall(text)}
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(body) == 2 * len(entries)  # nothing but hashed entries
    assert entries["torch"] == "2.13.0+cpu" and entries["lightning"] == "2.6.6"
    assert "torchvision" not in entries  # left out of the cpu variant
    assert stale_locks(load_recipes(RECIPES)) == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_lock_reports_an_unreachable_source_and_writes_nothing(temp_recipes: Path) -> None:
    require(shutil.which("python3.11") is not None, "python3.11")
    matrix = temp_recipes / "recipes/matrix.toml"
    port = _closed_port()
    edit(matrix, 'url = "https://download.pytorch.org/whl/cpu"', f'url = "http://127.0.0.1:{port}/simple"')
    edit(matrix, 'url = "https://pypi.org/simple"', 'url = "file:///nonexistent/lxpu-test/simple"')
    lock = temp_recipes / "recipes/locks/2.13-cpu.txt"
    before = lock.read_text()
    done = run_render("lock", "--torch", "2.13", "--variant", "cpu", "--timeout", "3", repo=temp_recipes)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        f"not locked 2.13/cpu: the recipe's sources: http://127.0.0.1:{port}/simple "
        "file:///nonexistent/lxpu-test/simple: no torch at all there: unreachable, or no torch (ERROR: "
    ), lines[0]
    assert lines[1].startswith("conda layer: not locked")
    assert lock.read_text() == before


def test_lock_from_the_system_source_skips_unlabelled_builds(temp_recipes: Path) -> None:
    done = run_render(
        "lock", "--pip-source", "system", "--torch", "2.13", "--variant", "cuda", repo=temp_recipes
    )
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "not locked 2.13/cuda: its torch has no build label, so the machine's pip configuration could hand "
        "pip a torch of another build; lock it with --pip-source recipe"
    )
    assert not (temp_recipes / "recipes/locks/2.13-cuda.txt").exists()


def test_check_catches_a_stale_or_orphan_lock(temp_repo: Path) -> None:
    edit(
        temp_repo / "recipes/matrix.toml",
        '[versions."2.13".pins]\ntorch = { version = "2.13.0"',
        '[versions."2.13".pins]\ntorch = { version = "2.13.1"',
    )
    (temp_repo / "recipes/locks/2.2-cpu.txt").write_text("# nothing\n")
    assert stale_locks(load_recipes(temp_repo / "recipes")) == [
        "recipes/locks/2.13-cpu.txt: stale (the recipe changed since it was locked): run render.py lock",
        "recipes/locks/2.2-cpu.txt: no recipe for it (expected recipes/locks/<ver>-<variant>.txt)",
    ]
    done = run_render("check", repo=temp_repo)
    assert done.returncode == 1
    assert "drift: recipes/locks/2.13-cpu.txt: stale" in done.stdout
