"""What a job's allocation says (lightning_xpu/commands/allocation.py), as the training jobs (`job nodes`, the launch's
log lines) and the site validation job (`lightning-xpu validate --site-job`) read it: the submit directory, the
node count and the job's id, from the scheduler's variables; a variable that cannot be read is one line."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from lightning_xpu.commands import job
from lightning_xpu.commands.allocation import job_stamp, node_count, submit_directory
from lightning_xpu.commands.cli import InputError, main, parse_args, site_job_options
from lightning_xpu.environments.errors import LaunchError

SCHEDULER_VARIABLES = ("PBS_O_WORKDIR", "SLURM_SUBMIT_DIR", "PBS_NODEFILE", "SLURM_JOB_NUM_NODES", "SLURM_JOB_ID",
                       "PBS_JOBID")


@pytest.fixture
def no_scheduler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in SCHEDULER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    return monkeypatch


def node_file(tmp_path: Path, hosts: list[str]) -> Path:
    path = tmp_path / "node file"
    path.write_text("".join(f"{host}\n" for host in hosts))
    return path


def test_the_submit_directory_pbs_first_then_slurm_then_here(tmp_path: Path) -> None:
    here = submit_directory({"PWD": str(tmp_path)})
    assert here[1] == "the current directory: no scheduler" and here[0].samefile(Path.cwd())
    slurm = {"SLURM_SUBMIT_DIR": "/s"}
    assert submit_directory(slurm) == (Path("/s"), "SLURM_SUBMIT_DIR: PBS_O_WORKDIR is not set")
    # PBS Pro names it; the Torque wrapper over Slurm does not: PBS_O_WORKDIR wins where it is set, and not empty.
    assert submit_directory({**slurm, "PBS_O_WORKDIR": "/p"}) == (Path("/p"), "PBS_O_WORKDIR, set by the scheduler")
    assert submit_directory({**slurm, "PBS_O_WORKDIR": ""})[0] == Path("/s")


def test_the_node_count_from_the_node_file_or_slurm(tmp_path: Path) -> None:
    assert node_count({}) == (1, "no scheduler")
    assert node_count({"SLURM_JOB_NUM_NODES": "3"}) == (3, "SLURM_JOB_NUM_NODES: PBS_NODEFILE is not set")
    hosts = node_file(tmp_path, ["a", "b", "a", "c", "b"])  # PBS repeats a host once per MPI slot
    assert node_count({"PBS_NODEFILE": str(hosts), "SLURM_JOB_NUM_NODES": "9"}) == (3, "PBS_NODEFILE")
    for environ, message in (
        ({"PBS_NODEFILE": str(tmp_path / "gone")}, "cannot read the PBS node file PBS_NODEFILE="),
        ({"PBS_NODEFILE": str(node_file(tmp_path, []))}, "lists no host"),
        ({"SLURM_JOB_NUM_NODES": "two"}, "SLURM_JOB_NUM_NODES='two' is not a whole number of 1 or more"),
    ):
        with pytest.raises(LaunchError, match=re.escape(message)) as raised:
            node_count(environ)
        assert "\n" not in str(raised.value)


def test_the_job_stamp_drops_the_pbs_server() -> None:
    assert job_stamp({"PBS_JOBID": "123.aurora-pbsadmin"}) == "123"
    assert job_stamp({"SLURM_JOB_ID": "45", "PBS_JOBID": "9.x"}) == "45"
    assert re.fullmatch(r"\d{8}-\d{6}", job_stamp({}))


def test_job_nodes_prints_the_count_and_a_bad_node_file_is_one_line(
    no_scheduler: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_scheduler.setenv("PBS_NODEFILE", str(node_file(tmp_path, ["x", "y"])))
    assert job.main(["nodes"]) == 0 and capsys.readouterr().out == "2\n"
    no_scheduler.setenv("PBS_NODEFILE", str(tmp_path / "gone"))
    no_scheduler.setenv("LXPU_JOB_NAME", "train_nodes.pbs")
    assert job.main(["nodes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("train_nodes.pbs: cannot read the PBS node file") and err.count("\n") == 1


def test_the_launch_log_names_the_directory_the_environment_and_the_nodes_source(
    no_scheduler: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_scheduler.setenv("SLURM_SUBMIT_DIR", str(tmp_path))
    no_scheduler.setenv("SLURM_JOB_NUM_NODES", "2")
    no_scheduler.setenv("LIGHTNING_XPU_SETUP", "setup dir/lightning-setup-2.13.sh")
    job.say_allocation(2)
    out = capsys.readouterr().out
    assert f"working directory: {tmp_path} (from SLURM_SUBMIT_DIR: PBS_O_WORKDIR is not set)" in out
    assert "environment: setup script setup dir/lightning-setup-2.13.sh" in out
    assert "nodes: 2 (from SLURM_JOB_NUM_NODES: PBS_NODEFILE is not set)" in out
    no_scheduler.delenv("LIGHTNING_XPU_SETUP")
    no_scheduler.setenv("LIGHTNING_XPU_MODULE", "lightning-xpu/x")
    no_scheduler.setenv("LIGHTNING_XPU_MODULEPATH", "/m")
    job.say_allocation(2)
    assert "environment: module lightning-xpu/x from /m" in capsys.readouterr().out


def site_job(*argv: str) -> argparse.Namespace:
    args = parse_args(["validate", "--site-job", "v.sh", *argv])
    site_job_options(args)
    return args


def test_the_site_job_takes_its_defaults_from_the_allocation(no_scheduler: pytest.MonkeyPatch, tmp_path: Path) -> None:
    no_scheduler.setenv("PBS_O_WORKDIR", str(tmp_path / "submitted"))
    no_scheduler.setenv("PBS_JOBID", "77.server")
    no_scheduler.setenv("PBS_NODEFILE", str(node_file(tmp_path, ["a", "b", "c"])))
    args = site_job()
    assert args.nodes == 2  # the launched checks use at most 2 nodes
    assert args.out == tmp_path / "submitted" / "lightning-xpu-validation-77"
    no_scheduler.setenv("PBS_NODEFILE", str(node_file(tmp_path, ["a"])))
    assert site_job().nodes == 1
    no_scheduler.setenv("PBS_NODEFILE", str(tmp_path / "gone"))  # what is given is not read from the allocation
    given = site_job("--nodes", "2", "--out", str(tmp_path / "o"))
    assert (given.nodes, given.out) == (2, tmp_path / "o")
    for argv, message in ((("--nodes", "3"), "--nodes must be 1 or 2, got '3'"),
                          (("--level", "smoke"), "--site-job runs the site level")):
        with pytest.raises(InputError, match=re.escape(message)):
            site_job(*argv)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--site-job", "v.sh", "--devices", "0"], "v.sh: --devices must be a positive number, got '0'"),
        (["--site-job", "v.sh", "--only", "bogus"], "v.sh: unknown check(s) bogus; known: "),
        (["--nodes", "x"], "lightning-xpu validate: --nodes must be a positive number, got 'x'"),
    ],
)
def test_bad_validate_input_is_one_line_and_writes_nothing(
    no_scheduler: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    assert main(["validate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1
    assert not list(tmp_path.iterdir())
