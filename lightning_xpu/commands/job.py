"""The training job scripts' Python half (scripts/<site>/train_*, through scripts/common/job.sh): the node count,
the rank's threads, the training command, the launch with its output also in a log, and the check in that log that
the Trainer used the device the job asked for. job.sh enters the submit directory and loads the environment first
(that must happen in the job's shell), then runs

  python -m lightning_xpu.commands.job nodes      (prints the allocation's node count: LXPU_JOB_NODES)
  python -m lightning_xpu.commands.job launch RANKS_PER_NODE CORES_PER_RANK NODES NARGS ARGS... LAUNCHER...

(NARGS words of ARGS go to the training script). `... job check LOG` runs the device check alone. Messages go out
as "<job name>: ..." (LXPU_JOB_NAME); a failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from lightning_xpu.commands.allocation import job_stamp, node_count, submit_directory
from lightning_xpu.environments.errors import LaunchError
from lightning_xpu.install_facts import environment_variant

# The line the Trainer's banner prints when the fit runs on an XPU (lightning_xpu/trainer.py);
# tests/runtime/test_job_device_check.py checks it against the banner Lightning prints on a simulated XPU.
XPU_USED = re.compile(r"XPU available: True \([0-9]+ devices?\), used: True")
BANNER = "GPU available: "


class JobError(Exception):
    """One line for the job log, naming the fix."""


def say(message: str) -> None:
    print(f"{os.environ.get('LXPU_JOB_NAME', 'job')}: {message}", flush=True)


def expected_device() -> str:
    """LIGHTNING_XPU_EXPECT, else cpu for a CPU build: the loaded install's variant, as the smoke level reads it
    (lightning_xpu/validation/model.py environment_variant; right for `module load lightning-xpu` whose default is a
    -cpu build); outside an install, a module or setup script whose name ends in -cpu. Else xpu."""
    expect = os.environ.get("LIGHTNING_XPU_EXPECT")
    if expect:
        return expect
    variant = environment_variant()[0]
    if variant is None:
        name = os.environ.get("LIGHTNING_XPU_SETUP") or os.environ.get("LIGHTNING_XPU_MODULE", "")
        variant = "cpu" if name.endswith(("-cpu", "-cpu.sh")) else "xpu"
    return "cpu" if variant == "cpu" else "xpu"


def check_device(log: Path) -> str:
    """The banner line in `log` showing the device the job expected; JobError otherwise."""
    expect, text = expected_device(), log.read_text(errors="replace")
    used = XPU_USED.search(text)
    if expect == "xpu":
        if not used:
            raise JobError(f"device check FAILED: {log} has no '{XPU_USED.pattern}' line: the fit did not run on an"
                           " XPU (see the banner lines above, and docs/xpu-guide.md)")
        line = used[0]
    elif expect == "cpu":
        if used:
            raise JobError(f"device check FAILED: expected cpu, but the Trainer used an XPU: {used[0]}")
        banner = next((line for line in text.splitlines() if BANNER in line), None)
        if banner is None:
            raise JobError(f"device check FAILED: {log} has no Trainer banner ('{BANNER}...'): did the fit start?")
        line = banner
    else:
        raise JobError(f"LIGHTNING_XPU_EXPECT={expect}: use xpu or cpu")
    return f"device check passed ({expect}): {line}"


def say_allocation(nodes: int) -> None:
    """What job.sh did before the launch: the working directory it entered, the environment it loaded, and where
    the node count it read (`job nodes`) came from."""
    directory, source = submit_directory(os.environ)
    say(f"working directory: {directory} (from {source})")
    setup, module = os.environ.get("LIGHTNING_XPU_SETUP"), os.environ.get("LIGHTNING_XPU_MODULE")
    say(f"environment: setup script {setup}" if setup
        else f"environment: module {module} from {os.environ.get('LIGHTNING_XPU_MODULEPATH')}")
    say(f"nodes: {nodes} (from {node_count(os.environ)[1]})")


def training_command(ranks: int, nodes: int, args: list[str]) -> list[str]:
    """python TRAIN --devices RANKS --num-nodes NODES ARGS... plus the words of LIGHTNING_XPU_TRAIN_ARGS."""
    train = os.environ.get("LIGHTNING_XPU_TRAIN") or "train.py"
    if not Path(train).is_file():
        raise JobError(f"no training script {train} in {os.getcwd()}: submit from its directory or set"
                       " LIGHTNING_XPU_TRAIN")
    extra = os.environ.get("LIGHTNING_XPU_TRAIN_ARGS", "").split()
    return ["python", train, "--devices", str(ranks), "--num-nodes", str(nodes), *args, *extra]


def launch(ranks: int, cores: int, nodes: int, args: list[str], launcher: list[str]) -> int:
    say_allocation(nodes)
    # CORES is what each rank is bound to: its own threads get them; PyTorch gives each DataLoader worker one.
    os.environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS") or str(cores)
    say(f"threads: {cores} cores per rank, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}; DataLoader num_workers"
        f" up to {max(cores - 2, 0)}")
    command = [*launcher, *training_command(ranks, nodes, args)]
    shown = " ".join(f"{name}={os.environ.get(name, 'unset')}"
                     for name in ("ZE_FLAT_DEVICE_HIERARCHY", "ZE_AFFINITY_MASK", "SLURM_GPUS_ON_NODE"))
    say(f"devices: {shown}")
    log = Path(f"lxpu-train-{job_stamp(os.environ, outside=str(os.getppid()))}.log")
    say(f"launch: {shlex.join(command)}")
    say(f"launcher: {shutil.which(command[0]) or command[0]}")
    say(f"log: {Path.cwd() / log}")
    with log.open("wb") as out, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as child:
        assert child.stdout is not None
        while chunk := os.read(child.stdout.fileno(), 65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            out.write(chunk)
    if child.returncode:  # the launcher's status, as a shell reports it (128 + N for a signal)
        return child.returncode if child.returncode > 0 else 128 - child.returncode
    say(check_device(log))
    return 0


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["check"] and len(argv) == 2:
            say(check_device(Path(argv[1])))
            return 0
        if argv == ["nodes"]:
            print(node_count(os.environ)[0])
            return 0
        if argv[:1] == ["launch"] and len(argv) >= 5 and all(word.isdigit() for word in argv[1:5]):
            ranks, cores, nodes, nargs = (int(word) for word in argv[1:5])
            return launch(ranks, cores, nodes, argv[5 : 5 + nargs], argv[5 + nargs :])
        raise JobError("usage: python -m lightning_xpu.commands.job launch RANKS CORES NODES NARGS ARGS... LAUNCHER..."
                       " | nodes | check LOG (scripts/common/job.sh runs it)")
    except (JobError, LaunchError) as error:
        print(f"{os.environ.get('LXPU_JOB_NAME', 'job')}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
