"""Issue 27, item 8: pins no route breaks silently.

Each route around the pins that issue 27 found (`pip install --isolated`, `python -m pip` without PIP_CONSTRAINT,
uv with its own `--constraint` or without UV_CONSTRAINT, a pinned package under another distribution's name,
`lightning-fabric`, and PyPI's CUDA torchvision next to a `+cpu` torch) is refused in one line, or, where it cannot
be (PIP_CONFIG_FILE=/dev/null with `python -m pip`, a uv run by its path), caught at the next start by `lightning-xpu
doctor` and the validation job. The module and the setup script keep a site's own PIP_CONSTRAINT and UV_CONSTRAINT
next to the pins, and `module unload` (real Lmod) restores them exactly.

A small prebuilt environment (install_harness.make_prebuilt_env: torch 2.13.0+cpu and Lightning from the base venv)
with the pins the install writes (lxpu_admin/envside/pins.py) and the repository's modulefile body and setup library;
real pip and uv install tiny wheels built here, offline (`--dry-run` where the route itself is what is tested).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lxpu_admin.envside import pins
from tests.install import install_harness as h
from tests.install.test_user_env import _uv, _wheel


def file_url(path: Path) -> str:
    """A file: URL as the module, the setup script and the guard write it (percent-encoded, no white space)."""
    return "file://" + quote(str(path))

pytestmark = [pytest.mark.install, pytest.mark.lmod]

REFUSED = "lightning-xpu: refused: "


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("pins")
    prefix = work / "pre fix"
    prefix.mkdir()
    root = h.laid_out_prefix(prefix)
    wheels = work / "wheels"
    wheels.mkdir()
    fabric = pins.read_constraints(root / pins.RELATIVE)["pytorch-lightning"]  # it ships lightning_fabric
    for name, version, requires in (("lightning", "2.6.5", ()), ("lightning-fabric", "2.6.5", ()),
                                    ("torch", "2.13.0", ()), ("torchvision", "0.28.0", ("torch==2.13.0",)),
                                    ("lxpu-demo", "1.0", ()), ("lxpu-demo", "2.0", ())):
        _wheel(wheels, name, version, requires)
    site = work / "site"
    site.mkdir()
    (site / "constraints.txt").write_text("lxpu-demo==1.0\n")
    (site / "other a.txt").write_text("# a site's second constraints file\n")
    return {"work": work, "prefix": prefix, "root": root, "wheels": wheels, "site": site, "fabric": fabric}


def shell(world: dict[str, Any], name: str, script: str, **extra: str) -> dict[str, tuple[int, str, str]]:
    """Run `script` in bash with a home of its own; each `run NAME COMMAND` line's (status, stdout, stderr)."""
    home = world["work"] / f"home-{name}"
    home.mkdir(exist_ok=True)
    results = home / "results"
    results.mkdir(exist_ok=True)
    prelude = f"""
results={h.q(results)}
run() {{ local name=$1; shift; "$@" >"$results/$name.out" 2>"$results/$name.err"; echo $? >"$results/$name.rc"; }}
find_links="--no-index --find-links={file_url(world['wheels'])}"  # no white space: one word each
"""
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "UV_CACHE_DIR": str(home / "uv-cache"),
           "UV_NO_CONFIG": "1", **extra}
    done = subprocess.run(["bash", "-c", prelude + script], env=env, cwd=home, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return {path.stem: (int(path.read_text()), (results / f"{path.stem}.out").read_text(),
                        (results / f"{path.stem}.err").read_text()) for path in results.glob("*.rc")}


def assert_refused(result: tuple[int, str, str], *words: str) -> None:
    """Refused by the guard: a failure, nothing on stdout, one line on stderr holding `words`."""
    status, out, err = result
    assert status != 0 and not out and len(err.splitlines()) == 1 and err.startswith(REFUSED), result
    assert all(word in err for word in words), (words, err)


def assert_not_installed(result: tuple[int, str, str], *words: str) -> None:
    """pip's own refusal (no guard on this route): a failure, nothing installed, and pip's answer holds `words`."""
    status, out, err = result
    assert status != 0 and "Would install" not in out and "Successfully installed" not in out, result
    assert all(word in out + err for word in words), (words, result)


def test_pins_cover_a_package_shipped_under_another_name(world: dict[str, Any]) -> None:
    """pytorch-lightning ships lightning_fabric: `lightning-fabric` is pinned at its version."""
    written = pins.read_constraints(world["root"] / pins.RELATIVE)
    assert written["lightning-fabric"] == written["pytorch-lightning"], written
    assert (world["root"] / "pip.conf").read_text().splitlines()[1:] == [
        "[install]", f"constraint = {file_url(world['root'] / pins.RELATIVE)}"]


def test_a_package_two_distributions_share_is_not_pinned() -> None:
    """A namespace several pinned distributions ship (nvidia/ of CUDA's libraries) has no one version: not pinned;
    a package shipped by one under another name is (torch's functorch)."""
    dists = {
        "torch": ("torch", "2.13.0", ["nvidia-a==12.1", "nvidia-b==9.0"], ["functorch", "torch"]),
        "nvidia-a": ("nvidia-a", "12.1", [], ["nvidia"]),
        "nvidia-b": ("nvidia-b", "9.0", [], ["nvidia"]),
    }
    assert pins.pinned(dists) == {"functorch": "2.13.0", "nvidia-a": "12.1", "nvidia-b": "9.0", "torch": "2.13.0"}


def test_routes_around_the_guard_are_refused(world: dict[str, Any]) -> None:
    """In the environment itself (a writable install of one's own): every route issue 27 took is refused."""
    results = shell(world, "routes", f"""
{h.load_line("setup script", world["prefix"], h.TAG)}
run isolated pip install --isolated --dry-run --no-deps $find_links lightning==2.6.5
run isolated-no-config env PIP_CONFIG_FILE=/dev/null pip install --isolated --dry-run $find_links lightning==2.6.5
run fabric pip install --dry-run --no-deps $find_links lightning-fabric==2.6.5
run module-pip env -u PIP_CONSTRAINT python -m pip install --dry-run --no-deps $find_links lightning==2.6.5
run module-pip-isolated python -m pip install --isolated --dry-run --no-deps --force-reinstall $find_links torch==2.13.0
run torchvision pip install --dry-run $find_links torchvision
run torchvision-spec pip install --dry-run --no-deps $find_links "torchvision>=0.28"
run torchvision-labelled pip install --dry-run --no-deps $find_links torchvision==0.28.0+cpu
""")
    assert_refused(results["isolated"], "lightning==2.6.5", "lightning==2.6.6")
    assert_refused(results["isolated-no-config"], "lightning==2.6.5", "lightning==2.6.6")
    assert_refused(results["fabric"], "lightning-fabric==2.6.5", f"lightning-fabric=={world['fabric']}")
    assert_not_installed(results["module-pip"], "(constraint) lightning==2.6.6")
    assert_not_installed(results["module-pip-isolated"])
    for name in ("torchvision", "torchvision-spec"):
        assert_refused(results[name], "+cpu", "2.13.0+cpu", "--index-url https://download.pytorch.org/whl/cpu")
    # The labelled build passes the guard (pip then finds none here: PyTorch's cpu index is not reachable).
    status, _, err = results["torchvision-labelled"]
    assert status != 0 and REFUSED not in err and "torchvision==0.28.0+cpu" in err, results["torchvision-labelled"]


def doctor_pins(report: Path) -> tuple[str, str]:
    check = next(c for c in json.loads(report.read_text())["checks"] if c["name"] == "pins")
    return check["status"], check["reason"]


def test_an_escape_is_caught_by_doctor_and_validation(world: dict[str, Any]) -> None:
    """A real install around every guard (no pip.conf, no PIP_CONSTRAINT, `python -m pip`) into the user layer:
    doctor (the layer's Python and the environment's) and both validation levels list it and fail."""
    load = h.load_line("setup script", world["prefix"], h.TAG)
    results = shell(world, "escape", f"""
{load}
python -m lightning_xpu user-env >/dev/null
{load}
run before python -m lightning_xpu validate --level site --only pins --json before.json
run doctor-before python -m lightning_xpu doctor --json doctor-before.json
run layer-module-pip env -u PIP_CONSTRAINT python -m pip install --isolated --dry-run --no-deps $find_links \
    lightning==2.6.5
run escape env -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null python -m pip install --no-deps $find_links \\
    lightning-fabric==2.6.5 torchvision==0.28.0
run doctor python -m lightning_xpu doctor --json doctor.json
run env-doctor "$LIGHTNING_XPU_ROOT/bin/python" -m lightning_xpu doctor --json env-doctor.json
run site python -m lightning_xpu validate --level site --only pins --json site.json
run smoke python -m lightning_xpu validate --level smoke --only pinned_packages --json smoke.json
""")
    home = world["work"] / "home-escape"
    assert results["before"][0] == 0, results["before"]
    assert doctor_pins(home / "doctor-before.json")[0] == "pass"
    assert_not_installed(results["layer-module-pip"], "(constraint) lightning==2.6.6")  # the layer's pip.conf
    assert results["escape"][0] == 0 and "Successfully installed" in results["escape"][1], results["escape"]
    for report in ("doctor.json", "env-doctor.json"):
        status, reason = doctor_pins(home / report)
        assert status == "fail", (report, reason)
        assert f"lightning-fabric 2.6.5 in {home}/.local/lightning-xpu/{h.TAG}" in reason, reason
        assert f"(pinned {world['fabric']})" in reason and "torchvision 0.28.0" in reason, reason
        assert "built for torch==2.13.0 from PyPI" in reason and "pip uninstall lightning-fabric torchvision" in reason
    for level in ("site", "smoke"):
        assert results[level][0] == 1, results[level]
        (check,) = json.loads((home / f"{level}.json").read_text())["checks"]
        assert check["status"] == "fail" and "lightning-fabric 2.6.5" in check["reason"], check


def real_uv(request: pytest.FixtureRequest) -> str:
    """LXPU_UV, uv on PATH, else the pinned uv of the session's real install (test_user_env._uv)."""
    found = os.environ.get("LXPU_UV") or shutil.which("uv")
    if found:
        return found
    return _uv(request.getfixturevalue("good_install"), request.getfixturevalue("tmp_path"))


def test_uv_routes(world: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """uv through the guard with constraints of its own (its --constraint replaces UV_CONSTRAINT) is refused; uv by
    its path without UV_CONSTRAINT installs, and doctor catches it."""
    uv = real_uv(request)
    other = world["site"] / "constraints.txt"
    load = h.load_line("setup script", world["prefix"], h.TAG)
    results = shell(world, "uv", f"""
{load}
python -m lightning_xpu user-env >/dev/null
{load}
run unset env -u UV_CONSTRAINT uv pip install --dry-run --offline --no-deps $find_links lightning==2.6.5
run own-constraint uv pip install --dry-run --offline --no-deps $find_links -c {h.q(other)} lightning==2.6.5
run torchvision uv pip install --dry-run --offline $find_links torchvision
run escape env -u UV_CONSTRAINT {shlex.quote(uv)} pip install --offline --no-deps $find_links lightning==2.6.5
run doctor python -m lightning_xpu doctor --json doctor.json
""", PATH=f"{Path(uv).parent}:/usr/local/bin:/usr/bin:/bin")
    for name in ("unset", "own-constraint"):
        assert_refused(results[name], "lightning==2.6.5", "lightning==2.6.6")
    assert_refused(results["torchvision"], "+cpu", "uv pip install 'torchvision==<version>+cpu'")
    assert results["escape"][0] == 0, results["escape"]
    status, reason = doctor_pins(world["work"] / "home-uv" / "doctor.json")
    assert status == "fail" and "lightning 2.6.5 in " in reason and "(pinned 2.6.6)" in reason, reason


def test_site_constraints_are_kept_and_restored(world: dict[str, Any]) -> None:
    """A site's PIP_CONSTRAINT applies next to the pins, under the module and the setup script; `module unload`
    restores it exactly, and leaves UV_CONSTRAINT unset as it was."""
    # Two files (one as a percent-encoded URL), two spaces between them: restored exactly as they were.
    site = f"{file_url(world['site'] / 'other a.txt')}  {world['site']}/constraints.txt"
    results = shell(world, "site", f"""
{h.load_line("module", world["prefix"], h.TAG)}
run loaded printenv PIP_CONSTRAINT
run loaded-uv printenv UV_CONSTRAINT
run site-pin pip install --dry-run --no-deps $find_links lxpu-demo==2.0
run our-pin pip install --dry-run --no-deps $find_links lightning==2.6.5
module unload lightning-xpu
run unloaded printenv PIP_CONSTRAINT
run unloaded-uv printenv UV_CONSTRAINT
( {h.load_line("setup script", world["prefix"], h.TAG)}
  run sourced printenv PIP_CONSTRAINT
  {h.load_line("setup script", world["prefix"], h.TAG)}
  run sourced-twice printenv PIP_CONSTRAINT )
""", PIP_CONSTRAINT=site)
    ours = file_url(world["root"] / pins.RELATIVE)
    assert results["loaded"][1].split() == [*site.split(), ours], results["loaded"]
    assert results["loaded-uv"][1].split() == [ours], results["loaded-uv"]
    status, out, err = results["site-pin"]  # the site's own pin (pip's answer: not one of the environment's)
    assert status != 0 and "(constraint) lxpu-demo==1.0" in out + err, results["site-pin"]
    assert_refused(results["our-pin"], "lightning==2.6.6")
    assert results["unloaded"][1] == f"{site}\n", results["unloaded"]
    assert results["unloaded-uv"][0] == 1 and not results["unloaded-uv"][1], results["unloaded-uv"]
    for name in ("sourced", "sourced-twice"):
        assert results[name][1].split() == [*site.split(), ours], results[name]
