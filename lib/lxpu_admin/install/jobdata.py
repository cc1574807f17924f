"""The recipe's data of one install job (site x PyTorch version), read from the rendered data file.

`python recipes/render.py render --all` writes recipes/rendered/install-data.json (every site x version; `check`
guards its drift); the thin install job names its site, version and the contract it was rendered for, and the
engine reads the rest from here, once. CONTRACT is the version of that data's shape: bump it with any change to
the names or their meaning, then render again (the renderer reads it from this file).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

CONTRACT = 6
# The names of a job's data and of each of its variants: the contract's shape (legacy: empty unless legacy).
JOB_KEYS = frozenset({
    "script", "version", "lightning", "legacy", "recipe_hash", "conda_channels", "site", "scheduler", "default_variant",
    "default_prefix", "env_manager", "modules", "modules_left_out", "python_module", "build_tools", "site_env",
    "variants", "validation",
})  # fmt: skip
VARIANT_KEYS = frozenset({"name", "tag", "python", "requirements", "pip_sources", "lock"})
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
    job = jobs[key]
    missing = sorted(JOB_KEYS - set(job)) + sorted(
        {f"{name}.{k}" for name, variant in job["variants"].items() for k in VARIANT_KEYS - set(variant)}
    )
    if missing:
        raise JobDataError(f"{path}: {key} lacks {', '.join(missing)}: {RENDER_AGAIN}")
    return job


def _close(word: str, known: list[str]) -> str:
    """", did you mean 'x'" for a near miss (a typo), else nothing."""
    match = difflib.get_close_matches(word, known, n=1)
    return f": did you mean '{match[0]}'?" if match else ""
