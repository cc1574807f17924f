"""Session fixtures for the install tests: one install job, one repository copy, one good install.

One real install of 2.13/cpu takes a minute or two here, so every test that only needs "a good install" shares
the session's. It goes through `sbatch` when the Slurm cluster is up (as in CI), else through `bash`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import install_harness as h
import pytest
from install_harness import GoodInstall


@pytest.fixture(scope="session")
def install_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return h.build_install_job(tmp_path_factory.mktemp("job"))


@pytest.fixture(scope="session")
def source_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return h.make_source(tmp_path_factory.mktemp("repo") / "lightning-xpu")


def _install_with_sbatch(job: Path, source: Path, prefix: Path, work: Path) -> GoodInstall:
    # Submitted from inside the repository copy, with no --source: the job must find the repository through
    # SLURM_SUBMIT_DIR, since under sbatch it runs from a spool copy of the script.
    output = work / "slurm-install.out"
    submit = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--job-name=lxpu-install-test",
            f"--chdir={source / 'scripts' / h.SITE}",
            f"--output={output}",
            str(job),
            "--prefix",
            str(prefix),
            *h.PIP_SOURCE,
        ],
        cwd=source / "scripts" / h.SITE,  # SLURM_SUBMIT_DIR is where sbatch runs, not --chdir
        env=h.job_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = submit.stdout.strip().split(";")[0]
    h.wait_for_slurm_job(job_id)
    logs = sorted(h.logs_of(prefix))
    assert len(logs) == 1, f"expected one install log, found {logs}; job output:\n{output.read_text()}"
    return GoodInstall(prefix, job, source, logs[0], output.read_text(), "sbatch", h.published_manifest(prefix))


@pytest.fixture(scope="session")
def good_install(
    install_job: Path, source_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> GoodInstall:
    work = tmp_path_factory.mktemp("good")
    prefix = work / "prefix with space"
    if h.slurm_up():
        return _install_with_sbatch(install_job, source_repo, prefix, work)
    result = h.run_job(install_job, "--source", str(source_repo), *h.PIP_SOURCE, prefix=prefix)
    assert result.returncode == 0 and result.log, result.output
    return GoodInstall(prefix, install_job, source_repo, result.log, result.output, "bash",
                       h.published_manifest(prefix))


@pytest.fixture
def good_prefix(good_install: GoodInstall) -> Path:
    """The good install's prefix, checked to be installed before a test uses it."""
    assert (good_install.prefix / h.TAG / "manifest.json").is_file(), good_install.output
    return good_install.prefix
