"""Fixtures of the docs test: the one install made by the README's own install command.

The README's install command (the block marked `role=install`) runs once per session, from the repository, with
a temporary HOME, or once per CI run before the stages (tests/docs/readme_install.py); every block marked
`needs=install` then runs with that same HOME, so that "$HOME/lightning-xpu" in the docs is that install.
"""

from __future__ import annotations

import pytest

from tests.docs.docs_services import DocsInstall, require_needs
from tests.docs.readme_install import installed, run_readme_install, shared_readme_install


@pytest.fixture(scope="session")
def docs_install(tmp_path_factory: pytest.TempPathFactory) -> DocsInstall:
    """The install the README's own install command makes, once per session, or once per CI run: where
    ci/test.sh ran that command before its stages (LXPU_SHARED_INSTALL_HOME), its recorded run."""
    require_needs(frozenset({"install"}))
    shared = shared_readme_install()
    if shared is not None:
        return shared
    home = tmp_path_factory.mktemp("docs-home")
    return installed(home, run_readme_install(home))
