"""What binds a hashed pip lock (recipes/locks/<ver>-<variant>.txt) to the recipe it was resolved from.

Standard library only (the install engine runs on Python 3.9 or newer): the one home of the rule, which the
renderer (`check`, `render`, `lock`) and the install (`check_file`, before anything is installed) both import. A lock
binds when:
- its `# inputs-sha256:` header is the hash of `python==X.Y` and the requirements, in order (`inputs_hash`);
- every `name==version` requirement is the version the lock holds (`torch==2.13.0+cpu` is `torch==2.13.0+cpu`);
- `lightning`, `pytorch-lightning` and `lightning-fabric`, where the lock holds them, are one version (one
  Lightning release ships all three; `lightning` requires `pytorch-lightning` unpinned, so a resolver can mix
  them, and each namespace would then run another Lightning).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

HASH_LINE = re.compile(r"^# inputs-sha256: ([0-9a-f]{64})$", re.MULTILINE)
RECIPE_LINE = "# recipe: "
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)
# The packages of one Lightning release (each also a namespace users import).
LIGHTNING_PACKAGES = ("lightning", "pytorch-lightning", "lightning-fabric")


def canonical(name: str) -> str:
    """PEP 503 name normalisation (packaging.utils.canonicalize_name, without packaging)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def inputs_hash(python: str, requirements: list[str]) -> str:
    """What a lock was resolved from: the recipe's Python version and its requirements, in order."""
    text = "\n".join([f"python=={python}", *requirements])
    return hashlib.sha256(text.encode()).hexdigest()


def header_lines(python: str, requirements: list[str]) -> list[str]:
    """The lines a lock records its recipe with: the pins in words, and their hash (the binding one)."""
    return [
        f"{RECIPE_LINE}python=={python} {' '.join(requirements)}",
        f"# inputs-sha256: {inputs_hash(python, requirements)}",
    ]


def entries(text: str) -> dict[str, str]:
    """{canonical name: version} of a lock's pinned entries."""
    return {canonical(name): version for name, version in _ENTRY.findall(text)}


def lightning_mismatch(held: dict[str, str]) -> str:
    """One phrase when a lock holds Lightning's packages at different versions, else ""."""
    versions = {name: held[name] for name in LIGHTNING_PACKAGES if name in held}
    if len(set(versions.values())) <= 1:
        return ""
    listed = ", ".join(f"{name} {version}" for name, version in versions.items())
    return f"it holds {listed}: Lightning's packages must be one release"


def problem(text: str, python: str, requirements: list[str]) -> str:
    """Why a lock with content `text` does not bind to (python, requirements); "" when it does."""
    held = entries(text)
    for requirement in requirements:
        name, sep, version = requirement.partition("==")
        if sep and held.get(canonical(name), version) != version:
            return f"it holds {canonical(name)} {held[canonical(name)]}, the recipe pins {requirement}"
    mixed = lightning_mismatch(held)
    if mixed:
        return mixed
    recorded = HASH_LINE.search(text)
    if recorded is None:
        return "it records no recipe (no '# inputs-sha256:' line)"
    if recorded[1] != inputs_hash(python, requirements):
        return "it was made from other recipe pins (its inputs-sha256 differs)"
    return ""


def check_file(lock: Path, python: str, requirements: list[str]) -> str:
    """One line naming `lock` and the fix when it does not bind, else ""."""
    try:
        text = lock.read_text()
    except OSError as exc:
        return f"{lock}: unreadable ({exc.strerror}): restore it, or lock again (python recipes/render.py lock)"
    why = problem(text, python, requirements)
    if not why:
        return ""
    return (
        f"{lock}: not the lock of this recipe: {why}; lock again (python recipes/render.py lock), then "
        "python recipes/render.py render --all"
    )

