"""The node-local compile caches cannot be squatted (issue 30, item 4): they hold code that gets loaded (Triton
and TorchInductor load the kernels they find there), and their path is predictable, <node tmp>/lxpu-<uid>/cache.<build>.

Another account (the attacker, a member of the shared group) makes the victim's <node tmp>/lxpu-<victim uid>
itself, writable to all, with a cache tree inside. Then:
 - the victim's setup script refuses it in one line and sets no cache variable there;
 - a rank that inherited the variables from a load on another node (where the directory was the victim's own)
   refuses it when it imports torch, in one line, and caches in a new private directory instead.
The node's temporary directory is a sticky, world-writable directory of the test's own, like /tmp
(LIGHTNING_XPU_STAGE_DIR), so that nothing is planted in the real /tmp.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.install import install_harness as h
from tests.security.accounts import Accounts

pytestmark = pytest.mark.security

DIRECTORY_NAMES = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "SYCL_CACHE_DIR", "NEO_CACHE_DIR")
SHOWN = ("LIGHTNING_XPU_CACHE", "LIGHTNING_XPU_CACHE_VARIABLES", "SYCL_CACHE_PERSISTENT", *DIRECTORY_NAMES)


@pytest.fixture
def build_with_helper(fresh_prefix: Path) -> Path:
    """The fresh prefix's build with lightning-xpu-stage in its bin/, as the install puts it for a venv build."""
    build = (fresh_prefix / h.TAG).resolve()
    stage = h.REPO / "scripts" / "common" / "stage" / "lightning-xpu-stage"
    subprocess.run(["install", "-m", "0755", str(stage), str(build / "bin")], check=True)
    return build


@pytest.fixture
def node_tmp(accounts: Accounts) -> Iterator[Path]:
    """A node's temporary directory: root's, mode 1777, like /tmp."""
    node = accounts.base / f"node-{secrets.token_hex(3)}"
    node.mkdir()
    node.chmod(0o1777)
    yield node
    shutil.rmtree(node, ignore_errors=True)


def _plant(accounts: Accounts, node: Path, build: Path) -> Path:
    """As the attacker: <node>/lxpu-<victim uid> of its own, writable to all, holding a cache tree."""
    squat = node / f"lxpu-{accounts.victim.uid}"
    planted = accounts.run(accounts.attacker, f"mkdir -m 0777 {h.q(squat)} && mkdir -p {h.q(squat)}/cache.{build.name}"
                           f"/triton/k && echo planted > {h.q(squat)}/cache.{build.name}/triton/k/kernel.json "
                           f"&& chmod -R a+rwX {h.q(squat)}")  # fmt: skip
    assert planted.returncode == 0, planted.stderr
    return squat


def _shown(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if line.split("=", 1)[0] in SHOWN)


def _show() -> str:
    return "\n".join(f'[ -z "${{{name}+x}}" ] || echo "{name}=${name}"' for name in SHOWN)


def test_the_setup_script_refuses_a_cache_directory_another_account_made(
    accounts: Accounts, fresh_prefix: Path, build_with_helper: Path, node_tmp: Path
) -> None:
    squat = _plant(accounts, node_tmp, build_with_helper)
    env = accounts.env(accounts.victim, LIGHTNING_XPU_STAGE_DIR=str(node_tmp))
    done = accounts.run(accounts.victim, f"source {h.q(fresh_prefix / f'lightning-setup-{h.TAG}.sh')}\n{_show()}",
                        env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _shown(done.stdout) == {}, done.stdout
    lines = [line for line in done.stderr.splitlines() if "compile caches" in line]
    assert len(lines) == 1 and f"refusing {squat}" in lines[0] and accounts.attacker.name in lines[0], done.stderr


def test_a_rank_refuses_a_cache_directory_another_account_made_on_its_node(
    accounts: Accounts, fresh_prefix: Path, build_with_helper: Path, node_tmp: Path
) -> None:
    setup = fresh_prefix / f"lightning-setup-{h.TAG}.sh"
    env = accounts.env(accounts.victim, LIGHTNING_XPU_STAGE_DIR=str(node_tmp))
    # The load, on the node where the job script runs: the directory is the victim's own. The job's environment
    # is what srun gives the ranks on the other nodes.
    saved = accounts.victim.home / f"job-env-{secrets.token_hex(3)}.sh"
    loaded = accounts.run(accounts.victim, f"source {h.q(setup)}\nexport -p > {h.q(saved)}\n{_show()}", env=env)
    assert loaded.returncode == 0, loaded.stderr
    assert _shown(loaded.stdout)["TRITON_CACHE_DIR"].startswith(str(node_tmp)), loaded.stdout
    # Another node: the directory is not there, and the attacker makes it first.
    shutil.rmtree(node_tmp / f"lxpu-{accounts.victim.uid}")
    squat = _plant(accounts, node_tmp, build_with_helper)
    # The rank imports torch: the hook acts when the name is looked up, before torch's code runs (this suite's
    # builds see no torch as another account, so the lookup is all that happens here; tests/install/test_caches.py
    # imports torch).
    rank = ("import os\ntry:\n    import torch\nexcept ModuleNotFoundError:\n    pass\n"
            "names = os.environ['LIGHTNING_XPU_CACHE_VARIABLES'].split()\n"
            "print('\\n'.join(f'{name}={os.environ[name]}' for name in names if name.endswith('_DIR')))\n")
    ran = accounts.run(accounts.victim, f"source {h.q(saved)}\npython -c {h.q(rank)}", env=env)
    assert ran.returncode == 0, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if "compile caches" in line]
    assert len(lines) == 1 and f"refusing {squat}" in lines[0], ran.stderr
    instead = Path(lines[0].rsplit("this process uses ", 1)[1].removesuffix(" instead"))
    shutil.rmtree(instead)  # the victim's private temporary directory (the suite's accounts go at its end)
    used = _shown(ran.stdout)
    assert set(used) == set(DIRECTORY_NAMES), ran.stdout
    assert all(value.startswith(f"{instead}/") for value in used.values()), used
