"""The training job scripts (scripts/<site>/train_*) are what the guides show, and follow the script rules.

A guide shows a job script as a fenced block right after `<!-- job-script: PATH -->`; the block must be the file,
byte for byte, and every job script must be shown. The Aurora scripts run here under bash with PBS's and PALS's
variables (PALS's mpiexec played by tests/pals_standin.py); under sbatch and qsub in tests/install/test_site_jobs.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.docs.docs_blocks import REPO, _fences
from tests.site_jobs import (
    AURORA_SCRIPTS,
    CI_RANKS,
    JOB_TIMEOUT_S,
    assert_one_ddp_run,
    aurora_shape,
    job_env,
    pals_bin,
    site_setup,
    work_directory,
)

JOB_SCRIPTS = sorted(path.relative_to(REPO).as_posix() for path in REPO.glob("scripts/*/train_*"))
LIBRARY = "scripts/common/job.sh"
_MARK = re.compile(r"^<!--\s*job-script:\s*(\S+)\s*-->\s*$")


def shown_job_scripts(root: Path = REPO) -> dict[str, list[tuple[str, str]]]:
    """PATH -> [(where, block text)] for every job-script mark in README.md and docs/*.md."""
    shown: dict[str, list[tuple[str, str]]] = {}
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        lines = doc.read_text().splitlines(keepends=True)
        fences = {first: close for first, close, _, _ in _fences(lines)}
        for index, line in enumerate(lines):
            mark = _MARK.match(line)
            if mark:
                close = fences.get(index + 1)
                text = "".join(lines[index + 2 : close]) if close is not None else ""
                shown.setdefault(mark[1], []).append((f"{doc.relative_to(root)}:{index + 1}", text))
    return shown


def test_job_scripts_exist_for_every_site_guide() -> None:
    sites = {path.split("/")[1] for path in JOB_SCRIPTS}
    assert {"dawn", "aurora"} <= sites, f"job scripts found only for {sorted(sites)}"


@pytest.mark.parametrize("script", JOB_SCRIPTS)
def test_a_guide_shows_the_job_script_as_it_is(script: str) -> None:
    shown = shown_job_scripts().get(script)
    assert shown, f"no guide shows {script}: add <!-- job-script: {script} --> and the file in a ```bash block"
    content = (REPO / script).read_text()
    differ = [where for where, text in shown if text != content]
    assert not differ, f"{', '.join(differ)}: the block differs from {script}; paste the file again"


def test_every_job_script_mark_names_a_job_script() -> None:
    unknown = sorted(set(shown_job_scripts()) - set(JOB_SCRIPTS))
    assert not unknown, f"job-script marks naming no scripts/<site>/train_* file: {unknown}"


def test_a_stale_block_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# R\n")
    (tmp_path / "docs" / "g.md").write_text("<!-- job-script: scripts/x/train_a.sh -->\n```bash\necho old\n```\n")
    assert shown_job_scripts(tmp_path) == {"scripts/x/train_a.sh": [("docs/g.md:1", "echo old\n")]}


@pytest.mark.parametrize("script", JOB_SCRIPTS)
def test_job_script_rules(script: str) -> None:
    """set -euo pipefail, one shared library, --help under bash, executable."""
    path = REPO / script
    text = path.read_text()
    assert "\nset -euo pipefail\n" in text
    assert LIBRARY in text, f"{script} does not source {LIBRARY}"
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    result = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True, timeout=30, check=False)
    first = next(line[2:] for line in text.splitlines()[1:] if line.startswith("# "))
    assert result.returncode == 0 and result.stdout.startswith(first), result.stdout + result.stderr
    assert "#SBATCH" not in result.stdout and "#PBS" not in result.stdout


def test_a_slurm_job_script_run_without_slurm_says_how_to_submit(tmp_path: Path) -> None:
    srun_scripts = [script for script in JOB_SCRIPTS if "#SBATCH" in (REPO / script).read_text()]
    result = subprocess.run(
        ["bash", str(REPO / srun_scripts[0])], capture_output=True, text=True, timeout=30, check=False, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "submit the job script with its scheduler" in result.stderr


def test_job_scripts_are_shellcheck_clean() -> None:
    require_service("shellcheck", shutil.which("shellcheck") is not None, "install it: bash ci/services/install.sh")
    result = subprocess.run(
        ["shellcheck", "-x", *JOB_SCRIPTS, LIBRARY], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("script", AURORA_SCRIPTS, ids=[path.name for path in AURORA_SCRIPTS])
def test_aurora_job_script_under_bash_with_pals_variables(script: Path, nodes: int, tmp_path: Path) -> None:
    """On one node or several, as `qsub -l select=N` gives them in PBS_NODEFILE. Launches small enough for this
    host train for real; bigger ones are recorded only, and then the job's device check must fail them, since
    nothing trained."""
    _, ranks, binding = aurora_shape(script)
    assert len(binding) == ranks, f"{script.name}: CPU_BIND has {len(binding)} entries for {ranks} ranks per node"
    work = work_directory(tmp_path / "work dir")  # paths with spaces must work
    node_file = tmp_path / "node file"
    hosts = [socket.gethostname()] + [f"node{index}" for index in range(1, nodes)]
    node_file.write_text("".join(f"{host}\n" for host in hosts))
    record = tmp_path / "mpiexec.jsonl"
    real = nodes == 1 and ranks <= CI_RANKS
    env = job_env(
        site_setup(tmp_path / "setup dir", "aurora"),
        PATH=f"{pals_bin(tmp_path / 'bin')}:{os.environ['PATH']}",
        PBS_O_WORKDIR=str(work),
        PBS_NODEFILE=str(node_file),
        PBS_JOBID="4242.aurora-pbs",
        LIGHTNING_XPU_TRAIN_ARGS="--epochs 1",
        LXPU_PALS_RECORD=str(record),
        **({} if real else {"LXPU_PALS_STANDIN_DRY": "1"}),
    )
    result = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    output = result.stdout + result.stderr
    assert f"working directory: {work} (from PBS_O_WORKDIR, set by the scheduler)" in output, output[-3000:]
    assert f"nodes: {nodes} (from PBS_NODEFILE)" in output
    assert "OMP_NUM_THREADS=1" in output  # CI's own setting wins over the script's 4
    (call,) = [json.loads(line) for line in record.read_text().splitlines()]
    bind = f"verbose,list:{':'.join(binding)}"
    expected = {"pmi": "pmix", "envall": "1", "n": str(nodes * ranks), "ppn": str(ranks), "cpu-bind": bind}
    assert call["options"] == expected
    assert call["command"][:6] == ["python", "train.py", "--devices", str(ranks), "--num-nodes", str(nodes)]
    if real:
        assert result.returncode == 0 and "device check passed (cpu)" in output, output[-3000:]
        reports = assert_one_ddp_run(work, ranks)
        assert {report["launch_environment"]["PALS_RANKID"] for report in reports} == {str(r) for r in range(ranks)}
    else:
        assert result.returncode == 2 and "device check FAILED" in output and "no Trainer banner" in output, output
