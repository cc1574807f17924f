"""ci/junit_summary.py sums pytest JUnit reports into pytest's summary words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.ci.ci_helpers import REPO


def write_report(path: Path, tests: int, failures: int, errors: int, skipped: int) -> Path:
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
        f'tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}"/></testsuites>'
    )
    return path


def summary(*paths: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(REPO / "ci" / "junit_summary.py"), *map(str, paths)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def test_sums_reports_of_several_runs(tmp_path: Path) -> None:
    first = write_report(tmp_path / "a.xml", tests=10, failures=1, errors=0, skipped=2)
    second = write_report(tmp_path / "b.xml", tests=5, failures=0, errors=1, skipped=0)
    assert summary(first, second) == "11 passed, 1 failed, 2 skipped, 1 errors"


def test_zero_skips_and_errors_are_left_out(tmp_path: Path) -> None:
    assert summary(write_report(tmp_path / "a.xml", 3, 0, 0, 0)) == "3 passed, 0 failed"


def test_missing_or_broken_report_counts_as_an_error(tmp_path: Path) -> None:
    (tmp_path / "broken.xml").write_text("<testsuites")
    assert summary(tmp_path / "absent.xml", tmp_path / "broken.xml") == "0 passed, 0 failed, 2 errors"


def test_no_reports_is_zero() -> None:
    assert summary() == "0 passed, 0 failed"
