"""One good install of 2.13/cpu (shared by the session, into a prefix with a space): its log, manifest,
layout, entry points, re-run, and a shared (group, read-only) install."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import re
import stat
from pathlib import Path

import install_harness as h
import pytest

from lightning_xpu.validation.schema import check_report

pytestmark = pytest.mark.install

AUTOLOAD_LINE = (
    'import sys; any(hasattr(f, "find_spec") and f.find_spec("lightning_xpu", None) for f in sys.meta_path)'
    ' and __import__("lightning_xpu._autoload")'
)


def manifest_of(prefix: Path) -> dict:
    return json.loads((prefix / h.TAG / "manifest.json").read_text())


def recipe_hash(job: Path) -> str:
    """The recipe hash rendered with the job (into the data file next to it: render --out writes both)."""
    data = json.loads((job.parents[2] / "recipes" / "rendered" / "install-data.json").read_text())
    found = str(data["jobs"][f"{h.SITE}/{h.VERSION}"]["recipe_hash"])
    assert re.fullmatch(r"[0-9a-f]{64}", found), "the rendered data has no recipe hash"
    return found


def test_log_shows_every_step_and_ends_installed(good_install: h.GoodInstall) -> None:
    log = good_install.log.read_text()
    for n in range(1, h.STEP_TOTAL + 1):
        assert re.search(rf"^\[{n}/{h.STEP_TOTAL}\] .* done \([0-9.]+ s\)$", log, re.MULTILINE), f"step {n}"
    last = log.strip().splitlines()[-1]
    assert re.fullmatch(rf"lightning-xpu {h.TAG}: installed .* \(total [0-9.]+ s\)", last), last


def test_manifest_records_what_was_installed(good_install: h.GoodInstall) -> None:
    manifest = manifest_of(good_install.prefix)
    assert manifest["status"] == "installed" and manifest["tag"] == h.TAG
    assert manifest["recipe"] == {
        "torch": h.VERSION,
        "site": h.SITE,
        "variant": "cpu",
        "lightning": "2.6.6",
        "python": "3.11",
        "hash": recipe_hash(good_install.job),
    }
    assert re.fullmatch(r"[0-9a-f]{64}", manifest["inputs_hash"])
    assert manifest["repository"]["commit"] == h.commit_of(good_install.source)
    assert manifest["env_manager"] == "venv" and manifest["base_python"] is None
    assert manifest["sources"]["mode"] == "system" and manifest["sources"]["pip_options"] == []
    packages = {p["name"].lower().replace("_", "-"): p for p in manifest["packages"]}
    assert packages["torch"]["version"] == "2.13.0+cpu" and len(packages["torch"]["sha256"]) == 64
    assert packages["lightning"]["version"] == "2.6.6"
    share = good_install.prefix / h.TAG / "share" / "lightning-xpu"
    (wheel,) = (share / "wheels").glob("lightning_xpu-*.whl")
    assert packages["lightning-xpu"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert all(p["from"] == "environment" for p in packages.values())
    assert [s["step"] for s in manifest["steps"]] == list(range(1, h.STEP_TOTAL - 1))  # all before the manifest
    assert all(s["seconds"] >= 0 for s in manifest["steps"])
    smoke = manifest["smoke"]
    check_report(smoke)
    assert smoke["ok"] is True and smoke["level"] == "smoke"
    checks = {check["name"]: check for check in smoke["checks"]}
    assert set(checks) >= {
        "imports",
        "autoload_hook",
        "pip_check",
        "devices",
        "distributed_backends",
        "allreduce",
        "fit_single_device",
        "fit_ddp",
    }
    assert checks["devices"]["detail"]["summary"] == "no XPU: ran on CPU"
    assert checks["fit_ddp"]["detail"]["devices"] == 2
    # The ranks' own record of what oneCCL would read, taken after their process group was created.
    for name in ("allreduce", "fit_ddp"):
        seen = checks[name]["oneccl"]
        assert [(r["rank"], r["variables"].get("LOCAL_RANK")) for r in seen] == [(0, "0"), (1, "1")], seen


def test_layout_hook_and_bytecode(good_install: h.GoodInstall) -> None:
    prefix = good_install.prefix
    target = os.readlink(prefix / h.TAG)
    assert re.fullmatch(rf"\.envs/{re.escape(h.TAG)}\.[0-9T]+-[0-9]+", target), target
    root = prefix / h.TAG
    for name in (
        "bin/python",
        "manifest.json",
        "lightning-xpu-site.sh",
        "lightning-xpu-site-modules.txt",
        "share/lightning-xpu/toy_fit.py",
        "share/lightning-xpu/install.log",
    ):
        assert (root / name).exists(), name
    site_packages = root / "lib" / "python3.11" / "site-packages"
    assert (site_packages / "lightning_xpu-autoload.pth").read_text() == AUTOLOAD_LINE + "\n"
    for path, text in h.expected_tag_files(prefix).items():  # written from the recipe's data, not copied
        assert path.read_text() == text, path
    assert (prefix / ".locks" / f"{h.TAG}.lock").read_text().startswith("pid ")
    for module in ("lightning/__init__.py", "torch/__init__.py", "lightning_xpu/__init__.py"):
        source = site_packages / module
        assert list((source.parent / "__pycache__").glob(f"{source.stem}.cpython-311*.pyc")), module


def test_nothing_is_world_writable(good_prefix: Path) -> None:
    offenders = [
        path
        for path in [good_prefix, *good_prefix.rglob("*")]
        if not path.is_symlink() and path.lstat().st_mode & stat.S_IWOTH
    ]
    assert offenders == []


def test_setup_script_and_module_give_the_same_environment(good_prefix: Path) -> None:
    h.require(h.lmod_available(), "Lmod")
    report = (
        'command -v python; python -c "import lightning_xpu, sys; print(sys.prefix)"; '
        'echo "$VIRTUAL_ENV|$LIGHTNING_XPU_ROOT|$PYTHONUSERBASE|${ZE_FLAT_DEVICE_HIERARCHY-}"; '
        'tr ":" "\\n" <<<"$PATH" | grep -cxF "$LIGHTNING_XPU_ROOT/bin"'
    )
    # Sourcing twice is harmless: PATH gets the environment once.
    by_setup = h.bash(
        h.with_setup_script(
            good_prefix, f"source {h.q(good_prefix / f'lightning-setup-{h.TAG}.sh')}\n{report}"
        )
    )
    by_module = h.bash(h.with_module(good_prefix, report))
    assert by_setup.returncode == 0, by_setup.stderr
    assert by_module.returncode == 0, by_module.stderr
    assert by_setup.stdout == by_module.stdout
    python, prefix, variables, path_entries = by_setup.stdout.strip().splitlines()
    # Both resolve <prefix>/<tag> to the one build it points to when they run (a rebuild changes nothing for them).
    assert python == str((good_prefix / h.TAG).resolve() / "bin" / "python")
    assert Path(prefix).resolve() == (good_prefix / h.TAG).resolve()
    assert variables.split("|")[2] == os.path.expanduser(f"~/.local/lightning-xpu/{h.TAG}")
    assert path_entries == "1"


def test_module_unload_restores_the_environment(good_prefix: Path, tmp_path: Path) -> None:
    h.require(h.lmod_available(), "Lmod")
    # Lmod's own bookkeeping variables aside.
    lmod_state = "^_ModuleTable\\|^__LMOD\\|^LOADEDMODULES=\\|^_LMFILES_="
    dump = f"env -0 | sort -z | tr '\\0' '\\n' | grep -v '{lmod_state}'"
    script = (
        f"set -euo pipefail\nsource {h.q(h.LMOD_INIT)}\nmodule use {h.q(good_prefix / 'modulefiles')}\n"
        f"{dump} > before\nmodule load lightning-xpu/{h.TAG}\n{dump} > loaded\n"
        f"module unload lightning-xpu/{h.TAG}\n{dump} > after\n"
        "cat before; echo ====; cat loaded; echo ====; cat after\n"
    )
    # Lmod drops duplicate PATH entries, so start from a PATH without any.
    path = ":".join(dict.fromkeys(os.environ["PATH"].split(":")))
    result = h.bash(f"cd {h.q(tmp_path)}\n{script}", env=h.job_env(PATH=path))
    assert result.returncode == 0, result.stderr
    before, loaded, after = result.stdout.split("====\n")
    assert loaded != before
    assert after == before


def test_rerun_unchanged_is_a_noop(good_install: h.GoodInstall) -> None:
    prefix = good_install.prefix
    before = h.snapshot(prefix)
    env_files = {str(p): p.lstat().st_mtime_ns for p in (prefix / h.TAG).resolve().rglob("*")}
    dirs = h.env_dirs(prefix)
    result = h.run_job(good_install.job, "--source", str(good_install.source), *h.PIP_SOURCE, prefix=prefix)
    assert result.returncode == 0, result.output
    assert "already installed with these inputs: nothing changed" in result.last_line
    assert f"[3/{h.STEP_TOTAL}]" not in result.log_text, "the re-run built something"
    assert h.snapshot(prefix) == before
    assert {str(p): p.lstat().st_mtime_ns for p in (prefix / h.TAG).resolve().rglob("*")} == env_files
    assert h.env_dirs(prefix) == dirs


@pytest.mark.slurm
def test_install_job_ran_under_sbatch(good_install: h.GoodInstall) -> None:
    h.require(h.slurm_up(), "the Slurm cluster")
    assert good_install.via == "sbatch"
    manifest = manifest_of(good_install.prefix)
    assert manifest["scheduler_job"], "the manifest does not name the Slurm job"
    assert f"(Slurm job {manifest['scheduler_job']})" in good_install.log.read_text()
    # The job's own output (spool copy, found the repository from SLURM_SUBMIT_DIR) ends like the log.
    assert (
        good_install.output.strip().splitlines()[-1] == good_install.log.read_text().strip().splitlines()[-1]
    )
    assert manifest["repository"]["path"] == str(good_install.source.resolve())


def test_shared_group_install_is_group_readable_and_read_only(
    install_job: Path, source_repo: Path, tmp_path: Path
) -> None:
    group = grp.getgrgid(os.getgid()).gr_name
    prefix = tmp_path / "shared prefix"
    # A hostile umask must not leak into a shared install.
    result = h.bash(
        f"umask 000; bash {h.q(install_job)} --prefix {h.q(prefix)} --source {h.q(source_repo)} "
        f"{' '.join(h.PIP_SOURCE)} --base-python {h.q(h.base_python())} --shared-group {group}",
        timeout=h.JOB_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    root = (prefix / h.TAG).resolve()
    published = [prefix / h.TAG, *h.entry_point_paths(prefix), prefix / "modulefiles"]
    paths = [*published, *root.rglob("*"), *(prefix / "modulefiles").rglob("*")]
    for path in paths:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        assert st.st_gid == os.getgid(), path
        assert not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), f"{path} is group- or world-writable"
        assert st.st_mode & stat.S_IRGRP, f"{path} is not group-readable"
        if stat.S_ISDIR(st.st_mode):
            assert st.st_mode & stat.S_IXGRP, f"{path} cannot be entered by the group"
    manifest = manifest_of(prefix)
    assert manifest["shared_group"] == group
    assert manifest["base_python"]["torch"].startswith("2.13.0")
    torch = next(p for p in manifest["packages"] if p["name"] == "torch")
    assert torch["from"] == "base-python", "torch was reinstalled over the base python"
