"""`lightning-xpu user-env`: a writable layer of the user's own over a (read-only) lightning-xpu environment.

The layer is a venv, `${LIGHTNING_XPU_USER_BASE:-~/.local/lightning-xpu}/<tag>`, made from the environment's
Python, with a .pth file that adds the environment's site-packages behind its own (site.addsitedir, so the
environment's own .pth files run too: the autoload hook, a --base-python's packages). Why a venv and not
PYTHONUSERBASE or a --target directory: inside a venv pip refuses --user ("User site-packages are not visible in
this virtualenv") and ignores PYTHONUSERBASE, and `uv pip install` installs into $VIRTUAL_ENV; a venv is what
both installers target by themselves. Once it exists, the module and the setup script put its bin/ first on PATH
and set VIRTUAL_ENV to it: `pip install X` and `uv pip install X` go there, `python` sees both, and the
environment's console scripts (lightning-xpu, lightning) keep running from the environment.

Its pip is the environment's (bin/pip runs `python -m pip` of the layer); `pip install --user X` is answered with
one line saying what to type instead. Every install is constrained by the environment's pins
(<env>/share/lightning-xpu/constraints.txt, exported as PIP_CONSTRAINT and UV_CONSTRAINT by the module and the
setup script).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from lightning_xpu.report import pipguard
from lightning_xpu.report.model import environment_tag


def user_base() -> Path:
    return Path(os.environ.get("LIGHTNING_XPU_USER_BASE") or Path.home() / ".local" / "lightning-xpu")


def environment_root() -> Path:
    """The environment this command runs in (the module's LIGHTNING_XPU_ROOT, else this interpreter's prefix)."""
    return Path(os.environ.get("LIGHTNING_XPU_ROOT") or sys.prefix)


def environment_sites(python: Path) -> list[str]:
    done = subprocess.run([str(python), "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"],
                          capture_output=True, text=True, check=True, env={**os.environ, "VIRTUAL_ENV": ""})
    return [line for line in done.stdout.splitlines() if line]


def create(layer: Path, root: Path) -> str:
    """Make (or refresh) the layer over the environment at `root`; the line to print."""
    python = root / "bin" / "python"
    if not python.exists():
        raise UserEnvError(f"no environment at {root}: load a lightning-xpu module or source its setup script first")
    sites = environment_sites(python)
    # A venv without pip (it uses the environment's) and without system site-packages (the environment's come
    # from the .pth file below, in order, behind the layer's own).
    done = subprocess.run([str(python), "-m", "venv", "--without-pip", str(layer)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise UserEnvError(f"cannot make {layer}: {(done.stderr.strip().splitlines() or ['?'])[-1]} "
                           "(set LIGHTNING_XPU_USER_BASE to a writable directory)")
    layer_python = layer / "bin" / "python"
    layer_sites = subprocess.run([str(layer_python), "-c", "import site; print(site.getsitepackages()[0])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    lines = "".join(f"import site; site.addsitedir({site!r})\n" for site in sites)
    (Path(layer_sites) / "_lightning_xpu_environment.pth").write_text(lines)
    # The layer's pip: the environment's pip module on the layer's interpreter (installs go to the layer,
    # sys.prefix), with one line for --user and for a request the pins refuse. Its uv is the environment's guard.
    # The environment is named first: the guard's pip.conf (for `python -m pip`) names its pins.
    (layer / "lightning-xpu-environment").write_text(f"{root}\n")
    pipguard.install(layer / "bin", ("pip", "pip3"))
    return (f"user layer {layer} over {root}: `pip install X` and `uv pip install X` go there once the module is "
            "loaded again (module load, or source the setup script)")


class UserEnvError(Exception):
    """One line for the user."""


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
    try:
        print(create(layer, environment_root()))
    except UserEnvError as exc:
        print(f"lightning-xpu user-env: error: {exc}", file=sys.stderr)
        return 1
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"lightning-xpu user-env: error: {shlex.quote(str(layer))}: {exc}", file=sys.stderr)
        return 1
    return 0
