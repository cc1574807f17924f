"""Issue 20, item 1: a user's own packages over a read-only environment, within the environment's pins.

A small prebuilt environment (install_harness.make_prebuilt_env: torch and Lightning from the base venv) with the
pins the install writes (lxpu_admin/envside/pins.py), the repository's modulefile body and setup library, made
read-only;
`lightning-xpu user-env` makes the layer; real pip (and uv, where one is at hand) install tiny wheels built here,
offline. One shell per entry (module, setup script) checks everything in order.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from lxpu_admin.envside import pins
from tests.install import install_harness as h

pytestmark = [pytest.mark.install, pytest.mark.lmod]

REPO = h.REPO


def _wheel(dest: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A pure-Python wheel with one module, written by hand (no build backend, no network)."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(dest / f"{module}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(text.encode())}")
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")


def _uv(install: h.GoodInstall, work: Path) -> str:
    """LXPU_UV, uv on PATH, else the pinned uv of the session's real install (from the wheel its tool cache keeps)."""
    return os.environ.get("LXPU_UV") or shutil.which("uv") or str(h.pinned_uv(install.prefix, work / "uv"))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, good_install: h.GoodInstall) -> dict[str, Path | str]:
    work = tmp_path_factory.mktemp("userenv")
    uv = Path(_uv(good_install, work))  # the install's pinned uv, kept in each build as the install keeps it
    tag = h.TAG
    # A shared install (made read-only below) and a user's own, writable one (for installs into the environment
    # itself: uv takes a lock file in the environment it installs into, even for a dry run).
    prefix, own = work / "shared prefix", work / "own prefix"
    for place in (prefix, own):
        place.mkdir()
        h.laid_out_prefix(place, uv=uv)
    wheels = work / "wheels"
    wheels.mkdir()
    _wheel(wheels, "lxpu-demo", "1.0")
    _wheel(wheels, "lxpu-needs-new-torch", "1.0", ("torch>99",))
    _wheel(wheels, "lxpu-needs-old-lightning", "1.0", ("lightning==1.0",))
    _wheel(wheels, "torch", "100.0")
    _wheel(wheels, "lightning", "1.0")
    for path in [prefix, *prefix.rglob("*")]:  # read-only for everyone (root still writes: see the listing check)
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    setup = f"lightning-setup-{tag}.sh"
    return {"prefix": prefix, "root": prefix / os.readlink(prefix / tag), "own": own, "tag": tag, "setup": setup,
            "wheels": wheels, "work": work}


def test_pins_are_derived_from_the_installed_distributions(world: dict[str, Path | str]) -> None:
    root = Path(world["root"])
    got = pins.read_constraints(root / pins.RELATIVE)
    python = root / "bin" / "python"
    versions = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('torch'), m.version('lightning'),"
                            " m.version('pytorch-lightning'))"],
        capture_output=True, text=True, check=True).stdout.split()
    assert (got["torch"], got["lightning"], got["pytorch-lightning"]) == tuple(versions)
    # Looser requirements of torch (filelock, ...) stay free.
    assert "filelock" not in got and "packaging" not in got


def _listing(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*") if not p.is_symlink())


@pytest.mark.parametrize("entry", ["setup script", "module"])
def test_user_layer_over_a_read_only_environment(
    entry: str, world: dict[str, Path | str], good_install: h.GoodInstall
) -> None:
    prefix, tag, wheels = Path(world["prefix"]), str(world["tag"]), Path(world["wheels"])
    home = Path(world["work"]) / f"home-{entry.replace(' ', '-')}"
    home.mkdir()
    load = h.load_line(entry, prefix, tag)
    find = f"--no-index --find-links {shlex.quote(str(wheels))}"

    def refused(name: str, command: str) -> str:
        return f"{command} {find} >{name}.out 2>{name}.err; echo {name} $?"

    # The refusals once, through the module (about 2 s per pip run here): in an environment itself (the user's own
    # install, no layer; its pip and uv, and its pip run by path with no pins exported), then in the layer. The
    # setup script's entry checks what differs: that it finds the layer.
    full = entry == "module"
    in_env = "\n".join([
        h.load_line(entry, Path(world["own"]), tag),
        refused("env-pip-torch", "pip install --dry-run torch==100.0"),
        refused("env-uv-torch", "uv pip install --dry-run --offline torch==100.0"),
        refused("env-uv-lightning", "uv pip install --dry-run --offline lxpu-needs-old-lightning"),
        refused("env-bare-pip-torch", 'env -u PIP_CONSTRAINT "$LIGHTNING_XPU_ROOT/bin/pip" install --dry-run'
                                      " lxpu-needs-new-torch"),
        f"pip install --dry-run --user {find} lxpu-demo 2>&1; echo env-user-flag $?",
    ]) if full else ""
    in_env = f"(\n{in_env}\n)" if full else ""  # a shell of its own, before the shared install is loaded
    in_layer = "\n".join([
        refused("layer-pip-torch", "pip install lxpu-needs-new-torch"),
        refused("layer-pip-lightning", "pip install lxpu-needs-old-lightning"),
        refused("layer-uv-torch", "uv pip install --offline torch==100.0"),
        refused("layer-uv-lightning", "uv pip install --offline lxpu-needs-old-lightning"),
        f"pip install --user {find} lxpu-demo 2>&1; echo user-flag $?",
    ]) if full else ""
    script = f"""
{in_env}
{load}
python -m lightning_xpu user-env; echo made $?
{load}
echo "venv $VIRTUAL_ENV"
pip install {find} lxpu-demo >/dev/null 2>&1; echo demo $?
python -c 'import lxpu_demo, lightning_xpu, torch, lightning; print("imports", lxpu_demo.VERSION, torch.__version__)'
{in_layer}
"""
    before = _listing(Path(world["root"]))
    # No uv of the user's on PATH: `uv pip install` runs the build's pinned uv, in the environment and in the layer.
    assert not any(Path(d, "uv").exists() for d in ("/usr/local/bin", "/usr/bin", "/bin"))
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "PIP_CONFIG_FILE": os.devnull,
           "UV_CACHE_DIR": str(home / "uv-cache"), "UV_NO_CONFIG": "1"}
    done = subprocess.run(["bash", "-c", script], env=env, cwd=home, capture_output=True, text=True, timeout=300,
                          check=False)
    out = done.stdout + done.stderr
    layer = home / ".local" / "lightning-xpu" / tag

    def status(name: str) -> int:
        return int(next(line.split()[-1] for line in done.stdout.splitlines() if line.startswith(name + " ")))

    assert status("made") == 0 and (layer / "pyvenv.cfg").is_file(), out
    assert f"venv {layer}" in done.stdout, out
    assert status("demo") == 0, out
    torch_pin = pins.read_constraints(Path(world["root"]) / pins.RELATIVE)["torch"]
    assert f"imports 1.0 {torch_pin}" in done.stdout, out
    assert _listing(Path(world["root"])) == before, "the shared environment changed"
    assert list(layer.glob("lib/python*/site-packages/lxpu_demo/__init__.py")), "lxpu-demo is in the layer"
    if not full:
        return
    pinned = pins.read_constraints(Path(world["root"]) / pins.RELATIVE)
    asked = {"torch": ("torch==100.0", "torch>99"), "lightning": ("lightning==1.0",)}
    for name in ("env-pip-torch", "env-uv-torch", "env-uv-lightning", "env-bare-pip-torch", "layer-pip-torch",
                 "layer-pip-lightning", "layer-uv-torch", "layer-uv-lightning"):
        package = name.rsplit("-", 1)[1]
        said = (home / f"{name}.err").read_text().splitlines()
        assert status(name) != 0 and not (home / f"{name}.out").read_text(), (name, out)
        assert len(said) == 1 and f"{package}=={pinned[package]}" in said[0], (name, said)
        assert any(wanted in said[0] for wanted in asked[package]), (name, said)
    assert status("user-flag") == 2 and "without --user" in out, out
    assert status("env-user-flag") == 2 and "lightning-xpu user-env" in out, out


def test_the_install_writes_the_pins_of_what_it_installed(good_install: h.GoodInstall) -> None:
    """The install writes constraints.txt (lxpu_admin/envside/pins.py) with the versions its manifest records, and puts
    the guard in front of the environment's pip and uv (the refusals themselves: the test above)."""
    bin_dir = good_install.prefix / h.TAG / "bin"
    assert all("lightning-xpu guard" in (bin_dir / name).read_text() for name in ("pip", "pip3", "uv"))
    # The install's pinned uv stays in the build, for the guard's uv (lightning_xpu/commands/pipguard.py PINNED_UV).
    kept = good_install.prefix / h.TAG / "libexec" / "lightning-xpu" / "uv"
    version = subprocess.run([str(kept), "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    assert f"uv=={version}" in (REPO / "recipes" / "tools" / "install-tools.txt").read_text()
    written = pins.read_constraints(good_install.prefix / h.TAG / pins.RELATIVE)
    installed = {pins.norm(p["name"]): p["version"] for p in good_install.manifest["packages"]}
    assert {"torch", "lightning", "pytorch-lightning", "lightning-fabric"} <= written.keys()
    assert {name: installed[name] for name in written if name in installed} == {
        name: version for name, version in written.items() if name in installed}
    # A package a pinned distribution ships under another name (pytorch-lightning's lightning_fabric) is pinned at
    # its shipper's version.
    assert written["lightning-fabric"] == installed["pytorch-lightning"]
