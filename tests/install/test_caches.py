"""Issue 30, item 4: the compile and JIT caches go to a private, node-local directory per user and build.

A prefix laid out as an install leaves it (install_harness.laid_out_prefix, with lightning-xpu-stage in the build's
bin/ as the install puts it), loaded by real Lmod and by the setup script. The node's temporary directory is a
directory of the test's own (LIGHTNING_XPU_STAGE_DIR, which lightning-xpu-stage reads). A rank on another node is a
process that inherits the variables where the directory does not exist (removed after the load): it must make it
through the same helper when it imports torch.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.install import install_harness as h

pytestmark = [pytest.mark.install, pytest.mark.lmod]

DIRECTORIES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "SYCL_CACHE_DIR": "sycl",
               "NEO_CACHE_DIR": "neo"}  # fmt: skip
NAMES = (*DIRECTORIES, "SYCL_CACHE_PERSISTENT", "TRITON_HOME", "LIGHTNING_XPU_CACHE", "LIGHTNING_XPU_CACHE_VARIABLES")
ENTRIES = ("module", "setup script")


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(prefix, its build) with lightning-xpu-stage installed into the build's bin/."""
    prefix = tmp_path_factory.mktemp("caches") / "a prefix"
    prefix.mkdir()
    root = h.laid_out_prefix(prefix)
    shutil.copy2(h.REPO / "scripts" / "common" / "stage" / "lightning-xpu-stage", root / "bin")
    return prefix, root


def _env(node: Path, **extra: str) -> dict[str, str]:
    env = h.job_env(LIGHTNING_XPU_STAGE_DIR=str(node), **extra)
    for name in NAMES:
        if name not in extra:
            env.pop(name, None)
    return env


def _printed(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line and line.split("=", 1)[0] in NAMES)


def _show() -> str:
    return " ".join(f'; [ -z "${{{name}+x}}" ] || echo "{name}=${name}"' for name in NAMES).lstrip("; ")


def _load_and_show(entry: str, prefix: Path, env: dict[str, str], after: str = "") -> dict[str, str]:
    done = h.bash(f"set -euo pipefail\n{h.load_line(entry, prefix, h.TAG)}\n{_show()}\n{after}", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return _printed(done.stdout)


def _private(path: Path) -> bool:
    info = path.lstat()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == 0o700


@pytest.mark.parametrize("entry", ENTRIES)
def test_caches_point_at_a_private_node_local_directory(laid_out: tuple[Path, Path], tmp_path: Path,
                                                        entry: str) -> None:  # fmt: skip
    prefix, root = laid_out
    node = tmp_path / "node tmp"
    node.mkdir()
    shown = _load_and_show(entry, prefix, _env(node))
    cache = node / f"lxpu-{os.geteuid()}" / f"cache.{root.name}"
    assert shown["LIGHTNING_XPU_CACHE"] == str(cache), shown
    assert {name: shown.get(name) for name in DIRECTORIES} == {
        name: f"{cache}/{sub}" for name, sub in DIRECTORIES.items()
    }
    assert shown["SYCL_CACHE_PERSISTENT"] == "1"
    assert _private(cache) and _private(cache.parent)
    if entry == "module":  # unload puts back exactly what was there before: nothing
        done = h.bash(f"{h.load_line(entry, prefix, h.TAG)}\nmodule unload lightning-xpu\n{_show()}", env=_env(node))
        assert done.returncode == 0 and _printed(done.stdout) == {}, done.stdout + done.stderr


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_users_own_cache_variables_win(laid_out: tuple[Path, Path], tmp_path: Path, entry: str) -> None:
    prefix, _ = laid_out
    node = tmp_path / "node"
    node.mkdir()
    own = {"TRITON_HOME": str(tmp_path / "my triton"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "my inductor"),
           "SYCL_CACHE_PERSISTENT": "0"}  # fmt: skip
    shown = _load_and_show(entry, prefix, _env(node, **own))
    assert {name: shown.get(name) for name in own} == own
    # Their groups are left alone (TRITON_HOME decides Triton's cache; SYCL's directory goes with its switch) ...
    assert "TRITON_CACHE_DIR" not in shown and "SYCL_CACHE_DIR" not in shown, shown
    # ... the others still go node-local.
    assert shown["NEO_CACHE_DIR"].startswith(f"{node}/lxpu-{os.geteuid()}/cache."), shown
    assert shown["LIGHTNING_XPU_CACHE_VARIABLES"].split() == ["NEO_CACHE_DIR"]


def test_a_rank_where_the_directory_is_missing_makes_it_through_the_same_checks(
    laid_out: tuple[Path, Path], tmp_path: Path
) -> None:
    """The module was loaded on one node; a rank runs on another, where <node tmp>/lxpu-<uid> does not exist yet:
    importing torch makes it private (and the directories the variables name, which the compute runtime needs)."""
    prefix, _ = laid_out
    node = tmp_path / "node"
    node.mkdir()
    script = (f"{h.load_line('module', prefix, h.TAG)}\n"
              f"rm -rf -- {h.q(node)}/lxpu-*\n"  # the other node: nothing there yet
              "python -c 'import torch, os; print(\"NEO=\" + os.environ[\"NEO_CACHE_DIR\"])'\n")  # fmt: skip
    done = h.bash(script, env=_env(node))
    assert done.returncode == 0, done.stdout + done.stderr
    neo = Path(done.stdout.split("NEO=", 1)[1].strip())
    assert neo.parent.parent == node / f"lxpu-{os.geteuid()}", neo
    assert _private(neo.parent.parent) and _private(neo.parent) and neo.is_dir()
    assert "warning" not in done.stderr, done.stderr
