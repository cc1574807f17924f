"""What the install job tells an administrator before it changes anything, and how it treats site modules.

- `--dry-run` prints the resolved pins and build tools, the package sources, which environment manager it chose
  and why, whether each site module exists, and warns when the xpu variant meets no Intel GPU; it names the real
  lightning_xpu wheel, never a placeholder.
- The site's modules, then the site's Python module, are loaded before Python is looked up (real Lmod; the
  modules are stand-ins written here).
- The oneAPI rule (recipes/matrix.toml): a site module that brings oneAPI of another year than a version's XPU
  wheels bundle is left out of that version's job.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomllib
from recipe_helpers import (
    LMOD_INIT,
    MINOR,
    PLAIN_SITE,
    REPO,
    Recipes,
    Rendered,
    bash,
    edit,
    load_recipes,
    require,
    run_render,
)

PYTHON = load_recipes(REPO / "recipes").matrix.version(MINOR).python

STAND_IN = "-- TEST STAND-IN for a site module ({name}); not a real one.\n{body}"


def _dry_run(job: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = bash(f'bash "{job}" --dry-run {" ".join(args)}', env)
    return done.returncode, done.stdout + done.stderr


def test_dry_run_prints_pins_sources_manager_and_modules(recipes: Recipes, tmp_path: Path) -> None:
    version = recipes.matrix.version(MINOR)
    job = REPO / f"scripts/{PLAIN_SITE}/install_lightning_{MINOR}.sh"
    code, out = _dry_run(job, "--variant", "cpu", "--pip-source", "system", "--prefix", f'"{tmp_path / "p"}"')
    assert code == 0, out
    pins = " ".join(version.variants["cpu"].requirements())
    tools = " ".join(tool.requirement("") for tool in recipes.matrix.tools)
    assert f"\npins:        {pins}, with every dependency from the lock: " in out
    assert f"\nbuild tools: {tools} (from the lock, sha256-checked)\n" in out
    assert "\nsources:     system; lock " in out
    assert f"\nenvironment: venv (site {PLAIN_SITE}'s default), Python {PYTHON} (" in out
    assert "\nmodule:      none to load\n" in out
    package = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"/lightning_xpu-{package}-py3-none-any.whl\n" in out and "<version>" not in out
    assert not (tmp_path / "p").exists()

    code, out = _dry_run(job, "--variant", "xpu", "--prefix", f'"{tmp_path / "p"}"')
    assert code == 0, out
    assert f"\npins:        {' '.join(version.variants['xpu'].requirements())} (no lock: " in out
    assert f"\nbuild tools: {tools} (pinned, no hash: the recipe has no lock)\n" in out
    assert "\nsources:     recipe --index-url " in out
    warning = "WARNING: the xpu variant needs an Intel GPU and none is visible here"
    if any(Path("/sys/class/drm").glob("card*/device/vendor")):
        pytest.skip("this machine has a GPU: the no-GPU warning is for machines without one")
    assert warning in out


def _source_with_data(rendered: Path, tmp_path: Path) -> Path:
    """This repository (linked), but with the recipe data rendered into `rendered`: the engine reads the data
    of the repository it runs from."""
    source = tmp_path / "source"
    (source / "recipes").mkdir(parents=True)
    for name in ("pyproject.toml", "lightning_xpu", "lib", "scripts", "modulefiles", "recipes/locks", "recipes/tools"):
        (source / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "bin", source / "bin")
    shutil.copytree(rendered / "recipes/rendered", source / "recipes/rendered")
    return source


def _site_with_modules(temp_repo: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The plain site's job of the locked version, made to name a site module and a Python module (in a
    repository whose data says so); a module tree holding both (the Python module puts a python3.X of its own
    first on PATH); an environment without Lmod loaded."""
    edit(
        temp_repo / f"recipes/sites/{PLAIN_SITE}.toml",
        "modules = []\n",
        'modules = ["lxpu-test/site"]\npython_module = "lxpu-test/python"\n',
    )
    out = temp_repo / "out"
    done = run_render("render", "--torch", MINOR, "--site", PLAIN_SITE, "--out", str(out), repo=temp_repo)
    assert done.returncode == 0, done.stderr
    python_dir = tmp_path / "python from a module"
    python_dir.mkdir()
    real = shutil.which(f"python{PYTHON}")
    assert real, f"python{PYTHON} is needed on PATH"
    (python_dir / f"python{PYTHON}").symlink_to(real)
    modules = tmp_path / "modules"
    (modules / "lxpu-test").mkdir(parents=True)
    (modules / "lxpu-test/site.lua").write_text(STAND_IN.format(name="site", body=""))
    body = f'prepend_path("PATH", "{python_dir}")\n'
    (modules / "lxpu-test/python.lua").write_text(STAND_IN.format(name="python", body=body))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LMOD", "MODULE", "_ModuleTable", "BASH_FUNC"))
    }
    env["MODULEPATH"] = str(modules)
    env["LXPU_SOURCE"] = str(_source_with_data(out, tmp_path))
    return out / f"scripts/{PLAIN_SITE}/install_lightning_{MINOR}.sh", python_dir, env


def test_python_comes_from_the_site_python_module(temp_repo: Path, tmp_path: Path) -> None:
    require(LMOD_INIT.is_file(), "Lmod")
    job, python_dir, env = _site_with_modules(temp_repo, tmp_path)
    code, out = _dry_run(
        job, "--variant", "cpu", "--prefix", f'"{tmp_path / "p"}"', env=env
    )
    assert code == 0, out
    assert "\nmodule:      lxpu-test/site: loaded (site module)\n" in out
    assert "\nmodule:      lxpu-test/python: loaded (Python module)\n" in out
    assert f"\nenvironment: venv (site {PLAIN_SITE}'s default), Python {PYTHON} ({python_dir}/python{PYTHON})\n" in out

    (tmp_path / "modules/lxpu-test/site.lua").unlink()
    code, out = _dry_run(
        job, "--variant", "cpu", "--prefix", f'"{tmp_path / "p"}"', env=env
    )
    assert (
        "\nmodule:      lxpu-test/site: NOT FOUND (site module; module avail lxpu-test/site shows nothing)\n"
        in out
    )
    real = bash(f'bash "{job}" --variant cpu --prefix "{tmp_path / "p"}"', env)
    why = (
        f"site module lxpu-test/site does not exist here (module avail lxpu-test/site): run on a machine of site "
        f"{PLAIN_SITE}, or change recipes/sites/{PLAIN_SITE}.toml"
    )
    assert real.returncode == 2 and real.stdout == ""
    assert real.stderr == f"install_lightning_{MINOR}.sh: error: {why}\n"
    # The dry run shows every step, then ends as the real run would: its last line says where and why, exit 2.
    assert code == 2, out
    assert f"; but the real run would stop before step 1 (exit 2): {why} (total " in out.rstrip().splitlines()[-1]
    assert re.search(r"^\[(\d+)/\1\] publish \.\.\.$", out, re.MULTILINE), out  # every step, to the last
    assert not (tmp_path / "p").exists()


def _job_modules(rendered: Rendered, minor: str) -> tuple[str, str]:
    data = rendered.job_data("dawn", minor)
    return " ".join(data["modules"]), "; ".join(data["modules_left_out"])


def _site_modules(site: Any, version: Any) -> tuple[str, str]:
    kept, left_out = site.modules_for(version)
    return " ".join(kept), "; ".join(left_out)


def test_oneapi_rule_leaves_out_site_oneapi_of_another_year(rendered: Rendered, recipes: Recipes) -> None:
    """Dawn's default environment brings oneAPI 2025: for a module that brought no oneCCL it would be kept for 2.12
    (2025 wheels), left out for 2.13 (2026 wheels, whose notes say not to mix) and for a version whose oneAPI is
    unverified. (It does bring oneCCL: the oneCCL rule leaves it out of every version, see below.)"""
    assert recipes.sites["dawn"].oneapi_modules == {"rhel9/default-dawn": "2025"}
    oneapi_only = dataclasses.replace(recipes.sites["dawn"], oneccl_modules={})
    kept = _site_modules(oneapi_only, recipes.matrix.versions["2.12"])
    assert kept == ("rhel9/default-dawn", "")
    left_out = _job_modules(rendered, "2.13")
    assert left_out == (
        "",
        "rhel9/default-dawn (brings oneAPI 2025; the XPU wheels of PyTorch 2.13 bundle oneAPI 2026)",
    )
    unverified = [v for v in recipes.matrix.versions.values() if not v.oneapi_generation]
    for version in unverified:
        assert _job_modules(rendered, version.minor)[1].endswith("bundle oneAPI an unverified generation)")
    for version in recipes.matrix.versions.values():
        kept_here = "rhel9/default-dawn" in _site_modules(oneapi_only, version)[0]
        assert kept_here == (version.oneapi_generation == "2025")
    listed = json.loads(run_render("list", "--json").stdout)["versions"]
    assert {minor: entry["oneapi"] for minor, entry in listed.items()} == {
        minor: version.oneapi_generation or None for minor, version in recipes.matrix.versions.items()
    }
    assert listed["2.13"]["oneapi"] == "2026"


def test_oneccl_rule_never_loads_dawns_base_module_with_wheels_that_carry_their_own_oneccl(
    rendered: Rendered, recipes: Recipes
) -> None:
    """Fails on main (it loaded rhel9/default-dawn, with its oneCCL 2021.15.0, for 2.5-2.12): every XPU version's
    wheels carry their own oneCCL (the bindings' wheel 2.5-2.7, the oneccl wheel 2.8+)."""
    assert recipes.sites["dawn"].oneccl_modules == {"rhel9/default-dawn": "2021.15.0"}
    for version in recipes.matrix.versions.values():
        assert version.bundles_oneccl
        modules, left_out = _job_modules(rendered, version.minor)
        assert modules == "" and left_out.startswith("rhel9/default-dawn (brings "), (version.minor, left_out)
    assert _job_modules(rendered, "2.12")[1] == (
        "rhel9/default-dawn (brings oneCCL 2021.15.0; the XPU wheels of PyTorch 2.12 bundle their own)"
    )


def test_oneapi_module_must_be_a_site_module(temp_recipes: Path) -> None:
    edit(
        temp_recipes / "recipes/sites/dawn.toml",
        '"rhel9/default-dawn" = { generation',
        '"intel-oneapi/2025" = { generation',
    )
    done = run_render("list", repo=temp_recipes)
    assert done.returncode == 2
    assert done.stderr == (
        "render.py: error: recipes/sites/dawn.toml: oneapi_modules.\"intel-oneapi/2025\": 'intel-oneapi/2025' "
        "is not one of this site's modules (rhel9/default-dawn)\n"
    )


def test_help_names_the_real_defaults_and_ends_with_the_exit_codes(recipes: Recipes) -> None:
    for site in recipes.sites.values():
        done = bash(f'bash "{REPO}/scripts/{site.name}/install_lightning_2.13.sh" --help')
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert f"--env-manager M         conda or venv (default: {site.env_manager});" in done.stdout
        assert done.stdout.splitlines()[-1].startswith("Exit status: 0 installed"), done.stdout[-300:]


def test_a_legacy_job_says_so_once(recipes: Recipes, tmp_path: Path) -> None:
    """A legacy recipe's install job prints its one legacy line (naming the discontinued packages and the newest
    current recipe); a current recipe's job prints none."""
    matrix = recipes.matrix
    site = next(s for s in recipes.sites.values() if s.env_manager == "venv" and not s.modules)
    legacy = next(v for v in matrix.versions.values() if matrix.legacy_line(v))
    newest = matrix.newest_current()
    assert newest is not None
    for version, expected in ((legacy, 1), (newest, 0)):
        job = REPO / f"scripts/{site.name}/install_lightning_{version.minor}.sh"
        code, out = _dry_run(job, "--variant", "cpu", "--prefix", f'"{tmp_path / "p"}"')
        assert code == 0, out
        assert out.count("legacy:") == expected, out
        if expected:
            assert f"\nlegacy:      {matrix.legacy_line(version)}\n" in out, out
            assert f"PyTorch {newest.minor} recipe" in out
