"""The install job's options: one declaration each (`OPTIONS`: flag, help, environment variable, type, as uv
declares its options), from which the parser and --help (every install_lightning_<ver>.sh takes these) are made.

Options may also come from LIGHTNING_XPU_INSTALL_ARGS (split on spaces; for schedulers that cannot pass arguments
to a job, e.g. qsub -v); the command line comes after them, so it wins. An option's environment variable gives
its value where neither names it.
"""

from __future__ import annotations

import os
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from lxpu_admin.install.state import State, bad_input

ACTIONS = ("--prune", "--uninstall", "--rollback")
# Where the help text of an option starts, and the width it is wrapped to.
_HELP_COLUMN, _WIDTH = 26, 116


@dataclass(frozen=True)
class Option:
    """One option of the install job. `help` may name the recipe's data as {default_prefix}, {variants},
    {default_variant}, {env_manager} and {channels}."""

    flag: str
    help: str
    metavar: str = ""  # "" for a switch (--force) or an action (--prune)
    env: str = ""  # the environment variable that gives the value where no option does
    default: str = ""
    whole: str = ""  # the value is a whole number of these ("seconds"): an int in the state
    repeat: bool = False  # each use adds one value (its environment variable: space-separated)

    @property
    def key(self) -> str:
        """The name it sets: the State attribute or the state.options key."""
        return "extra_index_urls" if self.repeat else self.flag[2:].replace("-", "_")

    def help_lines(self, fields: dict[str, str]) -> str:
        head = f"{self.flag} {self.metavar}" if self.metavar else self.flag
        text = self.help.format(**fields)
        if self.env:
            text += f" (also {self.env}{', space-separated' if self.repeat else ''})"
        lines = textwrap.wrap(text, _WIDTH - _HELP_COLUMN)
        first = f"  {head:<{_HELP_COLUMN - 3}} {lines[0]}"
        return "\n".join([first, *(" " * _HELP_COLUMN + line for line in lines[1:])])


OPTIONS: tuple[Option, ...] = (
    Option("--prefix", "install prefix (default: {default_prefix})", "DIR"),
    Option("--variant", "one of: {variants}, or auto (default: {default_variant}; auto = xpu when an Intel GPU is "
           "present, else cpu)", "V"),
    Option("--env-manager", "conda or venv (default: {env_manager}); conda needs no conda executable: the conda "
           "layer is solved and linked by py-rattler (pinned, hash-checked, in <prefix>/.tools)", "M", default="auto"),
    Option("--conda-exe", "build the conda layer with this conda's `conda env create` instead of py-rattler",
           "PATH"),
    Option("--conda-channel", "conda channels (a mirror or a local channel; space-separated) instead of the site's "
           "({channels}), else .condarc's channels", "C", env="LIGHTNING_XPU_CONDA_CHANNELS"),
    Option("--base-python", "build a venv with --system-site-packages over this Python, which must already have "
           "torch; packages it already has are used as they are (recorded), not reinstalled", "PATH"),
    Option("--source", "the lightning-xpu repository (default: found from SLURM_SUBMIT_DIR or PBS_O_WORKDIR under a "
           "scheduler, else from this script's location or the current directory)", "DIR"),
    Option("--pip-source", "recipe (default): the recipe's package indexes; system: this machine's own pip "
           "configuration (no index options are passed)", "S", env="LIGHTNING_XPU_PIP_SOURCE", default="recipe"),
    Option("--index-url", "use this package index instead of the recipe's", "URL", env="LIGHTNING_XPU_INDEX_URL"),
    Option("--extra-index-url", "an extra package index (repeatable)", "URL", env="LIGHTNING_XPU_EXTRA_INDEX_URL",
           repeat=True),
    Option("--wheelhouse", "offline: install only from wheels in DIR (--no-index --find-links DIR)", "DIR",
           env="LIGHTNING_XPU_WHEELHOUSE"),
    Option("--installer", "uv, pip or auto (default: auto = uv, pinned and hash-checked, bootstrapped into "
           "<prefix>/.tools; pip, with a note saying why, where uv cannot be had)", "I", env="LIGHTNING_XPU_INSTALLER",
           default="auto"),
    Option("--lock-timeout", "how long to wait for another install of the same tag (default: 1800)", "SECONDS",
           default="1800", whole="seconds"),
    Option("--shared-group", "shared install: the tree is made group GROUP, group-readable, read-only", "GROUP"),
    Option("--force", "rebuild even when the inputs are unchanged"),
    Option("--rollback", "publish again the build this one replaced (recorded in it); both are kept"),
    Option("--uninstall", "remove this tag: setup script, modulefile, links and every build no job uses"),
    Option("--prune", "remove old builds of this tag, with --keep N (keep the N newest) and/or --older-than DAYS; "
           "never the published one, its rollback build or one in use"),
    Option("--keep", "with --prune: keep the N newest builds", "N", whole="builds"),
    Option("--older-than", "with --prune: remove only builds older than DAYS", "DAYS", whole="days"),
    Option("--dry-run", "print every step and command; change nothing"),
    Option("-h, --help", "this help"),
)  # fmt: skip
_BY_FLAG = {option.flag: option for option in OPTIONS if option.flag.startswith("--")}
_VALUED = {flag: option for flag, option in _BY_FLAG.items() if option.metavar}

# Settings that only the environment gives (no option), with their help.
ENVIRONMENT = (
    ("LIGHTNING_XPU_INSTALL_ARGS", "options, split on spaces; e.g. for qsub -v"),
    ("LIGHTNING_XPU_UV_CACHE_DIR", "uv's cache; default <prefix>/.cache/uv, shared by every version in the prefix"),
    ("LIGHTNING_XPU_MIN_FREE_GIB", "free space required under the prefix"),
    ("LIGHTNING_XPU_MIN_FREE_INODES", "free files required"),
    ("LIGHTNING_XPU_PACK", "0: no packed image for node-local staging (lightning-xpu-stage)"),
    ("LIGHTNING_XPU_PACK_FORMAT", "tar.zst or tar.gz (default: tar.zst where zstd exists)"),
    ("LIGHTNING_XPU_PACK_CHECK_DIR", "where the image is unpacked once to check it (default: /dev/shm where it has "
     "room, else $TMPDIR or /tmp)"),
)  # fmt: skip


def usage(state: State) -> str:
    data = state.data
    version = data["version"]
    tags = ", ".join(f"{name}: {variant['tag']}" for name, variant in data["variants"].items())
    fields = {
        "default_prefix": data["default_prefix"], "variants": " ".join(data["variants"]),
        "default_variant": data["default_variant"], "env_manager": data["env_manager"],
        "channels": " ".join(data["conda_channels"]),
    }  # fmt: skip
    options = "\n".join(option.help_lines(fields) for option in OPTIONS)
    environment = "\n".join(
        textwrap.fill(f"{name}: {text}", _WIDTH, initial_indent="  ", subsequent_indent="    ")
        for name, text in ENVIRONMENT
    )
    return f"""\
Usage: install_lightning_{version}.sh [options]
   or: sbatch|qsub install_lightning_{version}.sh [options]

Builds a locked Python environment with PyTorch {version}, Lightning {data["lightning"]} and lightning_xpu
for site '{data["site"]}', runs a smoke job in it, and only if that passes publishes it as <prefix>/<tag> with
<prefix>/lightning-setup-<tag>.sh and the module lightning-xpu/<tag> (tags: {tags}).
Re-running with unchanged inputs does nothing.

Options (an option wins over its environment variable):
{options}

Environment:
{environment}

Builds are never deleted by an install: only --prune and --uninstall remove them, and never one that a job
uses (module load and the setup script record a lease in <prefix>/.leases). After publishing, a failed
clean-up is a WARNING, not a failure: the new build is live.
Exit status: 0 installed, already installed, or the action done; 1 a step failed (see the log); 2 bad input.
"""


def _whole(state: State, option: Option, value: str) -> int:
    if not re.fullmatch(r"[0-9]+", value):
        raise bad_input(state, f"{option.flag} must be a whole number of {option.whole}, not '{value}'")
    return int(value)


def parse(state: State, argv: list[str]) -> bool:
    """Fill state.options and the state's option fields from LIGHTNING_XPU_INSTALL_ARGS, argv and the options'
    environment variables. False: --help was printed (nothing else to do)."""
    words = [*os.environ.get("LIGHTNING_XPU_INSTALL_ARGS", "").split(), *argv]
    given: dict[str, Any] = {}
    index = 0
    while index < len(words):
        opt, equals, value = words[index].partition("=")
        if not (opt.startswith("--") and equals):
            opt, equals, value = words[index], "", ""
        elif opt not in _VALUED:  # --flag=word: the flag, then the word (an unknown argument)
            words[index + 1 : index + 1] = [value]
        if opt in ("-h", "--help"):
            print(usage(state), end="", flush=True)
            return False
        if opt == "--force":
            state.force = True
        elif opt == "--dry-run":
            state.dry = True
        elif opt in ACTIONS:
            if state.action not in ("install", opt[2:]):
                raise bad_input(state, f"--{state.action} and {opt} cannot be combined: pick one")
            state.action = opt[2:]
        elif opt in _VALUED:
            if not equals:
                index += 1
                value = words[index] if index < len(words) else ""
            if not value:
                raise bad_input(state, f"{opt} needs a value: see --help")
            option = _VALUED[opt]
            given[option.key] = [*given.get(option.key, []), value] if option.repeat else value
        else:
            raise bad_input(state, f"unknown argument '{opt}': see --help")
        index += 1
    state.options = {option.key: _value(state, option, given) for option in _VALUED.values()}
    state.prefix, state.variant = state.options["prefix"], state.options["variant"]
    state.base_python, state.shared_group = state.options["base_python"], state.options["shared_group"]
    state.keep, state.older_than = state.options["keep"], state.options["older_than"]
    state.lock_timeout = state.options["lock_timeout"]
    return True


def _value(state: State, option: Option, given: dict[str, Any]) -> Any:
    """The option's value: given, else its environment variable's, else its default; a whole number as an int
    (None when neither gives one)."""
    value = given.get(option.key)
    if value is None:
        from_env = os.environ.get(option.env, "") if option.env else ""
        value = from_env.split() if option.repeat else from_env or option.default
    if option.whole:
        return _whole(state, option, value) if value else None
    return value
