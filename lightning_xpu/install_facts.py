"""What the runtime reads about the install it runs in: the tag, the variant, torch's build and the versions of the
distributions around it, from the environment, the install's manifest.json and package metadata.

A module of the runtime (the device banner and the XPU diagnosis read it): it imports no tool of `commands/` or
`validation/`, and neither torch nor Lightning at import time.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

# Distributions whose versions a report names (None when not installed). Lightning comes in two namespaces. A tuple:
# the same package under the names it had, the first installed one counts. Triton for XPU is `triton-xpu` from
# PyTorch 2.10/2.11 on (intel/torch-xpu-ops#2814; `.github/workflows/_linux_build.yml`@release/2.11..release/2.14
# install `triton-xpu==`), `pytorch-triton-xpu` before.
DISTRIBUTIONS: dict[str, str | tuple[str, ...]] = {
    "lightning": "lightning",
    "pytorch_lightning": "pytorch-lightning",
    "lightning_fabric": "lightning-fabric",
    "lightning_utilities": "lightning-utilities",
    "intel_extension_for_pytorch": "intel-extension-for-pytorch",
    "oneccl_bindings_for_pytorch": "oneccl-bind-pt",
    "triton_xpu": ("triton-xpu", "pytorch-triton-xpu"),
    "numpy": "numpy",
}


def distribution_version(names: str | tuple[str, ...]) -> str | None:
    """The version of the first of `names` installed, None when none is."""
    for name in (names,) if isinstance(names, str) else names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def install_manifest() -> dict[str, Any]:
    """The install job's manifest.json of the environment this Python runs in ({} outside our installs)."""
    for root in (os.environ.get("LIGHTNING_XPU_ROOT"), sys.prefix):
        if root:
            try:
                return dict(json.loads((Path(root) / "manifest.json").read_text()))
            except (OSError, ValueError):
                continue
    return {}


# A pinned build is <prefix>/.envs/<tag>.<build-id>, the build id being <YYYYmmddTHHMMSS>-<pid> (install engine).
_BUILD_ID = re.compile(r"\.\d{8}T\d{6}-\d+$")


def environment_tag() -> str | None:
    """The tag (`2.13`, `2.13-cpu`) of the lightning-xpu environment this process runs in, None outside one: the
    install manifest's, else the name of `LIGHTNING_XPU_ROOT` (`<prefix>/<tag>`, or the build the module pinned)."""
    tag = install_manifest().get("tag")
    if tag:
        return str(tag)
    root = os.environ.get("LIGHTNING_XPU_ROOT", "").rstrip("/")
    return (_BUILD_ID.sub("", Path(root).name) or None) if root else None


def variant_of(tag: str) -> str:
    """`<ver>` is the xpu variant, `<ver>-<variant>` any other (lib/lxpu_admin/render/matrix.py `tag_of`)."""
    return tag.partition("-")[2] or "xpu"


def environment_variant() -> tuple[str | None, str]:
    """(variant, where it came from): `LIGHTNING_XPU_VARIANT`, else the install manifest, else the tag of
    `LIGHTNING_XPU_ROOT` (`<prefix>/2.13-cpu` -> cpu, `<prefix>/2.13` -> xpu), else (None, "not in an install")."""
    variant = os.environ.get("LIGHTNING_XPU_VARIANT")
    if variant:
        return variant, "LIGHTNING_XPU_VARIANT"
    recipe = install_manifest().get("recipe") or {}
    if recipe.get("variant"):
        return str(recipe["variant"]), "the install manifest"
    tag = environment_tag()
    if tag:
        return variant_of(tag), f"LIGHTNING_XPU_ROOT ({tag})"
    return None, "not in a lightning-xpu install (no module or setup script loaded)"


def is_xpu_build() -> bool:
    """Whether the installed torch was compiled with XPU (imports torch, counts nothing). `torch.version.xpu` says
    so from 2.6 on; 2.5.1 has no such attribute (added by pytorch/pytorch#139466), so there the compiled-in flag
    answers (`torch.xpu._is_compiled()`, torch/xpu/__init__.py@v2.5.1)."""
    import torch

    if hasattr(torch.version, "xpu"):
        return bool(torch.version.xpu)
    is_compiled = getattr(torch.xpu, "_is_compiled", None)
    return bool(is_compiled is not None and is_compiled())
