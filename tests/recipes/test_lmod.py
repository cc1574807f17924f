"""Every modulefile in real Lmod: module use, load, unload, with a fake install tree (stub bin/python) under a
prefix with a space. Loaded: PATH, VIRTUAL_ENV/CONDA_PREFIX, PYTHONUSERBASE, LIGHTNING_XPU_ROOT, the site
variables (only where unset) and the site modules; unloaded: the environment exactly as before. Site
prerequisite modules are empty stand-in modulefiles (site-module-stand-ins/) in a test-only MODULEPATH."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from fake_install import FakeInstall, add_shared_code, make_install, make_stand_ins
from recipe_helpers import LMOD_INIT, MINOR, MODULEFILE_BODY, OTHER, PLAIN_SITE, REPO, Rendered, bash, require

from lxpu_admin.render.recipes import Recipes, load_recipes

pytestmark = pytest.mark.lmod

_RECIPES = load_recipes(REPO / "recipes")
SITES = list(_RECIPES.sites)
TAGS = [v.tag(name) for v in _RECIPES.matrix.versions.values() for name in v.variants]
# Each modulefile is loaded with one site's files; the sites, venv/conda and "user already set
# variables" rotate so that every site and every case meets many modulefiles.
CASES = [(tag, SITES[i % len(SITES)], i % 2 == 1, i % 4 < 2) for i, tag in enumerate(TAGS)]

SCRIPT = r"""
set -euo pipefail
source "$LMOD_INIT"
module use "$STAND_INS"
module use "$PREFIX/modulefiles"
if [ "$USER_SET" = 1 ]; then
  export PYTHONUSERBASE=/user/own/base CCL_ATL_TRANSPORT=user-value VIRTUAL_ENV=/user/venv
fi
env -0 >"$OUT/before"
module load "lightning-xpu/$TAG"
env -0 >"$OUT/loaded"
command -v python >"$OUT/python"
module -t list 2>"$OUT/list"
module unload "lightning-xpu/$TAG"
env -0 >"$OUT/after"
"""


def _env(path: Path) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in path.read_bytes().decode().split("\0") if item]
    return dict(pairs)


def _without_lmod_bookkeeping(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """`after` minus what Lmod itself leaves behind, each checked to be pure bookkeeping:
    __LMOD_REF_COUNT_<VAR> (reference counts of exactly the entries <VAR> holds again),
    __LMOD_STACK_<VAR> (pushenv's record of the value <VAR> holds again), and stale _ModuleTableNNN_
    chunks beyond _ModuleTable_Sz_ (Lmod ignores them)."""
    result = dict(after)
    for name, value in after.items():
        if name in before:
            continue
        counted = re.fullmatch(r"__LMOD_REF_COUNT_(\w+)", name)
        if counted:
            entries = [item.rsplit(":", 1)[0] for item in value.split(";")]
            assert entries == after[counted[1]].split(":"), (name, value)
            del result[name]
        stacked = re.fullmatch(r"__LMOD_STACK_(\w+)", name)
        if stacked:
            assert base64.b64decode(value).decode() == after[stacked[1]] == before[stacked[1]], (name, value)
            del result[name]
        chunk = re.fullmatch(r"_ModuleTable(\d+)_", name)
        if chunk:
            assert int(chunk[1]) > int(after["_ModuleTable_Sz_"]), name
            del result[name]
    return result


def _run(install: FakeInstall, stand_ins: Path, home: Path, out: Path, user_set: bool) -> None:
    env = {
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "USER": "tester",
        "LOGNAME": "tester",
        "LMOD_INIT": str(LMOD_INIT),
        "STAND_INS": str(stand_ins),
        "PREFIX": str(install.prefix),
        "TAG": install.tag,
        "OUT": str(out),
        "USER_SET": "1" if user_set else "0",
    }
    done = bash(SCRIPT, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Lmod has detected" not in done.stderr, done.stderr
    assert "not a valid identifier" not in done.stderr, done.stderr


@pytest.mark.parametrize(("tag", "site", "conda", "user_set"), CASES)
def test_modulefile_load_unload_round_trip(
    rendered: Rendered, recipes: Recipes, tmp_path: Path, tag: str, site: str, conda: bool, user_set: bool
) -> None:
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    home = tmp_path / "home"
    home.mkdir()
    install = make_install(rendered, tmp_path / "pre fix", tag, site, conda)
    stand_ins = make_stand_ins(tmp_path, {m for s in recipes.sites.values() for m in s.modules})
    out = tmp_path / "out"
    out.mkdir()
    _run(install, stand_ins, home, out, user_set)
    before, loaded, after = _env(out / "before"), _env(out / "loaded"), _env(out / "after")

    root = str(install.build)  # resolved at load time: a rebuild never changes a loaded environment
    assert loaded["PATH"] == f"{root}/bin:{before['PATH']}"
    assert (out / "python").read_text().strip() == f"{root}/bin/python"
    assert loaded["CONDA_PREFIX" if conda else "VIRTUAL_ENV"] == root
    assert loaded["PYTHONUSERBASE"] == f"{home}/.local/lightning-xpu/{tag}"
    assert loaded["LIGHTNING_XPU_ROOT"] == root
    for setting in recipes.sites[site].env:
        expected = before[setting.name] if setting.name in before else setting.value
        assert loaded[setting.name] == expected, setting.name
    listed = (out / "list").read_text().split()
    for module in recipes.sites[site].modules:
        assert module in listed, listed
    assert f"lightning-xpu/{tag}" in listed

    assert _without_lmod_bookkeeping(before, after) == before


def test_load_without_an_environment_says_what_to_run(rendered: Rendered, tmp_path: Path) -> None:
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    modulefiles = tmp_path / "pre fix/modulefiles/lightning-xpu"
    modulefiles.mkdir(parents=True)
    modulefiles.joinpath(f"{MINOR}-cpu.lua").write_text(
        rendered.text(f"envs/{PLAIN_SITE}/modulefiles/lightning-xpu/{MINOR}-cpu.lua")
    )
    add_shared_code(tmp_path / "pre fix")
    script = (
        f'source "{LMOD_INIT}"; module use "{tmp_path}/pre fix/modulefiles"; '
        f"module load lightning-xpu/{MINOR}-cpu"
    )
    done = bash(script, {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    message = " ".join(done.stderr.split())
    assert f"lightning-xpu/{MINOR}-cpu: no environment at '{tmp_path}/pre fix/{MINOR}-cpu'" in message
    assert f"run install_lightning_{MINOR}.sh --variant cpu --prefix '{tmp_path}/pre fix'" in message


def test_one_family_at_a_time(rendered: Rendered, recipes: Recipes, tmp_path: Path) -> None:
    """Loading a second lightning-xpu module swaps out the first (family), and the environment follows."""
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    prefix = tmp_path / "prefix"
    first = make_install(rendered, prefix, f"{MINOR}-cpu", PLAIN_SITE, False)
    second = make_install(rendered, prefix, f"{OTHER}-cpu", PLAIN_SITE, False)
    script = (
        f'source "{LMOD_INIT}"; module use "{prefix}/modulefiles"; module load lightning-xpu/{MINOR}-cpu; '
        f'module load lightning-xpu/{OTHER}-cpu 2>/dev/null; echo "$LIGHTNING_XPU_ROOT|$PATH"; module -t list'
    )
    done = bash(script, {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    root, path = done.stdout.splitlines()[0].split("|")
    assert root == str(second.build)
    assert f"{second.build}/bin" in path.split(":") and f"{first.build}/bin" not in path.split(":")
    assert f"lightning-xpu/{MINOR}-cpu" not in done.stderr


def _lmod(script: str, home: Path) -> tuple[str, str]:
    """Run `script` after Lmod's init; (stdout, stderr with Lmod's line wrapping undone)."""
    done = bash(f'source "{LMOD_INIT}"\n{script}', {"HOME": str(home), "PATH": "/usr/bin:/bin"})
    return done.stdout, " ".join(done.stderr.split())


def test_a_version_without_its_variant_loads_nothing(rendered: Rendered, tmp_path: Path) -> None:
    """Lmod 8.6 matches `lightning-xpu/<minor>` to `<minor>-cpu` by prefix: the variant guard refuses it."""
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    prefix = tmp_path / "pre fix"
    make_install(rendered, prefix, f"{MINOR}-cpu", PLAIN_SITE, False)
    out, err = _lmod(
        f'module use "{prefix}/modulefiles"\n'
        f'module load lightning-xpu/{MINOR}; echo "status=$? root=${{LIGHTNING_XPU_ROOT:-none}}"; module -t list 2>&1\n'
        f'module load lightning-xpu/{MINOR}-cpu; echo "exact=${{LIGHTNING_XPU_ROOT:-none}}"',
        tmp_path,
    )
    assert "status=1 root=none" in out, (out, err)
    assert "No modules loaded" in out, out
    assert (f"lightning-xpu/{MINOR} is not installed: Lmod matched it to lightning-xpu/{MINOR}-cpu (cpu), which is"
            f" not what you asked for. Load it by its exact name, module load lightning-xpu/{MINOR}-cpu, or install"
            f" {MINOR}."
            f" Installed variants of {MINOR}: lightning-xpu/{MINOR}-cpu") in err, err
    # The exact name still loads, pinned to the build <prefix>/<minor>-cpu points to.
    assert f"exact={(prefix / f'{MINOR}-cpu').resolve()}" in out, (out, err)


def test_a_clone_on_modulepath_offers_nothing(tmp_path: Path) -> None:
    """The repository commits no per-tag modulefile (the install writes them): a clone's modulefiles/ on
    MODULEPATH offers no module and no default, with nothing hidden by a .modulerc."""
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    committed = sorted(p.name for p in (REPO / "modulefiles/lightning-xpu").iterdir())
    assert committed == [Path(MODULEFILE_BODY).name], committed
    out, err = _lmod(
        f'module use "{REPO}/modulefiles"\n'
        'echo "avail=[$(module -t avail lightning-xpu 2>&1)]"\n'
        'module load lightning-xpu; echo "versionless=$? root=${LIGHTNING_XPU_ROOT:-none}"',
        tmp_path,
    )
    assert "avail=[]" in out, out
    assert "versionless=1 root=none" in out, (out, err)


def test_the_modulefile_body_is_no_module(rendered: Rendered, tmp_path: Path) -> None:
    """An install prefix has no .modulerc.lua: Lmod offers the tags, never the body next to them."""
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    prefix = tmp_path / "pre fix"
    make_install(rendered, prefix, f"{MINOR}-cpu", PLAIN_SITE, False)
    make_install(rendered, prefix, OTHER, PLAIN_SITE, False)
    assert (prefix / MODULEFILE_BODY).is_file()
    body_module = "lightning-xpu/" + Path(MODULEFILE_BODY).stem
    out, err = _lmod(
        f'module use "{prefix}/modulefiles"\n'
        'echo "avail=[$(module -t avail 2>&1 | grep "lightning-xpu/." | sort | tr "\\n" " ")]"\n'
        f'module load {body_module}; echo "body=$? root=${{LIGHTNING_XPU_ROOT:-none}}"',
        tmp_path,
    )
    listed = " ".join(sorted([f"lightning-xpu/{OTHER}", f"lightning-xpu/{MINOR}-cpu"]))  # sort's C order
    assert f"avail=[{listed} ]" in out, (out, err)
    # Lmod hides a dot file but loads it by its name: the body then says what it is.
    assert "body=1 root=none" in out, (out, err)
    assert (f"{prefix}/{MODULEFILE_BODY} is the code behind the lightning-xpu modulefiles, not a module:"
            " module avail lightning-xpu lists the installed ones") in err, err


def test_a_modulefile_of_another_body_contract_says_what_to_rerun(rendered: Rendered, tmp_path: Path) -> None:
    """One body serves every tag of a prefix: a modulefile rendered for another body contract (an install of
    another checkout wrote the body since) stops with one line naming the install job to rerun."""
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    prefix = tmp_path / "pre fix"
    make_install(rendered, prefix, f"{MINOR}-cpu", PLAIN_SITE, False)
    body = prefix / MODULEFILE_BODY
    contract = re.search(r"^local CONTRACT = (\d+)$", body.read_text(), re.MULTILINE)
    assert contract is not None
    newer = int(contract[1]) + 1
    body.write_text(body.read_text().replace(contract[0], f"local CONTRACT = {newer}"))
    out, err = _lmod(
        f'module use "{prefix}/modulefiles"\n'
        f'module load lightning-xpu/{MINOR}-cpu; echo "status=$? root=${{LIGHTNING_XPU_ROOT:-none}}"',
        tmp_path,
    )
    assert "status=1 root=none" in out, (out, err)
    assert (f"lightning-xpu/{MINOR}-cpu: this modulefile was rendered for modulefile body contract {contract[1]}, but"
            f" the body next to it ('{prefix}/modulefiles/lightning-xpu/.lightning-xpu.lua') has contract {newer}"
            f" (an install from another checkout wrote it): rerun install_lightning_{MINOR}.sh --variant cpu"
            f" --prefix '{prefix}' from the checkout that installed the other versions here") in err, err
    assert err.count("Lmod has detected the following error") == 1, err


def test_a_missing_body_says_what_to_rerun(rendered: Rendered, tmp_path: Path) -> None:
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    prefix = tmp_path / "pre fix"
    make_install(rendered, prefix, f"{MINOR}-cpu", PLAIN_SITE, False)
    (prefix / MODULEFILE_BODY).unlink()
    out, err = _lmod(
        f'module use "{prefix}/modulefiles"\nmodule load lightning-xpu/{MINOR}-cpu; echo "status=$?"', tmp_path
    )
    assert "status=1" in out, (out, err)
    assert (f"lightning-xpu/{MINOR}-cpu: the modulefile body '{prefix}/{MODULEFILE_BODY}' is missing or unreadable:"
            f" rerun install_lightning_{MINOR}.sh --variant cpu --prefix '{prefix}'") in err, err


def test_a_legacy_recipe_says_so_once_per_load(rendered: Rendered, tmp_path: Path) -> None:
    """A recipe that pins a discontinued package (recipes/matrix.toml [discontinued]) prints its one legacy line
    at each load, naming the newest current recipe; a current recipe prints none."""
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    matrix = _RECIPES.matrix
    legacy = [v for v in matrix.versions.values() if matrix.legacy_line(v)]
    newest = matrix.newest_current()
    assert legacy and newest is not None and not matrix.legacy_line(newest)
    prefix = tmp_path / "pre fix"
    old, new = legacy[0].tag("xpu"), newest.tag("xpu")
    make_install(rendered, prefix, old, PLAIN_SITE, False)
    make_install(rendered, prefix, new, PLAIN_SITE, False)
    line = matrix.legacy_line(legacy[0])
    assert f"PyTorch {newest.minor} recipe" in line
    for name in matrix.discontinued:
        assert matrix.discontinued[name].last in line
    out, err = _lmod(
        f'module use "{prefix}/modulefiles"\n'
        f"module load lightning-xpu/{old}; echo loaded=$?; module unload lightning-xpu/{old}\n"
        f"module load lightning-xpu/{new}; echo current=$?",
        tmp_path,
    )
    assert "loaded=0" in out and "current=0" in out, (out, err)
    assert err.count(line) == 1, err
    assert "legacy" not in err.replace(line, ""), err


def test_a_body_with_a_lua_error_shows_the_error(rendered: Rendered, tmp_path: Path) -> None:
    """A body that is there but does not compile reports Lua's own error, not "missing: rerun the install"."""
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    tag = next(iter(TAGS))
    prefix = tmp_path / "pre fix"
    make_install(rendered, prefix, tag, PLAIN_SITE, False)
    body = prefix / MODULEFILE_BODY
    body.write_text(body.read_text() + "\nthis is not lua\n")
    out, err = _lmod(f'module use "{prefix}/modulefiles"\nmodule load lightning-xpu/{tag}; echo "status=$?"', tmp_path)
    assert "status=1" in out, (out, err)
    assert f"lightning-xpu/{tag}: the modulefile body does not load: " in err, err
    assert re.search(r"\.lightning-xpu\.lua:\d+: ", err), err
    assert "missing or unreadable" not in err, err
