"""Every ci/ script has --help and turns bad input into one actionable line and a non-zero exit."""

from __future__ import annotations

import pytest

from tests.ci.ci_helpers import run_script

SCRIPTS = [
    "ci/services/install.sh",
    "ci/services/munge.sh",
    "ci/services/slurm.sh",
    "ci/venvs.sh",
    "ci/test.sh",
    ".ci/run",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_usage(script: str) -> None:
    result = run_script(script, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: bash ")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["ci/services/install.sh", "--bogus"], "unknown argument '--bogus'"),
        (["ci/services/munge.sh", "restart-all"], "expected start, stop or status, got 'restart-all'"),
        (["ci/services/slurm.sh"], "expected start, stop, restart or status, got ''"),
        (["ci/venvs.sh", "--bogus"], "unknown argument '--bogus'"),
        (["ci/test.sh", "--stage", "nope"], "unknown stage 'nope': use one of lint ci recipes unit"),
        (["ci/test.sh", "--stage"], "--stage needs a name"),
        ([".ci/run", "--bogus"], "unknown argument '--bogus': see bash ci/test.sh --help"),
    ],
)
def test_bad_argument_is_one_clear_line(args: list[str], expected: str) -> None:
    result = run_script(*args)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "error:" in lines[0]


def test_bad_cpu_count_is_refused_before_touching_slurm() -> None:
    # Validation happens before any daemon is stopped, so this is safe while the cluster runs.
    result = run_script("ci/services/slurm.sh", "start", env={"LXPU_SLURM_CPUS": "lots"})
    assert result.returncode == 1
    assert "LXPU_SLURM_CPUS='lots' is not a positive integer" in result.stderr


def test_bad_test_timeout_is_refused() -> None:
    result = run_script("ci/test.sh", "--stage", "lint", env={"LXPU_TEST_TIMEOUT": "0"})
    assert result.returncode == 1
    assert "LXPU_TEST_TIMEOUT='0' is not a number of seconds" in result.stderr
