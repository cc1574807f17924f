"""Every bad input gets one clear line on stderr (naming the file and key, or the fix) and exit status 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from recipe_helpers import (
    MINOR,
    MODULE_SITE,
    OTHER,
    PLAIN_SITE,
    RECIPES,
    edit,
    load_recipes,
    run_render,
    run_render_process,
)

# Derived from the data, so that adding a version or a site changes no test.
_LOADED = load_recipes(RECIPES)
KNOWN = ", ".join(_LOADED.matrix.versions)
SITES = ", ".join(_LOADED.sites)
MATRIX = "recipes/matrix.toml"
DAWN = "recipes/sites/dawn.toml"
_VERSION = _LOADED.matrix.version(MINOR)  # the versions the edits below break (roles: recipe_helpers)
_OTHER = _LOADED.matrix.version(OTHER)


def _fails_with(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert expected in lines[0], lines[0]


def _render(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_render("render", *args, "--out", str(repo / "out"), repo=repo)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--torch", "2.4", "--site", MODULE_SITE],
            f"render.py: error: unknown PyTorch version '2.4' (known: {KNOWN})",
        ),
        (["--torch", MINOR, "--site", "polaris"], f"unknown site 'polaris' (known: {SITES})"),
        (
            ["--torch", MINOR, "--site", MODULE_SITE, "--variant", "rocm"],
            "unknown variant 'rocm' (known: xpu, cpu, cuda)",
        ),
    ],
)
def test_unknown_names(temp_recipes: Path, args: list[str], expected: str) -> None:
    _fails_with(_render(temp_recipes, *args), expected)


def test_variant_the_version_lacks(temp_recipes: Path) -> None:
    version = _LOADED.matrix.version(MINOR)
    names = ", ".join(f'"{name}"' for name in version.variants)
    declared = f"variants = [{names}]"
    head = f'[versions."{MINOR}"]\nreleased = "{version.released}"\n'
    edit(temp_recipes / MATRIX, head + declared, head + 'variants = ["xpu", "cpu"]')
    _fails_with(
        _render(temp_recipes, "--torch", MINOR, "--site", PLAIN_SITE, "--variant", "cuda"),
        f"PyTorch {MINOR} has no variant 'cuda' (it has: xpu, cpu)",
    )


# (file, text, replacement, the message `render --all` must give)
EDITS = {
    "missing field": (
        MATRIX,
        f'[versions."{MINOR}"]\nreleased = "{_VERSION.released}"\n',
        f'[versions."{MINOR}"]\n',
        f"recipes/matrix.toml: versions.\"{MINOR}\": missing field 'released'",
    ),
    "pin without a source": (
        MATRIX,
        f'torch = {{ version = "{_VERSION.torch}", source = "{_VERSION.pin("torch").source}" }}',
        f'torch = {{ version = "{_VERSION.torch}" }}',
        f"recipes/matrix.toml: versions.\"{MINOR}\".pins.torch: missing field 'source'",
    ),
    "pin with a misspelt key": (
        MATRIX,
        f'torch = {{ version = "{_VERSION.torch}", source',
        f'torch = {{ version = "{_VERSION.torch}", sauce',
        f'recipes/matrix.toml: versions."{MINOR}".pins.torch.sauce: unknown key (allowed here: source, '
        "verified, version); fix the spelling",
    ),
    "malformed version key": (
        MATRIX,
        f'[versions."{MINOR}"]\n',
        '[versions."2.x"]\n',
        "recipes/matrix.toml: versions.\"2.x\": malformed PyTorch version '2.x' "
        "(expected MAJOR.MINOR, e.g. 2.7)",
    ),
    "malformed pin version": (
        MATRIX,
        f'torch = {{ version = "{_VERSION.torch}", ',
        f'torch = {{ version = "{MINOR}.zero", ',
        f"recipes/matrix.toml: versions.\"{MINOR}\".pins.torch.version: malformed version '{MINOR}.zero'",
    ),
    "torch of another minor": (
        MATRIX,
        f'torch = {{ version = "{_VERSION.torch}", ',
        f'torch = {{ version = "{_OTHER.torch}", ',
        f'recipes/matrix.toml: versions."{MINOR}".pins.torch: torch {_OTHER.torch} is not a {MINOR} release',
    ),
    "misspelt key": (
        MATRIX,
        f'notes = "{_VERSION.notes}"',
        f'note = "{_VERSION.notes}"',
        f'recipes/matrix.toml: versions."{MINOR}".note: unknown key',
    ),
    "invalid TOML": (
        DAWN,
        'scheduler = "slurm"',
        "scheduler = slurm",
        "recipes/sites/dawn.toml: invalid TOML:",
    ),
    "undefined template variable": (
        "recipes/templates/requirements.txt.j2",
        "{{ pin.requirement(variant.label) }}",
        "{{ no_such }}",
        "recipes/templates/requirements.txt.j2:{line}: undefined template variable ('no_such' is undefined)",
    ),
    "misspelt site variable": (
        DAWN,
        "ZE_FLAT_DEVICE_HIERARCHY = {",
        "ZE_FLAT_DEVICE_HIERARCY = {",
        "recipes/sites/dawn.toml: env.ZE_FLAT_DEVICE_HIERARCY: ZE_FLAT_DEVICE_HIERARCY is not a known "
        "environment variable (did you mean ZE_FLAT_DEVICE_HIERARCHY?); if it is real, add it to "
        "recipes/known_env.toml with "
        "its source",
    ),
    "misspelt variable in the modulefile body": (
        "modulefiles/lightning-xpu/.lightning-xpu.lua",
        'pushenv("LIGHTNING_XPU_ROOT", root)',
        'pushenv("LIGHTNING_XPU_ROTO", root)',
        "modulefiles/lightning-xpu/.lightning-xpu.lua: LIGHTNING_XPU_ROTO is not a known environment variable "
        "(did you "
        "mean LIGHTNING_XPU_ROOT?)",
    ),
    "misspelt variable in the setup library": (
        "lib/lxpu_admin/envside/setup_lib.py",
        'exports["LIGHTNING_XPU_ROOT"] = root',
        'exports["LIGHTNING_XPU_ROTO"] = root',
        "lib/lxpu_admin/envside/setup_lib.py: LIGHTNING_XPU_ROTO is not a known environment variable "
        "(did you mean LIGHTNING_XPU_ROOT?)",
    ),
    "modulefile body without a contract": (
        "modulefiles/lightning-xpu/.lightning-xpu.lua",
        "local CONTRACT = ",
        "local contract_version = ",
        "modulefiles/lightning-xpu/.lightning-xpu.lua: needs exactly one line local CONTRACT = <number>",
    ),
    "unquotable site value": (
        "recipes/sites/aurora.toml",
        'value = "pmix"',
        'value = "pmix}$(reboot)"',
        "recipes/sites/aurora.toml: env.CCL_PROCESS_LAUNCHER.value: 'pmix}$(reboot)' holds characters",
    ),
    "account in headers": (
        DAWN,
        '"--partition=pvc9",',
        '"--partition=pvc9", "--account=PROJ-1",',
        "recipes/sites/dawn.toml: headers.slurm.common: '--account=PROJ-1' hard-codes an account: "
        "users give it "
        "when they submit the job",
    ),
    "relative prefix": (
        "recipes/sites/generic.toml",
        'default_prefix = "$HOME/lightning-xpu"',
        'default_prefix = "lightning-xpu"',
        "recipes/sites/generic.toml: default_prefix: 'lightning-xpu' must be an absolute path "
        "or start with $HOME/",
    ),
    "unknown source override": (
        "recipes/sites/generic.toml",
        "[env]\n",
        '[sources]\npytorch-rocm = "https://example.invalid/rocm"\n[env]\n',
        "recipes/sites/generic.toml: sources.pytorch-rocm: unknown source (known in recipes/matrix.toml: "
        "intel-xpu, pypi, pytorch-cpu, pytorch-xpu)",
    ),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_bad_recipe_data(temp_recipes: Path, case: str) -> None:
    relative, old, new, expected = EDITS[case]
    path = temp_recipes / relative
    edit(path, old, new)
    if "{line}" in expected:
        expected = expected.format(line=path.read_text().splitlines().index(new.strip()) + 1)
    _fails_with(_render(temp_recipes, "--all"), expected)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["render", "--out", "x"],
            "nothing selected: give --torch X.Y and/or --site NAME with --out DIR, or --all",
        ),
        (["render", "--torch", MINOR], "--out DIR is required unless --all"),
        (["render", "--all", "--site", MODULE_SITE], "--all renders everything: leave out --torch and --site"),
        (["render", "--bogus"], "render.py: error: unrecognized arguments: --bogus (see render.py --help)"),
        (["frobnicate"], "render.py: error: argument command: invalid choice: 'frobnicate'"),
        (["lock", "--pip-source", "conda"], "argument --pip-source: invalid choice: 'conda'"),
    ],
)
def test_command_line_mistakes(args: list[str], expected: str) -> None:
    _fails_with(run_render(*args), expected)


def test_every_command_has_help() -> None:
    for command in ([], ["list"], ["render"], ["check"], ["lock"]):
        done = run_render_process(*command, "--help")
        assert done.returncode == 0 and done.stdout.startswith("usage: render.py"), done.stderr


def _derived_edits() -> dict[str, tuple[str, str, str, str]]:
    """Cases built from the data (no version or site named here): (file, text, replacement, message)."""
    from packaging.specifiers import SpecifierSet

    newest = list(_LOADED.matrix.versions.values())[-1]
    python_line = f'python = {{ version = "{newest.python}", supported = "{newest.python_supported}"'
    outside = next(f"3.{n}" for n in range(30) if f"3.{n}" not in SpecifierSet(newest.python_supported))
    by_scheduler = {site.scheduler: site for site in reversed(list(_LOADED.sites.values()))}
    slurm, pbs = f"recipes/sites/{by_scheduler['slurm'].name}.toml", f"recipes/sites/{by_scheduler['pbs'].name}.toml"
    return {
        "Python outside torch's range": (
            MATRIX,
            python_line,
            python_line.replace(f'version = "{newest.python}"', f'version = "{outside}"'),
            f"python: Python {outside} is outside torch's supported range",
        ),
        "local label on a shared pin": (
            MATRIX,
            f'torch = {{ version = "{newest.torch}"',
            f'torch = {{ version = "{newest.torch}+xpu"',
            f"recipes/matrix.toml: versions.\"{newest.minor}\".pins.torch.version: '{newest.torch}+xpu' carries "
            "a local label (+xpu)",
        ),
        "directives of another scheduler": (
            slurm,
            "[env]\n",
            '[headers.pbs]\ncommon = ["-q debug"]\n\n[env]\n',
            f"{slurm}: headers.pbs: a site with scheduler 'slurm' cannot have pbs directives: remove "
            "[headers.pbs] or change scheduler",
        ),
        "an sbatch option in PBS directives": (
            pbs,
            "common = [",
            'common = ["--time=01:00:00", ',
            f"{pbs}: headers.pbs.common: '--time=01:00:00' is not a pbs directive: write a qsub option such as "
            "-l walltime=01:00:00",
        ),
    }


@pytest.mark.parametrize("case", list(_derived_edits()))
def test_bad_recipe_data_derived(temp_recipes: Path, case: str) -> None:
    relative, old, new, expected = _derived_edits()[case]
    edit(temp_recipes / relative, old, new)
    _fails_with(_render(temp_recipes, "--all"), expected)
