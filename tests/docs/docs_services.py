"""What the docs test needs around a block: the README's marked commands, and the services a block needs
(skipped locally when missing, a failure under CI's LXPU_REQUIRE_SERVICES=1)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.docs.docs_blocks import Block, documents, lmod_init

SLURM_READY_STATES = ("idle", "mixed", "allocated", "completing")


@dataclass(frozen=True)
class DocsInstall:
    home: Path  # the HOME the README's install command ran with
    output: str  # what it printed


def readme_block(role: str) -> Block:
    """The README's one block with this role; fails the test when there is not exactly one."""
    found = [block for doc in documents() if doc.path == "README.md" for block in doc.runnable()]
    found = [block for block in found if block.role == role]
    if len(found) != 1:
        pytest.fail(
            f"README.md must have exactly one block marked <!-- runnable: role={role} -->, has {len(found)}"
        )
    return found[0]


def slurm_state() -> str:
    try:
        result = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"sinfo failed: {error}"
    return result.stdout.strip() or result.stderr.strip() or f"sinfo exited {result.returncode}"


def mpich_mpiexec() -> str | None:
    """MPICH's Hydra mpiexec: LXPU_MPICH_MPIEXEC (set by ci/test.sh), else the `mpiexec` on PATH."""
    return os.environ.get("LXPU_MPICH_MPIEXEC") or shutil.which("mpiexec")


def require_needs(needs: frozenset[str]) -> None:
    """Skip (locally) or fail (CI) when a service in NEEDS is missing."""
    if "install" in needs:
        missing = [tool for tool in ("python3.11", "flock") if shutil.which(tool) is None]
        require_service("the install job's tools", not missing, f"{', '.join(missing)} not on PATH")
    if "lmod" in needs:
        require_service("Lmod", lmod_init().is_file(), f"no {lmod_init()} (LXPU_LMOD_INIT)")
    if "slurm" in needs:
        state = slurm_state()
        require_service("Slurm", state.split("\n")[0] in SLURM_READY_STATES, f"sinfo -h -o %T says {state!r}")
    if "mpi" in needs:
        found = mpich_mpiexec()
        require_service(
            "MPICH mpiexec", bool(found and os.access(found, os.X_OK)), "no LXPU_MPICH_MPIEXEC or mpiexec"
        )


def tools_first_on_path(block: Block, bin_dir: Path) -> list[Path]:
    """For needs=mpi, a directory whose `mpiexec` runs MPICH's (Open MPI may own /usr/bin/mpiexec).

    A wrapper, not a symlink: Hydra finds its proxy next to the path it was started as.
    """
    if "mpi" not in block.needs:
        return []
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "mpiexec"
    wrapper.write_text(f'#!/usr/bin/env bash\nexec {shlex.quote(str(mpich_mpiexec()))} "$@"\n')
    wrapper.chmod(0o755)
    return [bin_dir]
