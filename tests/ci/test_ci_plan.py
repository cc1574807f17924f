"""ci/test.sh prepares what the selected stages need and nothing more (issue 20, item 5).

`--plan` prints the preparation without doing it; one real run of the lint stage on a fresh copy of ci/ shows
that lint builds its small venv, no Lightning venv, and starts no service. The copy's munge.sh and slurm.sh are
recorders that fail, so a wrong plan can never touch the cluster the other tests use.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ci.ci_helpers import REPO, run_script

SERVICES = ("munge", "slurm")


def plan(*args: str) -> dict[str, list[str]]:
    """`bash ci/test.sh --plan ARGS`: {"install": [...], "start": [...], "venvs": [...], "stages": [...]}."""
    result = run_script("ci/test.sh", "--plan", *args)
    assert result.returncode == 0, result.stderr
    steps: dict[str, list[str]] = {"install": [], "start": [], "venvs": [], "readme-install": [], "stages": []}
    for line in result.stdout.splitlines():
        word, _, rest = line.removeprefix("plan: ").partition(" ")
        if word in steps:
            steps[word] += rest.split()
    return steps


def test_lint_alone_starts_no_service_and_builds_no_lightning_venv() -> None:
    steps = plan("--stage", "lint")
    # Only shellcheck of the Debian packages (issue 28: lint installed Slurm and munge among the rest).
    assert steps == {"install": ["shellcheck"], "start": [], "venvs": ["lint"], "readme-install": [],
                     "stages": ["lint"]}


@pytest.mark.parametrize(("stages", "shared"), [(["docs"], True), (["multinode"], True), (["unit", "services"], False),
                                                (["lint", "docs"], True)])
def test_one_readme_install_is_made_before_the_stages_that_share_it(stages: list[str], shared: bool) -> None:
    steps = plan(*(word for stage in stages for word in ("--stage", stage)))
    assert bool(steps["readme-install"]) == shared
    if shared:
        assert steps["readme-install"] == ["into", str(REPO / "build" / "ci-home")]
        # the install command the README gives needs everything the docs' own install needed
        assert steps["install"] == ["debian", "impi"] and "base" in steps["venvs"]


def test_the_full_run_prepares_everything_in_order_and_lints_with_base() -> None:
    steps = plan()
    assert steps["install"] == ["debian", "impi"]
    assert steps["start"] == ["munge", "slurm"]
    assert steps["venvs"] == ["base", "lightning", "conda-channel"]  # no lint venv: base's ruff has the same pin
    assert steps["readme-install"]  # once, for the docs and multinode stages
    assert steps["stages"][0] == "lint" and len(steps["stages"]) == len(set(steps["stages"])) > 1


@pytest.mark.parametrize(("stage", "services"), [("unit", []), ("recipes", list(SERVICES)),
                                                 ("services", list(SERVICES))])
def test_services_start_only_for_stages_whose_tests_use_them(stage: str, services: list[str]) -> None:
    steps = plan("--stage", stage)
    assert steps["start"] == services
    assert "lint" not in steps["venvs"] and "base" in steps["venvs"]
    assert ("lightning" in steps["venvs"]) == (stage == "unit")


def test_offline_plans_nothing() -> None:
    result = run_script("ci/test.sh", "--plan", "--offline", "--stage", "lint")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["plan: offline: install, start and build nothing", "plan: stages lint"]


def _fresh_clone(tmp_path: Path) -> Path:
    """ci/ and the ruff configuration as a new git checkout: no build/ at all."""
    repo = tmp_path / "fresh clone"
    shutil.copytree(REPO / "ci", repo / "ci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", repo)
    record = tmp_path / "services-touched"
    for name in SERVICES:
        (repo / "ci" / "services" / f"{name}.sh").write_text(
            f'#!/usr/bin/env bash\necho "{name} $*" >>"{record}"\nexit 9\n'
        )
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    return repo


def _lint(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "ci/test.sh", "--stage", "lint", *args], cwd=repo, capture_output=True,
                          text=True, timeout=600, check=False)


def test_lint_on_a_fresh_clone_builds_only_its_venv_and_then_works_offline(tmp_path: Path) -> None:
    repo = _fresh_clone(tmp_path)
    first = _lint(repo)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "---- stage lint passed" in first.stdout
    assert not (tmp_path / "services-touched").exists()
    assert sorted(path.name for path in (repo / "build" / "venvs").iterdir()) == ["lint", "logs"]

    # Offline, without base: the lint venv's ruff lints, and a lint error fails the stage.
    (repo / "ci" / "broken.py").write_text("import os\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    offline = _lint(repo, "--offline")
    assert offline.returncode == 1, offline.stdout + offline.stderr
    assert "F401" in offline.stdout and "---- stage lint FAILED" in offline.stdout
    assert not (tmp_path / "services-touched").exists()
