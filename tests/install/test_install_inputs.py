"""The install job's command line: help, bad input, dry run, finding the repository, the conda branch.

All cheap: nothing here builds an environment (the conda test stops at the package step on purpose).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

import install_harness as h
import pytest

pytestmark = pytest.mark.install

FLAGS = (
    "--installer",
    "--prefix",
    "--variant",
    "--env-manager",
    "--base-python",
    "--force",
    "--dry-run",
    "--source",
    "--pip-source",
    "--index-url",
    "--extra-index-url",
    "--wheelhouse",
    "--lock-timeout",
    "--shared-group",
    "--help",
)


def test_help_lists_every_option(install_job: Path, tmp_path: Path) -> None:
    result = h.run_job(install_job, "--help", prefix=tmp_path / "unused")
    assert result.returncode == 0
    for flag in FLAGS:
        assert flag in result.output, flag
    assert not (tmp_path / "unused").exists()


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


BAD_INPUTS = {
    "unknown-flag": (["--bogus"], "unknown argument '--bogus'"),
    "missing-value": (["--variant"], "--variant needs a value"),
    "variant": (["--variant", "gpu"], "--variant must be xpu, cpu, cuda or auto"),
    "env-manager": (["--env-manager", "pixi"], "--env-manager must be conda or venv"),
    "lock-timeout": (["--lock-timeout", "soon"], "--lock-timeout must be a whole number"),
    "pip-source": (["--pip-source", "mirror"], "--pip-source must be recipe or system"),
    "system-plus-index": (
        ["--pip-source", "system", "--index-url", "http://127.0.0.1:9/simple"],
        "--pip-source system uses this machine's pip configuration only",
    ),
    "index-not-url": (["--index-url", "not a url"], "is not a URL"),
    "wheelhouse": (["--wheelhouse", "/nonexistent/wheelhouse"], "is not a directory"),
    "wheelhouse-plus-index": (
        ["--wheelhouse", "/", "--extra-index-url", "http://127.0.0.1:9/simple"],
        "--wheelhouse cannot be combined",
    ),
    "base-python-missing": (["--base-python", "/nonexistent/python3"], "is not an executable"),
    "shared-group": (["--shared-group", "no-such-group-lxpu"], "no such group"),
    "prefix-colon": (["--prefix", "/tmp/a:b"], "must not contain ':'"),
    "installer": (["--installer", "conda"], "--installer must be uv, pip or auto"),
    "uv-over-base-python": (
        ["--installer", "uv", "--base-python", h.base_python()],
        "--installer uv cannot build over --base-python",
    ),
    # Nothing installed: an uninstall or a rollback says so instead of reporting success or creating the prefix.
    "uninstall-nothing": (["--uninstall"], f"--uninstall: nothing is installed as {h.TAG} in "),
    "rollback-no-prefix": (["--rollback"], "does not exist, so nothing is installed there: check --prefix"),
    # The README's clone is ~/lightning-xpu: installing into the checkout itself is refused.
    "prefix-is-the-checkout": (["--prefix", str(h.REPO)], "is a lightning-xpu repository checkout: install into"),
}


def test_bad_input_pip_configuration_uv_cannot_honour(install_job: Path, source_repo: Path, tmp_path: Path) -> None:
    """uv reads no pip configuration; a resolution key it has no equivalent for stops the install in one line."""
    prefix = tmp_path / "prefix"
    result = h.run_job(install_job, "--source", str(source_repo), "--pip-source", "system", prefix=prefix,
                       env=h.job_env(PIP_PRE="1"))
    assert result.returncode == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "error: pip configuration key ':env:.pre' has no uv equivalent" in line and "--installer pip" in line
    assert not prefix.exists()


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(
    case: str, install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    args, message = BAD_INPUTS[case]
    prefix = tmp_path / "prefix"
    result = h.run_job(install_job, "--source", str(source_repo), *args, prefix=prefix)
    assert result.returncode == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and message in lines[0], result.output
    assert not prefix.exists(), "bad input must not create anything"


def test_bad_input_base_python_without_torch(install_job: Path, source_repo: Path, tmp_path: Path) -> None:
    fake = executable(tmp_path / "python3", "#!/bin/sh\nexit 1\n")
    result = h.run_job(
        install_job, "--source", str(source_repo), "--base-python", str(fake), prefix=tmp_path / "p"
    )
    assert result.returncode == 2 and "has no torch" in result.output, result.output


def test_bad_input_base_python_of_another_torch(install_job: Path, source_repo: Path, tmp_path: Path) -> None:
    """A --base-python whose torch is another minor than the recipe's is refused, naming the job to use."""
    major, minor = h.VERSION.split(".")
    other = f"{major}.{int(minor) + 1}"
    fake = executable(tmp_path / "python3", f'#!/bin/sh\necho "3.11 {other}.0+cpu False"\n')
    result = h.run_job(
        install_job, "--source", str(source_repo), "--base-python", str(fake), prefix=tmp_path / "p"
    )
    assert result.returncode == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"has torch {other}.0+cpu, not PyTorch {h.VERSION}: run install_lightning_{other}.sh with it" in line
    assert not (tmp_path / "p").exists()


def test_bad_input_prefix_is_a_file(install_job: Path, source_repo: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "a-file"
    prefix.write_text("")
    result = h.run_job(install_job, "--source", str(source_repo), prefix=prefix)
    assert result.returncode == 2 and "exists and is not a directory" in result.output, result.output


def test_bad_input_conda_exe(install_job: Path, source_repo: Path, tmp_path: Path) -> None:
    """--env-manager conda needs no conda executable (the conda layer: tests/install/test_conda_layer.py); a
    --conda-exe that is not one, or without --env-manager conda, is bad input."""
    for args, expected in (
        (["--env-manager", "conda", "--conda-exe", str(tmp_path / "no-conda")], "is not an executable"),
        (["--env-manager", "venv", "--conda-exe", "bash"], "add --env-manager conda"),
    ):
        result = h.run_job(install_job, "--source", str(source_repo), *args, prefix=tmp_path / "p")
        assert result.returncode == 2 and expected in result.output, result.output
        assert not (tmp_path / "p").exists()


def test_dry_run_prints_every_step_and_creates_nothing(
    install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    prefix = tmp_path / "new prefix"
    result = h.run_job(install_job, "--source", str(source_repo), *h.PIP_SOURCE, "--dry-run", prefix=prefix)
    assert result.returncode == 0, result.output
    for n in range(1, h.STEP_TOTAL + 1):
        assert f"[{n}/{h.STEP_TOTAL}]" in result.output
    printed = h.commands(result.output)
    # Fetching uv's wheel, the default installer: named on the installer's line (unless the tool cache keeps it).
    assert "-m pip download --no-deps --require-hashes" in result.output
    for command in (
        "/bin/uv venv --quiet --relocatable",
        "/bin/uv pip install",
        "--require-hashes -r",
        "--wheel --no-build-isolation",
        "compileall",
        "/bin/lightning-xpu validate --level smoke --json",
        "-m lxpu_admin.envside.pack make",  # the image the real run writes during the smoke job, named, not attempted
        "mv -T",
        "lightning_xpu-autoload.pth",
        f"lightning-setup-{h.TAG}.sh",
    ):
        assert command in printed, command
    assert "dry run finished: nothing was changed" in result.output
    assert "cannot statx" not in result.output and "No such file" not in result.output  # the prefix is new
    assert "no packed image" not in result.output  # issue 20: the dry run predicted a failure the run never has
    assert not prefix.exists(), "--dry-run created the prefix"


def _commands_by_step(text: str, prefix: Path) -> list[tuple[str, str]]:
    """(step title, command line) for every `+ ` line, with what differs between two runs made neutral: the
    prefix, the build id and the run's pid in temporary names."""
    step, found = "", []
    for line in text.splitlines():
        if re.match(r"\[\d+/\d+\] .* \.\.\.$", line):
            step = line
        elif line.startswith("+ "):
            for shown in (str(prefix).replace(" ", "\\ "), str(prefix)):
                line = line.replace(shown, "PREFIX")
            line = re.sub(r"\d{8}T\d{6}-\d+", "BUILD", line)
            found.append((step, re.sub(r"\.tmp\.([^.]+\.[^.]+)\.\d+\.", r".tmp.\1.PID.", line)))
    return found


def test_the_dry_run_prints_the_commands_of_the_real_run(
    install_job: Path, good_install: h.GoodInstall, tmp_path: Path
) -> None:
    """Issue 28: a dry run printed commands the real run never printed (the build tools it found in the
    environment, the manifest writer, the image's writer, the tag's files, the read-only build) and missed others:
    the same job, source and options on a new prefix print the same steps and commands as the first install."""
    prefix = tmp_path / good_install.prefix.name
    dry = h.run_job(install_job, "--source", str(good_install.source), *h.PIP_SOURCE, "--dry-run", prefix=prefix)
    assert dry.returncode == 0, dry.output
    real = _commands_by_step(good_install.log.read_text(), good_install.prefix)
    assert real and _commands_by_step(dry.output, prefix) == real


def test_dry_run_on_an_install_changes_nothing(install_job: Path, good_prefix: Path, tmp_path: Path) -> None:
    before = h.snapshot(good_prefix)
    logs = h.logs_of(good_prefix)
    for extra in ([], ["--force"]):
        result = h.run_job(install_job, *h.PIP_SOURCE, "--dry-run", *extra, prefix=good_prefix)
        assert result.returncode == 0, result.output
        assert "no packed image" not in result.output, result.output
        assert h.logs_of(good_prefix) == logs, "--dry-run wrote a log"
    assert (
        "already installed" in h.run_job(install_job, *h.PIP_SOURCE, "--dry-run", prefix=good_prefix).output
    )
    assert h.snapshot(good_prefix) == before


def test_auto_variant_without_intel_gpu_installs_cpu_loudly(
    install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    if any(Path("/sys/class/drm").glob("card*/device/vendor")):
        pytest.skip("this machine has a GPU; the note is for machines without one")
    result = h.run_job(
        install_job, "--source", str(source_repo), "--variant", "auto", "--dry-run", prefix=tmp_path / "p"
    )
    assert result.returncode == 0, result.output
    assert "NOTE: no Intel GPU found" in result.output
    assert f"module lightning-xpu/{h.TAG}" in result.output and "(tag 2.13-cpu)" in result.output


@pytest.mark.parametrize("scheduler", ["slurm", "pbs"])
def test_repository_found_from_the_submit_dir_never_the_script(
    scheduler: str, install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    """Under sbatch/qsub the script runs from a spool copy: the repository comes from the submit directory."""
    spool = tmp_path / "spool"
    spool.mkdir()
    job = spool / "job.sh"
    shutil.copy2(install_job, job)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    submit_dir = str(source_repo / "scripts" / h.SITE)
    names = {"slurm": ("SLURM_JOB_ID", "SLURM_SUBMIT_DIR"), "pbs": ("PBS_JOBID", "PBS_O_WORKDIR")}[scheduler]
    clean = {name: None for name in ("SLURM_JOB_ID", "SLURM_SUBMIT_DIR", "PBS_JOBID", "PBS_O_WORKDIR")}
    env = h.job_env(**{**clean, names[0]: "4242", names[1]: submit_dir})
    result = h.bash(
        f"cd {h.q(elsewhere)} && bash {h.q(job)} --dry-run --prefix {h.q(tmp_path / 'p')}", env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"repository:  {source_repo.resolve()} " in result.stdout
    # Without a usable submit directory it fails clearly instead of guessing from the spool copy. The directory
    # must lie outside every checkout: pytest's basetemp may be inside this repository (CI puts it in build/).
    with tempfile.TemporaryDirectory(prefix="lxpu-not-a-repository-") as outside:
        env = h.job_env(**{**clean, names[0]: "4242", names[1]: outside})
        result = h.bash(f"cd {h.q(outside)} && bash {h.q(job)} --dry-run --prefix {h.q(tmp_path / 'p')}", env=env)
    assert result.returncode == 2 and "pass --source DIR" in result.stderr, result.stderr


CONDA_STANDIN = """#!/usr/bin/env bash
# TEST STAND-IN for conda: records its arguments and the environment file, then builds the prefix as a venv.
set -euo pipefail
printf '%s\\n' "$@" > "{record}/argv"
prefix="" file=""
while (($#)); do
    case "$1" in --prefix) prefix="$2"; shift ;; --file) file="$2"; shift ;; esac
    shift
done
cp "$file" "{record}/environment.yml"
exec python3.11 -m venv "$prefix"
"""


def test_conda_branch_runs_the_expected_commands(
    install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    """--conda-exe: no conda here (nor in CI): a recording stand-in shows what the conda branch runs with a site's
    own conda. The py-rattler path, for real: tests/install/test_conda_layer.py."""
    record = tmp_path / "record"
    record.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    executable(bindir / "conda", CONDA_STANDIN.format(record=record))
    env = h.job_env(PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    prefix = tmp_path / "conda prefix"
    empty_wheelhouse = tmp_path / "wheelhouse"
    empty_wheelhouse.mkdir()

    conda = ["--env-manager", "conda", "--conda-exe", str(bindir / "conda")]
    dry = h.run_job(install_job, "--source", str(source_repo), *conda, "--dry-run", prefix=prefix, env=env)
    assert dry.returncode == 0 and "lxpu_admin.install.conda_layer create" in dry.output, dry.output
    assert f"--conda-exe={bindir / 'conda'}" in dry.output.replace("\\ ", " "), dry.output
    assert not (record / "argv").exists()

    # An empty wheelhouse stops the run at the package step, right after conda's.
    result = h.run_job(
        install_job,
        "--source",
        str(source_repo),
        *conda,
        "--wheelhouse",
        str(empty_wheelhouse),
        prefix=prefix,
        env=h.job_env(PIP_DEFAULT_TIMEOUT="5", PATH=env["PATH"]),
    )
    assert result.returncode == 1, result.output
    argv = (record / "argv").read_text().splitlines()
    assert argv[:3] == ["env", "create", "--prefix"] and argv[4] == "--file", argv
    assert Path(argv[3]).parent == prefix / ".envs" and Path(argv[3]).name.startswith(f"{h.TAG}.")
    yml = (record / "environment.yml").read_text()
    assert "python" in yml and "dependencies:" in yml
    assert "pip:" not in yml and "pip-repositories" not in yml and "torch==" not in yml, yml
    log = result.log_text
    assert f"[3/{h.STEP_TOTAL}] create the conda environment done" in log
    assert f"FAILED at step [4/{h.STEP_TOTAL}] install pinned packages" in result.last_line
    assert h.env_dirs(prefix) == [], "the failed build was not removed"
    assert not (prefix / h.TAG).exists() and not (prefix / f"lightning-setup-{h.TAG}.sh").exists()


def test_options_from_the_environment_and_the_command_line_wins(
    install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    """For schedulers that cannot pass job arguments (qsub -v): LIGHTNING_XPU_INSTALL_ARGS and the source
    variables; an option on the command line overrides them."""
    prefix = tmp_path / "p"
    env = h.job_env(
        LIGHTNING_XPU_INSTALL_ARGS="--dry-run --lock-timeout 7",
        LIGHTNING_XPU_INDEX_URL="http://127.0.0.1:9/simple",
        LIGHTNING_XPU_EXTRA_INDEX_URL="file:///a/simple file:///b/simple",
    )
    result = h.run_job(install_job, "--source", str(source_repo), prefix=prefix, env=env)
    assert result.returncode == 0, result.output
    assert "(wait up to 7 s)" in result.output
    assert (
        "sources:     custom --index-url http://127.0.0.1:9/simple --extra-index-url file:///a/simple "
        "--extra-index-url file:///b/simple" in result.output
    )
    result = h.run_job(
        install_job, "--source", str(source_repo), "--lock-timeout", "9", prefix=prefix, env=env
    )
    assert "(wait up to 9 s)" in result.output
    assert not prefix.exists()
