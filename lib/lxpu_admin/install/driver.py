"""The install driver: one run of an install job (install, --prune, --uninstall, --rollback) from the recipe's data.

It checks the inputs (lxpu_admin/install/inputs.py), writes the log (everything the run prints, through `tee`), runs the
declared steps (lxpu_admin/install/steps.py) and ends every run with one last line: what was done, or where and why it
FAILED. Layout it builds (docs/architecture.md "Install layout"):
  <prefix>/.envs/<tag>.<build-id>/   the environment, built at its final path (venvs are not relocatable)
  <prefix>/<tag> -> .envs/...        published by one atomic rename of a symlink, after the smoke job passed
  <prefix>/lightning-setup-<tag>.sh, <prefix>/modulefiles/lightning-xpu/<tag>.lua and the shared code they call
  <prefix>/.locks/<tag>.lock, <prefix>/.leases/, <prefix>/logs/install-<tag>-<time>.log
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

from lxpu_admin.envside.setup_lib import create_exclusive
from lxpu_admin.install import inputs, options
from lxpu_admin.install.admin import validate_action
from lxpu_admin.install.build import stop_pack
from lxpu_admin.install.builds import new_build_id
from lxpu_admin.install.cleanup import cleanup_failed_build, finish
from lxpu_admin.install.installer import Installer
from lxpu_admin.install.publish import after_publish_failure
from lxpu_admin.install.space import disk_full_reason, explain_failure, is_disk_full
from lxpu_admin.install.state import State, Stop, end_step, say, seconds_since, start_step
from lxpu_admin.install.steps import ADMIN_STEPS, EXTRA_TITLES, install_steps

_SIGNALS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


class Interrupted(BaseException):
    """A signal stopped the install (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.status = _SIGNALS[signum]
        self.name = signal.Signals(signum).name


def _on_signal(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


class Log:
    """Everything the run and its commands print also goes to the log file, through `tee`, which ignores the
    signals that stop the install, so that the last line ("FAILED ... interrupted") still reaches the log."""

    def __init__(self, path: str) -> None:
        # A new file, never through a link (setup_lib.create_exclusive); tee appends to this very file through its
        # descriptor, not by its name.
        fd = create_exclusive(path, 0o644)
        self.saved = (os.dup(1), os.dup(2))
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            self.tee = subprocess.Popen(["tee", "-a", f"/dev/fd/{fd}"], stdin=subprocess.PIPE, pass_fds=(fd,),
                                        preexec_fn=_ignore_signals)  # fmt: skip
        finally:
            os.close(fd)
        assert self.tee.stdin is not None
        os.dup2(self.tee.stdin.fileno(), 1)
        os.dup2(self.tee.stdin.fileno(), 2)
        self.tee.stdin.close()

    def close(self) -> bool:
        """Close the pipe to tee and wait for it, so the log's last line is on disk. False: tee could not write
        the log (a full disk: tee stops writing a file at its first error)."""
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        return self.tee.wait() == 0


def _ignore_signals() -> None:
    for signum in _SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def new_state(data: dict[str, Any], source: str) -> State:
    return State(data=data, source=source, version=data["version"])


def prepare(state: State, argv: list[str]) -> bool:
    """Options, inputs, the build's name and the log. False: --help was printed."""
    if not options.parse(state, argv):
        return False
    inputs.validate(state)
    inputs.validate_repository(state)
    state.installer = Installer(state)
    state.installer.validate()
    validate_action(state)
    # Nothing from the caller's Python setup may leak into the build or fake a passing smoke job.
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"):
        if os.environ.pop(name, ""):
            state.unset_vars.append(name)
    os.environ["PYTHONNOUSERSITE"] = "1"
    state.inputs_hash = inputs.hash_inputs(state)
    state.commit = inputs.repo_commit(state.source)
    state.build_id = new_build_id(state.pid)
    state.env = f"{state.envs}/{state.tag}.{state.build_id}"
    return True


def run_steps(state: State) -> None:
    if state.action != "install":
        steps = ADMIN_STEPS
        titles = {"lock": ADMIN_STEPS[0][1], "action": EXTRA_TITLES[state.action]}
    else:
        steps = install_steps()
        titles = {key: title for key, title, _ in steps}
    state.step_total = len(steps)
    for key, _title, functions in steps:
        start_step(state, titles[key])
        for function in functions:
            function(state)
        if state.noop:
            return
    if state.action == "install":
        if state.dry:
            state.result = "dry run finished: nothing was changed"
        else:
            state.result = f"installed {state.prefix}/{state.tag} -> {os.readlink(f'{state.prefix}/{state.tag}')}"


def final_result(state: State) -> str:
    """The last line of a successful run: the result plus what else changed (repairs, removals: the notes). A run
    that changed or removed anything never says "nothing changed"."""
    result, notes = state.result or "done", "; ".join(state.notes)
    if notes and "nothing changed" in result:
        result = result.replace("nothing changed", notes)
    elif notes:
        result = f"{result}; {notes}"
    if state.would_stop:
        result += f"; but the real run would stop before step 1 (exit 2): {'; '.join(state.would_stop)}"
    return result


def _cleanup_failed_build(state: State) -> None:
    """A failed or interrupted build removes its own staging environment, temporary files and lease."""
    if state.dry or state.lock_fd is None:
        return
    stop_pack(state)
    cleanup_failed_build(state)


def end(state: State, status: int, t0: float, log: Log | None) -> int:
    """The last line, the clean-up of a failed build, then the log's rotation: every run ends here."""
    for signum in _SIGNALS:  # the clean-up finishes whatever arrives now
        signal.signal(signum, signal.SIG_IGN)
    total = seconds_since(t0)
    name, last = state.tag or state.version, ""
    if status == 0:
        end_step(state)
        say(f"lightning-xpu {name}: {final_result(state)} (total {total} s)")
        status = 2 if state.would_stop else 0  # a dry run ends as the real run would
    elif state.published and not state.dry:
        # The new build is live (lxpu_admin/install/publish.py): never FAILED.
        status = after_publish_failure(state, status, total)
        _cleanup_failed_build(state)
    elif status != 2 or state.step_name:
        where = "before the first step"
        if state.step_name:
            where = f"at step [{state.step_n}/{state.step_total}] {state.step_name}"
        # Named before the clean-up frees the space: a full disk is the reason whatever the step said.
        reason = explain_failure(state, state.fail_reason or f"exit status {status}")
        _cleanup_failed_build(state)
        if state.log:
            say(f"log: {state.log}")
        last = f"lightning-xpu {name}: FAILED {where} after {total} s: {reason}"
        say(last)
    if log is not None and not log.close() and last:
        _append_to_log(state.log, last)
    finish(state, status)
    return status


def _append_to_log(path: str, last: str) -> None:
    """The last line into a log tee could not finish (a full disk): written once the failed build is removed."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 4096))
            if handle.read().decode(errors="replace").rstrip("\n").endswith(last):
                return
        with open(path, "a") as handle:
            handle.write(f"(this log is incomplete: writing it failed, see the job's output)\n{last}\n")
    except OSError as exc:
        say(f"the log {path} could not be completed: {exc}")


def main(data: dict[str, Any], source: str, argv: list[str]) -> int:
    # Shared installs must be readable by others whatever the job's umask (PBS defaults to 077).
    os.umask(0o022)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    for signum in _SIGNALS:
        signal.signal(signum, _on_signal)
    t0 = time.monotonic()
    state, log, status = new_state(data, source), None, 0
    try:
        if not prepare(state, argv):
            return 0
        if state.dry:
            say("dry run: printing every step and command; nothing is changed")
        else:
            os.makedirs(f"{state.prefix}/logs", exist_ok=True)
            state.log = f"{state.prefix}/logs/install-{state.tag}-{time.strftime('%Y%m%dT%H%M%S')}-{state.pid}.log"
            log = Log(state.log)
        run_steps(state)
    except Stop as stop:
        status = stop.status
    except Interrupted as interrupted:
        state.fail_reason = f"interrupted by {interrupted.name}"
        status = interrupted.status
    except OSError as exc:  # a full disk, a permission: one line, as the shell's commands said it
        state.fail_reason = disk_full_reason(exc.filename or state.prefix, exc) if is_disk_full(exc) else str(exc)
        say(f"ERROR: {state.fail_reason}")
        status = 1
    except Exception as exc:  # a bug: its traceback goes to the log, the last line still says where
        traceback.print_exc()
        state.fail_reason = f"internal error: {type(exc).__name__}: {exc}"
        status = 1
    return end(state, status, t0, log)
