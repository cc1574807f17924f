"""Issue 27, "What to build" 5: a user layer follows its build, and never serves another prefix.

Each test installs the small prebuilt environment (install_harness.make_prebuilt_env, copied by the real install job
under LXPU_TEST_PREBUILT: about a second per run) into prefixes of its own, makes the user's layer with
`lightning-xpu user-env` as a user would, then changes the install the way an administrator does (a rebuild and
`--prune --keep 0`, `--rollback`, a second prefix of the same tag, a rebuild with other pins) and runs the user's
shells through the real module (Lmod) and setup script. The prebuilt environment sees torch and Lightning through a
.pth file in its own site-packages, so a layer that still points at a removed build fails as it does on a real
install: `No module named 'torch'`. And what the module leaves behind after `--uninstall` (Why 8): nothing, once
unloaded.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import install_harness as h
import pytest

pytestmark = [pytest.mark.install, pytest.mark.lmod]

# In a user's shell: which build's site-packages this Python sees, and that torch and lightning_xpu import.
PROBE = ("python -c 'import sys, torch, lightning_xpu; "
         "print(\"sees\", \" \".join(sorted({p.split(\"/.envs/\")[1].split(\"/\")[0] for p in sys.path "
         "if \"/.envs/\" in p})))'")  # fmt: skip


class Site:
    """Prefixes installed from one prebuilt environment by the real install job, and a user's home."""

    def __init__(self, job: Path, source: Path, work: Path) -> None:
        self.job, self.source, self.work = job, source, work
        self.env = h.make_prebuilt_env(work / "env", source)
        self.home = work / "home"
        self.home.mkdir()

    def install(self, prefix: Path, *args: str, prebuilt: Path | None = None) -> str:
        result = h.run_job(self.job, *h.prebuilt_args(self.source), *args, prefix=prefix,
                           env=h.job_env(LXPU_TEST_PREBUILT=str(prebuilt or self.env)))  # fmt: skip
        assert result.returncode == 0, result.output
        return os.path.realpath(prefix / h.TAG).rsplit("/", 1)[1] if (prefix / h.TAG).exists() else ""

    def user_env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "PATH": "/usr/local/bin:/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                "PIP_CONFIG_FILE": os.devnull, "LANG": "C.UTF-8"}  # fmt: skip

    def shell(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", script], env=self.user_env(), cwd=self.home, capture_output=True,
                              text=True, timeout=300, check=False)  # fmt: skip

    @contextmanager
    def held_shell(self, load: str, then: str, out: Path) -> Iterator[Callable[[], str]]:
        """A shell that runs `load`, then waits (the job that keeps its build) until the caller's block ends, then
        runs `then`; the block starts once the load is done. Yields what the shell printed, once it has ended."""
        go = out.with_suffix(".go")
        shell = subprocess.Popen(
            ["bash", "-c", f"{load}\necho loaded\nwhile [ ! -e {h.q(go)} ]; do sleep 0.2; done\n{then}"],
            env=self.user_env(), cwd=self.home, stdout=out.open("w"), stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while "loaded" not in out.read_text():
                assert shell.poll() is None and time.monotonic() < deadline, out.read_text()
                time.sleep(0.2)
            yield out.read_text
            go.touch()
            assert shell.wait(timeout=120) == 0, out.read_text()
        finally:
            shell.kill()

    def make_layer(self, entry: str, prefix: Path) -> None:
        done = self.shell(f"{h.load_line(entry, prefix, h.TAG)}\npython -m lightning_xpu user-env")
        assert done.returncode == 0 and "user layer" in done.stdout, done.stdout + done.stderr


def _sees(done: subprocess.CompletedProcess[str]) -> list[str]:
    lines = [line for line in done.stdout.splitlines() if line.startswith("sees")]
    assert lines, done.stdout + done.stderr
    return lines[-1].split()[1:]


@pytest.fixture
def site(install_job: Path, source_repo: Path, tmp_path: Path) -> Site:
    return Site(install_job, source_repo, tmp_path)


@pytest.mark.parametrize("entry", ["setup script", "module"])
def test_layer_after_a_rebuild_and_prune(site: Site, tmp_path: Path, entry: str) -> None:
    """A job that loaded the module after a rebuild, with a layer made over the build before, keeps working through
    another rebuild and `--prune --keep 0` (which removes the layer's first build); a new shell then works too."""
    prefix = tmp_path / "pre fix"
    first = site.install(prefix)
    site.make_layer(entry, prefix)
    second = site.install(prefix, "--force")
    with site.held_shell(h.load_line(entry, prefix, h.TAG), PROBE, tmp_path / "job.out") as printed:
        third = site.install(prefix, "--force")
        site.install(prefix, "--prune", "--keep", "0")
        assert not (prefix / ".envs" / first).exists(), "the prune was to remove the layer's first build"
    said = printed()
    assert f"sees {second}" in said, said  # the build the job pinned (and leased), nothing else
    new = site.shell(f"{h.load_line(entry, prefix, h.TAG)}\n{PROBE}")
    assert new.returncode == 0 and _sees(new) == [third], new.stdout + new.stderr
    notes = [line for line in new.stderr.splitlines() if "user layer" in line]
    assert len(notes) <= 1 and (not notes or "now runs over" in new.stderr.replace("\n", " ")), new.stderr


def test_layer_after_a_rollback(site: Site, tmp_path: Path) -> None:
    """After `--rollback`, the user's next shell runs the rolled-back build's packages under its layer, not those
    of the build the layer was made over."""
    prefix = tmp_path / "prefix"
    first = site.install(prefix)
    second = site.install(prefix, "--force")
    site.make_layer("module", prefix)
    site.install(prefix, "--rollback")
    for entry in ("module", "setup script"):
        done = site.shell(f"{h.load_line(entry, prefix, h.TAG)}\necho venv=$VIRTUAL_ENV\n{PROBE}")
        assert done.returncode == 0 and _sees(done) == [first], (second, done.stdout + done.stderr)
        assert f"venv={site.home}/.local/lightning-xpu/{h.TAG}" in done.stdout, done.stdout


def test_a_layer_never_serves_another_prefix_of_its_tag(site: Site, tmp_path: Path) -> None:
    """A layer made over the site's install is refused, in one line naming the fix, under a personal prefix of the
    same tag (and `doctor` fails it there); the site's module keeps it."""
    site_prefix, own = tmp_path / "site", tmp_path / "own"
    site_build, own_build = site.install(site_prefix), site.install(own)
    site.make_layer("module", site_prefix)
    for entry in ("module", "setup script"):
        done = site.shell(f"{h.load_line(entry, own, h.TAG)}\necho venv=$VIRTUAL_ENV\n{PROBE}\n"
                          "python -m lightning_xpu doctor | grep user_layer")  # fmt: skip
        assert _sees(done) == [own_build] and f"venv={own}/.envs/{own_build}" in done.stdout, done.stdout
        said = " ".join(done.stderr.split())
        assert said.count("your user layer") == 1 and f"belongs to the install {site_prefix}" in said, said
        assert "export LIGHTNING_XPU_USER_BASE=<another directory> and run lightning-xpu user-env" in said, said
        assert "| `user_layer` | **FAILED** |" in done.stdout, done.stdout
    done = site.shell(f"{h.load_line('module', site_prefix, h.TAG)}\n{PROBE}\n"
                      "python -m lightning_xpu doctor | grep user_layer")  # fmt: skip
    assert _sees(done) == [site_build] and "| `user_layer` | passed |" in done.stdout, done.stdout + done.stderr


def test_a_layer_over_other_pins_is_refused_until_moved(site: Site, tmp_path: Path) -> None:
    """A rebuild with other pins: the layer is not used (one line naming `lightning-xpu user-env`), `doctor` fails
    it; `lightning-xpu user-env` moves it over the new build, and the next shell uses it."""
    prefix = tmp_path / "prefix"
    site.install(prefix)
    site.make_layer("setup script", prefix)
    pinned = tmp_path / "pinned-env"
    subprocess.run(["cp", "-a", str(site.env), str(pinned)], check=True)
    torch = subprocess.run([str(pinned / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (pinned / "share" / "lightning-xpu" / "constraints.txt").write_text(f"torch=={torch}\n")
    new = site.install(prefix, "--force", prebuilt=pinned)
    load = h.load_line("module", prefix, h.TAG)
    done = site.shell(f"{load}\necho venv=$VIRTUAL_ENV\npython -m lightning_xpu doctor | grep user_layer")
    said = " ".join(done.stderr.split())
    assert f"venv={prefix}/.envs/{new}" in done.stdout, done.stdout + done.stderr
    assert said.count("your user layer") == 1 and "run lightning-xpu user-env to move it over" in said, said
    assert "| `user_layer` | **FAILED** |" in done.stdout, done.stdout
    moved = site.shell(f"{load} 2>/dev/null\npython -m lightning_xpu user-env\n{load}\necho venv=$VIRTUAL_ENV\n"
                       f"{PROBE}")  # fmt: skip
    assert f"venv={site.home}/.local/lightning-xpu/{h.TAG}" in moved.stdout, moved.stdout + moved.stderr
    assert _sees(moved) == [new] and "your user layer" not in moved.stderr, moved.stdout + moved.stderr


def test_module_unload_after_uninstall_removes_what_the_load_set(site: Site, tmp_path: Path) -> None:
    """`--uninstall` while a shell has the module loaded: the module is no longer offered, and `module unload` in
    that shell still removes every variable the load set; the last build's prune removes the modulefile."""
    prefix = tmp_path / "prefix"
    site.install(prefix)
    then = (f"module unload lightning-xpu/{h.TAG}; echo unloaded=$?\n"
            'env | grep -E "^(LIGHTNING_XPU_ROOT|VIRTUAL_ENV|PYTHONUSERBASE)=" || :\n'
            'echo "path=$PATH"\nmodule -t avail lightning-xpu 2>&1 | sed "s/^/avail /"')
    with site.held_shell(h.load_line("module", prefix, h.TAG), then, tmp_path / "shell.out") as printed:
        site.install(prefix, "--uninstall")
    said = printed()
    assert "unloaded=0" in said and "LIGHTNING_XPU_ROOT=" not in said and "VIRTUAL_ENV=" not in said, said
    assert "PYTHONUSERBASE=" not in said and "/.envs/" not in said.split("path=")[1].split("\n")[0], said
    assert f"avail lightning-xpu/{h.TAG}" not in said, said
    site.install(prefix, "--prune", "--keep", "0")
    assert not (prefix / "modulefiles" / "lightning-xpu" / f"{h.TAG}.lua").exists()
    assert not (prefix / "modulefiles" / "lightning-xpu" / ".modulerc.lua").exists()
