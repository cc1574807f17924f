"""Loading the site's Lmod modules into the install's own environment (os.environ), as `module load` would.

Lmod's `python` mode prints Python that sets os.environ (what Lmod's init/env_modules_python.py runs); its exit
status says whether the command worked. Where the caller's shell never set Lmod up (no LMOD_CMD: a batch job's
non-login shell), Lmod's init/bash is sourced once in a bash child and what it sets is taken over, as a shell
would.
"""

from __future__ import annotations

import os
import subprocess

from lxpu_admin.install.state import State, bad_input, bad_input_unless_dry, say

_SHELL_OWN = {"_", "SHLVL", "PWD", "OLDPWD"}


def _init_script() -> str:
    return f"{os.environ.get('LMOD_PKG') or '/usr/share/lmod/lmod'}/init/bash"


def _set_up() -> bool:
    """Lmod's variables in os.environ (sourcing init/bash where needed); False when there is no Lmod."""
    if os.environ.get("LMOD_CMD"):
        return True
    init = _init_script()
    if not os.path.isfile(init):
        return False
    done = subprocess.run(
        ["bash", "-c", 'source "$1" >/dev/null 2>&1; env -0', "lmod-init", init],
        capture_output=True, check=False,
    )  # fmt: skip
    for item in done.stdout.split(b"\0"):
        name, equals, value = item.decode(errors="surrogateescape").partition("=")
        if equals and name not in _SHELL_OWN and not name.startswith("BASH_FUNC_"):
            os.environ[name] = value
    return bool(os.environ.get("LMOD_CMD"))


def _lmod(*args: str) -> bool:
    done = subprocess.run([os.environ["LMOD_CMD"], "python", *args], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        exec(done.stdout, {"os": os})  # Lmod's own output: os.environ assignments
    return done.returncode == 0


def load_modules(state: State, what: str, names: list[str]) -> None:
    """Load NAMES, recording for the check step whether each exists. A module that does not exist is bad input,
    except in a dry run, which reports it and goes on."""
    if not names:
        return
    site = state.data["site"]
    if not _set_up():
        state.module_report.append(f"{' '.join(names)}: cannot tell (no module command; Lmod's {_init_script()} is "
                                   "missing)")
        bad_input_unless_dry(state, f"site {site} needs the modules '{' '.join(names)}' but Lmod's module command is "
                                    "missing: run from a login shell of the site")
        return
    for name in names:
        if _lmod("is-avail", name):
            say(f"+ module load {name}")
            if not _lmod("load", name):
                raise bad_input(state, f"{what} {name} exists but 'module load {name}' failed: try it in a login shell")
            state.module_report.append(f"{name}: loaded ({what})")
        else:
            state.module_report.append(f"{name}: NOT FOUND ({what}; module avail {name} shows nothing)")
            bad_input_unless_dry(state, f"{what} {name} does not exist here (module avail {name}): run on a machine of "
                                        f"site {site}, or change recipes/sites/{site}.toml")
