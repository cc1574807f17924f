"""lightning_xpu/versions.py: the patch manifest holds on the installed Lightning (the unit stage runs this file in
every CI Lightning venv), the feature probes agree with it, and every file naming the Lightning range agrees with it.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import tomllib
from lightning_grid import FABRIC_PACKAGES, TRAINER_PACKAGES, newest_lightning_only

import lightning_xpu  # noqa: F401  (patches the namespaces imported below)
from lightning_xpu import versions
from lightning_xpu._namespaces import LIGHTNING, STANDALONE
from lightning_xpu.versions import (
    ADVISORY,
    EXCLUDED,
    FEATURES,
    MINORS,
    REQUIREMENT,
    TESTED_VERSIONS,
    PatchWarning,
    expected_patches,
    release,
)
from tests.xpu_profiles import Profile
from tests.xpu_simulation import bootstrap_env

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [*TRAINER_PACKAGES, *FABRIC_PACKAGES]


def _side(package: str) -> str:
    return "pytorch" if package in ("lightning.pytorch", "pytorch_lightning") else "fabric"


def _installed(package: str) -> str:
    LIGHTNING.pytorch_module("")
    STANDALONE.pytorch_module("")
    return versions.installed_version(package)


@pytest.mark.parametrize("package", PACKAGES)
def test_exactly_the_manifest_applied(package: str) -> None:
    minor = versions.known_minor(_installed(package))
    assert minor is not None, f"Lightning {_installed(package)} is not in the manifest ({MINORS})"
    statuses = [s for s in versions.patch_status() if s.owner.startswith(package + ".")]
    applied = {(_side(package) + s.owner[len(package):], s.name) for s in statuses if s.applied}
    assert applied == expected_patches(minor, _side(package))
    assert all(s.expected for s in statuses if s.applied)
    assert versions.problems(statuses) == []


def test_manifest_minors_differ_where_lightning_does() -> None:
    # ModelParallelStrategy arrived in 2.3: its patches are the only ones that come and go.
    assert expected_patches("2.3") - expected_patches("2.2") == {
        (owner, name) for owner, name in expected_patches("2.3") if ".model_parallel" in owner
    }
    assert len({expected_patches(minor) for minor in MINORS[1:]}) == 1


@pytest.mark.parametrize(
    ("feature", "package"),
    [(f, p) for f in sorted(FEATURES) for p in PACKAGES if f != "fabric_run_command" or _side(p) == "fabric"],
)
def test_feature_probes_agree_with_the_table(feature: str, package: str) -> None:
    expected = release(_installed(package)) >= release(FEATURES[feature].since)
    assert versions.probe(feature, package) is expected


def test_excluded_releases_are_refused() -> None:
    for version in EXCLUDED:
        assert not versions.is_supported(version)
        reason = versions.excluded_reason(version)
        assert reason is not None and ADVISORY in reason and REQUIREMENT in reason
    assert all(versions.is_supported(version) for version in TESTED_VERSIONS)
    assert not versions.is_supported("2.1.4") and not versions.is_supported("2.7.0")


def test_pyproject_extra_is_the_supported_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["lightning"] == [REQUIREMENT]


def test_ci_venvs_are_the_tested_versions() -> None:
    match = re.search(r"^LIGHTNING_VERSIONS=\(([^)]*)\)", (REPO / "ci" / "venvs.sh").read_text(), re.M)
    assert match is not None and tuple(match.group(1).split()) == TESTED_VERSIONS


def test_readme_states_the_range_and_the_tested_versions() -> None:
    (row,) = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| Lightning (")]
    assert f"{MINORS[0]} to {MINORS[-1]}" in row and f"`{REQUIREMENT}`" in row and ADVISORY in row
    assert ", ".join(TESTED_VERSIONS) in row


def test_recipes_pin_supported_lightning() -> None:
    matrix = tomllib.loads((REPO / "recipes" / "matrix.toml").read_text())
    pins = [entry["pins"]["lightning"]["version"] for entry in matrix["versions"].values()]
    assert pins and all(versions.is_supported(pin) for pin in pins), pins


def _pretend(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    for top in ("lightning", "pytorch_lightning", "lightning_fabric"):
        monkeypatch.setattr(__import__(top), "__version__", version)


def test_newer_lightning_is_noted_once_as_untested(simulated_xpu, monkeypatch: pytest.MonkeyPatch) -> None:
    simulated_xpu()
    _pretend(monkeypatch, "2.7.0")
    monkeypatch.setattr(versions, "_checked", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=1, logger=False)
        LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=1, logger=False)
    (note,) = [w for w in caught if issubclass(w.category, PatchWarning)]
    text = str(note.message)
    assert "\n" not in text and "Lightning 2.7.0 is untested" in text
    assert "_AcceleratorConnector._choose_strategy" in text and "did not apply" in text


def test_compromised_lightning_is_named(simulated_xpu, monkeypatch: pytest.MonkeyPatch) -> None:
    simulated_xpu()
    _pretend(monkeypatch, "2.6.3")
    assert any(ADVISORY in message for message in versions.selection_messages())


# Run in a fresh interpreter whose `lightning_fabric` is a throwaway copy with one patch target renamed; on
# simulated XPU through the test-only rank bootstrap (tests/bootstrap, the 2.13 profile of tests/xpu_profiles.py).
RENAMED_TARGET_RUN = """
import sys, warnings
import lightning_xpu
import lightning_fabric
assert lightning_fabric.__file__.startswith(sys.argv[1]), lightning_fabric.__file__
warnings.simplefilter("always")
fabric = lightning_fabric.Fabric(accelerator="auto", devices=1)
print(type(fabric.accelerator).__name__)
"""


def _run_with_renamed_target(tmp_path: Path, simulate_xpu: bool) -> subprocess.CompletedProcess[str]:
    import lightning_fabric

    copy = tmp_path / "site" / "lightning_fabric"
    if not copy.exists():
        # copy2 keeps modification times, so the copied byte code stays valid except for the edited module.
        shutil.copytree(Path(lightning_fabric.__file__).parent, copy, copy_function=shutil.copy2)
        cli = copy / "cli.py"
        text = cli.read_text()
        assert "def _get_num_processes(" in text
        cli.write_text(text.replace("def _get_num_processes(", "def _renamed_get_num_processes("))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy.parent), str(REPO)]), "PYTHONWARNINGS": "always"}
    env.pop("LIGHTNING_XPU_DISABLE", None)
    if simulate_xpu:
        env = bootstrap_env(Profile("2.13"), env)
    argv = [sys.executable, "-c", RENAMED_TARGET_RUN, str(copy)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


@newest_lightning_only
def test_a_renamed_target_warns_on_xpu_and_is_silent_off_xpu(tmp_path: Path) -> None:
    on_xpu = _run_with_renamed_target(tmp_path, simulate_xpu=True)
    assert on_xpu.returncode == 0, on_xpu.stderr
    assert on_xpu.stdout.split() == ["XPUAccelerator"]
    (line,) = [line for line in on_xpu.stderr.splitlines() if "lightning_xpu:" in line]
    version = versions.installed_version("lightning_fabric")
    assert f"1 patch(es) needed on Lightning {version} found no target" in line
    assert "lightning_fabric.cli._get_num_processes" in line

    off_xpu = _run_with_renamed_target(tmp_path, simulate_xpu=False)
    assert off_xpu.returncode == 0, off_xpu.stderr
    assert off_xpu.stdout.split() == ["CPUAccelerator"]
    assert "lightning_xpu" not in off_xpu.stderr and "PatchWarning" not in off_xpu.stderr


@pytest.mark.parametrize("copy", versions.COPIES, ids=lambda copy: copy.upstream)
def test_copied_lightning_logic_is_unchanged_upstream(copy: versions.Copy) -> None:
    module, _, name = copy.ours.rpartition(".")
    assert callable(getattr(importlib.import_module(module), name)), copy.ours
    assert set(copy.hashes) == set(MINORS)
    side = copy.upstream.split(".")[0]
    for package in [p for p in PACKAGES if _side(p) == side]:
        version = _installed(package)
        function = versions.upstream_function(package, copy.upstream)
        actual = None if function is None else versions.source_hash(function)
        minor = versions.known_minor(version)
        assert minor is not None and actual == copy.hashes[minor], (
            f"Lightning {version} ({package}) changed {copy.upstream}: review {copy.ours} against it, then record"
            f" {actual!r} for {minor or versions.minor_of(version)} in lightning_xpu/versions.py COPIES"
        )


def test_source_hash_follows_logic_not_comments_or_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = {
        "base": 'def f(x: int) -> int:\n    """Doc."""\n    return x + 1\n',
        "comment": 'def f(x: "int") -> "int":\n    # a comment\n    """Other doc."""\n    return x + 1  # same\n',
        "logic": "def f(x):\n    return x + 2\n",
    }
    for name, body in bodies.items():
        (tmp_path / f"hash_{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    digest = {name: versions.source_hash(importlib.import_module(f"hash_{name}").f) for name in bodies}
    assert digest["base"] == digest["comment"] != digest["logic"]
