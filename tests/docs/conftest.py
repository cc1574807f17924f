"""Fixtures of the docs test: the one install made by the README's own install command.

The README's install command (the block marked `role=install`) runs once per session, from the repository,
with a temporary HOME; every block marked `needs=install` then runs with that same HOME, so that
"$HOME/lightning-xpu" in the docs is that install.
"""

from __future__ import annotations

import pytest

from tests.docs.docs_blocks import REPO, block_env, run_block, transcript
from tests.docs.docs_services import DocsInstall, readme_block, require_needs

INSTALL_TIMEOUT_S = 1800


@pytest.fixture(scope="session")
def docs_install(tmp_path_factory: pytest.TempPathFactory) -> DocsInstall:
    """The install the README's own install command makes, once per session."""
    block = readme_block("install")
    require_needs(frozenset({"install"}))
    home = tmp_path_factory.mktemp("docs-home")
    result = run_block(
        block,
        cwd=REPO,
        env=block_env(home),
        script=home.parent / "install-block.sh",
        timeout=INSTALL_TIMEOUT_S,
    )
    if result.returncode != 0:
        pytest.fail("the README's install command failed:\n" + transcript(block, result))
    return DocsInstall(home, result.stdout + result.stderr)
