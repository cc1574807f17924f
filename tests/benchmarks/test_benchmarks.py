"""The benchmark scripts run end to end at a tiny size, so they cannot rot. No timing is asserted: only that each
script produces every figure it promises, computed from what it measured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = ["--samples", "32", "--epochs", "2", "--repeats", "1", "--d-model", "32", "--heads", "2", "--layers", "1"]
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def run(script: str, *args: str, timeout: float = 600, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **env_vars)
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_has_help(script: str) -> None:
    done = run(script, "--help", timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_train_overhead_reports_all_variants_and_ratios(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    done = run("train_overhead.py", "--device", "cpu", "--precision", "both", *TINY, "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    for precision in ("32-true", "bf16-mixed"):
        stats = result["precisions"][precision]["epoch_seconds"]
        assert set(stats) == {"raw", "lightning", "lightning_xpu"}
        assert all(s["n"] == 1 and s["median"] > 0 for s in stats.values())
        ratios = result["precisions"][precision]["ratios"]
        assert ratios["lightning_xpu/lightning"] == stats["lightning_xpu"]["median"] / stats["lightning"]["median"]
    assert set(result["bf16_over_fp32"]) == {"raw", "lightning", "lightning_xpu"}
    assert "lightning_xpu/lightning" in done.stdout


def test_train_overhead_rejects_a_single_epoch() -> None:
    done = run("train_overhead.py", "--epochs", "1", timeout=60)
    assert done.returncode == 2
    assert "--epochs must be at least 2" in done.stderr


def test_ddp_scaling_reports_efficiency_for_both_variants(tmp_path: Path) -> None:
    out = tmp_path / "ddp.json"
    done = run("ddp_scaling.py", "--device", "cpu", "--devices", "2", *TINY, "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["epoch_seconds"]) == {"lightning@1", "lightning@2", "lightning_xpu@1", "lightning_xpu@2"}
    for variant in ("lightning", "lightning_xpu"):
        expected = result["samples_per_second"][f"{variant}@2"] / (2 * result["samples_per_second"][f"{variant}@1"])
        assert result["efficiency"][variant] == pytest.approx(expected)


def test_startup_reports_import_costs(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    done = run("startup.py", "--repeats", "1", "--importtime-runs", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["import_seconds"]) == {"lightning", "lightning+lightning_xpu", "hook (.pth) + lightning"}
    assert result["lightning_xpu_importtime_seconds"]["median"] > 0
    assert 0 < result["lightning_xpu_adds_seconds_best"] and result["budget_seconds"] == 0.030
    assert "ms to import lightning (-X importtime, best of 1)" in done.stdout
    assert set(result["byte_compilation"]) == {"no byte-compiled files", "byte-compiled"}


@pytest.mark.install
def test_install_time_measures_the_install_job_and_its_noop_rerun(tmp_path: Path) -> None:
    out = tmp_path / "install.json"
    # Without the node-local staging image (as the install tests' harness): the image is the multinode stage's
    # subject (tests/multinode/test_staging.py), and no figure of this script depends on it.
    done = run("install_time.py", "--cases", "uv-warm-cache,uv-rerun-noop", "--workdir", str(tmp_path),
               "--json", str(out), timeout=1200, LIGHTNING_XPU_PACK="0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["seconds"]) == {"uv-warm-cache", "uv-rerun-noop"}
    steps = result["steps"]["uv-warm-cache"]
    assert steps["install pinned packages"] > 0 and any("smoke" in name for name in steps)
    assert result["smoke_alone_seconds"] > 0 and "smoke job alone (uv-warm-cache's environment)" in done.stdout


def test_install_time_rejects_unknown_cases() -> None:
    done = run("install_time.py", "--cases", "uv-fast", timeout=60)
    assert done.returncode == 2
    assert "unknown case(s) uv-fast" in done.stderr
    done = run("install_time.py", "--cases", "baseline-warm-cache", timeout=60)
    assert done.returncode == 2
    assert "baseline-warm-cache needs --baseline CHECKOUT" in done.stderr


def test_hook_startup_reports_the_paired_difference_and_the_hooks_imports(tmp_path: Path) -> None:
    out = tmp_path / "hook.json"
    done = run("hook_startup.py", "--pairs", "2", "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    for clock in ("wall", "cpu"):
        assert set(result["start_seconds"][clock]) == {"without hook", "with hook"}
        assert result["added_seconds_pairs"][clock]["n"] == 2
    # What the hook imports at start-up, and nothing heavy (issue 30): the package, the hook and its constants.
    assert set(result["hook_imports_microseconds"]) == {"lightning_xpu", "lightning_xpu._autoload",
                                                        "lightning_xpu._startup"}  # fmt: skip
    assert "ms of cpu time to python -c pass (median of 2 paired differences)" in done.stdout


def test_image_size_counts_a_tree_and_its_squashfs_image(tmp_path: Path) -> None:
    root = tmp_path / "build"
    (root / "lib").mkdir(parents=True)
    for n in range(5):
        (root / "lib" / f"m{n}.py").write_text("x = 1\n" * 100)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to("/usr/bin/python3")
    out = tmp_path / "image.json"
    done = run("image_size.py", "--root", str(root), "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["tree"] | {"disk_bytes": 0} == {"entries": 9, "files": 5, "directories": 3, "links": 1,
                                                  "bytes": 3000, "disk_bytes": 0}  # fmt: skip
    assert result["squashfs"]["files"] == 1 and result["squashfs"]["bytes"] > 0
    assert result["ratio_bytes_image_over_tree"] == result["squashfs"]["bytes"] / 3000


def test_staging_modes_reports_every_mode_with_and_without_a_user_layer(tmp_path: Path) -> None:
    """On a prefix laid out as an install leaves it, packed as the install's pack step does (tar.gz and pack.env,
    the fields lxpu_admin/envside/pack.py writes): none and copy measured, mount measured or said to be unavailable."""
    from tests.install import install_harness as h

    prefix = tmp_path / "a prefix"
    prefix.mkdir()
    root = h.laid_out_prefix(prefix)
    subprocess.run(["install", "-m", "0755", str(h.REPO / "scripts/common/stage/lightning-xpu-stage"),
                    str(root / "bin")], check=True)  # fmt: skip
    pack = root / "share" / "lightning-xpu" / "pack"
    pack.mkdir()
    image = tmp_path / "env.tar.gz"
    subprocess.run(["tar", "-czf", str(image), "-C", str(root), "."], check=True)
    image.rename(pack / "env.tar.gz")
    squashfs = pack / "env.squashfs"
    subprocess.run(["mksquashfs", str(root), str(squashfs), "-noappend", "-no-progress", "-quiet",
                    "-e", "share/lightning-xpu/pack"], check=True)  # fmt: skip
    sha = subprocess.run(["sha256sum", str(pack / "env.tar.gz"), str(squashfs)], capture_output=True, text=True,
                         check=True).stdout.split()[::2]  # fmt: skip
    (pack / "pack.env").write_text(
        f"status=ok\nfile=share/lightning-xpu/pack/env.tar.gz\nformat=tar.gz\nsha256={sha[0]}\n"
        f"bytes={(pack / 'env.tar.gz').stat().st_size}\nunpacked_bytes=1000000\nbase_staged=0\nlibpython=0\n"
        f"site=generic\ntag={h.TAG}\nnote=the environment; the base interpreter stays shared\n"
        f"squashfs=share/lightning-xpu/pack/env.squashfs\nsquashfs_sha256={sha[1]}\n"
        f"squashfs_bytes={squashfs.stat().st_size}\nsquashfs_note=\n"
    )
    layer = tmp_path / "layer"
    (layer / "bin").mkdir(parents=True)
    out = tmp_path / "modes.json"
    done = run("staging_modes.py", "--root", str(prefix / h.TAG), "--layer", str(layer), "--ranks", "2",
               "--repeats", "1", "--code", "import lightning_xpu", "--json", str(out), timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [(r["mode"], bool(r["layer"])) for r in results] == [
        (mode, layered) for layered in (False, True) for mode in ("none", "copy", "mount")
    ]
    # Mount mode is measured wherever FUSE works for this account: CI installs squashfuse (ci/services/install.sh).
    squashfuse = shutil.which("squashfuse") or shutil.which("squashfuse_ll")
    fuse = bool(squashfuse) and os.access("/dev/fuse", os.R_OK | os.W_OK)
    for result in results:
        if result["mode"] != "mount" or fuse or os.environ.get("LXPU_REQUIRE_SERVICES") == "1":
            assert result["available"], result
            stage = result.get("stage", {}).get("shared", 0)
            assert result["shared_per_node"] == stage + 2 * result["rank"]["shared"], result
            assert result["ready_seconds"]["n"] == (0 if result["mode"] == "none" else 1)
        elif not result["available"]:
            assert "does not offer mount" in result["why"], result
    none, copy, mount = results[0], results[1], results[2]
    assert copy["rank"]["shared"] < none["rank"]["shared"], (none["rank"], copy["rank"])
    if mount["available"]:
        assert mount["rank"]["shared"] < none["rank"]["shared"], (none["rank"], mount["rank"])
