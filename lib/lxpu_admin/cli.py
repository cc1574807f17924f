"""lightning-xpu-admin (bin/lightning-xpu-admin): one command with subcommands.

  install (the default)  build, smoke-test and publish one tag; what every install job runs
  prune, rollback, uninstall  the same as install --prune, --rollback, --uninstall
  status                 the tags published in a prefix, their builds, what holds each and how to release it
                         (changes nothing)
  verify                 whether each build still matches its file-hash record and is read-only
                         ([--prefix DIR] [TAG|BUILD ...]; changes nothing; exit 1 on a mismatch)
  conda-channel          a local conda channel of the conda layer's packages, for an offline site
                         (--site NAME --version X.Y DIR; lxpu_admin/install/conda_mirror.py)
  list, render, check, lock  the renderer (lxpu_admin/render; needs jinja2 and packaging)

install/prune/rollback/uninstall take --site NAME and --version X.Y (the recipe: recipes/rendered/
install-data.json) and then the install job's options (install_lightning_<ver>.sh --help).
Exit status: 0 done, 1 a step failed, 2 bad input.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path
from typing import Callable

from lxpu_admin import paths
from lxpu_admin.install.jobdata import CONTRACT, DATA_FILE, RENDER_AGAIN, JobDataError, load

PROG = "lightning-xpu-admin"
ACTIONS = {"install": None, "prune": "--prune", "rollback": "--rollback", "uninstall": "--uninstall"}
RENDERER = ("list", "render", "check", "lock")
COMMANDS = (*ACTIONS, "status", "verify", "conda-channel", *RENDERER)


def _error(message: str, prog: str = PROG) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _source() -> Path:
    """The repository the shim lives in (it exports LXPU_SOURCE), else the one this package lies in."""
    return Path(os.environ.get("LXPU_SOURCE") or paths.REPOSITORY)


def split_recipe(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """--site, --version and --contract (the engine's own options) out of argv; the rest is the job's."""
    own: dict[str, str] = {}
    rest: list[str] = []
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if name in ("--site", "--version", "--contract"):
            own[name[2:]] = value if equals else next(words, "")
        else:
            rest.append(word)
    return own, rest


def _restore_caller_environment() -> None:
    """The shim set PYTHONPATH to find this package: the build gets the caller's (the driver reports and drops it
    for the build, as it always did)."""
    saved = os.environ.pop("_LXPU_CALLER_PYTHONPATH", "")
    if saved.startswith("set:"):
        os.environ["PYTHONPATH"] = saved[4:]
    else:
        os.environ.pop("PYTHONPATH", None)


def install(action: str, argv: list[str]) -> int:
    """Run the install driver (lxpu_admin/install/driver.py) for one recipe."""
    own, rest = split_recipe(argv)
    source = _source()
    if not own.get("site") or not own.get("version"):
        if "-h" in rest or "--help" in rest:
            return _help()
        return _error(f"{action} needs --site NAME and --version X.Y (the recipes in {source / DATA_FILE})")
    script = f"install_lightning_{own['version']}.sh"
    contract = own.get("contract")
    if contract is not None and contract != str(CONTRACT):
        shown = source / "lib/lxpu_admin/install/jobdata.py"
        return _error(
            f"{shown} has contract {CONTRACT}, this job was rendered for {contract}: run the job of the same "
            f"checkout, or re-render it ({RENDER_AGAIN})",
            script,
        )
    try:
        data = load(source, own["site"], own["version"])
    except JobDataError as exc:
        return _error(str(exc), script)
    flag = ACTIONS[action]
    _restore_caller_environment()
    from lxpu_admin.install.driver import main as drive  # the install's modules, loaded only for an install

    return drive(data, str(source), [flag, *rest] if flag else rest)


def status(argv: list[str]) -> int:
    """The tags published in --prefix DIR, their builds and what holds them (lxpu_admin/install/status.py)."""
    from lxpu_admin.install.status import main as status_main

    return status_main(split_recipe(argv)[1])


def verify(argv: list[str]) -> int:
    """Whether each build matches its file-hash record (lxpu_admin/install/verify.py)."""
    from lxpu_admin.install.verify import main as verify_main

    return verify_main(argv)


def conda_channel(argv: list[str]) -> int:
    """A local conda channel for an offline site (lxpu_admin/install/conda_mirror.py)."""
    from lxpu_admin.install.conda_mirror import main as mirror_main

    return mirror_main(_source(), argv)


def renderer(command: str, argv: list[str]) -> int:
    """The renderer's commands, from lxpu_admin/render (imported only here: it needs jinja2 and packaging)."""
    recipes = _source() / "recipes"
    if sys.version_info < (3, 11):
        return _error(f"{command} needs Python 3.11 or newer (for tomllib): run it with python3.11")
    try:
        from lxpu_admin.render.cli import main
    except ImportError as exc:
        return _error(f"{command}: {exc}: install the renderer's packages (pip install jinja2 packaging)")
    return main([command, *argv], default_recipes=recipes)


def _help() -> int:
    print(__doc__.strip())
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        if argv and argv[0] in ("-h", "--help") and len(argv) == 1:
            return _help()
        argv = ["install", *argv]
    command, rest = argv[0], argv[1:]
    handlers: dict[str, Callable[[list[str]], int]] = {
        **{name: (lambda args, name=name: install(name, args)) for name in ACTIONS},
        "status": status,
        "verify": verify,
        "conda-channel": conda_channel,
        **{name: (lambda args, name=name: renderer(name, args)) for name in RENDERER},
    }
    if command not in handlers:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f": did you mean '{close[0]}'?" if close else f" (commands: {', '.join(COMMANDS)})"
        return _error(f"unknown command '{command}'{hint}")
    return handlers[command](rest)
