"""Every collected test runs in some CI stage: a test file that no stage's directories and marker expression select
(`bash ci/test.sh --selection`) would pass review and never run. Tests marked `cuda` run on a CUDA machine only
(docs/xpu-guide.md), never in CI, by design."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _pytest.mark.expression import Expression  # pytest's own `-m` evaluator: the stages select with it

from tests.ci.ci_helpers import REPO, run_script

NEVER_IN_CI = "cuda"


def stage_selection() -> list[tuple[str, str, list[str]]]:
    """ci/test.sh's table: (stage, marker expression or "", test directories)."""
    done = run_script("ci/test.sh", "--selection")
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    return [(stage, markers, dirs.split()) for stage, markers, dirs in rows]


def collected(tmp_path: Path) -> dict[str, list[str]]:
    """Every test under tests/ with its markers, from one collection."""
    out = tmp_path / "collected.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "tests.ci.collected_markers", "tests"],
        cwd=REPO, env={**os.environ, "LXPU_COLLECTED_MARKERS": str(out)}, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return dict(json.loads(out.read_text()))


def selected(nodeid: str, markers: list[str], dirs: list[str], expression: str) -> bool:
    in_dirs = any(nodeid.startswith(directory.rstrip("/") + "/") for directory in dirs)
    return in_dirs and (not expression or Expression.compile(expression).evaluate(lambda name, **_: name in markers))


def test_every_collected_test_is_selected_by_a_stage(tmp_path: Path) -> None:
    stages = stage_selection()
    assert {stage for stage, _, _ in stages} >= {"unit", "services", "security"}, stages
    tests = collected(tmp_path)
    assert len(tests) > 100, f"collected only {len(tests)} tests"
    orphans = sorted(
        nodeid for nodeid, markers in tests.items()
        if NEVER_IN_CI not in markers and not any(selected(nodeid, markers, dirs, expr) for _, expr, dirs in stages)
    )  # fmt: skip
    files = sorted({nodeid.split("::")[0] for nodeid in orphans})
    assert not orphans, (f"{len(orphans)} tests in {files} are selected by no CI stage (bash ci/test.sh --selection): "
                         "give each file the marker of the stage that must run it")  # fmt: skip
