"""Recipes pin a Lightning release lightning_xpu supports, never a refused one (lightning_xpu/versions.py)."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from types import ModuleType

from .. import paths
from .tomldata import Table

# Read by path, the one documented by-path load (issue 28): the renderer must not import the runtime package (its
# import installs the Lightning hook).
VERSIONS_PY = paths.REPOSITORY / "lightning_xpu" / "versions.py"


@cache
def lightning_versions() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_lxpu_lightning_versions", VERSIONS_PY)
    assert spec is not None and spec.loader is not None, VERSIONS_PY
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def check_lightning_pin(table: Table, key: str, version: str) -> None:
    """Refuse a `lightning` pin that is excluded (2.6.2/2.6.3: malware) or outside the supported range."""
    versions = lightning_versions()
    refused = versions.excluded_reason(version)
    if refused is not None:
        raise table.error(key, refused)
    if not versions.is_supported(version):
        raise table.error(key, f"lightning {version} is outside the supported range {versions.REQUIREMENT}")


def patches_for(lightning: str) -> dict[str, list[str]]:
    """The runtime patches lightning_xpu applies on Lightning `lightning` (lightning_xpu/versions.py MANIFEST), by
    the lightning_xpu module applying them: {module: ["owner.attribute", ...]}; empty when the manifest does not
    know that Lightning minor."""
    versions = lightning_versions()
    minor = versions.known_minor(lightning)
    if minor is None:
        return {}
    expected = versions.expected_patches(minor)
    by_module: dict[str, list[str]] = {}
    for group in versions.MANIFEST:
        for name in group.names:
            if (group.owner, name) in expected and f"{group.owner}.{name}" not in by_module.get(group.by, []):
                by_module.setdefault(group.by, []).append(f"{group.owner}.{name}")
    return by_module
