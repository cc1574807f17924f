"""Session fixtures: the two-host cluster, up once for the session and always torn down afterwards (the
teardown then checks that no process of the cluster survived and no namespace is left), and the environment
the ranks run in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from multinode_cluster import Cluster, RankEnvironment, running_cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as started:
        yield started


@pytest.fixture(scope="session")
def rank_environment() -> RankEnvironment:
    return RankEnvironment.from_environment()
