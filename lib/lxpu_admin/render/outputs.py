"""Where rendered artifacts go: an output directory, or the repository itself (render --all), and the drift
check that compares the committed renders with a fresh render."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import tempfile
from pathlib import Path

from . import handwritten
from .artifacts import Artifact, Renderer
from .errors import RecipeError
from .matrix import MODULEFILE_BODY, Version
from .recipes import INSTALL_DATA
from .sites import Site

# The committed renders this renderer owns: the install jobs. The per-tag modulefiles and setup scripts are written
# by the install (lxpu_admin/install/tagfiles.py); the patterns below find copies an older checkout committed, which
# `render --all` deletes and `check` refuses.
COMMITTED_PATTERNS = (
    INSTALL_DATA,
    "scripts/*/install_lightning_*.sh",
    "scripts/common/setup/lightning-setup-*.sh",
    "modulefiles/lightning-xpu/*.lua",  # a .modulerc.lua too (pathlib's * matches dot files)
)
# Written by hand next to the renders: the code the thin modulefiles run (the setup library's name matches no
# pattern above).
_HAND_WRITTEN = ("scripts/common/install_lightning_", MODULEFILE_BODY)


def render_selection(
    renderer: Renderer, versions: list[Version], sites: list[Site], variants: list[str] | None
) -> list[Artifact]:
    """Every artifact of the selected (version, site) pairs; one rendered the same for every site appears once."""
    by_path: dict[str, Artifact] = {}
    for version in versions:
        chosen = renderer.recipes.select_variants(version, variants, strict=False)
        for site in sites:
            for artifact in renderer.pair(version, site, chosen):
                previous = by_path.get(artifact.path)
                if previous is not None and previous.content != artifact.content:
                    raise RecipeError(f"{artifact.path}: renders differently for different sites")
                by_path[artifact.path] = artifact
    data = {
        f"{site.name}/{version.minor}": renderer.job_data(version, site) for version in versions for site in sites
    }
    by_path[INSTALL_DATA] = Artifact(
        INSTALL_DATA,
        json.dumps({"contract": int(renderer.recipes.engine_contract()), "jobs": data}, indent=1)
        + "\n",
        False,
        True,
    )
    return list(by_path.values())


def write_artifacts(artifacts: list[Artifact], out_dir: Path) -> list[str]:
    """Write (only what changed, so unchanged files keep their mtime); return the paths written."""
    written = []
    for artifact in artifacts:
        path = out_dir / artifact.path
        mode = 0o755 if artifact.executable else 0o644
        if not (path.is_file() and path.read_text() == artifact.content):
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(artifact.content)
            os.replace(temporary, path)
            written.append(artifact.path)
        if path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
    return written


def committed_renders(repo_root: Path) -> set[str]:
    found = set()
    for pattern in COMMITTED_PATTERNS:
        for path in repo_root.glob(pattern):
            relative = path.relative_to(repo_root).as_posix()
            if path.is_file() and not relative.startswith(_HAND_WRITTEN):
                found.add(relative)
    return found


def remove_stale(repo_root: Path, artifacts: list[Artifact]) -> list[str]:
    """Delete committed renders no artifact produces any more (a version or site taken out)."""
    stale = sorted(committed_renders(repo_root) - {a.path for a in artifacts if a.committed})
    for relative in stale:
        (repo_root / relative).unlink()
    return stale


def broken(artifacts: list[Artifact], repo_root: Path) -> list[str]:
    """One line per artifact that cannot be right whatever is committed: an empty one (an empty or broken
    template), shell that `bash -n` rejects and Lua that `luac -p` rejects; and one per finding in the code
    written by hand next to the renders (handwritten.py: bash -n, shellcheck, luac -p)."""
    problems = [f"{a.path}: empty" for a in artifacts if not a.content.strip() and not a.may_be_empty]
    with tempfile.TemporaryDirectory(prefix="lxpu-bash-n-") as scratch:
        shells = [a for a in artifacts if a.path.endswith(".sh")]
        luas = [a for a in artifacts if a.path.endswith(".lua")]
        write_artifacts(shells + luas, Path(scratch))
        for shown, path in [(a.path, Path(scratch) / a.path) for a in shells]:
            done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                first = (done.stderr.strip().splitlines() or ["bash -n failed"])[0]
                problems.append(f"{shown}: bash -n: {first.replace(str(path), shown)}")
        problems += handwritten.lua_problems(Path(scratch), [a.path for a in luas])
    renders = committed_renders(repo_root) | {a.path for a in artifacts}
    return problems + handwritten.problems(repo_root, renders)


def drift(repo_root: Path, artifacts: list[Artifact]) -> list[str]:
    """One line per committed render that differs from a fresh render (content, executable bit, missing,
    stale). Renders into a temporary directory; never writes to the repository and never uses the network."""
    expected = [a for a in artifacts if a.committed]
    problems = []
    with tempfile.TemporaryDirectory(prefix="lxpu-check-") as scratch:
        write_artifacts(expected, Path(scratch))
        for artifact in sorted(expected, key=lambda a: a.path):
            committed = repo_root / artifact.path
            fresh = Path(scratch) / artifact.path
            if not committed.is_file():
                problems.append(f"{artifact.path}: missing (not rendered into the repository)")
            elif not filecmp.cmp(committed, fresh, shallow=False):
                problems.append(f"{artifact.path}: differs from a fresh render")
            elif os.access(committed, os.X_OK) != artifact.executable:
                problems.append(f"{artifact.path}: executable bit differs from a fresh render")
    for relative in sorted(committed_renders(repo_root) - {a.path for a in expected}):
        problems.append(f"{relative}: stale (no recipe renders it any more)")
    return problems
