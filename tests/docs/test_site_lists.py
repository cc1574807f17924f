"""The sites and versions the README and the guides name are the ones of the recipe data.

The data is what `python recipes/render.py list --json` prints (recipes/matrix.toml, recipes/sites/); nothing
here repeats a version or a site. A version or a site removed from the data must leave the docs (a site added
needs no doc edit: the README points to `render.py list`); the tiles per node the guides tell litgpt users to
pass are the ranks per node of the site's own whole-node job script.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.docs_blocks import REPO

_NAMED = {
    "install job": re.compile(r"\bscripts/(?P<site>[a-z0-9_-]+)/install_lightning_(?P<version>\d+\.\d+)\.sh"),
    "module": re.compile(r"\blightning-xpu/(?P<version>\d+\.\d+)(?![\d.])"),
    "setup script": re.compile(r"\blightning-setup-(?P<version>\d+\.\d+)(?![\d.])"),
}
# A whole-node job script starts its ranks with `lxpu_job_start "$0" <ranks per node> ...`, or takes them from
# its `#SBATCH --ntasks-per-node=N` line.
_RANKS = (
    re.compile(r'^lxpu_job_start "\$0" (?P<n>\d+)\b', re.MULTILINE),
    re.compile(r"^#SBATCH\b.*--ntasks-per-node=(?P<n>\d+)", re.MULTILINE),
)


def recipe_data(root: Path = REPO) -> dict[str, dict[str, object]]:
    listed = subprocess.run(
        [sys.executable, str(root / "recipes/render.py"), "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(listed.stdout)


def documents(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def names_not_in_data(root: Path, data: dict[str, dict[str, object]]) -> list[str]:
    """Every install job, module or setup script a doc names whose site or version the data does not have."""
    stale = []
    for doc in documents(root):
        for line_number, line in enumerate(doc.read_text().splitlines(), 1):
            for what, pattern in _NAMED.items():
                for match in pattern.finditer(line):
                    found = match.groupdict()
                    if found.get("site", next(iter(data["sites"]))) not in data["sites"] or (
                        found["version"] not in data["versions"]
                    ):
                        stale.append(f"{doc.relative_to(root)}:{line_number}: {what} {match[0]}")
    return stale


def ranks_per_node(job: Path) -> int:
    text = job.read_text()
    for pattern in _RANKS:
        if match := pattern.search(text):
            return int(match["n"])
    raise AssertionError(f"{job}: no ranks per node found (lxpu_job_start or --ntasks-per-node)")


def litgpt_devices(root: Path = REPO) -> dict[str, set[int]]:
    """Guide -> the `--devices N` values the litgpt rows of the migration table give for that site's guide."""
    text = (root / "docs/migration.md").read_text()
    section = text.split("## litgpt", 1)[1].split("\n## ", 1)[0]
    found: dict[str, set[int]] = {}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if len(cells) == 2 and (device := re.search(r"--devices (\d+)", cells[1])):
            found.setdefault(cells[0].split(",")[0].lower(), set()).add(int(device[1]))
    return found


@pytest.fixture(scope="module")
def data() -> dict[str, dict[str, object]]:
    return recipe_data()


def test_docs_name_only_sites_and_versions_of_the_data(data: dict[str, dict[str, object]]) -> None:
    assert names_not_in_data(REPO, data) == []


def test_a_retired_version_or_an_unknown_site_in_the_docs_is_found(
    tmp_path: Path, data: dict[str, dict[str, object]]
) -> None:
    versions = list(data["versions"])
    major, minor = versions[0].split(".")
    retired = f"{major}.{int(minor) - 1}"  # older than the oldest the data knows
    site = next(iter(data["sites"]))
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        f"`bash scripts/{site}/install_lightning_{versions[-1]}.sh`, then `module load lightning-xpu/{retired}`\n"
        f"`bash scripts/nosuchsite/install_lightning_{versions[-1]}.sh`\n"
    )
    assert names_not_in_data(tmp_path, data) == [
        f"README.md:1: module lightning-xpu/{retired}",
        f"README.md:2: install job scripts/nosuchsite/install_lightning_{versions[-1]}.sh",
    ]


def test_litgpt_devices_are_the_tiles_of_each_sites_node_job(data: dict[str, dict[str, object]]) -> None:
    rows = litgpt_devices()
    checked = 0
    for site in data["sites"]:
        jobs = sorted((REPO / "scripts" / site).glob("train_nodes.*"))
        if not jobs:  # a site without a whole-node job (a workstation: N cards, the user's)
            continue
        assert site in rows, f"docs/migration.md#litgpt has no row for {site}"
        assert rows[site] == {ranks_per_node(jobs[0])}, f"{site}: litgpt --devices {rows[site]}"
        checked += 1
    assert checked, "no site has a whole-node job script to compare with"
