"""Issue 27, "What to build" 3, entry-point side: what the setup script and `module load` write into the shared
`.leases` of a `--shared-group` prefix never goes through a link another member planted there.

`.leases` is group-writable and sticky (every member records leases there), so a member may plant a symbolic link at
any name another member's entry point would write. The attacker here plants links, pointing at the victim's own
files, at every name the victim's setup script and `module load` (real Lmod) could be predicted to write: the names
an entry point used before (`<build>@<host>.pid-<shell pid>` and `.pid-<session id>`, learnt from the victim's
running shell, as `ps` shows them to any account) and the same names with every random suffix an attacker could
guess in advance (none: the suffix is new at every load). The victim then sources the setup script and loads the
module; its files keep their content and mode, and its leases are recorded, its own, held and not world-writable.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.install import install_harness as h
from tests.security.accounts import Accounts
from tests.security.conftest import SharedInstall

pytestmark = pytest.mark.security

PRECIOUS = "the victim's own notes\n"


def _lmod_init() -> str:
    lmod = os.environ.get("LXPU_LMOD_INIT", h.LMOD_INIT)
    from tests.conftest import require_service

    require_service("lmod", os.path.isfile(lmod), f"no Lmod at {lmod}: run bash ci/services/install.sh")
    return lmod


def _victim_files(accounts: Accounts, names: list[str]) -> dict[Path, tuple[str, int]]:
    """Files of the victim's (group-writable, so that a chmod go-w through a link would show), by path: (text, mode)."""
    made = {}
    for name in names:
        path = accounts.victim.home / name
        path.write_text(PRECIOUS)
        os.chown(path, accounts.victim.uid, accounts.victim.gid)
        path.chmod(0o664)
        made[path] = (PRECIOUS, 0o664)
    return made


def _state(paths: dict[Path, tuple[str, int]]) -> dict[Path, tuple[str, int]]:
    return {path: (path.read_text(), stat.S_IMODE(path.stat().st_mode)) for path in paths}


def _victim_leases(prefix: Path, accounts: Accounts) -> list[dict[str, str]]:
    """The regular files in .leases the victim owns, as key=value fields (plus their mode)."""
    found = []
    for path in (prefix / ".leases").iterdir():
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and info.st_uid == accounts.victim.uid:
            fields = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
            found.append({**fields, "mode": oct(stat.S_IMODE(info.st_mode)), "name": path.name})
    return found


def test_planted_links_in_leases_change_no_victim_file(accounts: Accounts, fresh_prefix: Path) -> None:
    prefix = fresh_prefix
    build = os.path.realpath(prefix / h.TAG).rsplit("/", 1)[1]
    host = os.uname().nodename
    work = accounts.private_dir(accounts.victim, "entry-points")
    targets = _victim_files(accounts, ["setup-target", "module-target", "random-target"])
    before = _state(targets)
    # The victim's shell says who it is, waits for the attacker, then uses both entry points (and stays, holding
    # its leases, until the checks are done).
    script = f"""
read -r -a stat </proc/$$/stat
echo "$$ ${{stat[5]}}" >{h.q(work / 'ids')}
while [ ! -e {h.q(work / 'go')} ]; do sleep 0.1; done
source {h.q(prefix / f'lightning-setup-{h.TAG}.sh')} || echo "setup failed $?"
source {h.q(_lmod_init())}
module use {h.q(prefix / 'modulefiles')}
module load lightning-xpu/{h.TAG} || echo "module failed $?"
echo "root=$LIGHTNING_XPU_ROOT"
touch {h.q(work / 'done')}
while [ ! -e {h.q(work / 'end')} ]; do sleep 0.1; done
"""
    victim = subprocess.Popen(["runuser", "-u", accounts.victim.name, "--", "bash", "-c", script],
                              env=accounts.env(accounts.victim), cwd=accounts.victim.home, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (work / "ids").is_file() or not (work / "ids").read_text().strip():
            assert victim.poll() is None and time.monotonic() < deadline, victim.communicate()
            time.sleep(0.1)
        pid, session = (work / "ids").read_text().split()
        # Every predictable name, and guesses of the random part, each a link to one of the victim's files.
        names = {f"{build}@{host}.pid-{pid}": "setup-target", f"{build}@{host}.pid-{session}": "module-target"}
        for holder in (f"pid-{pid}", f"pid-{session}"):
            for guess in ("00000000", "ffffffff", "0", ""):
                names[f"{build}@{host}.{holder}.{guess}".rstrip(".")] = "random-target"
        plant = "\n".join(f"ln -sfn {h.q(accounts.victim.home / target)} {h.q(prefix / '.leases' / name)}"
                          for name, target in names.items())  # fmt: skip
        planted = accounts.run(accounts.attacker, f"set -e\n{plant}")
        assert planted.returncode == 0, planted.stderr
        (work / "go").touch()
        while not (work / "done").exists():
            assert victim.poll() is None and time.monotonic() < deadline + 60, victim.communicate()
            time.sleep(0.1)
        assert _state(targets) == before, "a victim's file changed through a link planted in .leases"
        leases = _victim_leases(prefix, accounts)
        assert {lease["what"] for lease in leases} == {"setup-script", "module"}, leases
        for lease in leases:
            assert lease["build"] == build and lease["user"] == accounts.victim.name, lease
            assert lease["mode"] == "0o644" and lease.get("held") == "flock", lease
            assert lease["name"] not in names, lease
        for name in names:  # the attacker's links are still what they were: nothing wrote through or over them
            assert (prefix / ".leases" / name).is_symlink()
        # Once written, a lease is the victim's: the sticky .leases keeps the attacker from removing or replacing
        # it (the flock line opens it by name).
        texts = {name: (prefix / ".leases" / name).read_text() for name in (lease["name"] for lease in leases)}
        attack = "\n".join(f"rm -f {h.q(prefix / '.leases' / name)}; mv -f {h.q(prefix / '.leases' / name)} "
                           f"{h.q(prefix / '.leases' / 'x')}" for name in texts)  # fmt: skip
        accounts.run(accounts.attacker, attack)
        assert {name: (prefix / ".leases" / name).read_text() for name in texts} == texts
    finally:
        (work / "end").touch()
        out, err = victim.communicate(timeout=60)
    assert "failed" not in out and f"root={prefix}/.envs/{build}" in out, out + err


def test_leases_are_never_world_writable_and_name_their_user(accounts: Accounts, fresh_prefix: Path) -> None:
    """`sh` with umask 000 and no USER (a cron job, say): the module's and the setup script's leases are 0644 and
    name the account that wrote them."""
    prefix = fresh_prefix
    script = f"""
umask 000
. {h.q(os.path.join(os.path.dirname(_lmod_init()), 'sh'))}
module use {h.q(prefix / 'modulefiles')}
module load lightning-xpu/{h.TAG} || echo "module failed $?"
bash -c 'umask 000; source "$SETUP" || echo "setup failed $?"'
"""
    env = {key: value for key, value in accounts.env(accounts.victim).items() if key not in ("USER", "LOGNAME")}
    env["SETUP"] = str(prefix / f"lightning-setup-{h.TAG}.sh")
    done = subprocess.run(["runuser", "-u", accounts.victim.name, "--", "sh", "-c", script], env=env,
                          cwd=accounts.victim.home, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0 and "failed" not in done.stdout, done.stdout + done.stderr
    leases = _victim_leases(prefix, accounts)
    assert {lease["what"] for lease in leases} == {"setup-script", "module"}, leases
    for lease in leases:
        assert lease["mode"] == "0o644" and lease["user"] == accounts.victim.name, lease



def test_a_layer_planted_by_another_account_is_never_used(accounts: Accounts, shared_install: SharedInstall) -> None:
    """A LIGHTNING_XPU_USER_BASE other members can write (a project directory, say) where the attacker made the
    victim's layer first, recording the victim's install and build: the victim's module and setup script leave it
    out in one line, and none of its code runs in the victim's Python."""
    prefix = shared_install.prefix
    build = os.path.realpath(prefix / h.TAG).rsplit("/", 1)[1]
    base = accounts.base / "project layers"
    base.mkdir(mode=0o3777)
    base.chmod(0o3777)
    owned = accounts.victim.home / "owned-by-attacker"
    layer = base / h.TAG
    record = "".join(f"{key}={value}\\n" for key, value in
                     (("prefix", prefix), ("tag", h.TAG), ("build", build), ("python", "3.11"), ("pins", "none")))
    plant = f"""set -e
"{prefix / h.TAG}/bin/python" -m venv --without-pip {h.q(layer)}
printf '{record}' >{h.q(layer / 'lightning-xpu-layer')}
for sites in {h.q(layer)}/lib/python3*/site-packages; do
  echo "import os; open({str(owned)!r}, 'w').write('ran as ' + str(os.getuid()))" >"$sites/aaa_planted.pth"
done
chmod -R a+rwX {h.q(layer)}
"""
    planted = accounts.run(accounts.attacker, plant)
    assert planted.returncode == 0, planted.stderr
    for entry in ("setup script", "module"):
        done = accounts.run(accounts.victim, f"{h.load_line(entry, prefix, h.TAG)}\necho venv=$VIRTUAL_ENV\n"
                                             "python -c 'import lightning_xpu'",
                            env=accounts.env(accounts.victim, LIGHTNING_XPU_USER_BASE=str(base)))  # fmt: skip
        assert done.returncode == 0 and f"venv={prefix}/.envs/{build}" in done.stdout, done.stdout + done.stderr
        said = " ".join(done.stderr.split())
        assert "your user layer" in said and "is not yours alone" in said, said
        assert not owned.exists(), f"the attacker's layer ran in the victim's {entry}"
