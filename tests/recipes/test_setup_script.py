"""The setup scripts (lightning-setup-<tag>.sh): relocatable, idempotent, nounset-safe, leave shell options
alone, and give the same environment as `module load lightning-xpu/<tag>`. Fake install trees (stub
python)."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest
from fake_install import add_shared_code, make_install, make_stand_ins
from recipe_helpers import (
    LMOD_INIT,
    MINOR,
    MODULE_MINOR,
    MODULE_SITE,
    OTHER,
    PBS_SITE,
    PLAIN_SITE,
    REPO,
    SETUP_LIBRARY_NAME,
    Rendered,
    bash,
    require,
)

from lxpu_admin.render.recipes import Recipes, load_recipes

_RECIPES = load_recipes(REPO / "recipes")
SITES = list(_RECIPES.sites)
TAGS = [v.tag(name) for v in _RECIPES.matrix.versions.values() for name in v.variants]
CASES = [(tag, SITES[i % len(SITES)], i % 2 == 0) for i, tag in enumerate(TAGS)]
OURS = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONUSERBASE", "LIGHTNING_XPU_ROOT", "JUPYTER_PATH")


def _bash(script: str, home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", **extra}
    return bash(script, env)


def _vars(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


PRINT = 'for v in $NAMES; do [ -n "${!v+x}" ] && echo "$v=${!v}"; done'


@pytest.mark.parametrize(("tag", "site", "conda"), CASES)
def test_setup_script_twice_under_nounset(
    rendered: Rendered, recipes: Recipes, tmp_path: Path, tag: str, site: str, conda: bool
) -> None:
    install = make_install(rendered, tmp_path / "pre fix", tag, site, conda)
    names = " ".join([*OURS, *(s.name for s in recipes.sites[site].env)])
    script = (
        'set -u; set -- one "two words"; options=$(set -o); funcs=$(declare -F | sort); vars=$(compgen -v | sort)\n'
        'source "$SETUP" && source "$SETUP"\n'
        '[ "$#:$1:$2" = "2:one:two words" ] || echo "POSITIONAL PARAMETERS CHANGED: $*"\n'
        '[ "$(set -o)" = "$options" ] || echo "SHELL OPTIONS CHANGED"\n'
        '[ "$(declare -F | sort)" = "$funcs" ] || echo "FUNCTIONS LEFT BEHIND"\n'
        'comm -13 <(echo "$vars") <(compgen -v | sort) | grep -v -x -e options -e funcs -e vars -e PIPESTATUS'
        ' | sed "s/^/NEW VARIABLE /"\n'
        f"command -v python\n{PRINT}\n"
    )
    done = _bash(script, tmp_path, SETUP=str(install.prefix / f"lightning-setup-{tag}.sh"), NAMES=names)
    assert done.returncode == 0, done.stderr
    report, _, rest = done.stdout.partition("/")
    lines = ("/" + rest).splitlines()
    root = str(install.build)  # resolved at setup time: a rebuild never changes this shell's environment
    assert lines[0] == f"{root}/bin/python"
    got = _vars("\n".join(lines[1:]))
    # Only the variables it exports are new: no shell options, functions or helper variables left behind, and the
    # caller's positional parameters are its own still.
    assert report.splitlines() == [f"NEW VARIABLE {name}" for name in sorted(set(got) - {"PATH"})]
    assert got["PATH"] == f"{root}/bin:/usr/bin:/bin"  # once, though sourced twice
    assert got["CONDA_PREFIX" if conda else "VIRTUAL_ENV"] == root
    assert ("VIRTUAL_ENV" if conda else "CONDA_PREFIX") not in got
    assert got["PYTHONUSERBASE"] == f"{tmp_path}/.local/lightning-xpu/{tag}"
    assert got["LIGHTNING_XPU_ROOT"] == root
    # The prefix-wide Jupyter kernel specs (lightning-xpu kernel install --prefix-wide), once though sourced twice.
    assert got["JUPYTER_PATH"] == f"{install.prefix}/share/jupyter"
    for setting in recipes.sites[site].env:
        assert got[setting.name] == setting.value
    if recipes.sites[site].modules:  # no `module` command in this shell: said, not fatal
        assert "no 'module' command here" in done.stderr


def test_user_values_win_and_relocation_works(rendered: Rendered, tmp_path: Path) -> None:
    install = make_install(rendered, tmp_path / "first place", MODULE_MINOR, MODULE_SITE, True)
    moved = tmp_path / "moved elsewhere"
    shutil.move(install.prefix, moved)
    done = _bash(
        f'source "$SETUP"; {PRINT}',
        tmp_path,
        SETUP=str(moved / f"lightning-setup-{MODULE_MINOR}.sh"),
        NAMES="LIGHTNING_XPU_ROOT CCL_ATL_TRANSPORT ZE_FLAT_DEVICE_HIERARCHY",
        CCL_ATL_TRANSPORT="mine",
    )
    assert done.returncode == 0, done.stderr
    assert _vars(done.stdout) == {
        "LIGHTNING_XPU_ROOT": f"{moved}/.envs/{install.build.name}",
        "CCL_ATL_TRANSPORT": "mine",
        "ZE_FLAT_DEVICE_HIERARCHY": "FLAT",
    }


def test_a_prefix_with_quotes_and_shell_characters(rendered: Rendered, tmp_path: Path) -> None:
    """Every path reaches the shell quoted (the library evaluates lines its Python half prints): the variables, the
    pins' percent-encoded file: URL and the lease whose flock the shell holds."""
    install = make_install(rendered, tmp_path / "it's \"q\" $x `y` ;", f"{MINOR}-cpu", PLAIN_SITE, False)
    constraints = install.build / "share" / "lightning-xpu" / "constraints.txt"
    constraints.parent.mkdir(parents=True)
    constraints.write_text("")
    done = _bash(
        'source "$SETUP"; echo "$LIGHTNING_XPU_ROOT"; echo "$PIP_CONSTRAINT"; echo "$PATH"',
        tmp_path,
        SETUP=str(install.prefix / f"lightning-setup-{MINOR}-cpu.sh"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        str(install.build), "file://" + urllib.parse.quote(str(constraints)), f"{install.build}/bin:/usr/bin:/bin"
    ]
    (lease,) = (install.prefix / ".leases").iterdir()
    assert lease.name.startswith(f"{install.build.name}@") and lease.read_text().endswith("held=flock\n")


def test_switching_versions_replaces_the_old_bin(rendered: Rendered, tmp_path: Path) -> None:
    first = make_install(rendered, tmp_path / "p", f"{MINOR}-cpu", PLAIN_SITE, False)
    second = make_install(rendered, tmp_path / "p", f"{OTHER}-cpu", PLAIN_SITE, False)
    done = _bash(
        'source "$A"; source "$B"; echo "$PATH"',
        tmp_path,
        A=str(first.prefix / f"lightning-setup-{MINOR}-cpu.sh"),
        B=str(second.prefix / f"lightning-setup-{OTHER}-cpu.sh"),
    )
    assert done.stdout.strip() == f"{second.build}/bin:/usr/bin:/bin"


def test_missing_environment_returns_an_error_and_keeps_the_shell(rendered: Rendered, tmp_path: Path) -> None:
    setup = tmp_path / f"lightning-setup-{MINOR}-cpu.sh"
    setup.write_text(rendered.text(f"envs/{PLAIN_SITE}/{MINOR}-cpu/lightning-setup-{MINOR}-cpu.sh"))
    add_shared_code(tmp_path)
    done = _bash(
        'source "$SETUP" || echo "returned $?"; echo "${LIGHTNING_XPU_ROOT:-unset}"',
        tmp_path,
        SETUP=str(setup),
    )
    assert done.stdout.splitlines() == ["returned 1", "unset"]
    assert done.stderr.strip() == (
        f"lightning-setup-{MINOR}-cpu.sh: no complete environment at {tmp_path}/{MINOR}-cpu: run "
        f"install_lightning_{MINOR}.sh --variant cpu --prefix {tmp_path}"
    )


def test_running_instead_of_sourcing_is_refused(rendered: Rendered, tmp_path: Path) -> None:
    setup = tmp_path / f"lightning-setup-{MODULE_MINOR}.sh"
    setup.write_text(rendered.text(f"envs/{MODULE_SITE}/{MODULE_MINOR}/lightning-setup-{MODULE_MINOR}.sh"))
    add_shared_code(tmp_path)
    done = subprocess.run(["bash", str(setup)], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr == f"lightning-setup-{MODULE_MINOR}.sh: source this file (source {setup}), do not run it\n"


def test_the_shared_library_missing_or_of_another_contract_says_what_to_rerun(
    rendered: Rendered, tmp_path: Path
) -> None:
    """One library serves every setup script of a prefix: missing, or written by an install of another
    checkout (another contract), sourcing a setup script returns 1 with one line naming the install job."""
    install = make_install(rendered, tmp_path / "pre fix", f"{MINOR}-cpu", PLAIN_SITE, False)
    library = install.prefix / SETUP_LIBRARY_NAME
    text = library.read_text()
    contract = re.search(r"^  local contract=(\d+)$", text, re.MULTILINE)
    assert contract is not None
    newer = int(contract[1]) + 1
    library.write_text(text.replace(contract[0], f"  local contract={newer}"))
    script = 'set -u; cd /; source "$SETUP" || echo "returned $?"; echo "${LIGHTNING_XPU_ROOT:-unset}"; declare -F'
    setup = str(install.prefix / f"lightning-setup-{MINOR}-cpu.sh")
    done = _bash(script, tmp_path, SETUP=setup)
    assert done.stdout.splitlines() == ["returned 1", "unset"]  # no function left behind either
    assert done.stderr == (
        f"lightning-setup-{MINOR}-cpu.sh: this setup script was rendered for setup library contract {contract[1]}, but"
        f" {library} has contract {newer} (an install from another checkout wrote it): rerun"
        f" install_lightning_{MINOR}.sh --variant cpu --prefix {install.prefix} from the checkout that installed the"
        " other versions here\n"
    )
    library.unlink()
    done = _bash(script, tmp_path, SETUP=setup)
    assert done.stdout.splitlines() == ["returned 1", "unset"]
    assert done.stderr == (
        f"lightning-setup-{MINOR}-cpu.sh: {SETUP_LIBRARY_NAME} is missing next to it: rerun "
        f"install_lightning_{MINOR}.sh --variant cpu --prefix {install.prefix} (it writes the library)\n"
    )


@pytest.mark.lmod
@pytest.mark.parametrize(
    ("tag", "site"), [(MODULE_MINOR, MODULE_SITE), (f"{MINOR}-cpu", PBS_SITE), (f"{OTHER}-cuda", PLAIN_SITE)]
)
def test_setup_script_gives_the_module_environment(
    rendered: Rendered, recipes: Recipes, tmp_path: Path, tag: str, site: str
) -> None:
    require(LMOD_INIT.is_file(), "Lmod (/usr/share/lmod/lmod/init/bash)")
    install = make_install(rendered, tmp_path / "pre fix", tag, site, False)
    stand_ins = make_stand_ins(tmp_path, set(recipes.sites[site].modules))
    names = " ".join([*OURS, *(s.name for s in recipes.sites[site].env)])
    start = f'source "{LMOD_INIT}"; module use "{stand_ins}"; module use "{install.prefix}/modulefiles"; '
    by_module = _bash(
        start + f"module load lightning-xpu/{tag}; {PRINT}; module -t list", tmp_path, NAMES=names
    )
    by_setup = _bash(
        start + f'source "$SETUP"; {PRINT}; module -t list',
        tmp_path,
        NAMES=names,
        SETUP=str(install.prefix / f"lightning-setup-{tag}.sh"),
    )
    assert by_module.returncode == 0 and by_setup.returncode == 0, by_module.stderr + by_setup.stderr
    assert _vars(by_setup.stdout) == _vars(by_module.stdout)
    for module in recipes.sites[site].modules:
        assert module in by_setup.stderr.split()
