"""The recipe's data of one install job (site x PyTorch version), read from the rendered data file.

`python recipes/render.py render --all` writes recipes/rendered/install-data.json (every site x version; `check`
guards its drift); the thin install job names its site, version and the contract it was rendered for, and the
engine reads the rest from here, once. CONTRACT is the version of that data's shape: bump it with any change to
the names or their meaning, then render again (the renderer reads it from this file).
"""

from __future__ import annotations

import difflib
import json
import shlex
from pathlib import Path
from typing import Any

CONTRACT = 5
DATA_FILE = "recipes/rendered/install-data.json"
RENDER_AGAIN = "python recipes/render.py render --all"


class JobDataError(Exception):
    """Bad input: one line naming the fix."""


def load(source: Path, site: str, version: str) -> dict[str, Any]:
    """The data of (site, version) from the repository `source`."""
    path = source / DATA_FILE
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise JobDataError(f"{path}: cannot read the rendered recipe data ({exc}): {RENDER_AGAIN}") from None
    if document.get("contract") != CONTRACT:
        raise JobDataError(
            f"{path} was rendered for engine contract {document.get('contract')}, the engine has {CONTRACT}: "
            f"{RENDER_AGAIN}"
        )
    jobs: dict[str, dict[str, Any]] = document.get("jobs", {})
    key = f"{site}/{version}"
    if key not in jobs:
        sites = sorted({known.split("/")[0] for known in jobs})
        versions = sorted(
            {known.split("/")[1] for known in jobs if known.startswith(f"{site}/")},
            key=lambda minor: tuple(int(part) for part in minor.split(".")),
        )
        if site not in sites:
            raise JobDataError(f"no site '{site}'{_close(site, sites)} (sites: {', '.join(sites)}): check --site")
        raise JobDataError(
            f"site {site} has no PyTorch {version}{_close(version, versions)} (versions: {', '.join(versions)}): "
            "check --version"
        )
    return jobs[key]


def _close(word: str, known: list[str]) -> str:
    """", did you mean 'x'" for a near miss (a typo), else nothing."""
    match = difflib.get_close_matches(word, known, n=1)
    return f": did you mean '{match[0]}'?" if match else ""


def _array(values: list[str]) -> str:
    return "(" + " ".join(shlex.quote(value) for value in values) + ")"


def shell_assignments(data: dict[str, Any]) -> str:
    """The data as the LXPU_* shell variables the bash half of the engine (engine.sh) reads."""
    scalars = {
        "LXPU_VERSION": data["version"],
        "LXPU_LIGHTNING_VERSION": data["lightning"],
        "LXPU_RECIPE_HASH": data["recipe_hash"],
        "LXPU_VARIANTS": " ".join(data["variants"]),
        "LXPU_CONDA_CHANNELS": " ".join(data["conda_channels"]),
        "LXPU_SITE": data["site"],
        "LXPU_SITE_SCHEDULER": data["scheduler"],
        "LXPU_SITE_VARIANT": data["default_variant"],
        "LXPU_DEFAULT_PREFIX": data["default_prefix"],
        "LXPU_SITE_ENV_MANAGER": data["env_manager"],
        "LXPU_SITE_MODULES": " ".join(data["modules"]),
        "LXPU_SITE_MODULES_LEFT_OUT": "; ".join(data["modules_left_out"]),
        "LXPU_SITE_PYTHON_MODULE": data["python_module"],
        "LXPU_MODULE_BODY": data["module_body"],
        "LXPU_SETUP_LIB": data["setup_library"],
        "LXPU_SETUP_LIB_NAME": data["setup_library_name"],
    }
    if data.get("legacy"):
        scalars["LXPU_LEGACY"] = data["legacy"]
    lines = [f"{name}={shlex.quote(str(value))}" for name, value in scalars.items()]
    lines.append(f"LXPU_BUILD_TOOLS={_array(data['build_tools'])}")
    lines.append(f"LXPU_SITE_ENV={_array(data['site_env'])}")
    # the site's validation job data, from which tagfiles.py writes <prefix>/validate_lightning.sh
    lines.append(f"LXPU_SITE_JOB_DATA={shlex.quote(json.dumps(data['validation'], sort_keys=True))}")
    for name, variant in data["variants"].items():
        lines += [
            f"LXPU_TAG_{name}={shlex.quote(variant['tag'])}",
            f"LXPU_PYTHON_{name}={shlex.quote(variant['python'])}",
            f"LXPU_REQUIREMENTS_{name}={_array(variant['requirements'])}",
            f"LXPU_PIP_SOURCES_{name}={_array(variant['pip_sources'])}",
            f"LXPU_LOCK_{name}={shlex.quote(variant['lock'])}",
            f"LXPU_SETUP_{name}={shlex.quote(variant['setup'])}",
            f"LXPU_MODULE_{name}={shlex.quote(variant['module'])}",
            # the variant's whole mapping, from which tagfiles.py writes the tag's modulefile and setup script
            f"LXPU_TAG_DATA_{name}={shlex.quote(json.dumps(variant, sort_keys=True))}",
        ]
    return "\n".join(lines) + "\n"
