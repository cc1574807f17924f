"""The install's test hooks: the one module of the engine that reads the LXPU_TEST_* variables (the suite's
tests/install sets them; an administrator never does). Each is inert when its variable is unset.

  LXPU_TEST_PAUSE_AT=<op>   wait before publishing operation <op> (publish.py lists them) while the file
                            LXPU_TEST_PAUSE_FILE exists: tests kill the job there
  LXPU_TEST_FAIL_AT=<op>    make <op> fail as a full disk would
  LXPU_TEST_PREBUILT=DIR    the build steps are replaced by one that copies DIR, a small prebuilt environment with
                            the files they would leave (tests/install/install_harness.py makes it); the manifest and
                            publish steps run as always (steps.py `install_steps`), so the tests of publishing,
                            links, locks and logs need no real install

The runtime's own test switch (LIGHTNING_XPU_SMOKE_INJECT_FAILURE) lives in lightning_xpu/validation/framework.py.
"""

from __future__ import annotations

import os
import time

from lxpu_admin.install.state import State, fail, run, say


def prebuilt() -> str:
    """LXPU_TEST_PREBUILT: the prebuilt environment the build steps are replaced by ("" for a real build)."""
    return os.environ.get("LXPU_TEST_PREBUILT", "")


def copy_prebuilt(state: State) -> None:
    """The step that replaces the build steps under LXPU_TEST_PREBUILT."""
    source = prebuilt()
    if not os.path.isdir(source):
        raise fail(state, f"LXPU_TEST_PREBUILT={source} is not a directory")
    os.makedirs(state.envs, exist_ok=True)
    run(state, "cp", "-a", source, state.env)


def before(state: State, op: str) -> None:
    """Before publishing operation OP: fail there (LXPU_TEST_FAIL_AT) or wait (LXPU_TEST_PAUSE_AT)."""
    pause_at, fail_at = os.environ.get("LXPU_TEST_PAUSE_AT", ""), os.environ.get("LXPU_TEST_FAIL_AT", "")
    if not (pause_at or fail_at) or state.dry:
        return
    if fail_at == op:
        raise fail(state, f"{op}: No space left on device (injected by LXPU_TEST_FAIL_AT)")
    if pause_at == op:
        pause_file = os.environ.get("LXPU_TEST_PAUSE_FILE", "")
        if not pause_file:
            raise fail(state, "LXPU_TEST_PAUSE_FILE is not set")
        say(f"test pause before {op} (pid {state.pid}): waiting while {pause_file} exists")
        while os.path.lexists(pause_file):
            time.sleep(0.1)
