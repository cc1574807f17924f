"""Every runnable block of README.md and docs/*.md runs, so that the docs cannot rot.

Each block runs as the docs show it (`bash -euo pipefail`, temporary HOME, the repository or a fresh work
directory as cwd) and must exit 0, print what its `expect=` marks promise, and leave the repository as it was.
Blocks that need the install share the one the README's own install command made (session fixture).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.docs.docs_blocks import (
    REPO,
    Block,
    block_env,
    documents,
    git_status,
    run_block,
    transcript,
    write_files,
)
from tests.docs.docs_services import DocsInstall, readme_block, require_needs, tools_first_on_path

BLOCK_TIMEOUT_S = 900
DOCUMENTS = {document.path: document for document in documents()}
MARKS = {
    "install": pytest.mark.install,
    "lmod": pytest.mark.lmod,
    "slurm": pytest.mark.slurm,
    "mpi": pytest.mark.mpi,
}


def _params() -> list[object]:
    blocks = [block for document in DOCUMENTS.values() for block in document.runnable() if block.role is None]
    return [
        pytest.param(block, id=block.where, marks=[MARKS[need] for need in sorted(block.needs)])
        for block in blocks
    ]


@pytest.mark.parametrize("block", _params())
def test_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    require_needs(block.needs)
    if "install" in block.needs:
        home = request.getfixturevalue("docs_install").home
    else:
        home = tmp_path / "home"
        home.mkdir()
    cwd = REPO
    if block.cwd == "work":
        cwd = tmp_path / "work"
        cwd.mkdir()
        write_files(block, DOCUMENTS[block.doc], cwd)
    env = block_env(home, tools_first_on_path(block, tmp_path / "bin"))
    before = git_status()

    result = run_block(block, cwd=cwd, env=env, script=tmp_path / "block.sh", timeout=BLOCK_TIMEOUT_S)

    assert result.returncode == 0, transcript(block, result)
    output = result.stdout + result.stderr
    missing = [text for text in block.expect if text not in output]
    assert not missing, f"expected {missing} in the output\n" + transcript(block, result)
    assert git_status() == before, f"{block.where} changed the repository: write into $HOME or use cwd=work"


@pytest.mark.install
def test_readme_install_command_installs_a_validated_environment(docs_install: DocsInstall) -> None:
    """The README's first command builds, smoke-tests and publishes the environment it names."""
    text = readme_block("install").text
    version = re.search(r"install_lightning_(\d+\.\d+)\.sh", text)
    variant = re.search(r"--variant (\w+)", text)
    assert version and variant, f"the README's install command names no version or variant:\n{text}"
    tag = f"{version[1]}-{variant[1]}"
    prefix = docs_install.home / "lightning-xpu"

    manifest = json.loads((prefix / tag / "manifest.json").read_text())

    assert manifest["status"] == "installed" and manifest["tag"] == tag
    assert (manifest["recipe"]["site"], manifest["recipe"]["variant"]) == ("generic", variant[1])
    failed = [check["name"] for check in manifest["smoke"]["checks"] if check["status"] == "fail"]
    assert manifest["smoke"]["checks"] and not failed, f"smoke checks failed: {failed}"
    assert (prefix / "modulefiles" / "lightning-xpu" / f"{tag}.lua").is_file()
    assert (prefix / f"lightning-setup-{tag}.sh").is_file()
    assert (prefix / "validate_lightning.sh").is_file()  # the site validation job, written with the tag files
    assert docs_install.output.rstrip().splitlines()[-1].startswith(f"lightning-xpu {tag}: installed")
