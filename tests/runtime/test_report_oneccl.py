"""Each check records the oneCCL launch variables its ranks saw at process-group creation (issue 18): kept per rank
in the report's JSON (`checks[].oneccl`, schema.json) and its Markdown, and captured inside the ranks themselves."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from lightning_grid import newest_lightning_only

from lightning_xpu.validation import PASS, Report, checks
from lightning_xpu.validation.framework import Context, Outcome, ValidationCheck, local_env, record_ranks, run_check
from lightning_xpu.validation.markdown import render
from lightning_xpu.validation.model import versions
from lightning_xpu.validation.oneccl import oneccl_variables
from lightning_xpu.validation.schema import check_report


def rank(global_rank: int, **environment: str) -> dict[str, Any]:
    return {"global_rank": global_rank, "host": "node-a", "launch_environment": environment}


def spec(run: Any) -> ValidationCheck:
    return ValidationCheck("collectives_local", run, needs_xpu=False, summary="stand-in")


def test_only_the_oneccl_launch_variables_are_kept() -> None:
    seen = {"CCL_PROCESS_LAUNCHER": "pmix", "CCL_ATL_TRANSPORT": "mpi", "MPI_LOCALRANKID": "1",
            "PALS_LOCAL_RANKID": "1", "PMI_RANK": "3", "SLURM_PROCID": "3", "PATH": "/usr/bin", "MASTER_PORT": "29500"}
    assert oneccl_variables(seen) == {"CCL_ATL_TRANSPORT": "mpi", "CCL_PROCESS_LAUNCHER": "pmix",
                                      "MPI_LOCALRANKID": "1", "PALS_LOCAL_RANKID": "1", "PMI_RANK": "3"}


def test_a_check_reports_what_each_rank_saw_in_json_and_markdown(tmp_path: Path) -> None:
    def launched(context: Context) -> str:
        record_ranks([rank(1, CCL_LOCAL_RANK="1", PATH="/bin"),
                      rank(0, CCL_LOCAL_RANK="0", CCL_PROCESS_LAUNCHER="none")])
        return "2 ranks"

    result = run_check(spec(launched), Context("cpu", 2, tmp_path))
    assert result.status == PASS
    assert result.oneccl == [
        {"rank": 0, "host": "node-a", "variables": {"CCL_LOCAL_RANK": "0", "CCL_PROCESS_LAUNCHER": "none"}},
        {"rank": 1, "host": "node-a", "variables": {"CCL_LOCAL_RANK": "1"}},
    ]
    quiet = run_check(spec(lambda context: Outcome("in-process", {"n": 1})), Context("cpu", 2, tmp_path))
    report = Report("validation", versions(), level="site", checks=[result, quiet])
    report.write(tmp_path / "r.json", tmp_path / "r.md")
    data = json.loads((tmp_path / "r.json").read_text())
    check_report(data)
    assert data["checks"][0]["oneccl"] == result.oneccl and "oneccl" not in data["checks"][1]
    assert data["checks"][1]["detail"] == {"n": 1} and data["level"] == "site"
    markdown = (tmp_path / "r.md").read_text()
    assert "## oneCCL launch variables" in markdown
    assert "| `collectives_local` | 0 | node-a | CCL_LOCAL_RANK=0, CCL_PROCESS_LAUNCHER=none |" in markdown
    assert render(data) == markdown


def test_a_failed_check_keeps_what_its_ranks_saw(tmp_path: Path) -> None:
    """A hang or a wrong sum is where the variables matter most."""
    def fails(context: Context) -> str:
        record_ranks([rank(0, CCL_PROCESS_LAUNCHER="pmix")])
        raise checks.CheckFailed("rank 0: all-reduce gave 1.0, expected 3.0")

    result = run_check(spec(fails), Context("cpu", 2, tmp_path))
    assert result.reason.startswith("rank 0: all-reduce gave")
    assert result.oneccl == [{"rank": 0, "host": "node-a", "variables": {"CCL_PROCESS_LAUNCHER": "pmix"}}]


def test_outside_a_check_nothing_is_recorded(tmp_path: Path) -> None:
    record_ranks([rank(0, CCL_LOCAL_RANK="0")])  # no running check: dropped, not carried into the next one
    result = run_check(spec(lambda context: "in-process"), Context("cpu", 1, tmp_path))
    assert result.oneccl is None


@newest_lightning_only
def test_real_ranks_capture_their_variables_after_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real worker ranks (gloo): each reports its own local rank and the CCL_* variables it inherited, read
    inside the rank once its process group exists; a launcher variable of the surrounding job is not among them.
    Started from a checkout-like working directory, they still run the lightning_xpu being validated."""
    checkout = tmp_path / "checkout"
    (checkout / "lightning_xpu").mkdir(parents=True)
    (checkout / "lightning_xpu" / "__init__.py").write_text("raise ImportError('a checkout shadowed the install')\n")
    monkeypatch.chdir(checkout)
    for name in [name for name in os.environ if name.startswith("CCL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CCL_ATL_TRANSPORT", "ofi")
    monkeypatch.setenv("PMI_RANK", "7")  # the batch job's: a local launch drops it
    context = Context("cpu", 2, tmp_path / "scratch")
    context.workdir.mkdir()

    def launched(ctx: Context) -> str:
        env = local_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(checks.free_port()))
        reports = checks.run_worker(ctx, ["collectives", "--backend", "gloo", "--device", "cpu"], ranks=2, env=env)
        return checks.judge_collectives(reports, 2)

    result = run_check(spec(launched), context)
    assert result.status == PASS, result.reason
    assert [(entry["rank"], entry["variables"]) for entry in result.oneccl or []] == [
        (0, {"CCL_ATL_TRANSPORT": "ofi", "LOCAL_RANK": "0"}), (1, {"CCL_ATL_TRANSPORT": "ofi", "LOCAL_RANK": "1"})]
