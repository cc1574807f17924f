"""The two namespaces Lightning ships under, and which of them are importable or imported.

`lightning` bundles `lightning.pytorch` + `lightning.fabric`; the standalone packages are `pytorch_lightning` +
`lightning_fabric`. Their classes are distinct objects, so every patch is applied once per namespace.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from types import ModuleType

# The top-level packages whose import triggers patching: defined where the start-up hook (`_autoload`) reads it.
from lightning_xpu._startup import WATCHED_TOP_LEVEL as WATCHED_TOP_LEVEL


@dataclass(frozen=True)
class Namespace:
    """One Lightning namespace: the Trainer package (None for Fabric-only) and its Fabric package."""

    pytorch: str | None
    fabric: str

    def fabric_module(self, relative: str) -> ModuleType:
        return importlib.import_module(f"{self.fabric}.{relative}" if relative else self.fabric)

    def pytorch_module(self, relative: str) -> ModuleType:
        if self.pytorch is None:
            raise ValueError(f"{self.fabric} has no Trainer package")
        return importlib.import_module(f"{self.pytorch}.{relative}" if relative else self.pytorch)


LIGHTNING = Namespace(pytorch="lightning.pytorch", fabric="lightning.fabric")
STANDALONE = Namespace(pytorch="pytorch_lightning", fabric="lightning_fabric")
STANDALONE_FABRIC = Namespace(pytorch=None, fabric="lightning_fabric")

def namespaces_for(top_level: str) -> tuple[Namespace, ...]:
    """The namespaces that are complete once `top_level` has been imported."""
    if top_level == "lightning":
        return (LIGHTNING,)
    if top_level == "pytorch_lightning":
        return (STANDALONE,)
    if top_level == "lightning_fabric":
        return (STANDALONE_FABRIC,)
    raise ValueError(f"not a Lightning top-level package: {top_level!r}")


def imported_namespaces() -> tuple[Namespace, ...]:
    """Namespaces whose top-level package is already fully imported in this process."""
    found: list[Namespace] = []
    for top in WATCHED_TOP_LEVEL:
        module = sys.modules.get(top)
        spec = getattr(module, "__spec__", None)
        if module is not None and not getattr(spec, "_initializing", False):
            found.extend(namespaces_for(top))
    return tuple(found)


def optional_module(package: str, relative: str) -> ModuleType | None:
    """`package.relative`, or None where this Lightning has no such module (e.g. model_parallel before 2.3; the
    Lightning-version probes are listed in lightning_xpu/versions.py FEATURES)."""
    name = f"{package}.{relative}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name == name:
            return None
        raise


def default_namespace() -> Namespace:
    """The namespace `lightning_xpu.XPUAccelerator` refers to: `lightning` if installed, else the standalone one."""
    return LIGHTNING if importlib.util.find_spec("lightning") is not None else STANDALONE
