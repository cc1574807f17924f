"""Returned site validation reports (docs/reports/*.json) agree with the profile table.

A report from real Intel GPUs is the only evidence this project can get of what a torch release does on XPU. Each
committed report must match the committed schema, and every fact of `tests/xpu_profiles.py` that it exercises must
agree with it; a row that cites a report as its evidence must name a committed one. None has been returned yet,
so the loader is also run on generated reports. The compatibility table (docs/compatibility.md) is generated from the
same folder and must match it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lightning_xpu.validation import FAIL, PASS, Check, Report
from lightning_xpu.validation.model import versions
from lightning_xpu.validation.schema import check_report

REPORTS = Path(__file__).resolve().parents[2] / "docs" / "reports"
REPORTS_CITED = "docs/reports/"


def load_reports(folder: Path) -> dict[str, dict[str, Any]]:
    """Every JSON report in `folder`, validated against the schema (a broken one fails with its file name)."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        check_report(data)
        if data["kind"] != "validation":
            raise ValueError(f"{path.name}: a {data['kind']} report, not a validation report")
        found[path.name] = data
    return found


def contradictions(report: dict[str, Any], fact: Callable[[str, str], Any]) -> list[str]:
    """Facts of the profile table that `report` contradicts (only those a validation run exercises)."""
    torch_version = report["versions"]["torch"].split("+")[0]
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    found = []
    backend = report["versions"].get("xpu_collective_backend")
    if statuses.get("collectives_local") == PASS and backend:
        xccl = fact("is_xccl_available", torch_version) is True
        if (backend == "xccl") != xccl:
            found.append(f"is_xccl_available at torch {torch_version}: the table says {xccl}, the site used {backend}")
        if (backend == "ccl" and fact("oneccl_needs_ipex_first", torch_version)
                and not report["versions"].get("intel_extension_for_pytorch")):
            found.append(f"oneccl_needs_ipex_first at torch {torch_version}: ccl collectives passed without IPEX")
    return found


def profile_table() -> Any:
    return importlib.import_module("tests.xpu_profiles")


def generated(torch: str, backend: str | None, collectives: str = PASS, ipex: str | None = None) -> dict[str, Any]:
    found = versions()
    found.update(torch=f"{torch}+xpu", torch_build="xpu", xpu_collective_backend=backend,
                 intel_extension_for_pytorch=ipex)
    return Report("validation", found, checks=[Check("collectives_local", collectives, "reason")]).to_dict()


def test_every_committed_report_agrees_with_the_profile_table() -> None:
    reports = load_reports(REPORTS)  # CI's own CPU run, then what sites return
    table = profile_table()
    for name, report in reports.items():
        assert contradictions(report, table.fact) == [], name
    for row in table.FACTS:
        for cited in [part for part in row.source.split() if part.startswith(REPORTS_CITED)]:
            assert cited.removeprefix(REPORTS_CITED).rstrip(";,)") in reports, f"{row.name} cites {cited}"


def test_the_loader_validates_and_compares_generated_reports(tmp_path: Path) -> None:
    (tmp_path / "dawn-2.8-x.json").write_text(json.dumps(generated("2.8.0", "xccl")))
    (tmp_path / "dawn-2.7-x.json").write_text(json.dumps(generated("2.7.0", "ccl", ipex="2.7.10+xpu")))
    (tmp_path / "aurora-2.7-x.json").write_text(json.dumps(generated("2.7.0", "xccl")))
    (tmp_path / "aurora-2.6-x.json").write_text(json.dumps(generated("2.6.0", "ccl")))
    (tmp_path / "failed-2.7-x.json").write_text(json.dumps(generated("2.7.0", "xccl", collectives=FAIL)))
    reports = load_reports(tmp_path)
    assert sorted(reports) == sorted(path.name for path in tmp_path.iterdir())
    table = profile_table()
    found = {name: contradictions(report, table.fact) for name, report in reports.items()}
    assert found == {
        "dawn-2.8-x.json": [],
        "dawn-2.7-x.json": [],
        "aurora-2.7-x.json": ["is_xccl_available at torch 2.7.0: the table says False, the site used xccl"],
        "aurora-2.6-x.json": ["oneccl_needs_ipex_first at torch 2.6.0: ccl collectives passed without IPEX"],
        "failed-2.7-x.json": [],
    }


def test_the_loader_refuses_a_report_that_breaks_the_schema(tmp_path: Path) -> None:
    broken = generated("2.8.0", "xccl")
    broken["checks"][0]["status"] = "ok"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"\$\.checks\[0\]\.status: 'ok' is not one of"):
        load_reports(tmp_path)


def test_the_committed_compatibility_table_is_generated_from_the_reports() -> None:
    from lightning_xpu.validation.compat import TABLE, render

    assert TABLE.read_text() == render(REPORTS), "run: python -m lightning_xpu.validation.compat"


def test_cis_own_cpu_run_is_the_first_entry_and_marked() -> None:
    from lightning_xpu.validation.compat import render

    rows = [line for line in render(REPORTS).splitlines() if line.startswith("| [")]
    assert rows[0].startswith("| [ci-generic-") and "(*CI*, CPU)" in rows[0] and "| none (gloo) |" in rows[0]
    assert "communication" in rows[0].split("|")[6]


def test_a_report_that_breaks_the_schema_stops_the_table(tmp_path: Path) -> None:
    from lightning_xpu.validation.compat import render

    broken = generated("2.8.0", "xccl")
    del broken["versions"]
    (tmp_path / "dawn-2.8.0-x.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"^dawn-2.8.0-x.json: report does not match .*missing 'versions'"):
        render(tmp_path)
