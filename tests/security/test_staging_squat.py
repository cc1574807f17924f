"""Node-local staging cannot be squatted (issue 27, Why 1): another account that pre-makes a victim's staging
directories for the victim's next Slurm jobs never gets its code run in the victim's job.

The attacker (a member of the shared group) reads the image's sha256 from the world-readable pack.env, asks Slurm
for the next job ids (its own job's id), and plants, for each of the next ids, what lightning-xpu-stage used to
trust: `<node tmp>/lxpu-stage.<victim uid>.<id>/<tag>/.lxpu-staged` holding that sha256 and a `bin/python` of its
own, plus the sbcast targets `.image`/`.stage` as links into the victim's home. In the new layout it also takes
`<node tmp>/lxpu-<victim uid>` (its own directory, a link to one, or the victim's own left writable to all) with
the same trees inside. The victim then submits a real `sbatch` job that sources the shared install's setup script
with LIGHTNING_XPU_STAGE=1 and runs python. The attacker's python writes a marker and appends to the victim's
~/.bashrc: neither may happen; the job runs from its own private copy, or from the shared install with one line
naming the squatted path.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.install import install_harness as h
from tests.security.accounts import Accounts
from tests.security.conftest import SharedInstall

pytestmark = pytest.mark.security

NODE_TMP = Path("/tmp")  # the default node-local parent of a job (no TMPDIR, no LIGHTNING_XPU_STAGE_DIR)
NEXT_IDS = 40  # job ids planted ahead: other users' jobs may come in between
WARNING = "lightning-xpu-stage: warning: running from the shared install "

# The attacker's interpreter: leaves a marker, tampers with the victim's files, then runs the real Python so the
# job looks normal.
ATTACKER_PYTHON = """#!/bin/sh
echo "attacker code ran as $(id -un)" > {markers}/ran-$(id -un)-$$
echo 'echo owned' >> "$HOME/.bashrc"
exec /usr/bin/python3 "$@"
"""


@dataclass
class Packed:
    prefix: Path
    build: Path  # the published build the setup script points at
    sha256: str


@pytest.fixture(scope="module")
def packed(shared_install: SharedInstall, accounts: Accounts) -> Iterator[Packed]:
    """A shared install of its own with a packed image: the administrator (root) adds lightning-xpu-stage and packs
    the published build as the install's steps 6 and 9 would (share/lightning-xpu/pack/env.tar.gz and pack.env),
    since the prebuilt install of the suite skips them (packing a real build takes minutes)."""
    h.require(h.slurm_up(), "Slurm (a real sbatch job as the victim)")
    prefix = accounts.base / "admin" / f"packed prefix {secrets.token_hex(3)}"
    result = shared_install.run_install(prefix=prefix)
    assert result.returncode == 0, result.output
    build = (prefix / h.TAG).resolve()
    # Step 6's part the prebuilt copy skips: the checkout's lightning-xpu-stage into the environment's bin/.
    stage = shared_install.source / "scripts" / "common" / "stage" / "lightning-xpu-stage"
    subprocess.run(["install", "-m", "0755", str(stage), str(build / "bin")], check=True)
    sha256 = _pack(build)
    yield Packed(prefix, build, sha256)
    shutil.rmtree(prefix, ignore_errors=True)


def _pack(build: Path) -> str:
    """The build's image and pack.env (the fields lxpu_admin/envside/pack.py records), readable by every account."""
    pack = build / "share" / "lightning-xpu" / "pack"
    pack.mkdir(parents=True, exist_ok=True)
    image = build.parent / f".{build.name}.env.tar.gz.tmp"  # outside the tree tar reads ("file changed": exit 1)
    subprocess.run(["tar", "-czf", str(image), "-C", str(build), "."], check=True)
    image.rename(pack / "env.tar.gz")
    sha256 = _sha(pack / "env.tar.gz")
    unpacked = sum(path.lstat().st_size for path in build.rglob("*"))
    (pack / "pack.env").write_text(
        f"status=ok\nfile=share/lightning-xpu/pack/env.tar.gz\nformat=tar.gz\nsha256={sha256}\n"
        f"bytes={(pack / 'env.tar.gz').stat().st_size}\nunpacked_bytes={unpacked}\nbase_staged=0\nlibpython=0\n"
        f"site=generic\ntag={h.TAG}\nnote=the environment; the base interpreter stays shared\n"
    )
    subprocess.run(["chmod", "-R", "a+rX", str(pack)], check=True)
    return sha256


@dataclass
class Scene:
    """What the attack leaves to check: the marker directory and the victim's files with their hashes."""

    markers: Path
    victim_files: dict[Path, str]
    squat: Path  # <node tmp>/lxpu-<victim uid>


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _remove_plants(accounts: Accounts) -> None:
    uid = accounts.victim.uid
    plants = [*NODE_TMP.glob(f"lxpu-stage.{uid}.*"), NODE_TMP / f"lxpu-{uid}", *NODE_TMP.glob(f"lxpu-squat-{uid}-*")]
    for path in plants:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)


@pytest.fixture
def scene(accounts: Accounts) -> Iterator[Scene]:
    _remove_plants(accounts)
    markers = accounts.base / f"markers-{secrets.token_hex(3)}"
    markers.mkdir()
    markers.chmod(0o1777)  # the attacker's code, run as anyone, can leave its marker here
    home = accounts.victim.home
    made = accounts.run(accounts.victim, "echo 'export EDITOR=vi' > ~/.bashrc; echo 'results' > ~/important.txt")
    assert made.returncode == 0, made.stderr
    files = {home / ".bashrc": _sha(home / ".bashrc"), home / "important.txt": _sha(home / "important.txt")}
    yield Scene(markers, files, NODE_TMP / f"lxpu-{accounts.victim.uid}")
    _remove_plants(accounts)
    shutil.rmtree(markers, ignore_errors=True)


def _plant_tree(directory: str, markers: Path, sha256: str) -> str:
    """Shell lines (run as the attacker) that make DIRECTORY/<tag> look like a finished copy of the image."""
    tree = f"{directory}/{h.TAG}"
    python = ATTACKER_PYTHON.format(markers=h.q(markers))
    return (f"mkdir -p {tree}/bin && printf '%s\\n' {sha256} > {tree}/.lxpu-staged && "
            f"cat > {tree}/bin/python <<'EOF'\n{python}EOF\n"
            f"chmod -R a+rwX {directory} && chmod a+x {tree}/bin/python\n")  # fmt: skip


def _attack(accounts: Accounts, packed: Packed, scene: Scene, layout: str) -> None:
    """As the attacker: plant the trees for the victim's next job ids in the old layout, and take the new layout's
    per-user directory as LAYOUT says."""
    uid, home = accounts.victim.uid, accounts.victim.home
    # The attacker's own job (held, then cancelled) tells it the current job id.
    first = accounts.run(accounts.attacker, "id=$(sbatch --parsable --hold -o /dev/null --wrap true) && scancel $id "
                         "&& echo $id", timeout=120)  # fmt: skip
    assert first.returncode == 0, first.stderr
    last_id = int(first.stdout.strip().split(";")[0])
    ids = range(last_id + 1, last_id + 1 + NEXT_IDS)
    squat_target = NODE_TMP / f"lxpu-squat-{uid}-{secrets.token_hex(3)}"
    lines = ["set -e"]
    for job in ids:
        old = f"{NODE_TMP}/lxpu-stage.{uid}.{job}"
        lines.append(_plant_tree(old, scene.markers, packed.sha256))
        lines.append(f"ln -sfn {h.q(home / 'important.txt')} {old}.image; ln -sfn {h.q(home / '.bashrc')} {old}.stage")
    if layout == "attacker's directory":
        lines.append(f"mkdir -m 0777 {scene.squat}")
        inside = scene.squat
    elif layout == "a link to the attacker's directory":
        lines.append(f"mkdir -m 0777 {squat_target} && ln -s {squat_target} {scene.squat}")
        inside = squat_target
    elif layout == "the victim's own, writable to all":
        made = accounts.run(accounts.victim, f"umask 000 && mkdir {scene.squat}")
        assert made.returncode == 0, made.stderr
        inside = scene.squat
    else:
        inside = None
    if inside is not None:
        lines += [_plant_tree(f"{inside}/stage.{job}", scene.markers, packed.sha256) for job in ids]
    planted = accounts.run(accounts.attacker, "\n".join(lines))
    assert planted.returncode == 0, planted.stderr


@dataclass
class Job:
    id: str
    output: str

    def python_prefix(self) -> str:
        return next(line.split(" ", 1)[1] for line in self.output.splitlines() if line.startswith("python-prefix "))

    def warnings(self) -> list[str]:
        # Not the line naming the mode (issue 30: "lightning-xpu-stage: copy staging: ..."), said on success too.
        return [line for line in self.output.splitlines() if line.startswith("lightning-xpu-stage: warning")]


def _victim_job(accounts: Accounts, packed: Packed) -> Job:
    """The victim's sbatch job: the shared install's setup script with LIGHTNING_XPU_STAGE=1, then python."""
    home = accounts.victim.home
    script = home / "job.sh"
    script.write_text("\n".join([
        "#!/bin/bash",
        "set -euo pipefail",
        "export LIGHTNING_XPU_STAGE=1",
        f"source {h.q(packed.prefix / f'lightning-setup-{h.TAG}.sh')}",
        "python -c 'import sys; print(\"python-prefix\", sys.prefix)'",
        "",
    ]))
    os.chown(script, accounts.victim.uid, accounts.victim.gid)
    done = accounts.run(accounts.victim, f"sbatch --parsable --wait -o {h.q(home)}/job-%j.out {h.q(script)}",
                        timeout=300)  # fmt: skip
    job_id = done.stdout.strip().split(";")[0]
    output = (home / f"job-{job_id}.out").read_text() if re.fullmatch(r"\d+", job_id) else ""
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{output}"
    return Job(job_id, output)


def _attacker_never_ran(scene: Scene) -> None:
    assert list(scene.markers.iterdir()) == [], "the attacker's python ran in the victim's job"
    for path, sha in scene.victim_files.items():
        assert _sha(path) == sha, f"{path} changed"


def test_planted_old_layout_is_ignored_and_the_job_runs_from_its_own_private_copy(
    accounts: Accounts, packed: Packed, scene: Scene
) -> None:
    _attack(accounts, packed, scene, "old layout only")
    job = _victim_job(accounts, packed)
    _attacker_never_ran(scene)
    assert job.warnings() == [], job.output
    assert job.python_prefix() == f"{scene.squat}/stage.{job.id}/{h.TAG}", job.output
    # The per-user directory stays, the victim's and private; the job's copy is gone with the job. What stays in it
    # are the node-local compile caches (cache.<build>, kept for the next job on purpose), the victim's and private.
    info = scene.squat.lstat()
    assert (info.st_uid, oct(info.st_mode & 0o7777)) == (accounts.victim.uid, oct(0o700))
    left = list(scene.squat.iterdir())
    assert all(path.name.startswith("cache.") for path in left), left
    assert all((path.lstat().st_uid, path.lstat().st_mode & 0o077) == (accounts.victim.uid, 0) for path in left), left


@pytest.mark.parametrize("layout", ["attacker's directory", "a link to the attacker's directory",
                                    "the victim's own, writable to all"])  # fmt: skip
def test_a_squatted_private_directory_is_refused_in_one_line_and_the_job_runs_from_the_shared_install(
    accounts: Accounts, packed: Packed, scene: Scene, layout: str
) -> None:
    _attack(accounts, packed, scene, layout)
    job = _victim_job(accounts, packed)
    _attacker_never_ran(scene)
    assert job.python_prefix() == str(packed.build), job.output
    (warning,) = job.warnings()
    assert warning.startswith(WARNING + str(packed.build)), warning
    assert f"refusing {scene.squat}: " in warning, warning
    owner = accounts.victim if layout.startswith("the victim") else accounts.attacker
    assert f"{owner.name} (uid {owner.uid})" in warning, warning
    expected = {"attacker's directory": "not by you", "a link to the attacker's directory": "symbolic link",
                "the victim's own, writable to all": "mode 0777"}[layout]  # fmt: skip
    assert expected in warning, warning
