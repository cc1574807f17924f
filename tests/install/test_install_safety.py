"""Never delete what is in use (issue 12): one fault test per data-loss case the issue lists.

- a job running `torchrun` through two rebuilds (the default and --force) keeps working;
- each kind of link damage (a removed tag link, a dangling link, a deleted .previous, a manual rollback through
  .previous, self-loops, a link to an incomplete build) is repaired or refused, and no build is deleted;
- a kill between every pair of publishing operations keeps one consistent published build and its rollback;
- a deleted lock file changes nothing; a full disk after publishing is not a failure;
- logs/ does not grow per no-op run; the free-space check counts inodes;
- --prune, --uninstall and --rollback keep what is in use (leases) and the other versions working.

Everything except the torchrun test runs against a small prebuilt environment (install_harness.make_prebuilt_env,
copied by the real install job under LXPU_TEST_PREBUILT): about a second per install run, no package installs.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import install_harness as h
import pytest

pytestmark = pytest.mark.install

PUBLISH_OPS = ["record", "entry-points", "link", "rename", "previous", "cleanup"]


@dataclass
class Prebuilt:
    job: Path
    source: Path
    env: Path  # the prebuilt environment
    template: Path  # a prefix with two builds: A (first), B (published, records A)


def run(pre: Prebuilt, prefix: Path, *args: str, **env: str | None) -> h.JobResult:
    return h.run_job(
        pre.job,
        *h.prebuilt_args(pre.source),
        *args,
        prefix=prefix,
        env=h.job_env(LXPU_TEST_PREBUILT=str(pre.env), **env),
    )


def target(prefix: Path, tag: str = h.TAG) -> str:
    """The build a published link resolves to (name), or '' when it does not resolve."""
    path = prefix / tag
    return Path(os.path.realpath(path)).name if path.exists() else ""


def recorded_previous(prefix: Path, build: str) -> str:
    record = prefix / ".envs" / build / "share" / "lightning-xpu" / "previous-build"
    return record.read_text().strip() if record.is_file() else ""


def previous_link(prefix: Path) -> str:
    link = prefix / ".envs" / f"{h.TAG}.previous"
    return os.readlink(link) if link.is_symlink() else ""


def assert_consistent(prefix: Path) -> None:
    """One published complete build; .previous is the rollback build recorded in it, and complete."""
    current = target(prefix)
    assert current and h.build_complete(prefix / ".envs" / current), f"{h.TAG} -> {current!r}"
    previous = recorded_previous(prefix, current)
    assert previous_link(prefix) == previous
    if previous:
        assert h.build_complete(prefix / ".envs" / previous), f"rollback build {previous} is not complete"


@pytest.fixture(scope="module")
def pre(install_job: Path, source_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Prebuilt:
    work = tmp_path_factory.mktemp("prebuilt")
    env = h.make_prebuilt_env(work / "env", source_repo)
    template = work / "template prefix"
    pre = Prebuilt(install_job, source_repo, env, template)
    for args in ((), ("--force",)):
        result = run(pre, template, *args)
        assert result.returncode == 0 and "installed" in result.last_line, result.output
    return pre


@pytest.fixture
def prefix(pre: Prebuilt, tmp_path: Path) -> Path:
    """A copy of the template prefix (builds A and B, B published)."""
    dest = tmp_path / "pre fix"
    shutil.copytree(pre.template, dest, symlinks=True)
    h.rewrite_site_job(dest, pre.source)
    return dest


def builds(prefix: Path) -> list[str]:
    return h.env_dirs(prefix)


# ---- link damage ----

DAMAGE = {
    # name: (shell commands run in the prefix, with A and B set; expected target after the run, or None: refused)
    "removed tag link": ("rm 2.13-cpu", "B"),
    "dangling tag link": ("ln -sfn .envs/2.13-cpu.gone 2.13-cpu", "B"),
    "tag link self-loop": ("ln -sfn 2.13-cpu 2.13-cpu", "B"),
    "deleted .previous": ("rm .envs/2.13-cpu.previous", "B"),
    ".previous self-loop": ("ln -sfn 2.13-cpu.previous .envs/2.13-cpu.previous", "B"),
    "manual rollback to .previous's build": ('ln -sfn ".envs/$A" 2.13-cpu', "A"),
    "manual rollback through .previous": ("ln -sfn .envs/2.13-cpu.previous 2.13-cpu", "A"),
    "link to an incomplete build": ("mkdir .envs/$X && ln -sfn .envs/$X 2.13-cpu", None),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_link_damage_is_repaired_or_refused(damage: str, pre: Prebuilt, prefix: Path) -> None:
    commands, expected = DAMAGE[damage]
    b = target(prefix)
    a = recorded_previous(prefix, b)
    assert a and previous_link(prefix) == a
    before = builds(prefix)
    incomplete = f"{h.TAG}.29990101T000000-1"
    done = h.bash(f"cd {h.q(prefix)} && A={a} && B={b} && X={incomplete} && {commands}")
    assert done.returncode == 0, done.stderr
    names = (h.TAG, f".envs/{h.TAG}.previous")
    links = {name: os.readlink(prefix / name) for name in names if (prefix / name).is_symlink()}
    result = run(pre, prefix)
    assert set(before) <= set(builds(prefix)), "a run deleted a build"
    if expected is None:
        assert result.returncode == 1, result.output
        assert "is not a complete build" in result.last_line and "FAILED at step [2/" in result.last_line
        assert {n: os.readlink(prefix / n) for n in links} == links, "a refused run changed the links"
        return
    assert result.returncode == 0, result.output
    assert target(prefix) == {"A": a, "B": b}[expected]
    assert os.readlink(prefix / h.TAG) == f".envs/{target(prefix)}", "the tag link is not normalised"
    assert_consistent(prefix)
    last = result.last_line
    assert "nothing changed" not in last and ("repaired" in last or "removed" in last), last
    # The next run finds nothing to repair.
    again = run(pre, prefix)
    assert again.returncode == 0 and "already installed with these inputs: nothing changed" in again.last_line


def test_truncated_manifest_of_the_published_build_is_said_and_kept(pre: Prebuilt, prefix: Path) -> None:
    b = target(prefix)
    manifest = prefix / ".envs" / b / "manifest.json"
    manifest.write_text(manifest.read_text()[:200])
    result = run(pre, prefix)
    assert result.returncode == 0 and "installed" in result.last_line, result.output
    assert f"the published build {b} has a missing or truncated manifest.json: it is kept" in result.output
    assert "its manifest.json is missing or truncated: rebuilding" in result.output
    assert target(prefix) != b and b in builds(prefix), "the damaged build was not kept"
    assert recorded_previous(prefix, target(prefix)) == b and previous_link(prefix) == ""


# ---- kills between publishing operations ----


def start(pre: Prebuilt, prefix: Path, output: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return h.start_job(
        pre.job,
        *h.prebuilt_args(pre.source),
        *args,
        prefix=prefix,
        output=output,
        env=h.job_env(LXPU_TEST_PREBUILT=str(pre.env), **env),
    )


def kill_before(op: str, pre: Prebuilt, prefix: Path, tmp_path: Path) -> None:
    """A --force install killed (kill -9 of its process group) just before publishing operation OP."""
    pause = tmp_path / "pause"
    pause.touch()
    output = tmp_path / "job.out"
    proc = start(pre, prefix, output, "--force", LXPU_TEST_PAUSE_AT=op, LXPU_TEST_PAUSE_FILE=str(pause))
    h.wait_for_text(output, f"test pause before {op} ", proc, timeout=120)
    h.kill_group(proc)


@pytest.mark.parametrize("op", PUBLISH_OPS)
def test_kill_between_publishing_operations(op: str, pre: Prebuilt, prefix: Path, tmp_path: Path) -> None:
    b = target(prefix)
    kill_before(op, pre, prefix, tmp_path)
    # Right after the kill -9: one published complete build, and the rollback build recorded in it exists.
    current = target(prefix)
    published_before_kill = PUBLISH_OPS.index(op) > PUBLISH_OPS.index("rename")
    assert (current != b) == published_before_kill, f"killed before {op}: {h.TAG} -> {current}"
    assert h.build_complete(prefix / ".envs" / current)
    rollback = recorded_previous(prefix, current)
    assert rollback and h.build_complete(prefix / ".envs" / rollback)
    # The next run repairs what the kill left (.previous, temporary files) and deletes no complete build.
    complete = h.kept_env_dirs(prefix)
    result = run(pre, prefix)
    assert result.returncode == 0, result.output
    assert_consistent(prefix)
    assert set(complete) <= set(builds(prefix))
    assert not list((prefix / ".envs").glob(".tmp.*"))
    # And the admin's rollback goes to the recorded build.
    result = run(pre, prefix, "--rollback")
    assert result.returncode == 0 and target(prefix) == rollback, result.output


def test_kill_after_the_rename_then_a_damaged_manifest_keeps_the_build_for_rollback(
    pre: Prebuilt, prefix: Path, tmp_path: Path
) -> None:
    """Killed right after the publishing rename, an install leaves its (stale) install lease on the build it
    published; once that build's manifest is damaged, it looked like a killed run's incomplete build, and the run
    that replaced it deleted it, although the new build records it as its rollback build (issue 27, Why 8)."""
    kill_before("previous", pre, prefix, tmp_path)
    c = target(prefix)
    assert list((prefix / ".leases").glob(f"{c}@*.install-*")), "the killed install left no lease"
    manifest = prefix / ".envs" / c / "manifest.json"
    manifest.write_text(manifest.read_text()[:200])
    result = run(pre, prefix)  # the published build's manifest is damaged: rebuild
    assert result.returncode == 0, result.output
    d = target(prefix)
    assert d != c and recorded_previous(prefix, d) == c
    assert (prefix / ".envs" / c / "bin" / "python").exists(), f"the build {c} it replaced was deleted"
    # One more build: C is neither published nor the rollback build now, and still no leftover of a killed run.
    result = run(pre, prefix, "--force")
    assert result.returncode == 0 and recorded_previous(prefix, target(prefix)) == d, result.output
    assert f"keeping the build {prefix}/.envs/{c}: its install reached publishing" in result.output
    assert (prefix / ".envs" / c / "bin" / "python").exists(), f"the build {c} was deleted"
    for back_to in (d, c):  # --rollback follows the records, to C too (published once, damaged since)
        result = run(pre, prefix, "--rollback")
        assert result.returncode == 0 and target(prefix) == back_to, result.output
    assert f"the rollback build {c} has a missing or truncated manifest.json" in result.output


def test_disk_full_after_publishing_is_not_a_failure(pre: Prebuilt, prefix: Path) -> None:
    b = target(prefix)
    result = run(pre, prefix, "--force", LXPU_TEST_FAIL_AT="previous")
    new = target(prefix)
    assert new != b and h.build_complete(prefix / ".envs" / new)
    assert result.returncode == 0, result.output
    assert "FAILED" not in result.output
    assert f"installed {prefix}/{h.TAG} -> .envs/{new}" in result.last_line
    assert "No space left on device" in result.last_line
    assert recorded_previous(prefix, new) == b
    result = run(pre, prefix)
    assert result.returncode == 0 and "repaired" in result.last_line, result.output
    assert_consistent(prefix)


def test_sigterm_after_publishing_says_installed(pre: Prebuilt, prefix: Path, tmp_path: Path) -> None:
    b = target(prefix)
    pause = tmp_path / "pause"
    pause.touch()
    output = tmp_path / "job.out"
    proc = start(pre, prefix, output, "--force", LXPU_TEST_PAUSE_AT="previous", LXPU_TEST_PAUSE_FILE=str(pause))
    h.wait_for_text(output, "test pause before previous ", proc, timeout=120)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    last = output.read_text().strip().splitlines()[-1]
    assert "FAILED" not in last and f"installed {prefix}/{h.TAG} -> .envs/{target(prefix)}" in last, last
    assert "interrupted by SIGTERM" in last and target(prefix) != b
    assert run(pre, prefix).returncode == 0
    assert_consistent(prefix)


def test_disk_full_before_publishing_keeps_the_old_build(pre: Prebuilt, prefix: Path) -> None:
    b = target(prefix)
    before = builds(prefix)
    result = run(pre, prefix, "--force", LXPU_TEST_FAIL_AT="rename")
    assert result.returncode == 1, result.output
    assert "FAILED at step" in result.last_line and "No space left on device" in result.last_line
    assert target(prefix) == b and builds(prefix) == before
    assert_consistent(prefix)


# ---- the lock ----


def test_deleted_lock_file_changes_nothing(pre: Prebuilt, prefix: Path, tmp_path: Path) -> None:
    b = target(prefix)
    pause = tmp_path / "pause"
    pause.touch()
    first_out, second_out = tmp_path / "first.out", tmp_path / "second.out"
    first = start(pre, prefix, first_out, "--force", LXPU_TEST_PAUSE_AT="rename", LXPU_TEST_PAUSE_FILE=str(pause))
    h.wait_for_text(first_out, "test pause before rename ", first, timeout=120)
    (prefix / ".locks" / f"{h.TAG}.lock").unlink()
    second = start(pre, prefix, second_out, "--force")
    h.wait_for_text(second_out, "its lock file", second, timeout=120)
    assert "waiting" in second_out.read_text()
    assert second.poll() is None and target(prefix) == b, "the second install went ahead"
    pause.unlink()
    assert first.wait(timeout=120) == 0, first_out.read_text()
    assert second.wait(timeout=120) == 0, second_out.read_text()
    first_build = first_out.read_text().strip().splitlines()[-1].split(" -> .envs/")[1].split()[0]
    second_build = target(prefix)
    assert first_build != second_build and h.build_complete(prefix / ".envs" / first_build)
    assert recorded_previous(prefix, first_build) == b
    assert recorded_previous(prefix, second_build) == first_build, "the two installs overlapped"
    assert_consistent(prefix)


def test_noop_rerun_restores_the_site_validation_job(pre: Prebuilt, prefix: Path, tmp_path: Path) -> None:
    """The install writes <prefix>/validate_lightning.sh (and the common script it runs) with the tag files; a
    no-op rerun puts back a missing one, as it does the setup script and modulefile."""
    job, common = prefix / "validate_lightning.sh", prefix / ".validate_lightning.common.sh"
    written = job.read_text()
    assert common.read_bytes() == (pre.source / "scripts" / "common" / "validate_lightning.sh").read_bytes()
    job.unlink()
    common.unlink()
    again = run(pre, prefix)
    assert again.returncode == 0 and "validation job restored" in again.last_line, again.output
    assert job.read_text() == written and os.access(job, os.X_OK) and common.is_file()
    spool = tmp_path / "spool" / "job.sh"  # the scheduler's copy, elsewhere: it finds the prefix it was written for
    spool.parent.mkdir()
    shutil.copy(job, spool)
    shown = subprocess.run(["bash", str(spool), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert shown.returncode == 0 and shown.stdout.startswith("Usage: validate_lightning.sh"), shown.stderr
    assert "nothing changed" in run(pre, prefix).last_line


# ---- logs and free space ----


def test_noop_runs_do_not_grow_logs(pre: Prebuilt, prefix: Path) -> None:
    first = run(pre, prefix)
    assert "nothing changed" in first.last_line, first.output
    files = sorted((prefix / "logs").iterdir())
    for _ in range(2):
        again = run(pre, prefix)
        assert again.log == h.noop_log(prefix) and "nothing changed" in again.last_line
    assert sorted((prefix / "logs").iterdir()) == files


def test_logs_are_rotated(pre: Prebuilt, prefix: Path) -> None:
    for _ in range(2):
        assert run(pre, prefix, "--force", LIGHTNING_XPU_KEEP_LOGS="2").returncode == 0
    assert len([p for p in (prefix / "logs").glob(f"install-{h.TAG}-2*.log")]) == 2


def test_free_space_check_counts_files(pre: Prebuilt, prefix: Path) -> None:
    result = run(pre, prefix, "--force", LIGHTNING_XPU_MIN_FREE_INODES=str(10**15))
    assert result.returncode == 1, result.output
    assert "FAILED at step [1/" in result.last_line and "free inodes (files)" in result.last_line
    # The estimate comes from the published build's recorded size, in bytes and files (a rebuild: a no-op run
    # needs no space).
    result = run(pre, prefix, "--dry-run", "--force")
    assert "files needed (the published build has " in result.output


# ---- leases, --prune, --uninstall, --rollback ----


@pytest.fixture
def holder(prefix: Path) -> Iterator[subprocess.Popen[str]]:
    """A 'job' outside a scheduler that sourced the setup script (lease: its shell) and runs on."""
    proc = subprocess.Popen(
        ["bash", "-c", f"source {h.q(prefix / f'lightning-setup-{h.TAG}.sh')} && echo ready && exec sleep 300"],
        stdout=subprocess.PIPE,
        text=True,
        env=h.job_env(SLURM_JOB_ID=None, PBS_JOBID=None),
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_prune_keeps_what_is_in_use(pre: Prebuilt, prefix: Path, holder: subprocess.Popen[str]) -> None:
    a = recorded_previous(prefix, target(prefix))
    b = target(prefix)  # leased by the holder
    leases = list((prefix / ".leases").glob(f"{b}@*"))
    assert len(leases) == 1 and f"pid={holder.pid}\n" in leases[0].read_text()
    for _ in range(2):
        assert run(pre, prefix, "--force").returncode == 0
    c = recorded_previous(prefix, target(prefix))
    d = target(prefix)
    assert b in builds(prefix), "a rebuild deleted the build in use"
    # A lease from another host whose job this host cannot ask about (here: a job of another Slurm cluster on the
    # same file system) is live until its age limit, and said so.
    other = prefix / ".leases" / f"{a}@elsewhere.slurm-999999"
    lease = f"build={a}\nhost=elsewhere\njob=slurm:999999\ncluster=another-cluster\npid=1\npid_start=1\n"
    other.write_text(f"{lease}created={int(time.time())}\n")
    result = run(pre, prefix, "--prune", "--keep", "0")
    assert result.returncode == 0, result.output
    assert builds(prefix) == sorted([a, b, c, d])
    assert "(Slurm job 999999 of cluster another-cluster, not this one): cannot be checked from here" in result.output
    assert f"in use: process {holder.pid} on " in result.output and "the rollback build" in result.output
    assert "pruned: removed 0 build(s)" in result.last_line
    other.write_text(f"{lease}created={int(time.time()) - 30 * 86400}\n")
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    result = run(pre, prefix, "--prune", "--keep", "0")
    assert result.returncode == 0, result.output
    assert builds(prefix) == sorted([c, d]), result.output
    assert f"pruned: removed 2 build(s) ({b} {a})" in result.last_line
    assert not list((prefix / ".leases").glob(f"{h.TAG}.*")), "stale leases survived --prune"
    assert_consistent(prefix)


def _lease_of(prefix: Path, pid: int) -> dict[str, str]:
    (path,) = [p for p in (prefix / ".leases").iterdir() if f"pid={pid}\n" in p.read_text()]
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_status_names_what_holds_each_build_and_how_to_release_it(
    prefix: Path, holder: subprocess.Popen[str]
) -> None:
    """`lightning-xpu-admin status`: per build, each live lease with what holds it and how to release it."""
    b = target(prefix)
    holders = [holder]
    if h.lmod_available():  # a module load in a shell of its own (its session leader is the lease's process)
        holders.append(subprocess.Popen(
            ["bash", "-c", h.with_module(prefix, "echo ready; exec sleep 301")], stdout=subprocess.PIPE, text=True,
            env=h.job_env(SLURM_JOB_ID=None, PBS_JOBID=None), start_new_session=True))  # fmt: skip
        assert holders[-1].stdout is not None and holders[-1].stdout.readline().strip() == "ready"
    a = recorded_previous(prefix, b)
    (prefix / ".leases" / f"{a}@elsewhere.slurm-999999").write_text(
        f"build={a}\nhost=elsewhere\njob=slurm:999999\ncluster=another-cluster\npid=1\nuser=someone\n"
        f"created={int(time.time())}\nwhat=setup-script\n")
    ended = subprocess.Popen(["true"])
    ended.wait()
    (prefix / ".leases" / f"{b}@{os.uname().nodename}.pid-{ended.pid}").write_text(
        f"build={b}\nhost={os.uname().nodename}\njob=\npid={ended.pid}\nwhat=setup-script\nheld=flock\n")
    admin = [str(h.REPO / "bin" / "lightning-xpu-admin"), "status", "--prefix", str(prefix)]
    user = pwd.getpwuid(os.getuid()).pw_name  # who took the leases (USER, else the lease file's owner)
    try:
        done = subprocess.run(admin, env=h.job_env(), capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert f"  {b} (published): {len(holders)} live lease{'s' if len(holders) > 1 else ''}" in lines, lines
        assert f"  {a}: 1 live lease" in lines, lines
        for proc, what, release in zip(holders, ("setup script", "module load"),
                                       ("leave that shell (exit)", "`module unload lightning-xpu` in that shell")):
            lease = _lease_of(prefix, proc.pid)
            assert lease["held"] == "flock", lease
            (index,) = [i for i, line in enumerate(lines) if f"pid {proc.pid} (sleep 30" in line]
            assert lines[index].startswith(f"    - {what}, user {user}, host {lease['host']}, "), lines
            assert lines[index + 1].startswith(f"      release: {release}"), lines
        (index,) = [i for i, line in enumerate(lines) if line.startswith("    - ") and "Slurm job 999999" in line]
        # The user is the file's owner; the text's user= is shown, not believed.
        assert f"user {user} (its text says someone), host elsewhere" in lines[index], lines
        assert "scancel 999999" in lines[index + 1], lines
        assert any(line.startswith("(1 stale lease in ") for line in lines), lines
    finally:
        for proc in holders:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    done = subprocess.run(admin, env=h.job_env(), capture_output=True, text=True, timeout=60, check=False)
    assert f"  {b} (published)" not in done.stdout and f"({len(holders) + 1} stale leases in " in done.stdout, (
        done.stdout)


def test_prune_by_age_and_dry_run(pre: Prebuilt, prefix: Path) -> None:
    a, b = recorded_previous(prefix, target(prefix)), target(prefix)
    assert run(pre, prefix, "--force").returncode == 0  # C published, B its rollback build, A unused
    result = run(pre, prefix, "--prune", "--older-than", "1")
    assert result.returncode == 0 and f"{a} (younger than 1 days)" in result.last_line, result.output
    result = run(pre, prefix, "--prune", "--older-than", "0", "--dry-run")
    last = result.output.strip().splitlines()[-1]  # a dry run writes no log
    assert result.returncode == 0 and f"it would have: pruned: removed 1 build(s) ({a})" in last, result.output
    assert a in builds(prefix)
    result = run(pre, prefix, "--prune", "--older-than", "0")
    assert result.returncode == 0 and f"pruned: removed 1 build(s) ({a})" in result.last_line, result.output
    assert a not in builds(prefix) and b in builds(prefix)


def test_prune_needs_a_rule(pre: Prebuilt, prefix: Path) -> None:
    result = run(pre, prefix, "--prune")
    assert result.returncode == 2
    assert (
        result.output.strip()
        .splitlines()[-1]
        .endswith("--prune needs --keep N (keep the N newest builds) or --older-than DAYS: see --help")
    )


def test_rollback_and_the_module_follow_the_record(pre: Prebuilt, prefix: Path) -> None:
    a, b = recorded_previous(prefix, target(prefix)), target(prefix)
    result = run(pre, prefix, "--rollback")
    assert result.returncode == 0 and target(prefix) == a, result.output
    assert b in builds(prefix)
    assert_consistent(prefix)
    result = run(pre, prefix, "--rollback")
    assert result.returncode == 1 and "records no rollback build" in result.last_line
    assert target(prefix) == a
    # The module and the setup script resolve to the one build the link points to at load time.
    h.require(h.lmod_available(), "Lmod")
    report = 'echo "$LIGHTNING_XPU_ROOT"; python -c "import sys; print(sys.prefix)"'
    for script in (h.with_module(prefix, report), h.with_setup_script(prefix, report)):
        done = h.bash(script)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [str(prefix / ".envs" / a)] * 2


def test_uninstall_keeps_builds_in_use_and_other_versions(
    pre: Prebuilt, prefix: Path, holder: subprocess.Popen[str]
) -> None:
    b = target(prefix)
    other = run(pre, prefix, "--variant", "xpu")  # a second tag (2.13) beside 2.13-cpu
    assert other.returncode == 0, other.output
    other_build = target(prefix, "2.13")
    result = run(pre, prefix, "--uninstall")
    assert result.returncode == 0, result.output
    assert f"kept 1 in use: {b}" in result.last_line
    assert builds(prefix) == sorted([b, other_build])
    for gone in (h.TAG, f"lightning-setup-{h.TAG}.sh"):
        assert not (prefix / gone).exists() and not (prefix / gone).is_symlink(), gone
    # The modulefile stays for `module unload` in the shells that loaded it, hidden from `module avail`.
    hidden = prefix / "modulefiles" / "lightning-xpu" / ".modulerc.lua"
    assert f'hide_version("lightning-xpu/{h.TAG}")' in hidden.read_text()
    assert target(prefix, "2.13") == other_build and (prefix / "lightning-setup-2.13.sh").is_file()
    # The other version keeps the shared code its modulefile and setup script call.
    assert (prefix / h.MODULEFILE_BODY).is_file() and (prefix / h.SETUP_LIBRARY_NAME).is_file()
    # No run resurrects the removed tag from the build kept for the running job.
    assert run(pre, prefix, "--prune", "--keep", "0").returncode == 0
    assert not (prefix / h.TAG).is_symlink() and b in builds(prefix)
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    result = run(pre, prefix, "--prune", "--keep", "0")
    assert result.returncode == 0 and builds(prefix) == [other_build], result.output
    assert not (prefix / f"modulefiles/lightning-xpu/{h.TAG}.lua").exists()
    # Its hiding line goes with it (.modulerc.lua stays where it marks the bare module's default, issue 28).
    assert f"lightning-xpu/{h.TAG}" not in (hidden.read_text() if hidden.exists() else "")
    # Installing again starts afresh.
    result = run(pre, prefix)
    assert result.returncode == 0 and "installed" in result.last_line, result.output
    assert_consistent(prefix)


# ---- a running torchrun job through two rebuilds (the real install) ----



def test_running_torchrun_job_survives_two_rebuilds(good_install: h.GoodInstall, pre: Prebuilt, tmp_path: Path) -> None:
    h.require(h.lmod_available(), "Lmod")
    prefix = good_install.prefix
    original = target(prefix)
    out = tmp_path / "job"
    out.mkdir()
    (tmp_path / "worker.py").write_text(h.TORCHRUN_WORKER)
    script = h.with_module(
        prefix,
        f"torchrun --standalone --nproc_per_node=2 {h.q(tmp_path / 'worker.py')} {h.q(out)}",
    )
    job = subprocess.Popen(
        ["bash", "-c", script],
        stdout=(tmp_path / "job.out").open("w"),
        stderr=subprocess.STDOUT,
        # A rank that dies in native code prints its Python stack (faulthandler) into job.out.
        env=h.job_env(SLURM_JOB_ID=None, PBS_JOBID=None, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(list(out.glob("ready-*"))) < 2:
            assert job.poll() is None, (tmp_path / "job.out").read_text()
            assert time.monotonic() < deadline, "torchrun workers did not start"
            time.sleep(0.5)
        executable = (out / "ready-0").read_text()
        assert f"/.envs/{original}/bin/python" in executable
        # Rebuild 1: the default run with changed inputs; rebuild 2: --force. Both publish in seconds.
        for args in ((), ("--force",)):
            result = run(pre, prefix, *args)
            assert result.returncode == 0 and "installed" in result.last_line, result.output
            assert target(prefix) != original
        assert (prefix / ".envs" / original / "bin" / "torchrun").is_file(), "a rebuild deleted the job's build"
        # Neither published nor the rollback build now: only the job's lease keeps it from --prune.
        result = run(pre, prefix, "--prune", "--keep", "0")
        assert result.returncode == 0 and f"keeping {original}: in use: process " in result.output, result.output
        assert "removed 0 build(s)" in result.last_line
        (out / "go").touch()
        assert job.wait(timeout=300) == 0, (tmp_path / "job.out").read_text()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    h.assert_torchrun_workers(out, executable)
    # Back to the real build: two rollbacks follow the records; --prune removes the two test builds.
    for _ in range(2):
        assert run(pre, prefix, "--rollback").returncode == 0
    assert target(prefix) == original
    result = run(pre, prefix, "--prune", "--keep", "0")
    assert result.returncode == 0 and "removed 2 build(s)" in result.last_line, result.output
    assert h.env_dirs(prefix) == [original]


# ---- never delete what is in use, without reading other users' processes (issue 19, item 7) ----


def start_nohup_job(prefix: Path, umask: str = "022") -> tuple[int, int]:
    """A login shell that sources the setup script, starts a training 'job' with nohup and exits: (shell pid,
    job pid). The job outlives the shell, as on a login node."""
    script = (
        f"umask {umask}\nsource {h.q(prefix / f'lightning-setup-{h.TAG}.sh')}\n"
        'nohup sleep 300 >/dev/null 2>&1 &\necho "$$ $!"\n'
    )
    done = subprocess.run(
        ["bash", "-c", script], env=h.job_env(SLURM_JOB_ID=None, PBS_JOBID=None), capture_output=True, text=True,
        timeout=60, start_new_session=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shell, job = (int(word) for word in done.stdout.split())
    return shell, job


def test_nohup_job_whose_shell_exited_keeps_its_build(pre: Prebuilt, prefix: Path) -> None:
    b = target(prefix)
    shell, job = start_nohup_job(prefix)
    try:
        for _ in range(2):
            assert run(pre, prefix, "--force").returncode == 0
        result = run(pre, prefix, "--prune", "--keep", "0")
        assert result.returncode == 0, result.output
        assert f"keeping {b}: in use: process {shell} on " in result.output, result.output
        assert b in builds(prefix) and (prefix / ".envs" / b / "bin" / "python").exists()
    finally:
        os.kill(job, signal.SIGKILL)  # its lock goes with it
    result = run(pre, prefix, "--prune", "--keep", "0")
    assert result.returncode == 0 and b not in builds(prefix), result.output


def test_leases_are_never_world_writable(pre: Prebuilt, prefix: Path) -> None:
    _, job = start_nohup_job(prefix, umask="000")
    try:
        commands = ["umask 000"]
        if h.lmod_available():
            commands.append(h.with_module(prefix, "true"))
        for command in commands:
            done = h.bash(command, env=h.job_env(SLURM_JOB_ID=None, PBS_JOBID=None))
            assert done.returncode == 0, done.stderr
        pause = prefix.parent / "pause"
        pause.touch()
        output = prefix.parent / "install.out"
        proc = start(pre, prefix, output, "--force", LXPU_TEST_PAUSE_AT="rename", LXPU_TEST_PAUSE_FILE=str(pause))
        h.wait_for_text(output, "test pause before rename ", proc, timeout=120)
        leases = {lease.name: (lease.stat().st_mode, lease.read_text()) for lease in (prefix / ".leases").iterdir()}
        pause.unlink()
        assert proc.wait(timeout=120) == 0, output.read_text()
    finally:
        os.kill(job, signal.SIGKILL)
    kinds = {line.split("=", 1)[1] for _, text in leases.values() for line in text.splitlines() if "what=" in line}
    assert {"setup-script", "install"} | ({"module"} if h.lmod_available() else set()) <= kinds, kinds
    writable = [f"{name} {mode:o}" for name, (mode, _) in leases.items() if mode & 0o002]
    assert writable == [], writable


def test_real_directory_at_previous_is_never_removed(pre: Prebuilt, prefix: Path) -> None:
    a = recorded_previous(prefix, target(prefix))
    assert run(pre, prefix, "--rollback").returncode == 0 and recorded_previous(prefix, a) == ""
    previous = prefix / ".envs" / f"{h.TAG}.previous"
    assert not previous.exists() and not previous.is_symlink()
    previous.mkdir()
    (previous / "results.csv").write_text("someone's work\n")
    for args in ((), ("--force",), ("--prune", "--keep", "0"), ("--uninstall",)):
        result = run(pre, prefix, *args)
        assert result.returncode == 0, result.output
        assert f"{previous} is a directory, not the link this installer keeps there" in result.output, result.output
        assert (previous / "results.csv").read_text() == "someone's work\n", args


def test_leftovers_of_kills_are_reclaimed_and_named(pre: Prebuilt, prefix: Path, tmp_path: Path) -> None:
    b = target(prefix)
    # A kill after the manifest, before publishing: a complete build that was never published.
    kill_before("record", pre, prefix, tmp_path)
    (unpublished,) = set(h.kept_env_dirs(prefix)) - {b, recorded_previous(prefix, b)}
    # A --prune killed half-way through removing a build, and a uv bootstrap killed half-way.
    removing = prefix / ".envs" / f".removing.{h.TAG}.20000101T000000-1"
    (removing / "lib").mkdir(parents=True)
    uv_tree = prefix / ".tools" / ".tmp.uv-0.0.1.999999999"
    (uv_tree / "uv").mkdir(parents=True)
    result = run(pre, prefix)
    assert result.returncode == 0, result.output
    assert f"removing leftover {removing} (a build a killed run was removing)" in result.output
    assert f"removing leftover {uv_tree} (the uv bootstrap of a killed run)" in result.output
    assert not removing.exists() and not uv_tree.exists()
    assert f"keeping the complete build {prefix}/.envs/{unpublished}: a killed install never published it" in (
        result.output
    )
    assert "removed 2 half-removed or temporary tree(s) of killed runs" in result.last_line
    assert unpublished in builds(prefix), "an install removed a complete build"
    result = run(pre, prefix, "--prune", "--keep", "5")
    assert result.returncode == 0, result.output
    assert f"{unpublished} (" not in result.last_line and unpublished not in builds(prefix), result.output
    assert "a killed install never published it" in result.output
    assert_consistent(prefix)


def test_prune_under_hidepid_keeps_another_users_build(pre: Prebuilt, tmp_path: Path) -> None:
    """/proc mounted with hidepid=2 (common on login nodes): the pruner, another user, cannot see the job's
    processes. The job's lease is live all the same (its shell holds the lease's flock)."""
    h.require(os.geteuid() == 0, "root (a second user and a private /proc mount)")
    mount = "mount -t proc -o hidepid=2 proc /proc"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", mount], capture_output=True, text=True)
    h.require(probe.returncode == 0, f"unshare -m and {mount}: {probe.stderr.strip()}")
    # Everything the other user reads, where it can read it (pytest's own temporary directories are private).
    work = Path(tempfile.mkdtemp(prefix="lxpu-hidepid-"))
    try:
        work.chmod(0o755)
        shutil.copytree(pre.template, work / "prefix", symlinks=True)
        shutil.copytree(pre.source, work / "source", symlinks=True)
        shutil.copy(pre.job, work / "job.sh")
        prefix = work / "prefix"
        b = target(prefix)
        holder = subprocess.Popen(
            ["bash", "-c", f"source {h.q(prefix / f'lightning-setup-{h.TAG}.sh')} && echo ready && exec sleep 300"],
            stdout=subprocess.PIPE, text=True, env=h.job_env(SLURM_JOB_ID=None, PBS_JOBID=None),
            start_new_session=True,
        )  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            for _ in range(2):
                assert run(pre, prefix, "--force").returncode == 0
            subprocess.run(["chown", "-R", "nobody:", str(prefix)], check=True)
            pruner = (
                f'{mount} && exec setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c '
                f'"test ! -e /proc/{holder.pid} || exit 99; exec \\"\\$@\\"" sh "$@"'
            )
            job = [
                "bash", str(work / "job.sh"), "--prefix", str(prefix), "--source", str(work / "source"),
                "--pip-source", "system", "--installer", "pip", "--prune", "--keep", "0",
            ]  # fmt: skip
            env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LIGHTNING_XPU_PACK": "0"}
            done = subprocess.run(["unshare", "-m", "sh", "-c", pruner, "sh", *job], env=env,
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
            output = done.stdout + done.stderr
            assert done.returncode != 99, "hidepid=2 did not hide the job's process from the pruner"
            assert done.returncode == 0, output
            assert f"keeping {b}: in use: process {holder.pid} on " in output, output
            assert b in builds(prefix) and (prefix / ".envs" / b / "bin").is_dir()
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
