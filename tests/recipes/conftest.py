"""Fixtures for the recipe tests: the loaded recipes, one render of everything, and temporary repository
copies for tests that edit recipes. Helpers live in recipe_helpers.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from recipe_helpers import (
    ADMIN_LIB,
    MODULEFILE_BODY,
    RECIPES,
    REPO,
    SETUP_LIBRARY,
    SHIM,
    Recipes,
    Rendered,
    Renderer,
    load_recipes,
    render_selection,
    write_artifacts,
)


@pytest.fixture(scope="session")
def recipes() -> Recipes:
    return load_recipes(RECIPES)


@pytest.fixture(scope="session")
def rendered(recipes: Recipes, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    root = tmp_path_factory.mktemp("rendered")
    artifacts = render_selection(
        Renderer(recipes), list(recipes.matrix.versions.values()), list(recipes.sites.values()), None
    )
    write_artifacts(artifacts, root)
    return Rendered(root, artifacts)


_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


@pytest.fixture
def temp_recipes(tmp_path: Path) -> Iterator[Path]:
    """A repository root holding a copy of recipes/, the admin package under lib/ (the install engine, whose
    contract the jobs carry) and the modulefile body and setup library (whose contracts the modulefiles and setup
    scripts carry), safe to edit."""
    root = tmp_path / "repo"
    shutil.copytree(RECIPES, root / "recipes", ignore=_IGNORE)
    shutil.copytree(REPO / ADMIN_LIB, root / ADMIN_LIB, ignore=_IGNORE)
    shutil.copytree(REPO / Path(SHIM).parent, root / Path(SHIM).parent, ignore=_IGNORE)
    for shared in (MODULEFILE_BODY, SETUP_LIBRARY):
        (root / shared).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / shared, root / shared)
    yield root


@pytest.fixture
def temp_repo(temp_recipes: Path) -> Iterator[Path]:
    """A copy of the repository's recipe inputs and committed renders, safe to edit."""
    for name in ("scripts", "modulefiles"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, temp_recipes / name, ignore=_IGNORE, dirs_exist_ok=True)
    yield temp_recipes
