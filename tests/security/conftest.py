"""Session fixtures of the security suite: throwaway accounts, and ONE shared install they all use.

The install is the real install job (rendered from this checkout) run by root with `--shared-group`, over the small
prebuilt environment of the install tests (LXPU_TEST_PREBUILT: about a second, no package installs), in a prefix
under a world-traversable directory so that the group's members can load it. Tests that change the prefix make
their own copy (`fresh_prefix`).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.install import install_harness as h
from tests.security.accounts import Accounts, accounts_session


@pytest.fixture(scope="session")
def accounts() -> Iterator[Accounts]:
    yield from accounts_session(Path("/tmp") / f"lxpu-security-{secrets.token_hex(4)}")


@dataclass
class SharedInstall:
    prefix: Path
    job: Path
    source: Path
    prebuilt: Path

    def run_install(self, *args: str, prefix: Path | None = None, **env: str | None) -> h.JobResult:
        """The install job as root (the administrator) on this install's inputs."""
        return h.run_job(self.job, *h.prebuilt_args(self.source), "--shared-group", self.group, *args,
                         prefix=prefix or self.prefix,
                         env=h.job_env(LXPU_TEST_PREBUILT=str(self.prebuilt), **env))  # fmt: skip

    group: str = ""


@pytest.fixture(scope="session")
def shared_install(accounts: Accounts) -> SharedInstall:
    """2.13-cpu installed by root into `<base>/site prefix` for the accounts' group."""
    work = accounts.base / "admin"
    work.mkdir(mode=0o755)
    base_python = h.base_python()
    if not accounts.readable_by(accounts.victim, Path(base_python)):
        pytest.fail(f"{base_python} (LXPU_PYTHON) cannot be read by another account: the security tests run the "
                    "shared install as other users; put the checkout under world-traversable directories")  # fmt: skip
    source = h.make_source(work / "repo")
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
    job = h.build_install_job(work / "job")
    prebuilt = h.make_prebuilt_env(work / "prebuilt", source)
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
    install = SharedInstall(work / "site prefix", job, source, prebuilt, accounts.group)
    result = install.run_install()
    assert result.returncode == 0, result.output
    return install


@pytest.fixture
def fresh_prefix(shared_install: SharedInstall, accounts: Accounts) -> Iterator[Path]:
    """A prefix of its own (the same prebuilt install, about a second) for a test that changes it."""
    prefix = accounts.base / "admin" / f"prefix {secrets.token_hex(3)}"
    result = shared_install.run_install(prefix=prefix)
    assert result.returncode == 0, result.output
    yield prefix
    shutil.rmtree(prefix, ignore_errors=True)
