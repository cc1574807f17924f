"""Everything the renderer reads, loaded and validated at once: matrix, site profiles, known names, paths."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .envnames import KnownNames, load_known_names
from .errors import RecipeError
from .matrix import MODULEFILE_BODY, SETUP_LIBRARY, VARIANT_NAMES, Matrix, Version, load_matrix
from .sites import Site, load_sites

# The install engine every job calls through the shim, the module that states the data contract between the jobs,
# the rendered data file and the engine, and that data file (every site x version, written by `render`).
ENGINE = "lib/lxpu_admin/install/driver.py"
SHIM = "bin/lightning-xpu-admin"
ENGINE_DATA = "lib/lxpu_admin/install/jobdata.py"
INSTALL_DATA = "recipes/rendered/install-data.json"
_CONTRACT = re.compile(r"^CONTRACT = ([0-9]+)$", re.MULTILINE)
# The shared code behind the thin modulefiles and setup scripts, and the lines that state their contracts.
_BODY_CONTRACT = re.compile(r"^local CONTRACT = ([0-9]+)$", re.MULTILINE)
_LIBRARY_CONTRACT = re.compile(r"^  local contract=([0-9]+)$", re.MULTILINE)


@dataclass(frozen=True)
class Recipes:
    recipes_dir: Path
    repo_root: Path
    matrix: Matrix
    sites: dict[str, Site]
    known: KnownNames

    @property
    def templates_dir(self) -> Path:
        return self.recipes_dir / "templates"

    @property
    def locks_dir(self) -> Path:
        return self.recipes_dir / "locks"

    def shown(self, path: Path) -> str:
        """A path as the repository sees it (recipes/matrix.toml), for messages and generated headers."""
        try:
            return path.resolve().relative_to(self.repo_root.resolve()).as_posix()
        except ValueError:
            return str(path)

    def _contract(self, relative: str, pattern: re.Pattern[str], what: str, line: str) -> str:
        try:
            found = pattern.findall((self.repo_root / relative).read_text())
        except OSError:
            raise RecipeError(f"{relative}: missing ({what})") from None
        if len(found) != 1:
            raise RecipeError(f"{relative}: needs exactly one line {line}")
        return str(found[0])

    def engine_contract(self) -> str:
        """The contract version the engine states; rendered into every job, which refuses another engine."""
        return self._contract(
            ENGINE_DATA, _CONTRACT, "the install engine's data contract", "CONTRACT = <number>"
        )

    def body_contract(self) -> str:
        """The modulefile body's contract; rendered into every modulefile, which refuses another body."""
        return self._contract(
            MODULEFILE_BODY, _BODY_CONTRACT, "the code every modulefile runs", "local CONTRACT = <number>"
        )

    def library_contract(self) -> str:
        """The setup library's contract; rendered into every setup script, which refuses another library."""
        return self._contract(
            SETUP_LIBRARY, _LIBRARY_CONTRACT, "the code every setup script sources", "  local contract=<number>"
        )

    def lock_path(self, minor: str, variant: str) -> Path:
        return self.locks_dir / f"{minor}-{variant}.txt"

    def site(self, name: str) -> Site:
        if name not in self.sites:
            raise RecipeError(f"unknown site '{name}' (known: {', '.join(self.sites)})")
        return self.sites[name]

    def select_versions(self, minors: list[str] | None) -> list[Version]:
        if not minors:
            return list(self.matrix.versions.values())
        return [self.matrix.version(minor) for minor in minors]

    def select_sites(self, names: list[str] | None) -> list[Site]:
        if not names:
            return list(self.sites.values())
        return [self.site(name) for name in names]

    def select_variants(self, version: Version, names: list[str] | None, strict: bool) -> list[str]:
        """The variants of `version` among `names` (all when None). Strict: each name must exist there."""
        if not names:
            return list(version.variants)
        for name in names:
            if name not in VARIANT_NAMES:
                raise RecipeError(f"unknown variant '{name}' (known: {', '.join(VARIANT_NAMES)})")
            if strict and name not in version.variants:
                raise RecipeError(
                    f"PyTorch {version.minor} has no variant '{name}' (it has: {', '.join(version.variants)})"
                )
        return [name for name in version.variants if name in names]


def load_recipes(recipes_dir: Path, repo_root: Path | None = None) -> Recipes:
    recipes_dir = recipes_dir.resolve()
    root = (repo_root or recipes_dir.parent).resolve()

    def shown(path: Path) -> str:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            return str(path)

    matrix = load_matrix(recipes_dir / "matrix.toml", shown(recipes_dir / "matrix.toml"))
    known = load_known_names(recipes_dir / "known_env.toml", shown(recipes_dir / "known_env.toml"))
    sites = load_sites(recipes_dir / "sites", shown(recipes_dir / "sites"), known, set(matrix.sources))
    return Recipes(recipes_dir, root, matrix, sites, known)
