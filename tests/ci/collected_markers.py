"""A pytest plugin for tests/ci/test_every_test_runs.py: at collection, write every test's node id and the names of
its markers (as `-m` sees them) to the JSON file named by LXPU_COLLECTED_MARKERS, then collect nothing more."""

from __future__ import annotations

import json
import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    found = {item.nodeid: sorted({mark.name for mark in item.iter_markers()}) for item in items}
    with open(os.environ["LXPU_COLLECTED_MARKERS"], "w") as handle:
        json.dump(found, handle)
