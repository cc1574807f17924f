"""The install's one state object, and the engine's messages and command runner.

`State` holds everything a run knows, as typed attributes: the recipe's data (recipes/rendered/install-data.json,
lxpu_admin/install/jobdata.py), the options, what validation resolved, and what the steps did. A signal arriving
at any point finds them as they are (lxpu_admin/install/driver.py's exit handling reads `published`, `env`,
`lease_file`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any


class Stop(Exception):
    """End this command with an exit status (the message, if any, was printed already)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class State:
    # The run: its process, its action (install, prune, uninstall, rollback) and switches.
    version: str = ""  # the recipe's PyTorch version (X.Y)
    pid: int = field(default_factory=os.getpid)
    action: str = "install"
    dry: bool = False
    force: bool = False
    # The options the state's users share (the rest are in `options`): resolved by validation where they name a
    # default (variant, prefix, base_python).
    prefix: str = ""
    variant: str = ""
    tag: str = ""
    base_python: str = ""
    shared_group: str = ""
    lock_timeout: int = 1800  # seconds
    keep: int | None = None  # --prune --keep N
    older_than: int | None = None  # --prune --older-than DAYS
    # What the steps did: the build being made, the published build's name, the lock's start (whole seconds).
    env: str = ""
    current: str = ""
    lock_t0: int | None = None
    lease_file: str = ""
    log: str = ""
    noop: bool = False  # the published build has these inputs: nothing to build
    published: bool = False  # THE publishing rename happened: the new build is live
    result: str = ""
    fail_reason: str = ""
    notes: list[str] = field(default_factory=list)
    # Unset (None) until looked up once (a lookup can take 10 s).
    cluster_name: str | None = None
    # The recipe's data for this site and version (jobdata.load) and the repository it came from.
    data: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    # Options (parsed by lxpu_admin/install/options.py; empty = not given).
    options: dict[str, Any] = field(default_factory=dict)
    # Resolved by validation (lxpu_admin/install/inputs.py).
    env_manager: str = ""
    env_why: str = ""
    python_version: str = ""
    python: str = ""  # the interpreter the environment is built from
    base_torch: str = ""
    base_is_venv: bool = False
    auto_cpu_note: bool = False
    lock_path: str = ""
    sources_mode: str = ""
    pip_options: list[str] = field(default_factory=list)
    module_report: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # What a dry run let pass that stops the real run as bad input (exit 2): its last line and status say so.
    would_stop: list[str] = field(default_factory=list)
    unset_vars: list[str] = field(default_factory=list)
    inputs_hash: str = ""
    # Whether the free-space check ran (the check step, or the first build step where it expected a no-op).
    space_checked: bool = False
    commit: str = ""
    build_id: str = ""
    # The installer back end (lxpu_admin/install/installer.py).
    installer: Any = None
    # Held files: the install lock (never passed to a child) and the install's lease (passed to every child, so
    # that a child left behind by a killed run still holds it).
    lock_fd: int | None = None
    lease_fd: int | None = None
    # Steps: the one running (its number and name), when it started, and "n<TAB>name<TAB>seconds" of those done.
    step_n: int = 0
    step_total: int = 0
    step_name: str = ""
    step_t0: float = 0.0
    timings: list[str] = field(default_factory=list)
    # The packed image's writer, running beside the smoke job (lxpu_admin/install/build.py Packer).
    packer: Any = None

    def set_cluster(self, value: str) -> None:
        self.cluster_name = value

    def note(self, text: str, quietly: bool = False) -> None:
        """A change besides building (a repair, a removal): the last line names it."""
        if self.dry:
            text = f"(dry run, not done) {text}"
        self.notes.append(text)
        if not quietly:
            say(text)

    @property
    def envs(self) -> str:
        return f"{self.prefix}/.envs"

    @property
    def env_python(self) -> str:
        """The interpreter of the environment being built."""
        return f"{self.env}/bin/python"

    @property
    def site_packages(self) -> str:
        return f"{self.env}/lib/python{self.python_version}/site-packages"

    @property
    def env_name(self) -> str:
        """The name of this run's build (<tag>.<build-id>)."""
        return os.path.basename(self.env)

    @property
    def variant_data(self) -> dict[str, Any]:
        """The recipe's data of the chosen variant."""
        return self.data["variants"][self.variant]

    def tmp(self, suffix: str) -> str:
        """A temporary path of this run (the next run removes those of killed runs)."""
        return f"{self.envs}/.tmp.{self.tag}.{self.pid}.{suffix}"

    def child_fds(self) -> tuple[int, ...]:
        """The descriptors every command inherits: the install's lease (never the lock)."""
        return (self.lease_fd,) if self.lease_fd is not None else ()


# ---- steps ----


def seconds_since(t0: float) -> str:
    """Seconds to one decimal, cut (not rounded), as the step lines have always shown them."""
    tenths = int((time.monotonic() - t0) * 10)
    return f"{tenths // 10}.{tenths % 10}"


def start_step(state: State, title: str) -> None:
    """End the running step, start the next: `[n/total] title ...`."""
    end_step(state)
    state.step_n += 1
    state.step_name = title.replace("{env_manager}", state.env_manager).replace("{tag}", state.tag)
    state.step_t0 = time.monotonic()
    say(f"[{state.step_n}/{state.step_total}] {state.step_name} ...")


def end_step(state: State) -> None:
    if not state.step_name:
        return
    seconds = seconds_since(state.step_t0)
    say(f"[{state.step_n}/{state.step_total}] {state.step_name} done ({seconds} s)")
    state.timings.append(f"{state.step_n}\t{state.step_name}\t{seconds}")
    state.step_name = ""


# ---- messages ----


def say(text: str) -> None:
    print(text, flush=True)


def warn(text: str) -> None:
    say(f"WARNING: {text}")


def fail(state: State, reason: str) -> Stop:
    """A step failed: the driver's end (driver.end) writes the last log line from the reason. Raise what it returns."""
    state.fail_reason = reason
    say(f"ERROR: {reason}")
    return Stop(1)


def bad_input_unless_dry(state: State, reason: str) -> None:
    """Bad input that a dry run reports and goes on past (so it shows every step), ending with exit status 2."""
    if not state.dry:
        raise bad_input(state, reason)
    state.would_stop.append(reason)


def bad_input(state: State, reason: str) -> Stop:
    """Bad input: one line naming the fix, exit 2, before anything is written. Raise what it returns."""
    print(f"install_lightning_{state.version}.sh: error: {reason}", file=sys.stderr, flush=True)
    state.fail_reason = f"bad input: {reason}"
    return Stop(2)


def quote(*args: str) -> str:
    """A command as one shell line (shlex.quote per word): what the install prints before it runs it."""
    return shlex.join(args)


def run(state: State, *argv: str) -> None:
    """Print a command, then run it (unless --dry-run); a failure stops the run with the command's status."""
    say(f"+ {quote(*argv)}")
    if state.dry:
        return
    sys.stdout.flush()
    status = subprocess.run(argv, check=False, pass_fds=state.child_fds()).returncode
    if status != 0:
        state.fail_reason = f"exit status {status} from: {quote(*argv)}"
        raise Stop(status)


def remove_quietly(*paths: str) -> None:
    """rm -rf without printing (leftovers of this run itself)."""
    if paths:
        # A build is made read-only, even to its owner, just before it is published (entrypoints.share_permissions).
        subprocess.run(["chmod", "-R", "u+w", "--", *paths], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--", *paths], check=False)


def command_output(*argv: str) -> tuple[int, str]:
    """(exit status, stdout and stderr with trailing newlines dropped), as "$(cmd 2>&1)" gives them."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout + done.stderr).rstrip("\n")
