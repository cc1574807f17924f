"""Whether the installed packages are still the environment's pins (issue 27): the check behind `lightning-xpu
doctor`'s `pins`, the site validation job's `pins` and the smoke job's `pinned_packages`.

The guard (pipguard.py) refuses what it sees, and <venv>/pip.conf binds `python -m pip`; a route around both
(PIP_CONFIG_FILE=/dev/null with another PIP_CONSTRAINT, a uv run by its path without UV_CONSTRAINT, a copy by
hand) is caught here, at the next start. Listed:
- each pinned distribution (<env>/share/lightning-xpu/constraints.txt, lxpu_admin/envside/pins.py) installed at another
  version, where this interpreter imports it from (first on sys.path: the user layer before the environment) and
  in the user layer in use (VIRTUAL_ENV, which the module and setup script set) when this interpreter is the
  environment's own (`lightning-xpu` runs there);
- a distribution built against one torch release (`Requires-Dist: torch==X`) without the pinned torch's build
  label, where torch has one: PyPI's torchvision next to a `+cpu` torch ("operator torchvision::nms does not
  exist").
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.version import InvalidVersion, Version

from lightning_xpu.commands import pipguard

# A Requires-Dist on one exact torch release, outside an extra.
_EXACT_TORCH = re.compile(r"^torch\s*\(?\s*==\s*([^\s,;)]+)\s*\)?\s*(?:;(?!.*\bextra\b).*)?$")


class PinsMissing(Exception):
    """No pins apply to this interpreter: the message says why."""


def environment_root() -> Path:
    """The environment whose pins apply to this interpreter: its own, a user layer's environment, else the loaded
    one (LIGHTNING_XPU_ROOT)."""
    root, _ = pipguard.environment_of(Path(sys.prefix) / "bin")
    if (root / pipguard.CONSTRAINTS).is_file() or not os.environ.get("LIGHTNING_XPU_ROOT"):
        return root
    return Path(os.environ["LIGHTNING_XPU_ROOT"])


def layer_sites(root: Path) -> list[Path]:
    """The site-packages of the user layer in use (VIRTUAL_ENV naming a layer: userenv.py) where this interpreter
    is not that layer's; a venv of the user's own is not checked against the pins."""
    layer = os.environ.get("VIRTUAL_ENV")
    if not layer or not (Path(layer) / "lightning-xpu-environment").is_file():
        return []
    if os.path.realpath(layer) in (os.path.realpath(sys.prefix), os.path.realpath(root)):
        return []
    return sorted(Path(layer).glob("lib/python*/site-packages"))


def _first_of_each(dists: Iterable[importlib.metadata.Distribution]) -> list[importlib.metadata.Distribution]:
    """The distribution that imports, per name (the first on the path)."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    for dist in dists:
        name = dist.metadata["Name"]
        if name:
            seen.setdefault(pipguard.norm(name), dist)
    return list(seen.values())


def _same(installed: str, pin: str) -> bool:
    try:
        return Version(installed) == Version(pin)
    except InvalidVersion:
        return installed == pin


def _where(dist: importlib.metadata.Distribution) -> str:
    return str(dist.locate_file(""))


def _exact_torch(dist: importlib.metadata.Distribution) -> str | None:
    """X of a `Requires-Dist: torch==X` (not an extra's)."""
    for line in dist.requires or ():
        match = _EXACT_TORCH.match(line.strip())
        if match:
            return match.group(1)
    return None


def differences(root: Path) -> list[str]:
    """One entry per installed distribution that differs from the pins of the environment at `root`."""
    constraints = root / pipguard.CONSTRAINTS
    pins = pipguard.pins(constraints)
    if not pins:
        raise PinsMissing(f"no pins at {constraints} (not a lightning-xpu environment, or one installed before its"
                          " pins were written)")
    label = pipguard.torch_label(pins)
    dists = _first_of_each(importlib.metadata.distributions())
    for site in layer_sites(root):
        dists += _first_of_each(importlib.metadata.distributions(path=[str(site)]))
    found = []
    for dist in dists:
        name, version = pipguard.norm(dist.metadata["Name"]), dist.version
        if name in pins and not _same(version, pins[name]):
            found.append(f"{name} {version} in {_where(dist)} (pinned {pins[name]})")
        elif label and name not in pins and f"+{label}" not in version:
            torch = _exact_torch(dist)
            if torch and "+" not in torch:
                found.append(f"{name} {version} in {_where(dist)} (built for torch=={torch} from PyPI, CUDA's build;"
                             f" this torch is {pins['torch']})")
    return sorted(set(found))


def verdict(root: Path) -> tuple[bool, str]:
    """(whether the pins hold, one line saying so or naming each difference and the fix)."""
    found = differences(root)
    constraints = root / pipguard.CONSTRAINTS
    if not found:
        return True, f"{len(pipguard.pins(constraints))} pins hold ({constraints})"
    names = " ".join(sorted({entry.split()[0] for entry in found}))
    return False, (f"installed versions differ from the pins of {constraints}: {'; '.join(found)}; fix: "
                   f"pip uninstall {names} where it is not the environment's (your layer, ~/.local), or run the "
                   "environment's install job again with --force where it is")


def check_text() -> str:
    """The validation checks' body: the pass line, CheckFailed or CheckSkipped (validation/framework.py)."""
    from lightning_xpu.validation.framework import CheckFailed, CheckSkipped

    try:
        ok, line = verdict(environment_root())
    except PinsMissing as exc:
        raise CheckSkipped(str(exc)) from None
    if not ok:
        raise CheckFailed(line)
    return line
