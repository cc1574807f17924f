"""The Python an environment is built from, checked at step 1 (issue 27, Why 8): a shared install's group must be
able to reach it, and it must be able to give a venv its pip (Debian's system Python keeps its pip wheel in
/usr/share/python-wheels, and its ensurepip in the separate python3.X-venv package).

Real interpreters only: Debian's /usr/bin/python3.11 (with python3.11-venv, as CI has it), and a copy of it whose
standard library lacks ensurepip, which is what that Python is without python3.11-venv.
"""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import install_harness as h
import pytest

pytestmark = pytest.mark.install

DEBIAN_PYTHON = Path("/usr/bin/python3.11")
DEBIAN_WHEELS = Path("/usr/share/python-wheels")


def debian_python() -> Path:
    h.require(DEBIAN_PYTHON.is_file() and any(DEBIAN_WHEELS.glob("pip-*.whl")),
              "Debian's python3.11 with python3.11-venv (its pip wheel in /usr/share/python-wheels)")  # fmt: skip
    return DEBIAN_PYTHON


def python_on_path(directory: Path, python: Path) -> dict[str, str]:
    """The job's environment with PYTHON first on PATH as python3.11 (what the install builds a venv from)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "python3.11").symlink_to(python)
    return h.job_env(PATH=f"{directory}:{os.environ['PATH']}")


def test_debian_python_seeds_pip_from_its_wheel_directory(install_job: Path, source_repo: Path,
                                                          tmp_path: Path) -> None:  # fmt: skip
    """On main the venv got no pip ("bundles no pip wheel": it looked in ensurepip/_bundled only) and the smoke job
    failed a minute later; the pip wheel is where Debian's ensurepip takes it from."""
    env = python_on_path(tmp_path / "bin", debian_python())
    result = h.run_job(install_job, "--source", str(source_repo), *h.PIP_SOURCE, "--dry-run", prefix=tmp_path / "p",
                       env=env)  # fmt: skip
    assert result.returncode == 0, result.output
    assert "bundles no pip wheel" not in result.output
    assert f"--no-index --no-deps {DEBIAN_WHEELS}/pip-" in result.output, result.output


def debian_python_without_venv(dest: Path) -> Path:
    """Debian's python3.11 as it is without python3.11-venv and python3-pip-whl: its own copy, so that it (and a
    venv of it) finds its standard library next to it, without ensurepip, its configured wheel directory empty."""
    (dest / "bin").mkdir(parents=True)
    shutil.copy2(debian_python(), dest / "bin" / "python3.11")
    stdlib = dest / "lib" / "python3.11"
    stdlib.mkdir(parents=True)
    no_wheels = dest / "share" / "python-wheels"
    no_wheels.mkdir(parents=True)
    for entry in Path("/usr/lib/python3.11").iterdir():
        if entry.name.startswith("_sysconfigdata_"):
            text = entry.read_text().replace(f"'WHEEL_PKG_DIR': '{DEBIAN_WHEELS}/'", f"'WHEEL_PKG_DIR': '{no_wheels}/'")
            (stdlib / entry.name).write_text(text)
        elif entry.name != "ensurepip":
            (stdlib / entry.name).symlink_to(entry)
    return dest / "bin" / "python3.11"


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_debian_python_without_its_venv_package_stops_at_step_1(
    installer: str, install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    """On main this failed at step 3 without saying why (uv cannot be bootstrapped by it, `python -m venv` exits
    1), and with uv from a warm cache it made a venv without pip (a warning) whose smoke job failed a minute
    later. Now step 1 stops both in one line naming the package to install."""
    python = debian_python_without_venv(tmp_path / "python")
    env = h.job_env(PATH=f"{python.parent}:{os.environ['PATH']}")
    prefix = tmp_path / "pre fix"
    result = h.run_job(install_job, "--source", str(source_repo), "--pip-source", "recipe", "--installer",
                       installer, prefix=prefix, env=env)  # fmt: skip
    assert result.returncode == 2, result.output
    last = result.last_line
    assert "FAILED at step [1/" in last and f"{python} has no ensurepip module" in last, result.output
    assert "apt-get install python3.11-venv" in last and "--base-python" in last
    assert not (prefix / ".envs").exists(), "a build was started"


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A directory every account can enter (pytest's own temporary directories are private)."""
    path = Path(tempfile.mkdtemp(prefix="lxpu-reach."))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_shared_group_over_a_python_in_a_private_directory_is_warned(install_job: Path, source_repo: Path,
                                                                     reachable_dir: Path) -> None:  # fmt: skip
    """A --shared-group install over a base Python under a mode 0700 home: the group's members would get
    "Permission denied" from the module; step 1 now says so, naming the directory and the fix."""
    home = reachable_dir / "home"
    home.mkdir(mode=0o700)
    venv = home / "py"
    subprocess.run([str(debian_python()), "-m", "venv", "--copies", "--without-pip", str(venv)], check=True)
    sites = subprocess.run([h.base_python(), "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "_base.pth").write_text(f"{sites}\n")  # torch and Lightning, as --base-python needs
    group = grp.getgrgid(os.getgid()).gr_name
    args = ["--source", str(source_repo), *h.PIP_SOURCE, "--base-python", str(venv / "bin" / "python"),
            "--shared-group", group, "--dry-run"]  # fmt: skip
    result = h.run_job(install_job, *args, prefix=reachable_dir / "prefix")
    assert result.returncode == 0, result.output
    (warning,) = [line for line in result.output.splitlines() if "its members cannot reach" in line]
    assert warning.startswith(f"WARNING: --shared-group {group}: its members cannot reach {venv}/"), warning
    assert f": {home} is mode 0700, owned by root:{group}; let the group in (chmod o+x {home}" in warning
    home.chmod(0o755)
    result = h.run_job(install_job, *args, prefix=reachable_dir / "prefix")
    assert result.returncode == 0 and "its members cannot reach" not in result.output, result.output
