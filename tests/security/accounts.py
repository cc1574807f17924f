"""Real, separate Unix accounts for the security tests: what one local user can do to another through a shared install.

CI runs as root (the README's test command needs it), so the suite creates throwaway accounts and a group with
random names, runs each attack as the attacker (`runuser -u`) and each victim's job, shell or `module load` as the
victim, and removes the accounts, their processes and their files at the end. Nothing here fakes a permission: the
kernel decides what each account may do. Nothing is shared with another pytest running beside it (own names, own
directory under /tmp).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import require_service

# What an account's job or shell finds on PATH: the system's tools, never root's or the test venv's.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _root_with_accounts_tools() -> bool:
    return os.geteuid() == 0 and all(shutil.which(tool) for tool in ("useradd", "groupadd", "userdel", "runuser"))


@dataclass
class Account:
    name: str
    uid: int
    gid: int
    home: Path


@dataclass
class Accounts:
    """A group, two members of it (`victim`, `attacker`: a careless site puts every user of a project in one group)
    and an `outsider` in no shared group; `base` is a world-traversable directory for the shared prefix."""

    group: str
    gid: int
    victim: Account
    attacker: Account
    outsider: Account
    base: Path
    _made: list[str] = field(default_factory=list)

    def env(self, who: Account, **extra: str) -> dict[str, str]:
        """A login-like environment for `who`: its own HOME, USER and a system PATH (plus `extra`)."""
        env = {"HOME": str(who.home), "USER": who.name, "LOGNAME": who.name, "PATH": SYSTEM_PATH, "LANG": "C.UTF-8",
               "OMP_NUM_THREADS": "1"}  # fmt: skip
        for name in ("LXPU_LMOD_INIT", "SLURM_CONF", "TZ"):
            if os.environ.get(name):
                env[name] = os.environ[name]
        env.update(extra)
        return env

    def run(self, who: Account, script: str, *, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """`bash -c script` as `who` (not a login shell: no profile is read), output captured, never raising."""
        return subprocess.run(
            ["runuser", "-u", who.name, "--", "bash", "-c", script],
            env=env or self.env(who),
            cwd=cwd or who.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def private_dir(self, who: Account, name: str) -> Path:
        """A directory under `base` that only `who` may write (mode 0755)."""
        path = self.base / name
        path.mkdir(mode=0o755)
        os.chown(path, who.uid, who.gid)
        return path

    def readable_by(self, who: Account, path: Path) -> bool:
        """Can `who` read `path` (every parent traversable)? The kernel's answer, asked as that account."""
        return self.run(who, f"test -r {_q(path)}").returncode == 0


def _q(path: Path | str) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def _account(name: str) -> Account:
    import pwd

    entry = pwd.getpwnam(name)
    return Account(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def make_accounts(base: Path) -> Accounts:
    """Create the group and three accounts (names: lx + role letter + 6 random hex digits), homes under `base`."""
    require_service("root with useradd/runuser", _root_with_accounts_tools(),
                    "the security tests create throwaway Unix accounts (CI runs as root)")  # fmt: skip
    tag = secrets.token_hex(3)
    group = f"lxg{tag}"
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    made: list[str] = []
    try:
        for role, groups in (("v", group), ("a", group), ("o", "")):
            name = f"lx{role}{tag}"
            home = base / "home" / name
            home.parent.mkdir(exist_ok=True)
            home.parent.chmod(0o755)
            subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                            "--user-group", *(["--groups", groups] if groups else []), name],
                           check=True, capture_output=True)  # fmt: skip
            made.append(name)
            home.mkdir(mode=0o700)
            entry = _account(name)
            os.chown(home, entry.uid, entry.gid)
    except BaseException:
        remove_accounts(made, group)
        raise
    import grp

    victim, attacker, outsider = (_account(name) for name in made)
    return Accounts(group, grp.getgrnam(group).gr_gid, victim, attacker, outsider, base, made)


def remove_accounts(names: list[str], group: str) -> None:
    """End every process of the accounts (a nohup'd attacker too), then remove them and the group."""
    for name in names:
        subprocess.run(["pkill", "-KILL", "-u", name], check=False, capture_output=True)
    for name in names:
        subprocess.run(["userdel", name], check=False, capture_output=True)
    subprocess.run(["groupdel", group], check=False, capture_output=True)


def accounts_session(base: Path) -> Iterator[Accounts]:
    """The body of the session fixture (tests/security/conftest.py): made once, removed with their files."""
    accounts = make_accounts(base)
    try:
        yield accounts
    finally:
        remove_accounts(accounts._made, accounts.group)
        shutil.rmtree(base, ignore_errors=True)
