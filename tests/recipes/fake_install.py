"""A fake install tree laid out as the install job leaves it (docs/architecture.md), for testing the
modulefiles and setup scripts without installing anything: bin/python is a stub script that runs this Python (the
setup library runs its Python half with it)."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from recipe_helpers import MODULEFILE_BODY, REPO, SETUP_LIBRARY, SETUP_LIBRARY_NAME, Rendered

from lxpu_admin.install.tagfiles import SETUP_HELPER, SETUP_HELPER_NAME

# Empty modulefiles standing in for the real site modules (rhel9/default-dawn exists only on Dawn).
STAND_IN_DIR = "site-module-stand-ins"
STAND_IN_TEXT = (
    "-- TEST STAND-IN: an empty modulefile in place of the real site module {name}; not the real one.\n"
)


@dataclass(frozen=True)
class FakeInstall:
    prefix: Path
    tag: str
    root: Path  # <prefix>/<tag>, the published symlink
    conda: bool
    build: Path  # <prefix>/.envs/<tag>.build-1: what the module and setup script resolve <prefix>/<tag> to


def make_install(rendered: Rendered, prefix: Path, tag: str, site: str, conda: bool) -> FakeInstall:
    build = prefix / ".envs" / f"{tag}.build-1"
    (build / "bin").mkdir(parents=True)
    python = build / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    if conda:
        (build / "conda-meta").mkdir()
    else:
        (build / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (build / "manifest.json").write_text("{}\n")
    shutil.copy(rendered.path(f"envs/{site}/lightning-xpu-site.sh"), build / "lightning-xpu-site.sh")
    shutil.copy(
        rendered.path(f"envs/{site}/lightning-xpu-site-modules.txt"), build / "lightning-xpu-site-modules.txt"
    )
    root = prefix / tag
    root.symlink_to(Path(".envs") / build.name)
    modulefiles = prefix / "modulefiles" / "lightning-xpu"
    modulefiles.mkdir(parents=True, exist_ok=True)
    shutil.copy(rendered.path(f"envs/{site}/modulefiles/lightning-xpu/{tag}.lua"), modulefiles / f"{tag}.lua")
    setup = rendered.path(f"envs/{site}/{tag}/lightning-setup-{tag}.sh")
    shutil.copy(setup, prefix / f"lightning-setup-{tag}.sh")
    add_shared_code(prefix)
    return FakeInstall(prefix, tag, root, conda, build)


def add_shared_code(prefix: Path) -> None:
    """The code the thin modulefiles and setup scripts call, where the install job puts it."""
    (prefix / MODULEFILE_BODY).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / MODULEFILE_BODY, prefix / MODULEFILE_BODY)
    shutil.copy(REPO / SETUP_LIBRARY, prefix / SETUP_LIBRARY_NAME)
    shutil.copy(REPO / SETUP_HELPER, prefix / SETUP_HELPER_NAME)


def make_stand_ins(directory: Path, modules: set[str]) -> Path:
    for name in modules:
        path = directory / STAND_IN_DIR / f"{name}.lua"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STAND_IN_TEXT.format(name=name))
    return directory / STAND_IN_DIR
