"""Fixtures for the tests of ci/ (helpers: tests/ci/ci_helpers.py)."""

from __future__ import annotations

import pytest

from tests.ci.ci_helpers import require_service, run_script


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The running single-node cluster started by ci/services/slurm.sh; returns the node name."""
    status = run_script("ci/services/slurm.sh", "status")
    require_service(status.returncode == 0, "the Slurm cluster", "bash ci/services/slurm.sh start")
    return status.stdout.split("node ", 1)[1].split()[0]
