"""Every rendered environment.yml parses offline with conda-lock's own parser
(conda_lock.src_parser.environment_yaml.parse_environment_file) and holds exactly the recipe's requirements:
sources under pip-repositories, no -e lines, no index options."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from recipe_helpers import Rendered, require

from lxpu_admin.render.recipes import Recipes


def _conda_lock_parser():  # type: ignore[no-untyped-def]
    try:
        from conda_lock.src_parser.environment_yaml import parse_environment_file
    except ImportError:
        require(False, "conda-lock (pip install conda-lock==4.0.3)")
    return parse_environment_file


def test_every_environment_yml_parses_with_conda_lock_offline(
    rendered: Rendered, recipes: Recipes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parse = _conda_lock_parser()

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("parsing tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    # conda-lock maps PyPI names to conda names with a lookup file it downloads unless given a local one.
    mapping = tmp_path / "pypi-to-conda.json"
    mapping.write_text(json.dumps({"pip": {"conda_name": "pip", "pypi_name": "pip"}}))
    files = sorted(p for p in rendered.artifacts if p.endswith("environment.yml"))
    assert len(files) == len(recipes.sites) * sum(len(v.variants) for v in recipes.matrix.versions.values())
    for relative in files:
        site, tag = relative.split("/")[1:3]
        minor, _, variant = tag.partition("-")
        version = recipes.matrix.versions[minor]
        variant = variant or "xpu"
        path = rendered.path(relative)
        spec = parse(path, ["linux-64"], mapping_url=str(mapping))
        deps = spec.dependencies["linux-64"]
        pip_deps = {d.name: d.version for d in deps if d.manager == "pip"}
        expected = {  # an unverified pin is left to pip: conda-lock reads it as any version
            name.lower().replace("_", "-"): f"=={pinned}" if pinned else "*"
            for name, _, pinned in (r.partition("==") for r in version.variants[variant].requirements())
        }
        assert pip_deps == expected, relative
        assert {d.name for d in deps if d.manager == "conda"} == {"python", "pip"}
        sources = [u for n, u in _urls(recipes, minor, variant, site) if n != "pypi"]
        assert [repository.url for repository in spec.pip_repositories] == sources, relative
        data = yaml.safe_load(path.read_text())
        pip_lines = next(d["pip"] for d in data["dependencies"] if isinstance(d, dict))
        assert not [line for line in pip_lines if line.startswith("-")], relative


def _urls(recipes: Recipes, minor: str, variant: str, site: str) -> list[tuple[str, str]]:
    overrides = recipes.sites[site].source_urls
    return [
        (s.name, overrides.get(s.name, s.url))
        for s in recipes.matrix.versions[minor].variants[variant].sources
    ]
