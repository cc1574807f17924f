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


# A Python every account can run: CI's own interpreter may sit under root's home (pyenv in /root, mode 0700), so the
# accounts' builds are made over a venv of the distribution's Python 3.11 that sees the base venv's packages.
SYSTEM_PYTHON = "/usr/bin/python3.11"


@dataclass
class SharedInstall:
    prefix: Path
    job: Path
    source: Path
    prebuilt: Path
    python: str  # the base Python of its builds (reachable by every account)
    group: str

    def run_install(self, *args: str, prefix: Path | None = None, **env: str | None) -> h.JobResult:
        """The install job as root (the administrator) on this install's inputs."""
        return h.run_job(self.job, *h.prebuilt_args(self.source, self.python), "--shared-group", self.group, *args,
                         prefix=prefix or self.prefix,
                         env=h.job_env(LXPU_TEST_PREBUILT=str(self.prebuilt), **env))  # fmt: skip


def accounts_python(dest: Path, accounts: Accounts) -> str:
    """A venv of the system Python 3.11 whose site adds the base venv's packages (torch, Lightning), checked to
    run as another account."""
    if not Path(SYSTEM_PYTHON).is_file():
        pytest.fail(f"{SYSTEM_PYTHON} is missing: the security tests need a Python 3.11 outside root's home "
                    "(Debian: apt-get install python3.11)")  # fmt: skip
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(dest)], check=True)
    sites = subprocess.run([h.base_python(), "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (site,) = dest.glob("lib/python3*/site-packages")
    (site / "_lxpu_base_venv.pth").write_text(f"import site; site.addsitedir({sites!r})\n")
    python = str(dest / "bin" / "python")
    ran = accounts.run(accounts.victim, f"{python} -c 'import torch, lightning'")
    if ran.returncode != 0:
        pytest.fail(f"another account cannot import torch from {sites}: {ran.stderr.strip().splitlines()[-1:]} "
                    "(put the checkout under world-traversable directories)")  # fmt: skip
    return python


@pytest.fixture(scope="session")
def shared_install(accounts: Accounts) -> SharedInstall:
    """2.13-cpu installed by root into `<base>/admin/site prefix` for the accounts' group."""
    work = accounts.base / "admin"
    work.mkdir(mode=0o755)
    python = accounts_python(work / "python", accounts)
    source = h.make_source(work / "repo")
    job = h.build_install_job(work / "job")
    prebuilt = h.make_prebuilt_env(work / "prebuilt", source, python)
    subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
    install = SharedInstall(work / "site prefix", job, source, prebuilt, python, accounts.group)
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
