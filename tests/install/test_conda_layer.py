"""The conda layer (issue 21): a real conda prefix from a local channel, with no conda executable.

One README-style install with --env-manager conda (module-scoped, shared by several assertions); the lock and
fault tests run the conda layer alone (lxpu_admin.install.conda_layer), against the CI channel built once by
ci/conda_channel.py (build/conda-channel, cached).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin import paths
from lxpu_admin.install import conda_layer

pytestmark = pytest.mark.install

ENGINE = paths.LIB  # what PYTHONPATH holds to find the admin package


@pytest.fixture(scope="module")
def channel() -> Path:
    built = subprocess.run(
        [sys.executable, str(h.REPO / "ci" / "conda_channel.py")], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip().removeprefix("file://"))


@pytest.fixture(scope="module")
def python_version(channel: Path) -> str:
    return (channel / "python.txt").read_text().strip()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An install prefix whose .tools (the bootstrapped py-rattler) and package cache the tests share."""
    return tmp_path_factory.mktemp("conda") / "prefix with space"


def layer(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-B", "-m", "lxpu_admin.install.conda_layer", *args],
        env={**(env or os.environ), "PYTHONPATH": str(ENGINE)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def installed_records(env: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in (env / "conda-meta").glob("*.json")}


@pytest.fixture(scope="module")
def conda_install(install_job: Path, source_repo: Path, channel: Path, tmp_path_factory) -> tuple[Path, h.JobResult]:
    assert shutil.which("conda") is None, "this test proves the conda layer needs no conda executable"
    prefix = tmp_path_factory.mktemp("conda-install") / "prefix with space"
    result = h.run_job(
        install_job,
        "--source",
        str(source_repo),
        "--variant",
        "cpu",
        "--env-manager",
        "conda",
        "--conda-channel",
        channel.as_uri(),
        *h.PIP_SOURCE,
        prefix=prefix,
    )
    assert result.returncode == 0, result.output
    return prefix, result


def test_install_builds_a_real_conda_prefix(conda_install: tuple[Path, h.JobResult], tmp_path: Path) -> None:
    prefix, result = conda_install
    env = (prefix / h.TAG).resolve()
    record = (env / conda_layer.RECORD).read_text().splitlines()
    urls = [line.split("#")[0] for line in record if not line.startswith(("#", "@"))]
    records = installed_records(env)
    # conda-meta records every package of the layer, each with its files and the sha256 we checked.
    assert sorted(Path(u).name.removesuffix(".tar.bz2") + ".json" for u in urls) == sorted(records)
    checked = {line.split("#sha256:")[1] for line in record if "#sha256:" in line}
    assert {r["sha256"] for r in records.values()} == checked
    python = next(r for r in records.values() if r["name"] == "python")
    assert "bin/python" in python["files"]
    # python is the conda layer's own interpreter (not a venv over another Python), and torch came from pip.
    assert not (env / "pyvenv.cfg").exists()
    probe = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import sys, torch, lightning; print(sys.prefix); print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.splitlines() == [str(env)] * 2
    manifest = h.published_manifest(prefix)
    assert manifest["env_manager"] == "conda" and manifest["status"] == "installed"
    assert "py-rattler" in result.output and "sha256 checked" in result.output
    # Not one file hard-linked from rattler's package cache (its default), read-only, matching its record.
    h.assert_sealed(prefix)
    h.assert_install_works(prefix, tmp_path)  # module load, the setup script, a toy fit


def test_a_rerun_without_env_manager_keeps_the_conda_tag_conda(
    conda_install: tuple[Path, h.JobResult], install_job: Path, source_repo: Path, channel: Path
) -> None:
    """Issue 28: the site's default is a venv; re-running the install of a conda tag without --env-manager used to
    rebuild it as a venv. The published build's manifest says conda, so the re-run is the same install: a no-op."""
    prefix, _ = conda_install
    args = ["--source", str(source_repo), "--variant", "cpu", "--conda-channel", channel.as_uri(), *h.PIP_SOURCE]
    again = h.run_job(install_job, *args, "--dry-run", prefix=prefix)
    assert again.returncode == 0, again.output
    assert f"environment: conda (the published {h.TAG}'s, from its manifest.json" in again.output, again.output
    assert "already installed with these inputs" in again.output
    switched = h.run_job(install_job, *args, "--env-manager", "venv", "--dry-run", prefix=prefix)
    assert "environment: venv (--env-manager venv)" in switched.output, switched.output


@pytest.fixture(scope="module")
def locked(root: Path, channel: Path, python_version: str, tmp_path_factory) -> tuple[Path, Path]:
    lock = tmp_path_factory.mktemp("lock") / "conda.txt"
    done = layer(
        root,
        "lock",
        str(lock),
        f"--python={python_version}",
        f"--channel={channel.as_uri()}",
        env={**os.environ, "LIGHTNING_XPU_TOOLS_DIR": str(root / ".tools")},
    )
    assert done.returncode == 0, done.stderr
    return lock, channel


def _offline_copy(channel: Path, dest: Path) -> Path:
    """The channel's packages at the same URLs' names, without repodata.json: a solve there cannot succeed."""
    for package in channel.glob("*/*.tar.bz2"):
        (dest / package.parent.name).mkdir(parents=True, exist_ok=True)
        (dest / package.parent.name / package.name).symlink_to(package)
    return dest


def test_lock_round_trip_installs_with_no_solve(
    root: Path, locked: tuple[Path, Path], python_version: str, tmp_path: Path
) -> None:
    lock, channel = locked
    copy = _offline_copy(channel, tmp_path / "no-index")
    text = lock.read_text().replace(channel.as_uri(), copy.as_uri())
    moved = tmp_path / "lock.txt"
    moved.write_text(text)
    envs = []
    for name in ("a", "b"):
        env = root / ".envs" / f"locked.{name}"
        done = layer(
            root, "create", str(env), f"--python={python_version}", f"--lock={moved}", f"--channel={copy.as_uri()}"
        )
        assert done.returncode == 0, done.stderr
        assert "(no solve)" in done.stdout
        envs.append(env)
    assert (envs[0] / conda_layer.RECORD).read_text() == moved.read_text()
    assert (envs[1] / conda_layer.RECORD).read_text() == moved.read_text()

    def tree(env: Path) -> dict[str, int]:
        return {
            str(p.relative_to(env)): p.stat().st_size
            for p in env.rglob("*")
            if p.is_file() and "conda-meta" not in p.parts and "__pycache__" not in p.parts
        }

    assert tree(envs[0]) == tree(envs[1])


def test_stale_or_missing_lock_is_refused(
    root: Path, locked: tuple[Path, Path], python_version: str, tmp_path: Path
) -> None:
    lock, channel = locked
    other = "3.0" if python_version != "3.0" else "3.1"
    for args, expected in (
        ([f"--python={other}", f"--lock={lock}", f"--channel={channel.as_uri()}"], "(stale)"),
        ([f"--python={python_version}", f"--lock={lock}", "--channel=file:///elsewhere"], "(stale)"),
        (
            [f"--python={python_version}", f"--lock={tmp_path / 'none.txt'}", f"--channel={channel.as_uri()}"],
            "is missing",
        ),
    ):
        done = layer(root, "create", str(tmp_path / "env"), *args)
        assert done.returncode == 1 and expected in done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert not (tmp_path / "env").exists()


@pytest.mark.parametrize("damage", ["zeroed", "wrong"])
def test_a_bad_hash_is_refused(root: Path, channel: Path, python_version: str, tmp_path: Path, damage: str) -> None:
    bad = _offline_copy(channel, tmp_path / "bad")
    for subdir in ("noarch", channel.joinpath("python.txt").parent.glob("linux-*").__next__().name):
        repodata = json.loads((channel / subdir / "repodata.json").read_text())
        for record in repodata["packages"].values():
            if record["name"] == "pip":
                record["sha256"] = "0" * 64 if damage == "zeroed" else record["sha256"][::-1]
                record["md5"] = "0" * 32
        (bad / subdir / "repodata.json").write_text(json.dumps(repodata))
    env = root / ".envs" / f"bad-{damage}"
    done = layer(root, "create", str(env), f"--python={python_version}", f"--channel={bad.as_uri()}")
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith("error: pip-") and done.stderr.count("\n") == 1, done.stderr
    assert not env.exists() and not list(env.parent.glob(f".tmp.{env.name}.*"))


def test_a_killed_child_leaves_nothing_and_the_previous_install_untouched(
    root: Path, channel: Path, python_version: str, tmp_path: Path
) -> None:
    previous = root / ".envs" / "previous"
    done = layer(root, "create", str(previous), f"--python={python_version}", f"--channel={channel.as_uri()}")
    assert done.returncode == 0, done.stderr
    before = {str(p): p.stat().st_mtime_ns for p in previous.rglob("*")}
    env = root / ".envs" / "killed"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-B",
            "-m",
            "lxpu_admin.install.conda_layer",
            "create",
            str(env),
            f"--python={python_version}",
            f"--channel={channel.as_uri()}",
        ],
        env={**os.environ, "PYTHONPATH": str(ENGINE)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Kill the py-rattler child once it has started linking into the temporary prefix.
    deadline = time.monotonic() + 120
    while not list(env.parent.glob(f".tmp.{env.name}.*/conda-meta")) and time.monotonic() < deadline:
        time.sleep(0.01)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert children, "the install child had already finished"
    for child in children:
        os.kill(int(child), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "killed by signal 9" in err and err.count("\n") == 1, err
    assert not env.exists() and not list(env.parent.glob(f".tmp.{env.name}.*"))
    assert {str(p): p.stat().st_mtime_ns for p in previous.rglob("*")} == before


def test_condarc_channels_and_alias(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc = tmp_path / ".condarc"
    rc.write_text(
        "channel_alias: https://mirror.example/conda\nchannels:\n  - conda-forge\n  - nodefaults\n"
        "  - file:///local/channel  # a comment\nssl_verify: true\n"
    )
    monkeypatch.delenv("LIGHTNING_XPU_CONDA_CHANNELS", raising=False)
    assert conda_layer.channels_from(["site"], None, rc) == [
        "https://mirror.example/conda/conda-forge",
        "file:///local/channel",
    ]
    assert conda_layer.channels_from(["site"], "file:///a file:///b", rc) == ["file:///a", "file:///b"]
    assert conda_layer.channels_from(["site", "nodefaults"], None, tmp_path / "absent") == ["site"]
    monkeypatch.setenv("LIGHTNING_XPU_CONDA_CHANNELS", "file:///mirror")
    assert conda_layer.channels_from(["site"], None, rc) == ["file:///mirror"]


def test_py_rattler_comes_from_the_tool_cache_in_a_new_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bootstrapped once with pip and kept in the tool cache; a second prefix copies it (a pip that could fetch
    nothing would fail the second bootstrap: its options point at no index)."""
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # rattler_python sets it; restored after
    lines: list[str] = []
    cache = str(tmp_path / "uv cache")
    conda_layer.rattler_python(tmp_path / "a" / "py-rattler", [], lines.append, tool_cache=cache)
    assert any("bootstrapping py-rattler" in line for line in lines), lines
    lines.clear()
    conda_layer.rattler_python(tmp_path / "b" / "py-rattler", ["--no-index", "--find-links", str(tmp_path / "none")],
                               lines.append, tool_cache=cache)
    assert any(f"from the cache, {cache}/lightning-xpu-tools/py-rattler-" in line for line in lines), lines
    assert (tmp_path / "b" / "py-rattler" / "rattler").is_dir()


def test_an_offline_site_installs_from_the_channel_lightning_xpu_admin_writes(
    root: Path, channel: Path, python_version: str, tmp_path: Path
) -> None:
    """Issue 28: administrators had no documented way to build a local channel. `lightning-xpu-admin conda-channel`
    writes one (here from the CI channel standing for conda-forge); the conda layer then installs from it alone,
    and every package and index in it is readable by the site's other accounts."""
    local = tmp_path / "local channel"
    env = {**h.job_env(), "LIGHTNING_XPU_TOOLS_DIR": str(root / ".tools")}
    done = subprocess.run(
        [str(h.REPO / "bin" / "lightning-xpu-admin"), "conda-channel", "--site", h.SITE, "--version", h.VERSION,
         "--variant", "cpu", "--conda-channel", channel.as_uri(), str(local)],
        env=env, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].endswith(f"--env-manager conda --conda-channel {local.as_uri()}")
    files = [path for path in local.rglob("*") if path.is_file()]
    assert any(path.name == "repodata.json" for path in files) and all(p.stat().st_mode & 0o004 for p in files)
    made = layer(root, "create", str(root / ".envs" / "from-local"), f"--python={python_version}",
                 f"--channel={local.as_uri()}", env={**os.environ, "LIGHTNING_XPU_TOOLS_DIR": str(root / ".tools")})
    assert made.returncode == 0, made.stderr
    records = installed_records(root / ".envs" / "from-local")
    assert {r["name"] for r in records.values()} >= {"python", "pip"}


def test_an_unreachable_channel_names_the_offline_fix(root: Path, python_version: str, tmp_path: Path) -> None:
    """The failure names --conda-channel and the command that writes a local channel, on one line."""
    done = layer(root, "create", str(tmp_path / "env"), f"--python={python_version}",
                 f"--channel={(tmp_path / 'no channel').as_uri()}",
                 env={**os.environ, "LIGHTNING_XPU_TOOLS_DIR": str(root / ".tools")})  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "--conda-channel URL" in line and "lightning-xpu-admin conda-channel" in line, line


def test_a_conda_build_is_packed_into_images_readable_like_the_build(
    root: Path, channel: Path, python_version: str, tmp_path: Path
) -> None:
    """Issues 28 and 30: a conda build is packed as it is (no conda, no conda-pack on PATH), and every image is
    readable like the build, so other accounts' jobs can stage it (conda-pack's image was 0600)."""
    env = root / ".envs" / "packed"
    made = layer(root, "create", str(env), f"--python={python_version}", f"--channel={channel.as_uri()}",
                 env={**os.environ, "LIGHTNING_XPU_TOOLS_DIR": str(root / ".tools")})  # fmt: skip
    assert made.returncode == 0, made.stderr
    # What pack's check imports from the unpacked copy: lightning_xpu and a stand-in `lightning` (the real one needs
    # torch), as the harness's stand-in venv has.
    (site,) = env.glob("lib/python3*/site-packages")
    h.add_what_pack_imports(site)
    packed = subprocess.run([sys.executable, "-B", "-m", "lxpu_admin.envside.pack", "make", str(env), h.SITE, "packed"],
                            env={**os.environ, "PYTHONPATH": str(ENGINE), "LIGHTNING_XPU_PACK": "1"},
                            capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert packed.returncode == 0, packed.stdout + packed.stderr
    images = [path for path in (env / "share" / "lightning-xpu" / "pack").iterdir() if path.name.startswith("env.")]
    assert images, packed.stdout
    assert all(path.stat().st_mode & 0o444 == 0o444 for path in images), [oct(p.stat().st_mode) for p in images]
