"""Commands the install runs whose output it also reads. `run_logged` prints one first (`+ command`, as every
step's commands are), streams it into the log as it runs and keeps it for the failure reason; `output_of` only
collects it; `engine_command`/`engine_on` run an engine module on another interpreter. Every child gets the
install's lease descriptor and never the lock's (State.child_fds)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

from lxpu_admin import paths
from lxpu_admin.install.state import State, Stop, fail, quote, say


def engine_command(python: str, module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of lxpu_admin.MODULE (e.g. envside.pins) on PYTHON (the environment's own: it
    reads the environment's installed packages), writing no bytecode into the checkout."""
    return [python, "-B", "-m", f"lxpu_admin.{module}", *args], {**os.environ, "PYTHONPATH": str(paths.LIB)}


def engine_on(
    state: State, python: str, module: str, *args: str, failure: str, why: Callable[[str], str] | None = None
) -> None:
    """engine_command printed, then (unless a dry run) run to its end with the install's lease; a failure stops the
    run with FAILURE as its reason, followed by why(the module's output) where WHY is given and finds a reason."""
    argv, env = engine_command(python, module, *args)
    say(f"+ {quote(*argv)}")
    if state.dry:
        return
    if why is None:
        sys.stdout.flush()
        status, said = subprocess.run(argv, env=env, check=False, pass_fds=state.child_fds()).returncode, ""
    else:
        status, output = _streamed(state, argv, env)
        said = why(output) if status != 0 else ""
    if status != 0:
        raise fail(state, f"{failure}: {said}" if said else failure)


def _streamed(state: State, argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ARGV with its output shown as it comes and kept: (exit status, the output). A signal that stops the
    install stops the command too."""
    sys.stdout.flush()
    kept = bytearray()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             pass_fds=state.child_fds())  # fmt: skip
    stream = child.stdout
    assert stream is not None
    try:
        for chunk in iter(lambda: stream.read1(65536), b""):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            kept += chunk
        child.wait()
    except BaseException:  # a signal stopped the install: so does the command
        child.kill()
        child.wait()
        raise
    finally:
        stream.close()
    return child.returncode, kept.decode(errors="replace")


def output_of(state: State, argv: list[str]) -> tuple[int, str]:
    """(exit status, stdout and stderr together), not printed."""
    sys.stdout.flush()
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=state.child_fds(),
                          check=False)  # fmt: skip
    return done.returncode, done.stdout.decode(errors="replace").rstrip("\n")


def run_logged(
    state: State, argv: list[str], reason: Callable[[str, int], str], exit_status: int | None = None
) -> None:
    """Print and run ARGV with its output shown as it comes; on failure the run stops with reason(output, status)
    as its reason, and EXIT_STATUS (default: the command's)."""
    say(f"+ {quote(*argv)}")
    if state.dry:
        return
    status, output = _streamed(state, argv)
    if status != 0:
        state.fail_reason = reason(output, status)
        raise Stop(exit_status or status)
