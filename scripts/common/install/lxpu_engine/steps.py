"""The install's declared step lists (EasyBuild's `get_steps`): the driver runs them in this order and numbers
them from these lists, so a step is added, removed or moved here and nowhere else.

Each step is (key, title, the driver functions that run it, in order). The first starts its step with
`_lxpu_step KEY`, which prints `[n/total] title ...`; `{env_manager}` and `{tag}` in a title are filled in when
it runs. The bash half of the driver (engine.sh) gets the lists from `shell_steps()`.
"""

from __future__ import annotations

import shlex

Step = tuple[str, str, str]

INSTALL_STEPS: tuple[Step, ...] = (
    ("check", "check inputs and disk space", "_lxpu_step_check"),
    ("lock", "take the install lock", "_lxpu_lock_or_stop"),
    ("create", "create the {env_manager} environment", "_lxpu_create_env"),
    ("packages", "install pinned packages", "_lxpu_install_packages"),
    ("runtime", "install lightning_xpu from the repository", "_lxpu_install_runtime"),
    (
        "hook",
        "enable the zero-code-change hook and site files",
        "_lxpu_enable_hook _lxpu_write_pins _lxpu_pack_relocatable",
    ),
    ("compile", "byte-compile the environment", "_lxpu_byte_compile _lxpu_pack_start"),
    ("smoke", "run the smoke job", "_lxpu_smoke"),
    ("pack", "pack the environment for node-local staging", "_lxpu_pack"),
    ("manifest", "write the manifest", "_lxpu_write_manifest"),
    ("publish", "publish", "_lxpu_publish"),
)

# --prune, --uninstall and --rollback: the lock, then the action (the key is the action's name).
ADMIN_STEPS: tuple[Step, ...] = (
    ("lock", "take the install lock", "_lxpu_lock"),
    ("action", "the action (below)", "_lxpu_admin_run"),
)

# The action step's titles, and (tests only, LXPU_TEST_PREBUILT) the step that replaces the build steps.
EXTRA_TITLES = {
    "prebuilt": "copy the prebuilt test environment (LXPU_TEST_PREBUILT)",
    "prune": "prune builds of {tag}",
    "uninstall": "uninstall {tag}",
    "rollback": "roll back {tag}",
}


def shell_steps() -> str:
    """The lists as bash: LXPU_STEPS (the install's functions) and LXPU_STEP_TOTAL (its steps), LXPU_ADMIN_STEPS,
    and LXPU_STEP_TITLES by key."""
    titles = {key: title for key, title, _ in (*INSTALL_STEPS, *ADMIN_STEPS)}
    titles.update(EXTRA_TITLES)
    pairs = " ".join(f"[{key}]={shlex.quote(title)}" for key, title in titles.items())
    return (
        f"LXPU_STEPS=({' '.join(functions for _, _, functions in INSTALL_STEPS)})\n"
        f"LXPU_STEP_TOTAL={len(INSTALL_STEPS)}\n"
        f"LXPU_ADMIN_STEPS=({' '.join(functions for _, _, functions in ADMIN_STEPS)})\n"
        f"declare -A LXPU_STEP_TITLES=({pairs})\n"
    )
