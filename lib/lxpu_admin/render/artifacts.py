"""Renders the artifact set of one (PyTorch version, site): install job (data only: it sources the engine from
the repository), smoke job, and per variant the modulefile and setup script (the same for every site), the
requirements and conda environment.yml, plus the site files."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..install.tagfiles import (
    SETUP_HELPER,
    VALIDATION_JOB,
    TagData,
    modulefile_text,
    setup_text,
    validation_job_text,
)
from .envnames import names_set_in
from .errors import RecipeError
from .matrix import MODULEFILE_BODY, SETUP_LIBRARY, Version
from .recipes import INSTALL_DATA, SHIM, Recipes
from .sites import Site
from .templating import make_environment, render

# The install engine's one writer of a tag's modulefile and setup script and the site's validation job: the
# renderer uses it to vet and preview them.
TAGFILES = "lib/lxpu_admin/install/tagfiles.py"


@dataclass(frozen=True)
class Artifact:
    path: str  # relative to the output root, in the repository's layout
    content: str
    executable: bool
    committed: bool  # part of the repository (scripts/, modulefiles/), guarded by `check`
    may_be_empty: bool = False  # a list that can be empty (the site's variables and modules); nothing else


def install_script(minor: str) -> str:
    return f"install_lightning_{minor}.sh"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Renderer:
    def __init__(self, recipes: Recipes) -> None:
        self.recipes = recipes
        self.env = make_environment(recipes.templates_dir)

    def _render(self, template: str, context: dict[str, Any]) -> str:
        return render(self.env, self.recipes.templates_dir, template, context, self.recipes.shown)

    def _check_names(self, template: str, text: str) -> None:
        for name in sorted(set(names_set_in(text))):
            self.recipes.known.check(name, f"{self.recipes.shown(self.recipes.templates_dir)}/{template}")

    def recipe_hash(self, version: Version, site: Site) -> str:
        templates = {
            path.relative_to(self.recipes.templates_dir).as_posix(): _sha256(path.read_bytes())
            for path in sorted(self.recipes.templates_dir.rglob("*"))
            if path.is_file()
        }
        locks = {
            variant: _sha256(self.recipes.lock_path(version.minor, variant).read_bytes())
            for variant in version.variants
            if self.recipes.lock_path(version.minor, variant).is_file()
        }
        inputs = {
            "matrix": self.recipes.matrix.hash_input(version),
            "site": site.raw,
            "templates": templates,
            "locks": locks,
        }
        return _sha256(json.dumps(inputs, sort_keys=True).encode())

    def pip_sources(self, version: Version, variant: str, site: Site) -> list[tuple[str, str]]:
        """(source name, URL) of a variant in order, with the site's URL overrides applied."""
        return [
            (source.name, site.source_urls.get(source.name, source.url))
            for source in version.variants[variant].sources
        ]

    def pip_options(self, version: Version, variant: str, site: Site) -> list[str]:
        urls = [url for _name, url in self.pip_sources(version, variant, site)]
        return [f"--index-url {urls[0]}"] + [f"--extra-index-url {url}" for url in urls[1:]]

    def lock_file(self, version: Version, variant: str) -> str:
        path = self.recipes.lock_path(version.minor, variant)
        if not path.is_file():
            return ""
        text = path.read_text()
        for tool in self.recipes.matrix.tools:
            if not re.search(rf"^{re.escape(tool.requirement(''))} \\$", text, re.MULTILINE):
                raise RecipeError(
                    f"{self.recipes.shown(path)}: has no hashed {tool.requirement('')} (recipes/matrix.toml [tools]): "
                    f"lock again (render.py lock --torch {version.minor} --variant {variant}) or change the pin"
                )
        return self.recipes.shown(path)

    def _variant_context(self, version: Version, variant: str, site: Site) -> dict[str, Any]:
        sources = self.pip_sources(version, variant, site)
        allow_pypi = any(name == "pypi" for name, _ in sources) and "pypi" not in site.source_urls
        return {
            "version": version,
            "variant": version.variants[variant],
            "tag": version.tag(variant),
            "site": site,
            "requirements": version.variants[variant].requirements(),
            "pip_sources": self.pip_options(version, variant, site),
            "pip_repositories": [url for name, url in sources if not (name == "pypi" and allow_pypi)],
            "allow_pypi": allow_pypi,
            "conda_channels": self.recipes.matrix.conda_channels,
        }

    def _check_shared_code(self) -> None:
        """The names the modulefile body and the setup library (both its halves) set (they are written by hand)."""
        for relative in (MODULEFILE_BODY, SETUP_LIBRARY, SETUP_HELPER):
            text = (self.recipes.repo_root / relative).read_text()
            for name in sorted(set(names_set_in(text))):
                self.recipes.known.check(name, relative)

    def tag_data(self, version: Version, variant: str) -> dict[str, Any]:
        """One tag's data for lxpu_admin.install.tagfiles.TagData.from_mapping: the install writes its modulefile and
        setup script from it."""
        return {
            "tag": version.tag(variant),
            "minor": version.minor,
            "torch": version.torch,
            "lightning": version.lightning,
            "python": version.python,
            "variant": variant,
            "backend": version.backend,
            "notes": version.notes,
            "siblings": [version.tag(name) for name in version.variants],
            "install_job": install_script(version.minor),
            "variant_description": version.variants[variant].description,
            "body_contract": int(self.recipes.body_contract()),
            "setup_contract": int(self.recipes.library_contract()),
            "legacy": self.recipes.matrix.legacy_line(version),
        }

    def tag_texts(self, version: Version, variant: str) -> tuple[str, str]:
        """The modulefile and setup script the install writes for this tag (lxpu_admin/install/tagfiles.py, from
        tag_data): rendered here too, so that `check` vets their names and `render --out` shows them."""
        tag = TagData.from_mapping(self.tag_data(version, variant))
        modulefile, setup = modulefile_text(tag), setup_text(tag)
        self._check_names(TAGFILES, modulefile + setup)
        return modulefile, setup

    @staticmethod
    def site_job_data(site: Site) -> dict[str, Any]:
        """The site's validation job data for lxpu_admin.install.tagfiles (write_site_validation_job): the install
        writes <prefix>/validate_lightning.sh from it."""
        return {"site": site.name, "default_prefix": site.default_prefix, **site.validation.job_data()}

    def _job_variant(self, version: Version, variant: str, site: Site) -> dict[str, Any]:
        """One variant's data in the install job: the engine derives no name itself."""
        names = version.names(variant)
        return {
            "name": variant,
            "tag": names.tag,
            "python": version.python,
            "requirements": version.variants[variant].requirements(),
            "pip_sources": [
                word for option in self.pip_options(version, variant, site) for word in option.split()
            ],
            "lock": self.lock_file(version, variant),
        }

    def job_data(self, version: Version, site: Site) -> dict[str, Any]:
        """The recipe's data of one (version, site) job, read by the engine from the rendered data file
        (INSTALL_DATA): what the install job held as bash variables, plus per variant what its modulefile and
        setup script say (lxpu_admin/install/tagfiles.py TagData)."""
        site_modules, modules_left_out = site.modules_for(version)
        site_env = self._render("site-env.sh.j2", {"site": site})
        legacy = self.recipes.matrix.legacy_line(version)
        variants = {}
        for name in version.variants:
            # what the engine installs, and what the tag's modulefile and setup script say (tagfiles.TagData)
            entry = {**self._job_variant(version, name, site), **self.tag_data(version, name)}
            variants[name] = entry
        return {
            "script": install_script(version.minor),
            "version": version.minor,
            "lightning": version.lightning,
            "legacy": legacy,
            "recipe_hash": self.recipe_hash(version, site),
            "conda_channels": list(self.recipes.matrix.conda_channels),
            "site": site.name,
            "scheduler": site.scheduler,
            "default_variant": site.default_variant,
            "default_prefix": site.default_prefix,
            "env_manager": site.env_manager,
            "modules": list(site_modules),
            "modules_left_out": list(modules_left_out),
            "python_module": site.python_module,
            "build_tools": [tool.requirement("") for tool in self.recipes.matrix.tools],
            "site_env": site_env.splitlines(),
            "variants": variants,
            "validation": self.site_job_data(site),
        }

    def pair(self, version: Version, site: Site, variants: list[str] | None = None) -> list[Artifact]:
        """Every artifact of (version, site); per-variant files only for `variants` (all when None)."""
        chosen = variants if variants is not None else list(version.variants)
        per_variant = {name: self._variant_context(version, name, site) for name in version.variants}
        ymls = {n: self._render("environment.yml.j2", c) for n, c in per_variant.items()}
        self._check_shared_code()
        requirement_files = {n: self._render("requirements.txt.j2", c) for n, c in per_variant.items()}
        site_env = self._render("site-env.sh.j2", {"site": site})
        self._check_names("site-env.sh.j2", site_env)
        install = self._render(
            "install_lightning.sh.j2",
            {
                "version": version,
                "site": site,
                "script": install_script(version.minor),
                "contract": self.recipes.engine_contract(),
                "shim": SHIM,
                "data_file": INSTALL_DATA,
            },
        )
        scripts = f"scripts/{site.name}"
        envs = f"envs/{site.name}"
        # a preview of the site's validation job, as the install writes it into the site's default prefix
        validation = validation_job_text(Path(site.default_prefix), self.site_job_data(site))
        artifacts = [
            Artifact(f"{scripts}/{install_script(version.minor)}", install, True, True),
            Artifact(f"{envs}/{VALIDATION_JOB}", validation, True, False),
            Artifact(f"{envs}/lightning-xpu-site.sh", site_env, False, False, may_be_empty=True),
            Artifact(
                f"{envs}/lightning-xpu-site-modules.txt",
                "".join(m + "\n" for m in site.modules),
                False,
                False,
                may_be_empty=True,
            ),
        ]
        for name in chosen:
            tag, names = version.tag(name), version.names(name)
            modulefile, setup = self.tag_texts(version, name)
            artifacts += [  # the modulefile and setup script: a preview, not committed (the install writes them)
                Artifact(f"{envs}/{names.modulefile}", modulefile, False, False),
                Artifact(f"{envs}/{tag}/requirements.txt", requirement_files[name], False, False),
                Artifact(f"{envs}/{tag}/environment.yml", ymls[name], False, False),
                Artifact(f"{envs}/{tag}/{names.setup}", setup, False, False),
            ]
        return artifacts
