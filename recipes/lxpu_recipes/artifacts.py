"""Renders the artifact set of one (PyTorch version, site): install job (data only: it sources the engine from
the repository), smoke job, and per variant the modulefile and setup script (the same for every site), the
requirements and conda environment.yml, plus the site files."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .envnames import names_set_in
from .matrix import Version
from .recipes import ENGINE, Recipes
from .sites import Site
from .templating import make_environment, render


@dataclass(frozen=True)
class Artifact:
    path: str  # relative to the output root, in the repository's layout
    content: str
    executable: bool
    committed: bool  # part of the repository (scripts/, modulefiles/), guarded by `check`


def install_script(minor: str) -> str:
    return f"install_lightning_{minor}.sh"


def smoke_script(minor: str) -> str:
    return f"smoke_lightning_{minor}.sh"


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
        return self.recipes.shown(path) if path.is_file() else ""

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

    def modulefile(self, version: Version, variant: str) -> Artifact:
        context = {"version": version, "variant": version.variants[variant], "tag": version.tag(variant)}
        text = self._render("modulefile.lua.j2", context)
        self._check_names("modulefile.lua.j2", text)
        return Artifact(version.names(variant).modulefile, text, False, True)

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
            "setup": names.setup_path,
            "module": names.module,
        }

    def pair(self, version: Version, site: Site, variants: list[str] | None = None) -> list[Artifact]:
        """Every artifact of (version, site); per-variant files only for `variants` (all when None)."""
        chosen = variants if variants is not None else list(version.variants)
        per_variant = {name: self._variant_context(version, name, site) for name in version.variants}
        ymls = {n: self._render("environment.yml.j2", c) for n, c in per_variant.items()}
        setups = {c["tag"]: self._render("lightning-setup.sh.j2", c) for c in per_variant.values()}
        requirement_files = {n: self._render("requirements.txt.j2", c) for n, c in per_variant.items()}
        site_env = self._render("site-env.sh.j2", {"site": site})
        self._check_names("site-env.sh.j2", site_env)
        for text in setups.values():
            self._check_names("lightning-setup.sh.j2", text)
        shared = {"version": version, "site": site, "recipe_hash": self.recipe_hash(version, site)}
        install = self._render(
            "install_lightning.sh.j2",
            {
                **shared,
                "script": install_script(version.minor),
                "engine": ENGINE,
                "contract": self.recipes.engine_contract(),
                "conda_channels": self.recipes.matrix.conda_channels,
                "variants": [self._job_variant(version, n, site) for n in version.variants],
                "site_env": site_env.splitlines(),
            },
        )
        smoke = self._render("smoke_lightning.sh.j2", {**shared, "script": smoke_script(version.minor)})
        scripts = f"scripts/{site.name}"
        envs = f"envs/{site.name}"
        artifacts = [
            Artifact(f"{scripts}/{install_script(version.minor)}", install, True, True),
            Artifact(f"{scripts}/{smoke_script(version.minor)}", smoke, True, True),
            Artifact(f"{envs}/lightning-xpu-site.sh", site_env, False, False),
            Artifact(
                f"{envs}/lightning-xpu-site-modules.txt",
                "".join(m + "\n" for m in site.modules),
                False,
                False,
            ),
        ]
        for name in chosen:
            tag = version.tag(name)
            artifacts += [
                self.modulefile(version, name),
                Artifact(version.names(name).setup_path, setups[tag], False, True),
                Artifact(f"{envs}/{tag}/requirements.txt", requirement_files[name], False, False),
                Artifact(f"{envs}/{tag}/environment.yml", ymls[name], False, False),
                Artifact(f"{envs}/{tag}/lightning-setup-{tag}.sh", setups[tag], False, False),
            ]
        return artifacts
