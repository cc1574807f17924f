"""ci/test.sh's stage logic on a scratch copy of ci/: skip notes, "no tests collected" fails its stage,
counts are summed over stages, and the run fails when a stage fails.

The copy reuses this run's venvs (build/venvs is a symlink), so only the stages' own pytest runs cost, and the
preparation of the one full run (the packages, services and venvs checked): every other case runs --offline.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ci.ci_helpers import REPO, require_env_path


@pytest.fixture
def scratch_repo(tmp_path: Path, slurm_cluster: str) -> Path:
    venvs = require_env_path("LXPU_PYTHON").parents[2]
    repo = tmp_path / "repo with space"
    shutil.copytree(REPO / "ci", repo / "ci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", repo)
    (repo / "build").mkdir()
    (repo / "build" / "venvs").symlink_to(venvs)
    return repo


def run_stages(repo: Path, *stages: str, offline: bool = False) -> subprocess.CompletedProcess[str]:
    args = [arg for stage in stages for arg in ("--stage", stage)]
    # --keep-services: the cluster is shared with the run that runs this test.
    return subprocess.run(
        ["bash", "ci/test.sh", *args, "--offline" if offline else "--keep-services"],
        cwd=repo, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def write_test(repo: Path, directory: str, body: str, name: str = "sample") -> None:
    (repo / "tests" / directory).mkdir(parents=True, exist_ok=True)
    (repo / "tests" / directory / f"test_{directory}_{name}.py").write_text(body)


# A test that writes build/handshake/MINE, then waits for build/handshake/THEIRS (written by a test of another
# stage): it passes only where the two stages ran at the same time.
HANDSHAKE = (
    "import time\nfrom pathlib import Path\n\n"
    "def handshake(mine, theirs):\n"
    "    folder = Path('build/handshake')\n"
    "    folder.mkdir(exist_ok=True)\n"
    "    (folder / mine).touch()\n"
    "    deadline = time.monotonic() + 120\n"
    "    while not (folder / theirs).exists():\n"
    "        assert time.monotonic() < deadline, f'{theirs} never ran beside {mine}'\n"
    "        time.sleep(0.2)\n"
)


# One full run (its preparation is most of its cost) shows every stage outcome at once.
def test_stage_outcomes_are_summed_and_a_failed_stage_fails_the_run(scratch_repo: Path) -> None:
    write_test(scratch_repo, "ci", "def helper():\n    return 1\n")  # collects nothing
    write_test(
        scratch_repo, "benchmarks",
        "def test_ok():\n    assert True\n\ndef test_broken():\n    assert 1 == 2\n",
    )  # fmt: skip
    # services runs in the background beside the docs stage (CI's 2 cores): each stage's test waits for the other's.
    write_test(
        scratch_repo,
        "docs",
        HANDSHAKE + "import os\n\ndef test_required():\n    assert os.environ['LXPU_REQUIRE_SERVICES'] == '1'\n"
        "    handshake('docs', 'services')\n",
    )
    write_test(scratch_repo, "runtime", HANDSHAKE + "import pytest\n\n@pytest.mark.slurm\ndef test_beside():\n"
               "    handshake('services', 'docs')\n", name="services")  # fmt: skip
    # unit: once per Lightning venv, the older ones in the background; the oldest's run fails.
    write_test(
        scratch_repo,
        "runtime",
        "import os\nfrom pathlib import Path\n\nfrom packaging.version import Version\n\n"
        "def test_not_the_oldest():\n"
        "    oldest = min(Path(os.environ['LXPU_VENV_DIR']).iterdir(), key=lambda venv: Version(venv.name))\n"
        "    assert Path(os.environ['VIRTUAL_ENV']) != oldest\n",
    )
    venvs = len(list((scratch_repo / "build" / "venvs" / "lightning").iterdir()))
    result = run_stages(scratch_repo, "ci", "unit", "multinode", "services", "benchmarks", "docs")
    out = result.stdout
    assert result.returncode == 1, result.stderr
    assert "skipped: not present: tests/multinode not present" in out
    assert "--- FAILED: no tests collected by pytest tests/ci" in out
    unit = out.split("==================== stage unit ====================", 1)[1].split("---- stage unit ", 1)
    assert unit[0].count("--- pytest tests/runtime") == venvs and unit[0].count("--- FAILED: pytest") == 1
    summary = out.split("==================== summary ====================", 1)[1].splitlines()
    rows = [line.split()[:2] for line in summary[2:8]]
    assert rows == [["ci", "FAILED"], ["unit", "FAILED"], ["multinode", "skipped"], ["services", "passed"],
                    ["benchmarks", "FAILED"], ["docs", "passed"]]
    # The re-runs on the older Lightning venvs are counted apart (ci/junit_summary.py).
    older = f"re-runs on older Lightning: {venvs - 2} passed, 1 failed"
    assert next(line for line in summary if line.startswith("unit ")).endswith(f"1 passed, 0 failed; {older}")
    assert "1 passed, 0 failed" in next(line for line in summary if line.startswith("services "))
    assert "stage services: in the background beside benchmarks docs" in out
    assert summary[-1].startswith(f"==================== 4 passed, 1 failed; {older} in ")
    assert "3 stage(s) failed" in result.stderr


def test_passing_stage_passes_the_run(scratch_repo: Path) -> None:
    # Offline (no preparation): the pass/fail verdict is the same code with or without it.
    write_test(scratch_repo, "recipes", "def test_ok():\n    assert True\n")
    result = run_stages(scratch_repo, "recipes", offline=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().splitlines()[-1].startswith("==================== 1 passed, 0 failed in ")
