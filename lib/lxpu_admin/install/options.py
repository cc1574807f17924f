"""The install job's options: its --help and the parser (every install_lightning_<ver>.sh takes these).

Options may also come from LIGHTNING_XPU_INSTALL_ARGS (split on spaces; for schedulers that cannot pass arguments
to a job, e.g. qsub -v); the command line comes after them, so it wins.
"""

from __future__ import annotations

import os

from lxpu_admin.install.state import State, bad_input

# Options that take a value, and the state key each sets (--extra-index-url repeats).
VALUED = {
    "--prefix": "prefix", "--variant": "variant", "--env-manager": "env_manager", "--base-python": "base_python",
    "--source": "source", "--pip-source": "pip_source", "--index-url": "index_url",
    "--extra-index-url": "extra_index_urls", "--wheelhouse": "wheelhouse", "--lock-timeout": "lock_timeout",
    "--shared-group": "shared_group", "--keep": "keep", "--older-than": "older_than", "--installer": "installer",
    "--conda-exe": "conda_exe", "--conda-channel": "conda_channel",
}  # fmt: skip
ACTIONS = ("--prune", "--uninstall", "--rollback")


def usage(state: State) -> str:
    data = state.data
    version, variants = data["version"], " ".join(data["variants"])
    tags = ", ".join(f"{name}: {variant['tag']}" for name, variant in data["variants"].items())
    channels = " ".join(data["conda_channels"])
    return f"""\
Usage: install_lightning_{version}.sh [options]
   or: sbatch|qsub install_lightning_{version}.sh [options]

Builds a locked Python environment with PyTorch {version}, Lightning {data["lightning"]} and lightning_xpu
for site '{data["site"]}', runs a smoke job in it, and only if that passes publishes it as <prefix>/<tag> with
<prefix>/lightning-setup-<tag>.sh and the module lightning-xpu/<tag> (tags: {tags}).
Re-running with unchanged inputs does nothing.

Options:
  --prefix DIR            install prefix (default: {data["default_prefix"]})
  --variant V             one of: {variants}, or auto (default: {data["default_variant"]}; auto = xpu
                          when an Intel GPU is present, else cpu)
  --env-manager M         conda or venv (default: {data["env_manager"]}); conda needs no conda executable: the conda
                          layer is solved and linked by py-rattler (pinned, hash-checked, in <prefix>/.tools)
  --conda-exe PATH        build the conda layer with this conda's `conda env create` instead of py-rattler
  --conda-channel C       conda channels (a mirror or a local channel; space-separated) instead of the site's
                          ({channels}); also LIGHTNING_XPU_CONDA_CHANNELS, else .condarc's channels
  --base-python PATH      build a venv with --system-site-packages over this Python, which must already
                          have torch; packages it already has are used as they are (recorded), not reinstalled
  --source DIR            the lightning-xpu repository (default: found from SLURM_SUBMIT_DIR or
                          PBS_O_WORKDIR under a scheduler, else from this script's location or the
                          current directory)
  --pip-source S          recipe (default): the recipe's package indexes; system: this machine's own pip
                          configuration (no index options are passed)
  --index-url URL         use this package index instead of the recipe's
  --extra-index-url URL   an extra package index (repeatable)
  --wheelhouse DIR        offline: install only from wheels in DIR (--no-index --find-links DIR)
  --installer I           uv, pip or auto (default: auto = uv, pinned and hash-checked, bootstrapped into
                          <prefix>/.tools; pip, with a note saying why, where uv cannot be had)
  --lock-timeout SECONDS  how long to wait for another install of the same tag (default: 1800)
  --shared-group GROUP    shared install: the tree is made group GROUP, group-readable, read-only
  --force                 rebuild even when the inputs are unchanged
  --rollback              publish again the build this one replaced (recorded in it); both are kept
  --uninstall             remove this tag: setup script, modulefile, links and every build no job uses
  --prune                 remove old builds of this tag, with --keep N (keep the N newest) and/or
                          --older-than DAYS; never the published one, its rollback build or one in use
  --dry-run               print every step and command; change nothing
  -h, --help              this help

Environment (the options win): LIGHTNING_XPU_INSTALL_ARGS (options, split on spaces; e.g. for qsub -v),
LIGHTNING_XPU_PIP_SOURCE, LIGHTNING_XPU_INDEX_URL,
LIGHTNING_XPU_EXTRA_INDEX_URL (space-separated), LIGHTNING_XPU_WHEELHOUSE, LIGHTNING_XPU_INSTALLER,
LIGHTNING_XPU_UV_CACHE_DIR (uv's cache; default <prefix>/.cache/uv, shared by every version in the prefix),
LIGHTNING_XPU_MIN_FREE_GIB (free space required under the prefix), LIGHTNING_XPU_MIN_FREE_INODES (free files
required).
LIGHTNING_XPU_PACK=0: no packed image for node-local staging (lightning-xpu-stage); LIGHTNING_XPU_PACK_FORMAT
tar.zst or tar.gz (default: tar.zst where zstd exists); LIGHTNING_XPU_PACK_CHECK_DIR where the image is unpacked
once to check it (default: /dev/shm where it has room, else $TMPDIR or /tmp).
Builds are never deleted by an install: only --prune and --uninstall remove them, and never one that a job
uses (module load and the setup script record a lease in <prefix>/.leases). After publishing, a failed
clean-up is a WARNING, not a failure: the new build is live.
Exit status: 0 installed, already installed, or the action done; 1 a step failed (see the log); 2 bad input.
"""


def parse(state: State, argv: list[str]) -> bool:
    """Fill state.options and the shared fields from LIGHTNING_XPU_INSTALL_ARGS and argv. False: --help was
    printed (nothing else to do)."""
    words = [*os.environ.get("LIGHTNING_XPU_INSTALL_ARGS", "").split(), *argv]
    options: dict[str, object] = {"extra_index_urls": []}
    action = "install"
    index = 0
    while index < len(words):
        opt, equals, value = words[index].partition("=")
        if not (opt.startswith("--") and equals):
            opt, equals, value = words[index], "", ""
        elif opt not in VALUED:  # --flag=word: the flag, then the word (an unknown argument)
            words[index + 1 : index + 1] = [value]
        if opt in ("-h", "--help"):
            print(usage(state), end="", flush=True)
            return False
        if opt in ("--force", "--dry-run"):
            state.set("force" if opt == "--force" else "dry_run", "1")
        elif opt in ACTIONS:
            if action not in ("install", opt[2:]):
                raise bad_input(state, f"--{action} and {opt} cannot be combined: pick one")
            action = opt[2:]
        elif opt in VALUED:
            if not equals:
                index += 1
                value = words[index] if index < len(words) else ""
            if not value:
                raise bad_input(state, f"{opt} needs a value: see --help")
            key = VALUED[opt]
            if key == "extra_index_urls":
                options[key].append(value)  # type: ignore[attr-defined]
            else:
                options[key] = value
        else:
            raise bad_input(state, f"unknown argument '{opt}': see --help")
        index += 1
    state.options = options
    state.set("action", action)
    for key in ("prefix", "variant", "base_python", "shared_group", "keep", "older_than"):
        state.set(key, str(options.get(key, "")))
    state.set("lock_timeout", str(options.get("lock_timeout", "1800")))
    return True
