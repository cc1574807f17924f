"""The security suite's own ground: the accounts are really separate, and the shared install loads for a member."""

from __future__ import annotations

import pytest

from tests.install import install_harness as h
from tests.security.accounts import Accounts
from tests.security.conftest import SharedInstall

pytestmark = pytest.mark.security


def test_accounts_are_separate(accounts: Accounts) -> None:
    made = accounts.run(accounts.attacker, f"touch {h.q(accounts.victim.home / 'planted')}")
    assert made.returncode != 0 and "Permission denied" in made.stderr
    assert not (accounts.victim.home / "planted").exists()
    ids = accounts.run(accounts.attacker, "id -un; id -Gn").stdout.split("\n")
    assert ids[0] == accounts.attacker.name and accounts.group in ids[1].split()


def test_a_member_sets_up_the_shared_install(accounts: Accounts, shared_install: SharedInstall) -> None:
    setup = shared_install.prefix / f"lightning-setup-{h.TAG}.sh"
    done = accounts.run(accounts.victim, f'source {h.q(setup)} && python -c "import sys; print(sys.prefix)"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(shared_install.prefix / ".envs" / f"{h.TAG}.")), done.stdout
