"""The install's declared step lists (EasyBuild's `get_steps`): the driver (lxpu_admin/install/driver.py) runs them in
this order and numbers them from these lists, so a step is added, removed or moved here and nowhere else.

Each step is (key, title, the functions that run it, in order). The driver prints `[n/total] title ...` before
the first; `{env_manager}` and `{tag}` in a title are filled in when it runs.
"""

from __future__ import annotations

from typing import Callable

from lxpu_admin.install import build, inputs, publish, testhooks
from lxpu_admin.install.state import State

Step = tuple[str, str, tuple[Callable[[State], None], ...]]

INSTALL_STEPS: tuple[Step, ...] = (
    ("check", "check inputs and disk space", (inputs.check_step,)),
    ("lock", "take the install lock", (publish.lock_or_stop,)),
    ("create", "create the {env_manager} environment", (build.create_env,)),
    ("packages", "install pinned packages", (build.install_packages,)),
    ("runtime", "install lightning_xpu from the repository", (build.install_runtime,)),
    (
        "hook",
        "enable the zero-code-change hook and site files",
        (build.enable_hook, build.write_pins, build.pack_relocatable),
    ),
    ("compile", "byte-compile the environment", (build.byte_compile, build.start_pack)),
    ("smoke", "run the smoke job", (build.smoke,)),
    ("pack", "pack the environment for node-local staging", (build.finish_pack,)),
    ("manifest", "write the manifest", (build.write_manifest,)),
    ("publish", "publish", (publish.publish_step,)),
)

# LXPU_TEST_PREBUILT (tests only, testhooks.py): the build steps, up to the manifest, replaced by one copy.
_BUILT_BY_COPY = ("create", "packages", "runtime", "hook", "compile", "smoke", "pack")
PREBUILT_STEPS: tuple[Step, ...] = tuple(
    ("prebuilt", "copy the prebuilt test environment (LXPU_TEST_PREBUILT)", (testhooks.copy_prebuilt,))
    if key == "create"
    else (key, title, functions)
    for key, title, functions in INSTALL_STEPS
    if key == "create" or key not in _BUILT_BY_COPY
)


def install_steps() -> tuple[Step, ...]:
    """The steps of an install: INSTALL_STEPS, or PREBUILT_STEPS under the test hook."""
    return PREBUILT_STEPS if testhooks.prebuilt() else INSTALL_STEPS


# --prune, --uninstall and --rollback: the lock, then the action (titled by EXTRA_TITLES).
ADMIN_STEPS: tuple[Step, ...] = (
    ("lock", "take the install lock", (publish.take_lock,)),
    ("action", "the action (below)", (publish.admin_step,)),
)

# The action step's titles.
EXTRA_TITLES = {
    "prune": "prune builds of {tag}",
    "uninstall": "uninstall {tag}",
    "rollback": "roll back {tag}",
}
