"""The engine's command, bin/lightning-xpu-admin: subcommands are the install job's options, typos get a
suggestion, `status` reads a prefix, the renderer's commands run through it, and the step list in
docs/architecture.md is the declared one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin.install.steps import INSTALL_STEPS

pytestmark = pytest.mark.install

SHIM = h.REPO / "bin" / "lightning-xpu-admin"


def _admin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SHIM), *args], env=env or h.job_env(), capture_output=True, text=True, timeout=120, check=False
    )


def test_the_documented_step_list_is_the_declared_one() -> None:
    text = (h.REPO / "docs" / "architecture.md").read_text()
    block = re.search(r"<!-- install steps: .*? -->\n(.*?)<!-- end install steps -->", text, re.DOTALL)
    assert block, "docs/architecture.md has no install step list"
    listed = [re.sub(r"^\d+\. | \(.*\)$", "", line) for line in block[1].splitlines()]
    assert listed == [title for _, title, _ in INSTALL_STEPS]


def test_a_mistyped_command_gets_one_line_with_a_suggestion() -> None:
    done = _admin("instal", "--dry-run")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "lightning-xpu-admin: error: unknown command 'instal': did you mean 'install'?\n"
    done = _admin("zzzz")
    assert done.returncode == 2 and "unknown command 'zzzz' (commands: install, prune," in done.stderr


def test_subcommands_are_the_job_options(tmp_path: Path) -> None:
    """`prune` is `--prune`: same steps, same result line, for the recipe named by --site/--version."""
    jobs = json.loads((h.REPO / "recipes/rendered/install-data.json").read_text())["jobs"]
    entry = jobs[f"{h.SITE}/{h.VERSION}"]
    recipe = ["--site", entry["site"], "--version", entry["version"]]
    args = ["--keep", "1", "--variant", "cpu", "--dry-run", "--prefix", str(tmp_path / "p")]
    by_command = _admin("prune", *recipe, *args)
    by_option = _admin(*recipe, "--prune", *args)
    assert by_command.returncode == 0, by_command.stdout + by_command.stderr
    tag = entry["variants"]["cpu"]["tag"]
    assert f"[2/2] prune builds of {tag} done" in by_command.stdout
    last = [done.stdout.splitlines()[-1].rsplit(" (total", 1)[0] for done in (by_command, by_option)]
    assert last[0] == last[1], last
    missing = _admin("prune", "--keep", "1")
    assert missing.returncode == 2 and "prune needs --site NAME and --version X.Y" in missing.stderr


def test_status_names_each_published_tag_and_its_builds(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    for build in ("t.1", "t.2", "u.1"):
        (prefix / ".envs" / build).mkdir(parents=True)
    os.symlink(".envs/t.2", prefix / "t")
    os.symlink("t.1", prefix / ".envs" / "t.previous")  # the rollback link names a build; it is not one
    done = _admin("status", "--prefix", str(prefix))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "t -> .envs/t.2 (2 builds kept)\n"
    done = _admin("status", "--prefix", str(tmp_path / "none"))
    assert done.returncode == 2 and "nothing is installed there" in done.stderr


def test_the_renderer_runs_through_the_command(tmp_path: Path) -> None:
    """With jinja2 (the base venv's Python first on PATH) `list` answers; without it, one line says what to
    install."""
    venv_bin = h.REPO / "build" / "venvs" / "base" / "bin"
    env = h.job_env(PATH=f"{venv_bin}:{os.environ['PATH']}")
    done = _admin("list", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert f"{h.VERSION}" in json.loads(done.stdout)["versions"]
    bare = tmp_path / "bare"  # a venv of this Python with no packages: no jinja2, whatever the system has
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    done = _admin("list", env=h.job_env(PATH=f"{bare / 'bin'}:/usr/bin:/bin"))
    assert done.returncode == 2
    assert done.stderr.endswith("install the renderer's packages (pip install jinja2 packaging)\n"), done.stderr


def test_an_unknown_site_or_version_is_one_line_with_the_known_ones() -> None:
    jobs = json.loads((h.REPO / "recipes/rendered/install-data.json").read_text())["jobs"]
    sites = sorted({key.split("/")[0] for key in jobs})
    done = _admin("install", "--site", h.SITE[:-1], "--version", h.VERSION)
    assert done.returncode == 2 and done.stdout == ""
    assert f"no site '{h.SITE[:-1]}': did you mean '{h.SITE}'? (sites: {', '.join(sites)})" in done.stderr
    done = _admin("install", "--site", h.SITE, "--version", "0.0")
    assert done.returncode == 2 and f"site {h.SITE} has no PyTorch 0.0 (versions: " in done.stderr
    assert len(done.stderr.splitlines()) == 1
