"""Fault tests: killed installs, a failing package source, a failing smoke job, two installs at once, a
lock that is never released. After each, the previous install is untouched, still loads (module and setup
script) and runs the toy fit, and no half-written setup script or modulefile is visible.

To stay cheap: the kills, the interruption and the race test the lock, the cleanup and the previous install, not
the package steps, so their builds copy the small prebuilt environment (LXPU_TEST_PREBUILT, install_harness.
make_prebuilt_env) instead of installing packages. A kill "during the build" happens right after that copy, before
the manifest: the new build is as incomplete as one killed in the package steps. The failing package source and the
failing smoke job need the real steps; they use --base-python (CI's base venv already has torch and Lightning), so
they reach the late steps in seconds instead of minutes.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import install_harness as h
import pytest

pytestmark = pytest.mark.install


def fast_build_args(source: Path) -> list[str]:
    return ["--source", str(source), *h.PIP_SOURCE, "--base-python", h.base_python()]


# What the `cp` shim of `paused_build_env` prints once the prebuilt environment is copied into the new build.
PAUSED = "test pause: the prebuilt environment is copied, the new build has no manifest yet"


@pytest.fixture(scope="module")
def prebuilt_env(source_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return h.make_prebuilt_env(tmp_path_factory.mktemp("prebuilt") / "env", source_repo)


def paused_build_env(prebuilt: Path, tmp_path: Path) -> dict[str, str]:
    """The job environment of a build that copies `prebuilt` (LXPU_TEST_PREBUILT: steps 3 to 8) and then waits
    while tmp_path/pause exists: a `cp` shim on PATH prints PAUSED after the copy. There the new build is in
    .envs without a manifest, incomplete as in the package steps, and the job holds the install lock."""
    shims, pause = tmp_path / "shims", tmp_path / "pause"
    shims.mkdir()
    pause.touch()
    (shims / "cp").write_text(
        "#!/bin/sh\n"
        f'{shlex.quote(str(shutil.which("cp")))} "$@" || exit\n'
        '[ "$2" = "$LXPU_TEST_PREBUILT" ] || exit 0\n'
        f"echo {shlex.quote(PAUSED)}\n"
        f"while [ -e {shlex.quote(str(pause))} ]; do sleep 0.1; done\n"
    )
    (shims / "cp").chmod(0o755)
    return h.job_env(LXPU_TEST_PREBUILT=str(prebuilt), PATH=f"{shims}:{os.environ['PATH']}")


def wait_until(done: Callable[[], bool], procs: list[subprocess.Popen[bytes]], what: str) -> None:
    deadline = time.monotonic() + h.JOB_TIMEOUT_S
    while not done():
        assert all(proc.poll() is None for proc in procs), f"a job ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {h.JOB_TIMEOUT_S} s"
        time.sleep(0.1)


def assert_leftovers_cleaned_by_next_run(good: h.GoodInstall) -> None:
    """A kill -9 leaves its staging build behind; the next run (here a no-op) removes it under the lock."""
    result = h.run_job(good.job, "--source", str(good.source), *h.PIP_SOURCE, prefix=good.prefix)
    assert result.returncode == 0 and "already installed" in result.last_line, result.output
    assert "removing leftover" in result.log_text
    assert h.env_dirs(good.prefix) == h.kept_env_dirs(good.prefix)
    assert not list((good.prefix / ".envs").glob(".tmp.*")), "temporary files survived the next run"


def start_paused_job(good_install: h.GoodInstall, prebuilt: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """The install job into the good install's prefix, once it waits inside its build (paused_build_env); its
    output is tmp_path/job.out."""
    output = tmp_path / "job.out"
    proc = h.start_job(good_install.job, *h.prebuilt_args(good_install.source), prefix=good_install.prefix,
                       output=output, env=paused_build_env(prebuilt, tmp_path))
    h.wait_for_text(output, PAUSED, proc)
    return proc


def test_kill_9_of_the_process_group_keeps_the_previous_install(
    good_install: h.GoodInstall, prebuilt_env: Path, tmp_path: Path
) -> None:
    """kill -9 while the new build is incomplete (once: kills in the runtime and in the smoke step left the same
    incomplete build; which package step ran is not what the lock and the cleanup see)."""
    prefix = good_install.prefix
    before = h.snapshot(prefix)
    logs = h.logs_of(prefix)
    proc = start_paused_job(good_install, prebuilt_env, tmp_path)
    h.kill_group(proc)
    log = h.new_log(prefix, logs)
    assert log is not None and PAUSED in log.read_text()
    assert not log.read_text().rstrip().splitlines()[-1].startswith("lightning-xpu "), (
        "a kill -9 has no last line"
    )
    assert len(h.env_dirs(prefix)) > len(h.kept_env_dirs(prefix)), "the killed build left nothing to clean?"
    h.assert_unchanged(prefix, before, tmp_path)
    assert_leftovers_cleaned_by_next_run(good_install)


@pytest.mark.slurm
@pytest.mark.parametrize("how", ["kill", "cancel"])
def test_scancel_of_the_install_job_keeps_the_previous_install(
    how: str, good_install: h.GoodInstall, prebuilt_env: Path, tmp_path: Path
) -> None:
    """kill: SIGKILL to the batch shell and all its children (`scancel --batch --signal=KILL`), nothing of the
    job runs after it. cancel: a plain `scancel` (what `scancel -s KILL` also does to a batch job): Slurm
    sends SIGTERM first, so the job logs why it stopped and removes its own build."""
    h.require(h.slurm_up(), "the Slurm cluster")
    prefix = good_install.prefix
    before = h.snapshot(prefix)
    logs = h.logs_of(prefix)
    output = tmp_path / "slurm.out"
    submit = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--job-name=lxpu-install-kill",
            f"--output={output}",
            str(good_install.job),
            "--prefix",
            str(prefix),
            *h.prebuilt_args(good_install.source),
        ],
        env=paused_build_env(prebuilt_env, tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = submit.stdout.strip().split(";")[0]
    scancel = ["scancel", "--batch", "--signal=KILL", job_id] if how == "kill" else ["scancel", job_id]
    try:
        h.wait_for_slurm_text(job_id, output, PAUSED)
    finally:
        subprocess.run(scancel, check=False, timeout=60)
    h.wait_for_slurm_job(job_id)
    # Slurm ended the job, but `scancel --batch` signals the batch shell's tree only as far as it reaches: let the
    # paused `cp` shim go, so no process of the job stays behind holding the log's tee open.
    (tmp_path / "pause").unlink()
    log = h.new_log(prefix, logs)
    assert log is not None and PAUSED in log.read_text()
    last = log.read_text().strip().splitlines()[-1]
    if how == "kill":
        assert not last.startswith("lightning-xpu "), "a SIGKILLed job cannot write a last line"
        assert len(h.env_dirs(prefix)) > len(h.kept_env_dirs(prefix)), "the killed build left nothing behind?"
    else:
        assert "FAILED at step" in last and last.endswith("interrupted by SIGTERM"), last
        assert h.env_dirs(prefix) == h.kept_env_dirs(prefix), "the cancelled build was not removed"
    h.assert_unchanged(prefix, before, tmp_path)
    if how == "kill":
        assert_leftovers_cleaned_by_next_run(good_install)


SOURCES = {
    # Nothing listens there: connection refused, fast (with a short pip timeout).
    "closed-port": lambda: f"http://127.0.0.1:{h.closed_port()}/simple",
    "missing-file-url": lambda: "file:///nonexistent/lightning-xpu-test/simple",
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_failing_package_source_keeps_the_previous_install(
    kind: str, good_install: h.GoodInstall, tmp_path: Path
) -> None:
    prefix = good_install.prefix
    before = h.snapshot(prefix)
    # The machine's pip configuration (extra indexes, find-links) would otherwise still find the packages.
    env = h.job_env(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=None, PIP_DEFAULT_TIMEOUT="5")
    result = h.run_job(
        good_install.job,
        "--source",
        str(good_install.source),
        "--pip-source",
        "recipe",
        "--index-url",
        SOURCES[kind](),
        prefix=prefix,
        env=env,
    )
    assert result.returncode == 1, result.output
    last = result.last_line
    assert f"FAILED at step [4/{h.STEP_TOTAL}] install pinned packages" in last, last
    # pip's or uv's own reason, whichever installed: the package it could not find, or the connection error.
    reasons = ("No matching distribution found for", "not found in the package registry", "Connection refused")
    assert "pip install failed" in last and any(reason in last for reason in reasons), last
    assert h.env_dirs(prefix) == h.kept_env_dirs(prefix), "the failed build was not removed"
    h.assert_unchanged(prefix, before, tmp_path)


def test_failing_smoke_job_keeps_the_previous_install(good_install: h.GoodInstall, tmp_path: Path) -> None:
    prefix = good_install.prefix
    before = h.snapshot(prefix)
    # The image is written while the smoke job runs; a tar that first sleeps keeps it writing when the smoke job
    # fails, so the install must stop it.
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "tar").write_text(f'#!/bin/sh\nsleep 60\nexec {shutil.which("tar")} "$@"\n')
    (shims / "tar").chmod(0o755)
    env = h.job_env(LIGHTNING_XPU_SMOKE_INJECT_FAILURE="fit_ddp",  # test-only switch of the check framework
                    LIGHTNING_XPU_PACK="1", PATH=f"{shims}:{os.environ['PATH']}")
    result = h.run_job(good_install.job, *fast_build_args(good_install.source), prefix=prefix, env=env)
    assert result.returncode == 1, result.output
    last = result.last_line
    assert f"FAILED at step [8/{h.STEP_TOTAL}] run the smoke job" in last, last
    assert "fit_ddp: failure injected by LIGHTNING_XPU_SMOKE_INJECT_FAILURE" in last, last
    assert result.log is not None
    assert result.log.with_suffix(".smoke.json").is_file(), "the failed smoke result was not kept"
    assert h.env_dirs(prefix) == h.kept_env_dirs(prefix), "the failed build was not removed"
    # The image was being written meanwhile (step 9 starts with the smoke job): stopped, nothing of it left.
    assert processes_naming(str(prefix)) == []
    h.assert_unchanged(prefix, before, tmp_path)


def processes_naming(text: str) -> list[str]:
    """'pid: command line' of every process whose command line contains TEXT."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and text in command:
            found.append(f"{proc.name}: {command}")
    return found


def test_two_installs_at_once_make_one_good_install(
    install_job: Path, source_repo: Path, prebuilt_env: Path, tmp_path: Path
) -> None:
    """The lock, not the build: both runs build from the prebuilt environment, and the first to take the lock waits
    before publishing (LXPU_TEST_PAUSE_AT=record) until the other says that it waits."""
    prefix = tmp_path / "race prefix"
    pause = tmp_path / "pause"
    pause.touch()
    env = h.job_env(LXPU_TEST_PREBUILT=str(prebuilt_env), LXPU_TEST_PAUSE_AT="record", LXPU_TEST_PAUSE_FILE=str(pause))
    paths = [tmp_path / f"job{i}.out" for i in range(2)]
    procs = [h.start_job(install_job, *h.prebuilt_args(source_repo), prefix=prefix, output=path, env=env)
             for path in paths]
    waiting = f"another install of {h.TAG} holds"
    wait_until(lambda: any(waiting in path.read_text() for path in paths), procs, "job waiting for the lock")
    pause.unlink()
    for proc in procs:
        proc.wait(timeout=h.JOB_TIMEOUT_S)
    outputs = [path.read_text() for path in paths]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    waited = [i for i, out in enumerate(outputs) if waiting in out]
    assert len(waited) == 1, outputs
    waiter, holder = waited[0], 1 - waited[0]
    assert f"pid {procs[holder].pid} host " in outputs[waiter], "the waiter did not log the holder's pid"
    assert "already installed with these inputs" in outputs[waiter].strip().splitlines()[-1]
    assert f"lightning-xpu {h.TAG}: installed" in outputs[holder].strip().splitlines()[-1]
    assert len(h.env_dirs(prefix)) == 1
    h.assert_install_works(prefix, tmp_path)


def test_lock_held_too_long_fails_clearly(install_job: Path, source_repo: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "locked prefix"
    lockfile = prefix / ".locks" / f"{h.TAG}.lock"
    lockfile.parent.mkdir(parents=True)
    with lockfile.open("w") as handle:
        handle.write("pid 4242 host elsewhere since earlier\n")
        handle.flush()
        fcntl.flock(handle, fcntl.LOCK_EX)
        result = h.run_job(
            install_job, "--source", str(source_repo), *h.PIP_SOURCE, "--lock-timeout", "1", prefix=prefix
        )
    assert result.returncode == 1, result.output
    assert "holds" in result.log_text and "pid 4242 host elsewhere" in result.log_text
    last = result.last_line
    assert f"FAILED at step [2/{h.STEP_TOTAL}] take the install lock" in last, last
    assert "still holds" in last and "after 1 s" in last and "--lock-timeout" in last, last
    assert h.env_dirs(prefix) == [] and not (prefix / h.TAG).exists()


def test_interrupted_install_says_so_and_cleans_up(
    good_install: h.GoodInstall, prebuilt_env: Path, tmp_path: Path
) -> None:
    """SIGTERM (scancel without -s KILL, Ctrl-C): the last log line names the step and the signal, and the
    interrupted build removes its own staging directory and temporary files."""
    prefix = good_install.prefix
    before = h.snapshot(prefix)
    logs = h.logs_of(prefix)
    proc = start_paused_job(good_install, prebuilt_env, tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    log = h.new_log(prefix, logs)
    assert log is not None
    lines = log.read_text().strip().splitlines()
    started = [line.removesuffix(" ...") for line in lines if re.fullmatch(r"\[\d+/\d+\] .* \.\.\.", line)]
    assert f"FAILED at step {started[-1]} after" in lines[-1], lines[-1]
    assert lines[-1].endswith("interrupted by SIGTERM"), lines[-1]
    assert h.env_dirs(prefix) == h.kept_env_dirs(prefix)
    assert not list((prefix / ".envs").glob(".tmp.*"))
    h.assert_unchanged(prefix, before, tmp_path)
