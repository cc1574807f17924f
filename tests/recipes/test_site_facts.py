"""Site facts (issue 11, item 6) checked against the data: the site profiles, recipes/known_env.toml, the guides
and the job scripts must agree with each other and with the runtime's oneCCL rule.

Nothing here lists sites, variables or launchers by hand: sites come from recipes/sites/*.toml, known names from
recipes/known_env.toml, a site's guide is docs/<site>.md, its job scripts scripts/<site>/train_*.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from recipe_helpers import REPO

from lightning_xpu.environments.oneccl import oneccl_settings
from tests.oneccl_launch import LAUNCHER_BY_NAME

SITES = {path.stem: tomllib.loads(path.read_text()) for path in sorted((REPO / "recipes" / "sites").glob("*.toml"))}
KNOWN = tomllib.loads((REPO / "recipes" / "known_env.toml").read_text())["families"]
KNOWN_NAMES = {name for family in KNOWN.values() for name in family["names"]}
# The families of launcher, library and device variables (not PATH and friends, nor the project's own switches,
# which users set too): their name prefixes.
LIBRARY_FAMILIES = [family for key, family in KNOWN.items() if key not in ("environment", "lightning_xpu")]
PREFIXES = tuple(sorted({name.split("_")[0] + "_" for family in LIBRARY_FAMILIES for name in family["names"]}))
ASSIGNMENT = re.compile(rf"(?<![\w$]){'(?:' + '|'.join(map(re.escape, PREFIXES)) + ')'}[A-Z0-9_]+(?==)")
MPIEXEC = re.compile(r"\bmpiexec\s+(?:-|python)")


def site_env(site: str) -> dict[str, str]:
    return {name: setting["value"] for name, setting in SITES[site].get("env", {}).items()}


def guide(site: str) -> Path:
    return REPO / "docs" / f"{site}.md"


def site_texts(site: str) -> dict[str, str]:
    """The site's guide and job scripts, by path."""
    paths = [guide(site), *sorted((REPO / "scripts" / site).glob("train_*"))]
    return {path.relative_to(REPO).as_posix(): path.read_text() for path in paths if path.is_file()}


def user_facing_texts() -> dict[str, str]:
    """What users copy from: the guides and the job scripts. The first cell of a table row is left out: in the
    migration guide it quotes other people's code as they wrote it, misspellings included."""
    paths = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "scripts").glob("*/train_*"))]
    paths.append(REPO / "scripts" / "common" / "job.sh")
    texts = {}
    for path in paths:
        lines = path.read_text().splitlines()
        kept = [line.split("|", 2)[2] if line.startswith("|") and line.count("|") > 2 else line for line in lines]
        texts[path.relative_to(REPO).as_posix()] = "\n".join(kept)
    return texts


def test_known_names_have_one_spelling_each() -> None:
    names = [name for family in KNOWN.values() for name in family["names"]]
    assert len(names) == len(set(names)), "a name is listed in two families"
    # The misspelling issue 11 found: libfabric's cxi provider reads FI_CXI_OFLOW_BUF_SIZE (fi_cxi(7)).
    assert not [name for name in names if "OVFLOW" in name]


def test_every_variable_the_docs_and_job_scripts_set_is_a_known_name() -> None:
    """A misspelt name in a guide (ZE_FLAT_DEVICE_HIERARCY, FI_CXI_OVFLOW_BUF_SIZE) is silently ignored at run time."""
    found = {(path, name) for path, text in user_facing_texts().items() for name in ASSIGNMENT.findall(text)}
    unknown = sorted(f"{path}: {name}" for path, name in found if name not in KNOWN_NAMES)
    assert found and not unknown, "\n".join(unknown)


def mpiexec_lines_without_pmix(env: dict[str, str], texts: dict[str, str]) -> list[str]:
    """The mpiexec lines of a site's guide and job scripts that do not pass --pmi=pmix where the site sets
    CCL_PROCESS_LAUNCHER=pmix. A site that is data only (no guide, no job script) has none: a guide is optional
    (docs/administrators.md, "Adding a site")."""
    if env.get("CCL_PROCESS_LAUNCHER") != "pmix":
        return []
    return [
        f"{path}:{number}: {line.strip()}"
        for path, text in texts.items()
        for number, line in enumerate(text.splitlines(), 1)
        if MPIEXEC.search(line) and "--pmi=pmix" not in line
    ]


@pytest.mark.parametrize("site", sorted(SITES))
def test_the_oneccl_launcher_a_site_sets_matches_how_its_jobs_launch(site: str) -> None:
    """Under srun lightning_xpu gives oneCCL the rank's place on its node with CCL_PROCESS_LAUNCHER=none, whatever the
    site sets (srun has neither Hydra's variables nor a PMIx server); a site that sets pmix must launch every mpiexec
    with --pmi=pmix (oneCCL vars.hpp)."""
    env = site_env(site)
    srun_rank = {**env, **LAUNCHER_BY_NAME["srun"].variables(1, 2)}
    assert {**srun_rank, **oneccl_settings(srun_rank, 1, 2).set}["CCL_PROCESS_LAUNCHER"] == "none", site
    missing = mpiexec_lines_without_pmix(env, site_texts(site))
    assert not missing, "mpiexec without --pmi=pmix:\n" + "\n".join(missing)


def test_a_data_only_site_that_sets_pmix_passes_the_launcher_check() -> None:
    """Adding a site is data only (docs/administrators.md): a pmix site with no guide and no job script has no
    mpiexec line to get wrong, while one mpiexec line without --pmi=pmix in a guide is still found."""
    env = {"CCL_PROCESS_LAUNCHER": "pmix"}
    assert mpiexec_lines_without_pmix(env, {}) == []
    guide_text = {"docs/newsite.md": "mpiexec -n 2 python train.py\nmpiexec --pmi=pmix -n 2 python train.py"}
    assert mpiexec_lines_without_pmix(env, guide_text) == ["docs/newsite.md:1: mpiexec -n 2 python train.py"]


@pytest.mark.parametrize("site", sorted(site for site in SITES if guide(site).is_file()))
def test_the_guide_lists_what_the_module_sets(site: str) -> None:
    text = guide(site).read_text()
    section = text.split("## What the module sets", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}
    assert listed == set(site_env(site)), f"docs/{site}.md's table differs from recipes/sites/{site}.toml [env]"


def test_the_migration_guide_says_nothing_to_keep_only_for_what_the_aurora_module_sets() -> None:
    """Rows of the ALCF example: `export A=x` lines the guide says the module sets must be in the site env."""
    text = (REPO / "docs" / "migration.md").read_text().split("## From ALCF's", 1)[1].split("\n## ", 1)[0]
    claims = [row for row in text.splitlines() if row.startswith("| `export ") and "the module sets" in row]
    exported = [pair for row in claims for pair in re.findall(r"`export ([A-Z0-9_]+)=([^`]+)`", row.split("|")[1])]
    aurora = site_env("aurora")
    wrong = [f"{name}={value}" for name, value in exported if aurora.get(name) != value]
    assert exported and not wrong, f"the migration guide says the module sets {wrong}, but aurora.toml does not"


def test_the_project_variables_a_site_may_set_are_the_documented_ones() -> None:
    """The administrators' guide tells a site which of the project's variables it may set (`[env]` `NAME`); the
    known names (recipes/known_env.toml [families.lightning_xpu]) list exactly those, so the renderer accepts what
    the guide says to write."""
    guide = (REPO / "docs/administrators.md").read_text()
    documented = set(re.findall(r"`\[env\]` `([A-Z][A-Z0-9_]*)`", guide))
    assert documented, "docs/administrators.md documents no `[env]` `NAME` a site may set"
    assert set(KNOWN["lightning_xpu"]["names"]) == documented
