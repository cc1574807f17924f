"""`lightning-xpu kernel install | uninstall | list`: a Jupyter kernel for the loaded install.

The kernel spec starts the kernel through the install's own setup script, exactly as a shell that sources it:
`bash -c 'source <prefix>/lightning-setup-<tag>.sh && exec python -m ipykernel_launcher -f CONNECTION_FILE'`. So
the kernel gets what `module load` gives a shell: the ONE build <prefix>/<tag> points to when the kernel starts,
its lease (the shell takes the lease's shared flock, and `exec` hands that descriptor to the kernel process, so
the lease is held exactly while the kernel runs), the site's variables and modules, the pins, the user's layer and
whatever else the setup library does (lightning-setup.lib.sh, lxpu_admin/envside/setup_lib.py). No launcher file is
written: the spec names the setup script the install already keeps up to date.

One spec per install prefix and tag: its name is `lightning-xpu-<tag>-<8 hex digits of the prefix's sha256>`, its
display name "Lightning XPU <minor> (<variant>)" from the install's tag. For the user it goes where Jupyter reads
the user's kernels (jupyter_core's data directory: $JUPYTER_DATA_DIR, else ~/.local/share/jupyter); with
`--prefix-wide` (the install's administrator, once) into <prefix>/share/jupyter/kernels, which the module and the
setup script put on JUPYTER_PATH, so JupyterHub and Open OnDemand sessions that load the module list it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

PROG = "lightning-xpu kernel"
METADATA_KEY = "lightning_xpu"  # kernel.json metadata: which install a spec starts (what `list` shows)
PREFIX_KERNELS = Path("share/jupyter/kernels")  # under the prefix; <prefix>/share/jupyter is on JUPYTER_PATH
# Sourcing the setup script, then exec: the kernel process is the shell that took the lease's flock.
# LIGHTNING_XPU_KERNEL=1: the lease says "kernel" (lightning-xpu-admin status: shut the kernel down to release it).
LAUNCH = 'export LIGHTNING_XPU_KERNEL=1 && source "$1" && exec python -m ipykernel_launcher -f "$2"'


class KernelError(Exception):
    """One line for the user, naming the fix."""


@dataclass(frozen=True)
class Install:
    """The install this command runs in: its prefix and tag, and the tag's variant."""

    prefix: Path
    tag: str
    variant: str

    @property
    def setup_script(self) -> Path:
        return self.prefix / f"lightning-setup-{self.tag}.sh"

    @property
    def kernel_name(self) -> str:
        digest = hashlib.sha256(os.fsencode(self.prefix)).hexdigest()[:8]
        return f"lightning-xpu-{self.tag}-{digest}"

    @property
    def display_name(self) -> str:
        return f"Lightning XPU {self.tag.partition('-')[0]} ({self.variant})"

    def spec(self) -> dict[str, object]:
        return {
            "argv": ["/bin/bash", "-c", LAUNCH, "lightning-xpu-kernel", str(self.setup_script), "{connection_file}"],
            "display_name": self.display_name,
            "language": "python",
            "interrupt_mode": "signal",
            "metadata": {METADATA_KEY: {"prefix": str(self.prefix), "tag": self.tag}},
        }


def loaded_install() -> Install:
    """The install of the loaded module or sourced setup script, or KernelError naming what to load."""
    from lightning_xpu.commands.userenv import environment_root, install_prefix
    from lightning_xpu.install_facts import environment_tag, variant_of

    tag = environment_tag()
    if tag is None:
        raise KernelError("not in a lightning-xpu environment: load a lightning-xpu module (or source its setup "
                          "script) first, then run this again")
    root = environment_root()
    prefix = install_prefix(root, tag)
    if prefix is None:
        raise KernelError(f"{root} is not a build of an install prefix (<prefix>/.envs/{tag}.<id>): load the module "
                          "or source the setup script (without LIGHTNING_XPU_STAGE) first")
    install = Install(prefix, tag, variant_of(tag))
    if not install.setup_script.is_file():
        raise KernelError(f"{install.setup_script} is missing: the install of {prefix} is incomplete; ask its "
                          "administrator to rerun the install job")
    return install


def user_kernels() -> Path:
    """Where Jupyter reads this user's kernel specs (jupyter_core's rule: $JUPYTER_DATA_DIR, else the XDG one)."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "kernels"


def kernels_dir(install: Install, prefix_wide: bool) -> Path:
    return install.prefix / PREFIX_KERNELS if prefix_wide else user_kernels()


def write_spec(install: Install, kernels: Path) -> Path:
    """kernel.json of INSTALL in KERNELS/<name>/, replaced whole (a reader sees the old spec or the new one).
    Prefix-wide specs are readable by everyone, whatever the administrator's umask."""
    from lightning_xpu.commands.userenv import setup_library

    directory = kernels / install.kernel_name
    directory.mkdir(parents=True, exist_ok=True)
    if kernels.is_relative_to(install.prefix):
        for path in (directory, *directory.parents):
            if path == install.prefix:
                break
            path.chmod(path.stat().st_mode | 0o755)
    text = json.dumps(install.spec(), indent=1) + "\n"
    setup_library(install.prefix).write_file(str(directory / "kernel.json"), text)
    return directory


def cmd_install(args: argparse.Namespace) -> int:
    install = loaded_install()
    kernels = kernels_dir(install, args.prefix_wide)
    try:
        directory = write_spec(install, kernels)
    except PermissionError:
        fix = ("--prefix-wide is for the install's owner (the administrator); without it the kernel is written for "
               "you alone") if args.prefix_wide else "export JUPYTER_DATA_DIR=<a directory of yours> and run this again"
        raise KernelError(f"cannot write into {kernels}: {fix}") from None
    where = "for everyone who loads the module" if args.prefix_wide else "for you"
    print(f"{PROG}: '{install.display_name}' ({install.kernel_name}) written {where}: {directory}")
    if not args.prefix_wide:
        print(f"{PROG}: it starts through {install.setup_script}: choose '{install.display_name}' in Jupyter")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    install = loaded_install()
    directory = kernels_dir(install, args.prefix_wide) / install.kernel_name
    if not (directory / "kernel.json").is_file():
        hint = "" if args.prefix_wide else " (a prefix-wide one: add --prefix-wide)"
        raise KernelError(f"no kernel spec {install.kernel_name} in {directory.parent}{hint}: "
                          "`lightning-xpu kernel list` shows them")
    try:
        shutil.rmtree(directory)
    except PermissionError:
        raise KernelError(f"cannot remove {directory}: --prefix-wide is for the install's owner") from None
    print(f"{PROG}: removed '{install.display_name}' ({install.kernel_name}) from {directory.parent}")
    return 0


def specs_in(kernels: Path) -> list[tuple[Path, dict[str, object]]]:
    """This tool's kernel specs in KERNELS (those whose metadata names an install)."""
    found = []
    for spec in sorted(kernels.glob("*/kernel.json")):
        try:
            data = json.loads(spec.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("metadata"), dict) and METADATA_KEY in data["metadata"]:
            found.append((spec.parent, data))
    return found


def cmd_list(args: argparse.Namespace) -> int:
    places = [user_kernels()]
    try:
        places.append(kernels_dir(loaded_install(), prefix_wide=True))
    except KernelError:
        pass
    shown = 0
    for kernels in places:
        for directory, data in specs_in(kernels):
            origin = data["metadata"][METADATA_KEY]  # type: ignore[index]
            script = Path(origin["prefix"]) / f"lightning-setup-{origin['tag']}.sh"
            state = "" if script.is_file() else f"  (broken: {script} is gone; uninstall it)"
            print(f"{directory.name:40} {data.get('display_name')!s:28} {origin['prefix']}  [{directory}]{state}")
            shown += 1
    if not shown:
        print(f"{PROG}: no lightning-xpu kernel specs in {' or '.join(str(p) for p in places)}: "
              "`lightning-xpu kernel install` writes one for the loaded install")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `kernel` subcommand of `lightning-xpu` (lightning_xpu/commands/cli.py)."""
    kernel = sub.add_parser("kernel", help="write, remove or list the Jupyter kernel of the loaded install",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = kernel.add_subparsers(dest="kernel_command", required=True, metavar="{install,uninstall,list}")
    for name, command, helptext in (
        ("install", cmd_install, "write the kernel spec of the loaded install"),
        ("uninstall", cmd_uninstall, "remove the kernel spec of the loaded install"),
    ):
        action = actions.add_parser(name, help=helptext)
        action.add_argument("--prefix-wide", action="store_true",
                            help="administrator: <prefix>/share/jupyter/kernels, listed by Jupyter wherever the module"
                                 " is loaded (default: your own, in $JUPYTER_DATA_DIR or ~/.local/share/jupyter)")
        action.set_defaults(kernel_run=command)
    listing = actions.add_parser("list", help="list the lightning-xpu kernel specs (yours and the loaded prefix's)")
    listing.set_defaults(kernel_run=cmd_list)
    kernel.set_defaults(run=run_kernel)


def run_kernel(args: argparse.Namespace) -> int:
    from lightning_xpu.commands.userenv import UserEnvError

    try:
        return int(args.kernel_run(args))
    except (KernelError, UserEnvError) as error:
        print(f"{PROG} {args.kernel_command}: error: {error}", file=sys.stderr)
        return 2
