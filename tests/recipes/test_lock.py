"""Hashed pip locks: each committed lock is well formed and binds to its recipe; `lock` says on one line what it
could not lock and why (an unreachable source here is a closed loopback port and a missing file:// path); `check`,
`render` and the install-time check (lib/lxpu_admin/lockbind.py) refuse a lock that is not its recipe's:
other pins (issue 19 'Why' 1: the recipe moved to another Lightning and the lock was not made again), mixed
Lightning packages ('Why' 2), or no record of its recipe; `lock --header-only` rewrites the record offline where
the lock holds the recipe's pins. Versions come from the data (the first committed lock), never named here."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import RECIPES, edit, locked, require, run_render

from lxpu_admin.lockbind import check_file
from lxpu_admin.render.lightning_range import lightning_versions
from lxpu_admin.render.locking import stale_locks
from lxpu_admin.render.recipes import load_recipes

ENTRY = re.compile(r"^([a-z0-9][a-z0-9._-]*)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", re.MULTILINE)
LOADED = load_recipes(RECIPES)
MINOR, VARIANT = locked(LOADED)
VERSION = LOADED.matrix.version(MINOR)
LOCK = f"recipes/locks/{MINOR}-{VARIANT}.txt"


def _pins_block(minor: str) -> str:
    return f'[versions."{minor}".pins]\n'


def _lockbind(lock: Path, minor: str = MINOR, variant: str = VARIANT, repo: Path | None = None) -> str:
    """The install-time check, as the engine calls it (lxpu_admin.lockbind.check_file) with the job's data: "" when
    the lock binds, else the one line the install refuses with."""
    version = load_recipes(repo / "recipes").matrix.version(minor) if repo else VERSION
    return check_file(lock, version.python, version.variants[variant].requirements())


def test_committed_locks_are_complete_and_current() -> None:
    for path in sorted((RECIPES / "locks").glob("*.txt")):
        minor, variant = path.stem.rsplit("-", 1)
        version = LOADED.matrix.version(minor)
        text = path.read_text()
        entries = {name: version_ for name, version_, _sha in ENTRY.findall(text)}
        body = [line for line in text.splitlines() if not line.startswith("#")]
        assert len(body) == 2 * len(entries)  # nothing but hashed entries
        assert entries["lightning"] == entries["pytorch-lightning"] == version.lightning
        for omitted in version.variants[variant].omitted:
            assert omitted not in entries  # left out of the variant
        assert f"# recipe: python=={version.python} {' '.join(version.variants[variant].requirements())}\n" in text
        assert _lockbind(path, minor, variant) == ""
    assert stale_locks(LOADED) == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_lock_reports_an_unreachable_source_and_writes_nothing(temp_recipes: Path) -> None:
    require(shutil.which(f"python{VERSION.python}") is not None, f"python{VERSION.python}")
    matrix = temp_recipes / "recipes/matrix.toml"
    port = _closed_port()
    urls = []
    for i, source in enumerate(VERSION.variants[VARIANT].sources):
        url = f"http://127.0.0.1:{port}/simple" if i == 0 else f"file:///nonexistent/lxpu-test-{i}/simple"
        edit(matrix, f'url = "{source.url}"', f'url = "{url}"')
        urls.append(url)
    lock = temp_recipes / LOCK
    before = lock.read_text()
    done = run_render("lock", "--torch", MINOR, "--variant", VARIANT, "--timeout", "3", repo=temp_recipes)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        f"not locked {MINOR}/{VARIANT}: the recipe's sources: {' '.join(urls)}: no torch at all there: "
        "unreachable, or no torch (ERROR: "
    ), lines[0]
    assert lines[1].startswith("conda layer: not locked")
    assert lock.read_text() == before


def _index_with_unlabelled_torch(root: Path, version: str) -> str:
    """A file:// PEP 503 index whose torch page lists one unlabelled wheel (PyPI's kind of build)."""
    page = root / "simple" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    wheel = f"torch-{version}-cp{VERSION.python.replace('.', '')}-none-manylinux_2_28_x86_64.whl"
    page.write_text(f'<a href="{wheel}#sha256={"0" * 64}">{wheel}</a>\n')
    return (root / "simple").as_uri()


def test_lock_names_an_unreachable_pytorch_index_instead_of_its_builds(temp_recipes: Path, tmp_path: Path) -> None:
    """The PyTorch index down and PyPI up: pip lists PyPI's unlabelled torch, and the lock used to report the
    PyTorch index's builds as "none"; it names the index that does not answer and the override instead."""
    require(shutil.which(f"python{VERSION.python}") is not None, f"python{VERSION.python}")
    variant = VERSION.variants[VARIANT]
    require(bool(variant.label), "a labelled variant is locked")
    matrix = temp_recipes / "recipes/matrix.toml"
    down = f"http://127.0.0.1:{_closed_port()}/whl"
    up = _index_with_unlabelled_torch(tmp_path / "pypi", VERSION.torch)
    for i, source in enumerate(variant.sources):
        edit(matrix, f'url = "{source.url}"', f'url = "{down if i == 0 else up}"')
    done = run_render("lock", "--torch", MINOR, "--variant", VARIANT, "--timeout", "3", repo=temp_recipes)
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stdout.splitlines()[0]
    assert f"the index {down} is unreachable (" in line, line
    assert line.endswith("--pip-source system (this machine's pip configuration)"), line
    assert "builds: none" not in line


def test_lock_from_the_system_source_skips_unlabelled_builds(temp_recipes: Path) -> None:
    minor, variant = next(
        (v.minor, name) for v in LOADED.matrix.versions.values() for name, var in v.variants.items() if not var.label
    )
    done = run_render("lock", "--pip-source", "system", "--torch", minor, "--variant", variant, repo=temp_recipes)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        f"not locked {minor}/{variant}: its torch has no build label, so the machine's pip configuration could "
        "hand pip a torch of another build; lock it with --pip-source recipe"
    )
    assert not (temp_recipes / f"recipes/locks/{minor}-{variant}.txt").exists()


def test_check_catches_a_stale_or_orphan_lock(temp_repo: Path) -> None:
    torch = VERSION.torch
    newer = re.sub(r"\d+$", lambda m: str(int(m[0]) + 1), torch)
    label = VERSION.variants[VARIANT].label
    edit(
        temp_repo / "recipes/matrix.toml",
        f'{_pins_block(MINOR)}torch = {{ version = "{torch}"',
        f'{_pins_block(MINOR)}torch = {{ version = "{newer}"',
    )
    orphan = "0.0-cpu"
    (temp_repo / f"recipes/locks/{orphan}.txt").write_text("# nothing\n")
    suffix = f"+{label}" if label else ""
    assert sorted(stale_locks(load_recipes(temp_repo / "recipes"))) == sorted([
        f"{LOCK}: stale (not the lock of its recipe: it holds torch {torch}{suffix}, the recipe pins "
        f"torch=={newer}{suffix}): run render.py lock",
        f"recipes/locks/{orphan}.txt: no recipe for it (expected recipes/locks/<ver>-<variant>.txt)",
    ])
    done = run_render("check", repo=temp_repo)
    assert done.returncode == 1
    assert f"stale lock: {LOCK}: stale" in done.stdout


def _other_lightning() -> str:
    """A Lightning release the recipes may pin (lightning_xpu/versions.py), other than the lock's."""
    return next(v for v in reversed(lightning_versions().TESTED_VERSIONS) if v != VERSION.lightning)


def test_a_recipe_moved_to_another_lightning_refuses_its_old_lock(temp_repo: Path) -> None:
    """Issue 19 'Why' 1: the recipe pins another Lightning, the lock is not made again. render --all, check and
    the install-time check each refuse it with one line naming the lock; render writes nothing."""
    other = _other_lightning()
    lightning = f'lightning = {{ version = "{VERSION.lightning}"'
    matrix = temp_repo / "recipes/matrix.toml"
    text = matrix.read_text()
    start = text.index(_pins_block(MINOR))
    at = text.index(lightning, start)
    matrix.write_text(text[:at] + f'lightning = {{ version = "{other}"' + text[at + len(lightning) :])
    job = next((temp_repo / "scripts").glob(f"*/install_lightning_{MINOR}.sh"))
    before = job.read_text()
    expected = (
        f"{LOCK}: stale (not the lock of its recipe: it holds lightning {VERSION.lightning}, the recipe pins "
        f"lightning=={other}): run render.py lock"
    )
    rendered = run_render("render", "--all", repo=temp_repo)
    assert rendered.returncode == 1 and rendered.stderr.splitlines()[0] == f"stale lock: {expected}"
    assert len(rendered.stderr.splitlines()) == 2 and job.read_text() == before
    checked = run_render("check", repo=temp_repo)
    assert checked.returncode == 1 and f"stale lock: {expected}" in checked.stdout.splitlines()
    installed = _lockbind(temp_repo / LOCK, repo=temp_repo)
    assert installed == (
        f"{temp_repo / LOCK}: not the lock of this recipe: it holds lightning {VERSION.lightning}, the recipe pins "
        f"lightning=={other}; lock again (python recipes/render.py lock), then python recipes/render.py render --all"
    )


def test_a_lock_with_mixed_lightning_packages_is_refused(temp_repo: Path) -> None:
    """Issue 19 'Why' 2: a lock holding pytorch-lightning at another version than lightning."""
    lock = temp_repo / LOCK
    other = _other_lightning()
    edit(lock, f"\npytorch-lightning=={VERSION.lightning} ", f"\npytorch-lightning=={other} ")
    expected = (
        f"it holds lightning {VERSION.lightning}, pytorch-lightning {other}: Lightning's packages must be one release"
    )
    recipe = VERSION.variants[VARIANT].requirements()
    if f"pytorch-lightning=={VERSION.lightning}" in recipe:  # the recipe pins it: that mismatch is named first
        expected = f"it holds pytorch-lightning {other}, the recipe pins pytorch-lightning=={VERSION.lightning}"
    assert stale_locks(load_recipes(temp_repo / "recipes")) == [
        f"{LOCK}: stale (not the lock of its recipe: {expected}): run render.py lock"
    ]
    installed = _lockbind(lock, repo=temp_repo)
    assert expected in installed and "\n" not in installed


def test_a_recipe_that_pins_lightnings_packages_apart_is_refused(temp_recipes: Path) -> None:
    other = _other_lightning()
    matrix = temp_recipes / "recipes/matrix.toml"
    edit(
        matrix,
        _pins_block(MINOR),
        f'{_pins_block(MINOR)}lightning-fabric = {{ version = "{other}", source = "test" }}\n',
    )
    done = run_render("render", "--all", repo=temp_recipes)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr == (
        f'render.py: error: recipes/matrix.toml: versions."{MINOR}".pins.lightning-fabric: lightning-fabric '
        f"{other} with lightning {VERSION.lightning}: Lightning's packages are one release, pin lightning-fabric to "
        f"{VERSION.lightning} (or leave it out: it follows lightning)\n"
    )


@pytest.mark.parametrize("damage", ["no record", "edited pins"])
def test_header_only_rewrites_the_record_and_nothing_else(temp_repo: Path, damage: str) -> None:
    """`lock --header-only` gives a lock the record of its recipe's pins offline when it holds exactly those pins
    (here: a lock whose record is gone); it refuses a lock whose entries are not the recipe's."""
    lock = temp_repo / LOCK
    text = lock.read_text()
    entries_before = [line for line in text.splitlines() if not line.startswith("#")]
    if damage == "no record":
        lock.write_text(
            "".join(line + "\n" for line in text.splitlines() if not line.startswith(("# recipe:", "# inputs-sha256:")))
        )
        assert stale_locks(load_recipes(temp_repo / "recipes")) == [
            f"{LOCK}: stale (not the lock of its recipe: it records no recipe (no '# inputs-sha256:' line)): "
            "run render.py lock"
        ]
        done = run_render("lock", "--header-only", repo=temp_repo)
        assert done.returncode == 0 and done.stdout == f"rewrote the header of {LOCK} (entries and hashes unchanged)\n"
        assert lock.read_text() == text
        assert run_render("lock", "--header-only", repo=temp_repo).stdout == f"current {LOCK}\n"
    else:
        edit(lock, f"\nlightning=={VERSION.lightning} ", f"\nlightning=={_other_lightning()} ")
        done = run_render("lock", "--header-only", "--torch", MINOR, repo=temp_repo)
        assert done.returncode == 1 and done.stdout.startswith(f"not rewritten {LOCK}: it holds lightning ")
        assert [line for line in lock.read_text().splitlines() if not line.startswith("#")] != entries_before


def test_the_install_job_refuses_a_lock_of_another_recipe(temp_repo: Path) -> None:
    """The engine runs the install-time check before it changes anything: a lock whose Lightning packages
    differ (edited after the render) stops the job with exit 2 and one line naming the lock."""
    for name in ("pyproject.toml", "lightning_xpu"):
        (temp_repo / name).symlink_to(RECIPES.parent / name)
    lock = temp_repo / LOCK
    other = _other_lightning()
    edit(lock, f"\npytorch-lightning=={VERSION.lightning} ", f"\npytorch-lightning=={other} ")
    site = next(iter(LOADED.sites))
    job = temp_repo / f"scripts/{site}/install_lightning_{MINOR}.sh"
    done = subprocess.run(
        ["bash", str(job), "--dry-run", "--variant", VARIANT, "--prefix", str(temp_repo / "prefix")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"install_lightning_{MINOR}.sh: error: {lock.resolve()}: not the lock of this recipe: it holds "
        f"pytorch-lightning {other}, the recipe pins pytorch-lightning=={VERSION.lightning}; lock again "
        "(python recipes/render.py lock), then python recipes/render.py render --all"
    ), done.stderr
    assert not (temp_repo / "prefix").exists()
