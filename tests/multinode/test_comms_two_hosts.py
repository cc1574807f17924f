"""The site validation job's communication check over the two-host cluster (ci/multinode/): `lightning-xpu
validate --only communication --nodes 2` in a 2-node batch job, gloo standing in for oneCCL on CPU. Within a node
it starts 2 ranks itself; across nodes srun starts one rank per host. Both scopes measure every collective and
size, the ranks of the nodes' scope run on both hosts, and the picture and the bundle are written."""

from __future__ import annotations

import json
import shlex
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from multinode_cluster import Cluster, RankEnvironment, submit_and_wait

from lightning_xpu.validation.comms import BUSBW_FACTOR
from lightning_xpu.validation.schema import check_report

pytestmark = pytest.mark.multinode


def test_the_communication_check_within_and_across_two_hosts(cluster: Cluster, rank_environment: RankEnvironment,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "report"
    validate = shlex.join(["-m", "lightning_xpu", "validate", "--only", "communication", "--nodes", "2",
                           "--launchers", "srun", "--comm-max-bytes", "64KiB", "--comm-deadline", "100",
                           "--link-gbps", "10", "--out", str(out)])
    script = tmp_path / "job.sh"
    script.write_text("\n".join(["#!/usr/bin/env bash", "set -euo pipefail", "export OMP_NUM_THREADS=1",
                                 *rank_environment.setup_lines, f'"$PYTHON" {validate}', ""]))
    job = submit_and_wait(cluster, script, "--nodes=2", "--ntasks-per-node=2")
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), f"{job.describe()}\n{cluster.log_tails()}"
    data = json.loads((out / "validation.json").read_text())
    check_report(data)
    result = data["checks"][0]
    assert result["status"] == "pass", result["reason"]
    scopes = result["detail"]["scopes"]
    assert sorted(scopes) == ["node", "nodes"]
    for scope in scopes.values():
        assert {row["operation"] for row in scope["results"]} == set(BUSBW_FACTOR)
        assert max(row["bytes"] for row in scope["results"]) == 64 << 10
    hosts = {rank["host"] for rank in scopes["nodes"]["oneccl_log"]}
    assert hosts == {host.name for host in cluster.nodes}
    assert all("busbw_of_nominal" in row for row in scopes["nodes"]["results"])
    assert result["reason"].startswith("within a node, 2 ranks (gloo)")
    assert "; across nodes, 2 ranks (gloo)" in result["reason"]
    ET.parse(out / "validation-communication.svg")
    with tarfile.open(out / "validation.tar.gz") as archive:
        assert "validation/validation-communication.svg" in archive.getnames()
