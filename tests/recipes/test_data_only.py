"""Adding a PyTorch version or a site is data only (issue 12, administrators' workflow).

In a temporary copy of this checkout, a new PyTorch version (the minor after the newest in recipes/matrix.toml, one
`[versions."X.Y"]` entry copied from the newest one's facts) and a new site
(one `recipes/sites/<site>.toml`) are added, `render --all` is run, and the recipes stage of CI passes offline
(`bash ci/test.sh --offline --stage recipes`) with no other change: no test, doc or template edited. The docs,
for their part, never state the matrix's version range or its list of sites (they would go stale).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import RECIPES, REPO, Recipes, load_recipes, run_render_process

_NEWEST = list(load_recipes(RECIPES).matrix.versions.values())[-1]
_MAJOR, _MINOR = _NEWEST.minor.split(".")
NEW_MINOR = f"{_MAJOR}.{int(_MINOR) + 1}"  # the next release after the newest the data knows
NEW_SITE = "newsite"
# The nested stage runs this file too: that copy must not start another copy.
NESTED = "LXPU_DATA_ONLY_NESTED"

NEW_VERSION = f"""
[versions."{NEW_MINOR}"]
released = "2026-11"
variants = ["xpu", "cpu", "cuda"]
python = {{ version = "{_NEWEST.python}", supported = "{_NEWEST.python_supported}", source = "test: as the newest" }}
backend = {{ name = "xccl", source = "test: a version added as data only" }}
oneapi = {{ verified = false, why = "test: a version added as data only" }}

[versions."{NEW_MINOR}".pins]
torch = {{ version = "{NEW_MINOR}.0", source = "PyPI: torch {NEW_MINOR}.0" }}
lightning = {{ version = "{_NEWEST.lightning}", source = "test: a version added as data only" }}
"""

NEW_SITE_PROFILE = """# TEST: a site added as data only.
description = "a new Slurm site (test)"
scheduler = "slurm"
default_variant = "xpu"
default_prefix = "$HOME/lightning-xpu"
prefix_source = "test"
env_manager = "venv"
env_manager_source = "test"
modules = []
modules_source = "test"
submit_hint = "sbatch --account=<project> {script}"

[headers.slurm]
common = ["--partition=gpu", "--nodes=1"]
install = ["--time=01:00:00"]

[env]
ZE_FLAT_DEVICE_HIERARCHY = { value = "FLAT", source = "test" }
"""


def _checkout_files(root: Path) -> set[str]:
    """The files of a checkout as they are now: tracked and untracked-not-ignored (git), or all (a copy)."""
    if (root / ".git").exists():
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\0")
        return {relative for relative in listed if relative and (root / relative).is_file()}
    skip = ("build/", ".")
    return {
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and not path.relative_to(root).as_posix().startswith(skip)
    }


def _copy_checkout(dest: Path) -> dict[str, bytes]:
    """This checkout's files (returned with their content as copied), and its build/venvs."""
    copied = {}
    for relative in _checkout_files(REPO):
        (dest / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relative, dest / relative, follow_symlinks=False)
        copied[relative] = (dest / relative).read_bytes()
    venvs = Path(os.path.abspath(os.environ.get("LXPU_PYTHON", "python"))).parents[2].resolve()
    if not (venvs / "base").is_dir():
        pytest.fail(
            f"LXPU_PYTHON must be build/venvs/base/bin/python (got {venvs}): the stage runs from there"
        )
    (dest / "build").mkdir()
    (dest / "build" / "venvs").symlink_to(venvs)
    return copied


@pytest.mark.skipif(os.environ.get(NESTED) == "1", reason="already inside the data-only copy")
def test_new_version_and_site_are_data_only(tmp_path: Path, recipes: Recipes) -> None:
    repo = tmp_path / "copy"
    copied = _copy_checkout(repo)
    matrix = repo / "recipes/matrix.toml"
    matrix.write_text(matrix.read_text() + NEW_VERSION)
    (repo / f"recipes/sites/{NEW_SITE}.toml").write_text(NEW_SITE_PROFILE)
    rendered = run_render_process("render", "--all", repo=repo)
    assert rendered.returncode == 0, rendered.stderr
    for site in [*recipes.sites, NEW_SITE]:
        assert (repo / f"scripts/{site}/install_lightning_{NEW_MINOR}.sh").is_file()
    for minor in [*recipes.matrix.versions, NEW_MINOR]:
        assert (repo / f"scripts/{NEW_SITE}/install_lightning_{minor}.sh").is_file()

    env = {**os.environ, NESTED: "1"}
    stage = subprocess.run(
        ["bash", "ci/test.sh", "--offline", "--stage", "recipes"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert stage.returncode == 0, (stage.stdout + stage.stderr)[-6000:]
    assert re.search(r"^recipes +passed ", stage.stdout, re.MULTILINE), stage.stdout[-3000:]
    # Nothing changed but the data and the renders.
    renders = re.compile(
        r"^(scripts/[^/]+/install_lightning_|scripts/common/setup/|modulefiles/|recipes/rendered/)"
    )
    changed = sorted(
        relative
        for relative in _checkout_files(repo)
        if not renders.match(relative) and copied.get(relative) != (repo / relative).read_bytes()
    )
    assert changed == ["recipes/matrix.toml", f"recipes/sites/{NEW_SITE}.toml"]


def _stale_claims(text: str, recipes: Recipes) -> list[str]:
    """Prose that states the matrix's range (`X to <newest>`) or lists every site: it goes stale when a
    version or a site is added."""
    newest = list(recipes.matrix.versions)[-1]
    claims = [m[0] for m in re.finditer(rf"\b\d+\.\d+ to {re.escape(newest)}\b", text)]
    sites = list(recipes.sites)
    for line in text.splitlines():
        if len(sites) > 1 and all(re.search(rf"\b{re.escape(site)}\b", line) for site in sites):
            claims.append(line.strip()[:120])
    return claims


def test_docs_state_no_version_range_or_site_list(recipes: Recipes) -> None:
    documents = [REPO / "README.md", REPO / "recipes/README.md", *sorted((REPO / "docs").glob("*.md"))]
    stale = {
        doc.relative_to(REPO).as_posix(): claims
        for doc in documents
        if (claims := _stale_claims(doc.read_text(), recipes))
    }
    assert not stale, (
        "say `python recipes/render.py list` (or link recipes/matrix.toml) instead of a range or list that "
        f"goes stale when a version or site is added: {stale}"
    )


def test_offline_ci_refuses_stages_that_need_services() -> None:
    usage = subprocess.run(
        ["bash", "ci/test.sh", "--help"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "--offline         install, start and build nothing" in usage.stdout
    done = subprocess.run(
        ["bash", "ci/test.sh", "--offline", "--stage", "recipes", "--stage", "services"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "[test.sh] error: stage 'services' needs services or the network: drop --offline, or run only lint recipes\n"
    )
