"""The administrators' procedures are data only, and work as docs/administrators.md writes them (issues 12, 19).

In a temporary copy of this checkout, the four procedures of the administrators' guide are followed: a new
PyTorch version is added (the minor after the newest in recipes/matrix.toml, one `[versions."X.Y"]` entry copied
from the newest one's facts, with an older Lightning), a new PBS site (one `recipes/sites/<site>.toml`), that
version's Lightning is upgraded to the newest's pin, and the oldest version is retired. Each data edit is the
one its procedure's step 1 describes; the commands are the guide's own `<!-- procedure: NAME -->` blocks, with
`<version>`/`<site>` filled in. Then the recipes stage of CI passes offline (`bash ci/test.sh --offline --stage
recipes`) and the docs' data tests pass, with no other change: no test, doc or template edited. The docs, for
their part, never state the matrix's version range or its list of sites (they would go stale).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import RECIPES, REPO, Recipes, job_data, load_recipes, run_render_process

from lightning_xpu import versions as lightning_versions

_NEWEST = list(load_recipes(RECIPES).matrix.versions.values())[-1]
_MAJOR, _MINOR = _NEWEST.minor.split(".")
NEW_MINOR = f"{_MAJOR}.{int(_MINOR) + 1}"  # the next release after the newest the data knows
OLDEST = next(iter(load_recipes(RECIPES).matrix.versions))
# The new version starts on the oldest Lightning minor lightning_xpu supports; the upgrade moves it to the newest's pin.
OLD_LIGHTNING = f"{lightning_versions.LOWEST}.0"
NEW_SITE = "newsite"
GUIDE = REPO / "docs/administrators.md"
# Lines of a procedure the copy does not run: `lock` needs the package indexes (CI is offline; the copy's
# recipes have no lock to refresh but the one the retired or unchanged versions keep), and the recipes stage
# runs once, after all four procedures.
NOT_RUN_HERE = ("render.py lock", "ci/test.sh")
PYTHON = os.environ.get("LXPU_PYTHON", "python")
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
lightning = {{ version = "{OLD_LIGHTNING}", source = "test: a version added as data only" }}
"""

NEW_SITE_PROFILE = """# TEST: a site added as data only.
description = "a new PBS site (test)"
scheduler = "pbs"
default_variant = "xpu"
default_prefix = "$HOME/lightning-xpu"
prefix_source = "test"
env_manager = "venv"
env_manager_source = "test"
modules = []
modules_source = "test"
submit_hint = "qsub -A <project> {script}"

[headers.pbs]
common = ["-l select=1", "-q gpu"]
install = ["-l walltime=01:00:00"]

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
        if path.is_file() and "__pycache__" not in path.parts and not path.relative_to(root).as_posix().startswith(skip)
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
        pytest.fail(f"LXPU_PYTHON must be build/venvs/base/bin/python (got {venvs}): the stage runs from there")
    (dest / "build").mkdir()
    (dest / "build" / "venvs").symlink_to(venvs)
    return copied


def procedure(name: str, **placeholders: str) -> list[str]:
    """The command lines of the guide's `<!-- procedure: NAME -->` block, placeholders filled in."""
    found = re.search(rf"^<!-- procedure: {name} -->\n```bash\n(.*?)^```$", GUIDE.read_text(), re.M | re.S)
    assert found, f"docs/administrators.md has no procedure block {name!r}"
    lines = [line.split("  #")[0].strip() for line in found[1].splitlines()]
    for key, value in placeholders.items():
        lines = [line.replace(f"<{key}>", value) for line in lines]
    return [line for line in lines if line and not line.startswith("#")]


def follow(name: str, repo: Path, **placeholders: str) -> None:
    for line in procedure(name, **placeholders):
        assert "<" not in line.replace("<<", ""), f"{name}: unfilled placeholder in {line!r}"
        if any(skipped in line for skipped in NOT_RUN_HERE):
            continue
        command = re.sub(r"^python(3)? ", f"{PYTHON} ", line)
        done = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name}: {line}\n{(done.stdout + done.stderr)[-3000:]}"


def retire(matrix: Path, minor: str) -> None:
    """Step 1 of "Retiring a PyTorch version": the version's entry and every table under it go."""
    kept, inside = [], False
    for line in matrix.read_text().splitlines(keepends=True):
        if line.startswith("["):
            inside = line.startswith((f'[versions."{minor}"]', f'[versions."{minor}".'))
        if not inside:
            kept.append(line)
    matrix.write_text("".join(kept))


def listed(repo: Path) -> dict[str, dict[str, dict[str, object]]]:
    done = run_render_process("list", "--json", repo=repo)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _in_copy(repo: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ARGS in the copy, marked as nested so that the copy's own run of this file skips this test."""
    env = {**os.environ, NESTED: "1"}
    return subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.skipif(os.environ.get(NESTED) == "1", reason="already inside the data-only copy")
def test_the_guides_procedures_are_data_only(tmp_path: Path, recipes: Recipes) -> None:
    repo = tmp_path / "copy"
    copied = _copy_checkout(repo)
    matrix = repo / "recipes/matrix.toml"

    matrix.write_text(matrix.read_text() + NEW_VERSION)
    follow("add-version", repo, version=NEW_MINOR)
    (repo / f"recipes/sites/{NEW_SITE}.toml").write_text(NEW_SITE_PROFILE)
    follow("add-site", repo, site=NEW_SITE)
    old_pin = f'lightning = {{ version = "{OLD_LIGHTNING}"'
    assert matrix.read_text().count(old_pin) == 1
    matrix.write_text(matrix.read_text().replace(old_pin, f'lightning = {{ version = "{_NEWEST.lightning}"'))
    follow("upgrade-lightning", repo, version=NEW_MINOR)
    retire(matrix, OLDEST)
    follow("retire-version", repo, version=OLDEST)

    data = listed(repo)
    assert NEW_MINOR in data["versions"] and OLDEST not in data["versions"]
    assert NEW_SITE in data["sites"] and data["sites"][NEW_SITE]["scheduler"] == "pbs"
    for site in [*recipes.sites, NEW_SITE]:
        assert (repo / f"scripts/{site}/install_lightning_{NEW_MINOR}.sh").is_file()
        assert not (repo / f"scripts/{site}/install_lightning_{OLDEST}.sh").exists()
    for minor in data["versions"]:
        assert (repo / f"scripts/{NEW_SITE}/install_lightning_{minor}.sh").is_file()
    new_job = (repo / f"scripts/{NEW_SITE}/install_lightning_{NEW_MINOR}.sh").read_text()
    assert "#PBS -l walltime=01:00:00" in new_job
    new_pins = [pin for v in job_data(repo, NEW_SITE, NEW_MINOR)["variants"].values() for pin in v["requirements"]]
    assert f"lightning=={_NEWEST.lightning}" in new_pins

    stage = _in_copy(repo, "bash", "ci/test.sh", "--offline", "--stage", "recipes", timeout=900)
    assert stage.returncode == 0, (stage.stdout + stage.stderr)[-6000:]
    assert re.search(r"^recipes +passed ", stage.stdout, re.MULTILINE), stage.stdout[-3000:]
    docs_tests = ("tests/docs/test_site_lists.py", "tests/docs/test_docs_conventions.py", "-k", "not ci_entry_point")
    docs = _in_copy(repo, PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *docs_tests, timeout=300)
    assert docs.returncode == 0, (docs.stdout + docs.stderr)[-6000:]
    # Nothing changed but the data and the renders (the retired version's renders and locks are gone).
    renders = re.compile(
        r"^(scripts/[^/]+/install_lightning_|scripts/common/setup/|modulefiles/|recipes/locks/|recipes/rendered/)"
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
    usage = subprocess.run(["bash", "ci/test.sh", "--help"], cwd=REPO, capture_output=True, text=True, check=True)
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
