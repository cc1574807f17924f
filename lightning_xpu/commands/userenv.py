"""`lightning-xpu user-env`: a writable layer of the user's own over a (read-only) lightning-xpu environment.

The layer is a venv, `${LIGHTNING_XPU_USER_BASE:-~/.local/lightning-xpu}/<tag>`, made from the environment's
Python. Why a venv and not PYTHONUSERBASE or a --target directory: inside a venv pip refuses --user ("User
site-packages are not visible in this virtualenv") and ignores PYTHONUSERBASE, and `uv pip install` installs into
$VIRTUAL_ENV; a venv is what both installers target by themselves. Once it exists, the module and the setup script
put its bin/ first on PATH and set VIRTUAL_ENV to it: `pip install X` and `uv pip install X` go there, `python` sees
both, and the environment's console scripts (lightning-xpu, lightning) keep running from the environment.

A layer belongs to one install prefix and tag and records the build it was made over, with that build's Python
and pins (`lightning-xpu-layer`). Its site .pth adds, at every start, the site-packages of the build the shell
pinned (LIGHTNING_XPU_ROOT, when it is a build of its prefix and tag; else the recorded build), so a job never mixes
two builds and needs no build but the one it leased. The rules for a layer over another build (repointed when the
Python and the pins are the same, else refused in one line naming this command) and the code that writes the
layer's pointers are the setup library's Python half (lxpu_admin/envside/setup_lib.py,
`<prefix>/.lightning-setup.lib.py`), which the module and the setup script run at every load: this command loads
the same file, so one implementation serves all three.

Its pip is the environment's (bin/pip runs `python -m pip` of the layer); `pip install --user X` is answered with
one line saying what to type instead. Every install is constrained by the environment's pins
(<env>/share/lightning-xpu/constraints.txt, exported as PIP_CONSTRAINT and UV_CONSTRAINT by the module and the
setup script).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from lightning_xpu.commands import pipguard
from lightning_xpu.install_facts import environment_tag
from lightning_xpu.validation.model import FAIL, PASS, SKIP, Check

# lxpu_admin/install/tagfiles.py SETUP_HELPER_NAME: where every install writes the setup library's Python half.
SETUP_HELPER_NAME = ".lightning-setup.lib.py"


class UserEnvError(Exception):
    """One line for the user."""


def user_base() -> Path:
    return Path(os.environ.get("LIGHTNING_XPU_USER_BASE") or Path.home() / ".local" / "lightning-xpu")


def environment_root() -> Path:
    """The build this command runs in (the module's LIGHTNING_XPU_ROOT, else this interpreter's prefix), resolved:
    `<prefix>/.envs/<tag>.<build-id>`."""
    return Path(os.path.realpath(os.environ.get("LIGHTNING_XPU_ROOT") or sys.prefix))


def install_prefix(root: Path, tag: str) -> Path | None:
    """The install prefix of the build ROOT of TAG (None when ROOT is no build of a prefix: a node-local copy, a
    development environment)."""
    if root.parent.name != ".envs" or not root.name.startswith(f"{tag}."):
        return None
    return root.parent.parent


def setup_library(prefix: Path) -> ModuleType:
    """The prefix's setup library Python half (lxpu_admin/envside/setup_lib.py, written by the install with the module
    body and setup library), which holds the layer's rules and writes its pointers."""
    path = prefix / SETUP_HELPER_NAME
    spec = importlib.util.spec_from_file_location("lightning_xpu_setup_lib", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise UserEnvError(f"{path} is missing: the install of {prefix} is incomplete; ask its administrator to "
                           "rerun the install job")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def create(layer: Path, root: Path, prefix: Path, tag: str) -> str:
    """Make the layer over the build ROOT of PREFIX/TAG, or move an existing one over it; the line to print."""
    lib = setup_library(prefix)
    python = root / "bin" / "python"
    if not python.exists():
        raise UserEnvError(f"no environment at {root}: load a lightning-xpu module or source its setup script first")
    record = lib.read_layer(str(layer)) if (layer / "pyvenv.cfg").is_file() else {}
    why = lib.layer_verdict(str(layer), str(prefix), tag, str(root))[1] if record else ""
    if why.startswith("it is not yours alone"):
        raise UserEnvError(f"{layer}: {why}: export LIGHTNING_XPU_USER_BASE=<a directory only you can write> (also "
                           "before each module load or setup script) and run lightning-xpu user-env again")
    if record and not lib.same_path(record.get("prefix", ""), str(prefix)):
        raise UserEnvError(f"{layer} belongs to the install {record['prefix']}, not {prefix}: for this install, "
                           "export LIGHTNING_XPU_USER_BASE=<another directory> (also before each module load or "
                           "setup script) and run lightning-xpu user-env again")
    # A venv without pip (it uses the environment's) and without system site-packages (the environment's come
    # from the layer's site .pth, in order, behind the layer's own). Over an existing layer it only renews the
    # interpreter's links and pyvenv.cfg: the packages in it stay.
    done = subprocess.run([str(python), "-m", "venv", "--without-pip", str(layer)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise UserEnvError(f"cannot make {layer}: {(done.stderr.strip().splitlines() or ['?'])[-1]} "
                           "(set LIGHTNING_XPU_USER_BASE to a writable directory)")
    lib.point_layer(str(layer), str(prefix), tag, str(root))
    # The layer's pip: the environment's pip module on the layer's interpreter (installs go to the layer,
    # sys.prefix), with one line for --user and for a request the pins refuse. Its uv is the environment's guard.
    pipguard.install(layer / "bin", ("pip", "pip3"))
    done_line = (f"user layer {layer} over {root}: `pip install X` and `uv pip install X` go there once the module is "
                 "loaded again (module load, or source the setup script)")
    old_python, build = record.get("python"), root.name
    if record and old_python and old_python != lib.build_python(str(root)):
        done_line += (f"; the packages you installed for Python {old_python} (over {record['build']}) are not seen by"
                      f" Python {lib.build_python(str(root))}: install them again")
    elif record and record.get("build") != build:
        done_line += f"; moved from {record['build']}: `pip check` lists what you installed that the new pins break"
    return done_line


def layer_check() -> Check:
    """`lightning-xpu doctor`'s check of the user layer: does the layer serve the build this process runs?"""
    tag = environment_tag()
    root = environment_root()
    prefix = install_prefix(root, tag) if tag else None
    if tag is None or prefix is None:
        return Check("user_layer", SKIP, "not a build of a lightning-xpu install prefix")
    layer = user_base() / tag
    try:
        lib = setup_library(prefix)
    except UserEnvError as exc:
        return Check("user_layer", SKIP, str(exc))
    verdict, why = lib.layer_verdict(str(layer), str(prefix), tag, str(root))
    if verdict == "none":
        return Check("user_layer", SKIP, f"no user layer at {layer} (lightning-xpu user-env makes one)")
    if verdict == "refuse":
        return Check("user_layer", FAIL, lib.refusal(str(layer), why, root.name))
    return Check("user_layer", PASS, f"{layer} over {root.name}" + (f" ({why})" if verdict == "repair" else ""))


def run(args: object) -> int:
    tag = environment_tag()
    if tag is None:
        print("lightning-xpu user-env: error: not in a lightning-xpu environment: "
              "load a lightning-xpu module or source its setup script first", file=sys.stderr)
        return 2
    layer = user_base() / tag
    if getattr(args, "print_path", False):
        print(layer)
        return 0
    root = environment_root()
    prefix = install_prefix(root, tag)
    if prefix is None:
        print(f"lightning-xpu user-env: error: {root} is not a build of an install prefix (<prefix>/.envs/{tag}.<id>):"
              " load the module or source the setup script (without LIGHTNING_XPU_STAGE) first", file=sys.stderr)
        return 2
    try:
        print(create(layer, root, prefix, tag))
    except UserEnvError as exc:
        print(f"lightning-xpu user-env: error: {exc}", file=sys.stderr)
        return 1
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"lightning-xpu user-env: error: {shlex.quote(str(layer))}: {exc}", file=sys.stderr)
        return 1
    return 0
