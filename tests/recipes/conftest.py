"""Fixtures for the recipe tests: the repository paths, one render of everything, temporary repository
copies for tests that edit recipes, and the CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
sys.path.insert(0, str(RECIPES))

from lxpu_recipes.artifacts import Artifact, Renderer  # noqa: E402
from lxpu_recipes.outputs import render_selection, write_artifacts  # noqa: E402
from lxpu_recipes.recipes import Recipes, load_recipes  # noqa: E402


def require(available: bool, what: str) -> None:
    """Skip when `what` is missing, or fail when CI demands every service (LXPU_REQUIRE_SERVICES=1)."""
    if available:
        return
    if os.environ.get("LXPU_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{what} is required (LXPU_REQUIRE_SERVICES=1) but missing")
    pytest.skip(f"{what} is missing")


@pytest.fixture(scope="session")
def recipes() -> Recipes:
    return load_recipes(RECIPES)


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


@pytest.fixture(scope="session")
def rendered(recipes: Recipes, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    root = tmp_path_factory.mktemp("rendered")
    artifacts = render_selection(
        Renderer(recipes), list(recipes.matrix.versions.values()), list(recipes.sites.values()), None
    )
    write_artifacts(artifacts, root)
    return Rendered(root, artifacts)


def cases(recipes_: Recipes | None = None) -> list[tuple[str, str, str]]:
    """Every (version, site, variant) the matrix and site profiles declare."""
    loaded = recipes_ or load_recipes(RECIPES)
    return [
        (minor, site, variant)
        for minor, version in loaded.matrix.versions.items()
        for site in loaded.sites
        for variant in version.variants
    ]


_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


@pytest.fixture
def temp_recipes(tmp_path: Path) -> Iterator[Path]:
    """A repository root holding a copy of recipes/ only, safe to edit."""
    root = tmp_path / "repo"
    shutil.copytree(RECIPES, root / "recipes", ignore=_IGNORE)
    yield root


@pytest.fixture
def temp_repo(temp_recipes: Path) -> Iterator[Path]:
    """A copy of the repository's recipe inputs and committed renders, safe to edit."""
    for name in ("scripts", "modulefiles"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, temp_recipes / name, ignore=_IGNORE)
    yield temp_recipes


def run_render(
    *args: str, repo: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python recipes/render.py ARGS` of the repository (or of a temporary copy)."""
    return subprocess.run(
        [sys.executable, str(repo / "recipes" / "render.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
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
