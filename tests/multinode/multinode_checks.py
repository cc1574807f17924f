"""What a correct two-host DDP run looks like, checked from the ranks' own reports (toy_fit.py's JSON files).

`rank_problems` returns one line per problem found, so that a test can assert there are none, and the
deliberate-mistake test can assert which ones appear.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class NamedHost(Protocol):
    name: str
    address: str


def read_reports(out_dir: Path) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """The reports by the global rank their file name gives, and a problem line per unreadable file."""
    reports: dict[int, dict[str, Any]] = {}
    problems = []
    for path in sorted(out_dir.glob("rank-*.json")):
        try:
            reports[int(path.stem.removeprefix("rank-"))] = json.loads(path.read_text())
        except (ValueError, OSError) as error:
            problems.append(f"{path.name}: unreadable report ({error})")
    return reports, problems


def rank_problems(
    reports: dict[int, dict[str, Any]], hosts: Sequence[NamedHost], ranks_per_host: int, samples: int
) -> list[str]:
    """Every way the reports differ from `len(hosts) * ranks_per_host` ranks, filled host by host."""
    world_size = len(hosts) * ranks_per_host
    problems = []
    if sorted(reports) != list(range(world_size)):
        problems.append(f"expected reports from global ranks 0..{world_size - 1}, got {sorted(reports)}")
    for rank, report in sorted(reports.items()):
        problems += _placement_problems(rank, report, hosts, ranks_per_host)
    problems += _agreement_problems(reports, hosts[0], samples)
    return problems


def _placement_problems(
    rank: int, report: dict[str, Any], hosts: Sequence[NamedHost], ranks_per_host: int
) -> list[str]:
    if not 0 <= rank < len(hosts) * ranks_per_host:
        return [f"rank {rank}: outside the world"]
    host = hosts[rank // ranks_per_host]
    expected = {
        "global_rank": rank,
        "world_size": len(hosts) * ranks_per_host,
        "node_rank": rank // ranks_per_host,
        "local_rank": rank % ranks_per_host,
        "hostname": host.name,
        "host_address": host.address,
        "lightning_xpu_imported": True,
        "process_group_backend": "gloo",
    }
    return [
        f"rank {rank}: {field} is {report.get(field)!r}, expected {value!r}"
        for field, value in expected.items()
        if report.get(field) != value
    ]


def _agreement_problems(reports: dict[int, dict[str, Any]], first_host: NamedHost, samples: int) -> list[str]:
    problems = []
    for rank, report in sorted(reports.items()):
        if report.get("master_addr") not in (first_host.name, first_host.address):
            problems.append(
                f"rank {rank}: master_addr is {report.get('master_addr')!r}, expected the first host "
                f"({first_host.name} or {first_host.address})"
            )
    for field in ("master_port", "initial_weights_sha256", "final_weights_sha256"):
        values = {report.get(field) for report in reports.values()}
        if len(values) != 1:
            problems.append(f"{field} differs between ranks: {sorted(map(str, values))}")
    if any(report.get("final_weights_sha256") == report.get("initial_weights_sha256") for report in reports.values()):
        problems.append("final weights equal the initial ones: no training step reached the weights")
    seen = [index for report in reports.values() for index in report.get("data_indices", [])]
    if len(seen) != len(set(seen)) or set(seen) != set(range(samples)):
        problems.append(
            f"data shards overlap or miss samples: {len(seen)} indices, {len(set(seen))} distinct, expected each "
            f"of the {samples} samples once"
        )
    return problems
