"""Helpers for the tests of ci/: run a repository script, and require a real service.

A missing service skips its test, except under LXPU_REQUIRE_SERVICES=1 (set by ci/test.sh), where it
fails: CI must never pass because Slurm or MPI quietly was not there.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import require_service

REPO = Path(__file__).resolve().parents[2]


def run_script(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `bash <repo script> args...` from the repository root and capture its output."""
    return subprocess.run(
        ["bash", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def require_env_path(name: str) -> Path:
    """The path an LXPU_* variable (exported by ci/test.sh) names; required like a service."""
    value = os.environ.get(name, "")
    require_service(name, bool(value) and Path(value).exists(), "run the tests through bash ci/test.sh")
    return Path(value)
