"""Helpers shared by the recipe tests (a module of its own name, so that no other conftest.py can shadow
it): repository paths, the CLI in and out of process, bash, file edits, the rendered tree."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from lxpu_admin.render.artifacts import Artifact, Renderer
from lxpu_admin.render.matrix import MODULEFILE_BODY, SETUP_LIBRARY, SETUP_LIBRARY_NAME
from lxpu_admin.render.outputs import render_selection, write_artifacts
from lxpu_admin.render.recipes import ENGINE, ENGINE_DATA, INSTALL_DATA, SHIM, Recipes, load_recipes
from tests.conftest import require_service

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")


ADMIN_LIB = "lib"  # the folder that holds the admin package (engine and renderer), copied whole into temp repos

__all__ = [
    "ENGINE",
    "ENGINE_DATA",
    "INSTALL_DATA",
    "MODULEFILE_BODY",
    "SETUP_LIBRARY",
    "SETUP_LIBRARY_NAME",
    "SHIM",
    "Recipes",
    "Renderer",
    "load_recipes",
    "render_selection",
    "write_artifacts",
]


def require(available: bool, what: str) -> None:
    """Skip when `what` is missing, or fail when CI demands every service (LXPU_REQUIRE_SERVICES=1)."""
    require_service(what, available, "missing")


class Rendered:
    """Every artifact of every (version, site), written under `root` in the repository's layout."""

    def __init__(self, root: Path, artifacts: list[Artifact]) -> None:
        self.root = root
        self.artifacts = {a.path: a for a in artifacts}

    def path(self, relative: str) -> Path:
        assert relative in self.artifacts, f"{relative} was not rendered"
        return self.root / relative

    def text(self, relative: str) -> str:
        return self.path(relative).read_text()

    def job_data(self, site: str, minor: str) -> dict[str, Any]:
        """The recipe data the engine reads for the install job of (site, minor)."""
        return job_data(self.root, site, minor)


def job_data(root: Path, site: str, minor: str) -> dict[str, Any]:
    """(site, minor)'s entry of the rendered data file under `root`."""
    document = json.loads((root / INSTALL_DATA).read_text())
    return dict(document["jobs"][f"{site}/{minor}"])


def cases(recipes_: Recipes | None = None) -> list[tuple[str, str, str]]:
    """Every (version, site, variant) the matrix and site profiles declare."""
    loaded = recipes_ or load_recipes(RECIPES)
    return [
        (minor, site, variant)
        for minor, version in loaded.matrix.versions.items()
        for site in loaded.sites
        for variant in version.variants
    ]


def locked(recipes_: Recipes) -> tuple[str, str]:
    """(version, variant) of the first committed lock: the tests of a locked recipe use it, whichever it is."""
    for minor, version in recipes_.matrix.versions.items():
        for variant in version.variants:
            if recipes_.lock_path(minor, variant).is_file():
                return minor, variant
    raise AssertionError("no committed lock in recipes/locks/")


def plain_site(recipes_: Recipes) -> str:
    """A site that sets no variables and loads no modules, with a venv and no scheduler (runs under bash)."""
    return next(
        name
        for name, site in recipes_.sites.items()
        if not site.env and not site.modules and site.env_manager == "venv" and site.scheduler == "none"
    )


def run_render(*args: str, repo: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`render.py ARGS` of the repository (or of a temporary copy), in this process: the CLI's main with its
    exit status, stdout and stderr (argparse's exits included)."""
    from lxpu_admin.render import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args), default_recipes=repo / "recipes")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["render.py", *args], code, out.getvalue(), err.getvalue())


def run_render_process(*args: str, repo: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`python recipes/render.py ARGS` as its own process (the entry point itself)."""
    return subprocess.run(
        [sys.executable, str(repo / "recipes" / "render.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def bash(
    script: str, env: dict[str, str] | None = None, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    """Run a bash script (with exactly `env` as its environment when given)."""
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=False, timeout=timeout
    )


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


# Roles the tests use instead of naming a version or a site (derived from the data, so adding, retiring or
# locking a version changes no test): the locked version, another version, and sites by what they have.
_LOADED = load_recipes(RECIPES)
MINOR = locked(_LOADED)[0]
_MINORS = list(_LOADED.matrix.versions)
OTHER = _MINORS[_MINORS.index(MINOR) - 1] if _MINORS.index(MINOR) > 0 else _MINORS[-1]
PLAIN_SITE = plain_site(_LOADED)
MODULE_SITE = next(name for name, site in _LOADED.sites.items() if site.modules)
# A version whose oneAPI the modules of MODULE_SITE share (the oneAPI rule leaves none out; the oneCCL rule leaves
# Dawn's out of every version, but the rendered preview of a site's module list names them all).
MODULE_MINOR = next(
    minor for minor, v in _LOADED.matrix.versions.items()
    if all(v.admits_oneapi(year) for year in _LOADED.sites[MODULE_SITE].oneapi_modules.values())
)
PBS_SITE = next(name for name, site in _LOADED.sites.items() if site.scheduler == "pbs")
