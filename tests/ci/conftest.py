"""Fixtures for the tests of ci/ (helpers: tests/ci/ci_helpers.py)."""

from __future__ import annotations

import pytest

from tests.ci.ci_helpers import run_script
from tests.conftest import require_service


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The running single-node cluster started by ci/services/slurm.sh; returns the node name."""
    status = run_script("ci/services/slurm.sh", "status")
    require_service("the Slurm cluster", status.returncode == 0, "start it with bash ci/services/slurm.sh start")
    return status.stdout.split("node ", 1)[1].split()[0]
