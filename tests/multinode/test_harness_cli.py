"""The harness scripts' command line: help, one-line errors naming the fix for bad input, teardown on a failed start.

All but the last need no cluster and no root: settings are checked before anything else, so a bad setting never
touches a running cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from multinode_cluster import require_cluster_tools

HARNESS = Path(__file__).resolve().parents[2] / "ci" / "multinode"
SCRIPTS = ("up.sh", "down.sh", "status.sh", "client.sh")


def run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(HARNESS / script), *args], capture_output=True, text=True, timeout=30,
        env={**os.environ, **env}, check=False,
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_describes_the_script(script: str) -> None:
    result = run(script, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Usage: bash ci/multinode/{script}")


@pytest.mark.parametrize("script", ("up.sh", "down.sh", "status.sh"))
def test_unknown_argument_is_refused(script: str) -> None:
    result = run(script, "--bogus")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"[{script}] error: unknown argument '--bogus': see bash ci/multinode/{script} --help"
    )


SUBNET_FIX = "is not the first three octets of a private /24: use e.g. 10.251.77"


@pytest.mark.parametrize("script", SCRIPTS[:3])
@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LXPU_MULTINODE_SUBNET", "8.8.8", f"LXPU_MULTINODE_SUBNET='8.8.8' {SUBNET_FIX}"),
        ("LXPU_MULTINODE_SUBNET", "10.251", f"LXPU_MULTINODE_SUBNET='10.251' {SUBNET_FIX}"),
        ("LXPU_MULTINODE_SUBNET", "10.251.77.0", f"LXPU_MULTINODE_SUBNET='10.251.77.0' {SUBNET_FIX}"),
        ("LXPU_MULTINODE_SUBNET", "10.300.77", "LXPU_MULTINODE_SUBNET='10.300.77' has an octet above 255: use e.g. "
         "10.251.77"),
        ("LXPU_MULTINODE_DIR", "/tmp/with space", "LXPU_MULTINODE_DIR='/tmp/with space' contains whitespace, which "
         "slurm.conf cannot hold: pick a path without"),
        ("LXPU_MULTINODE_DIR", "relative", "LXPU_MULTINODE_DIR='relative' is not absolute: give an absolute path"),
        ("LXPU_MULTINODE_PREFIX", "Upper-", "LXPU_MULTINODE_PREFIX='Upper-' is not a short lower-case name: use e.g. "
         "lxpu-mn-"),
        ("LXPU_MULTINODE_PREFIX", "a/b", "LXPU_MULTINODE_PREFIX='a/b' is not a short lower-case name: use e.g. "
         "lxpu-mn-"),
        ("LXPU_MULTINODE_PREFIX", "x" * 40, f"LXPU_MULTINODE_PREFIX='{'x' * 40}' is not a short lower-case name: "
         "use e.g. lxpu-mn-"),
    ],
)
def test_a_setting_the_cluster_cannot_use_is_refused_in_one_line(
    script: str, variable: str, value: str, message: str
) -> None:
    result = run(script, **{variable: value})
    assert result.returncode == 1
    assert result.stderr == f"[{script}] error: {message}\n"


def test_client_without_a_command_says_how_to_use_it() -> None:
    result = run("client.sh")
    assert result.returncode == 1
    assert "no command given" in result.stderr


@pytest.mark.multinode
def test_a_failed_start_tears_down_what_it_started(tmp_path: Path) -> None:
    """slurmctld starts, then slurmd fails: up.sh must remove the namespaces and stop the controller.

    A second cluster (own prefix, subnet and state directory) so that the session's cluster is not touched.
    """
    require_cluster_tools()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "slurmd").write_text("#!/bin/sh\necho 'fake slurmd: refusing to start' >&2\nexit 1\n")
    (fake / "slurmd").chmod(0o755)
    state = Path(tempfile.mkdtemp(prefix="lxpu-mn-failed-start-"))  # Slurm needs a path without whitespace
    prefix = "lxpu-mnfail-"
    try:
        result = run(
            "up.sh", PATH=f"{fake}:{os.environ['PATH']}", LXPU_MULTINODE_PREFIX=prefix,
            LXPU_MULTINODE_SUBNET="10.251.78", LXPU_MULTINODE_DIR=str(state / "cluster"),
        )
    finally:
        run("down.sh", LXPU_MULTINODE_PREFIX=prefix, LXPU_MULTINODE_SUBNET="10.251.78",
            LXPU_MULTINODE_DIR=str(state / "cluster"))
        shutil.rmtree(state, ignore_errors=True)
    assert result.returncode == 1
    assert "[up.sh] start failed: tearing down" in result.stderr
    assert "[up.sh] error: slurmd node1 failed to start" in result.stderr
    assert "fake slurmd: refusing to start" in result.stderr  # the log tail shows the cause
    assert not list(Path("/run/netns").glob(f"{prefix}*"))
    conf = str(state / "cluster" / "slurm.conf")
    survivors = [p.name for p in Path("/proc").glob("[0-9]*") if conf in _cmdline(p)]
    assert survivors == [], f"processes still using {conf}"


def _cmdline(process: Path) -> str:
    try:
        return (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # ended meanwhile
        return ""
