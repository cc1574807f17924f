"""`accelerator="xpu"` where XPU cannot be used: the error names the cause and points to `lightning-xpu doctor`.

Each cause is simulated: `simulated_xpu(devices=0)` (tests/conftest.py) makes torch see no device, and
`torch.version.xpu` is set where the cause needs an XPU build of torch (the build here is 2.13.0+cpu).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_xpu.report import diagnose
from tests.xpu_profiles import ABSENT, ALL_PROFILES, fact


def build(api: str) -> None:
    if api == "trainer":
        from lightning.pytorch import Trainer

        Trainer(accelerator="xpu", logger=False)
    else:
        from lightning.fabric import Fabric

        Fabric(accelerator="xpu")


@pytest.fixture
def xpu_build_without_devices(simulated_xpu, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An XPU build of torch that sees no device; returns the directory standing in for /dev/dri."""
    simulated_xpu(devices=0)
    monkeypatch.setattr(torch.version, "xpu", "20250101", raising=False)
    for name in ("LIGHTNING_XPU_VARIANT", "LIGHTNING_XPU_ROOT", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR",
                 "ZE_FLAT_DEVICE_HIERARCHY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(diagnose, "RENDER_NODES", str(tmp_path / "renderD*"))
    return tmp_path


CAUSES = {
    "cpu build": ({}, False, "PyTorch .* is a CPU build without XPU support"),
    "cpu variant": ({"LIGHTNING_XPU_VARIANT": "cpu"}, False, "the cpu variant of lightning-xpu is loaded"),
    "cpu module": ({"LIGHTNING_XPU_ROOT": "/opt/lightning-xpu/2.13-cpu"}, False,
                   r"cpu variant .*LIGHTNING_XPU_ROOT \(2.13-cpu\)"),
    "affinity mask": ({"ZE_AFFINITY_MASK": "7"}, True, "ZE_AFFINITY_MASK='7' selects none that exists"),
    "selector hides level zero": ({"ONEAPI_DEVICE_SELECTOR": "opencl:gpu"}, True,
                                  "ONEAPI_DEVICE_SELECTOR=opencl:gpu hides the Level Zero GPUs"),
    "selector excludes level zero": ({"ONEAPI_DEVICE_SELECTOR": "!level_zero:*"}, True, "hides the Level Zero"),
    "selector selects nothing": ({"ONEAPI_DEVICE_SELECTOR": "level_zero:5"}, True,
                                 "ONEAPI_DEVICE_SELECTOR=level_zero:5 selects none"),
    "bad hierarchy": ({"ZE_FLAT_DEVICE_HIERARCHY": "flat"}, True, "ZE_FLAT_DEVICE_HIERARCHY=flat is not one of"),
    "no gpu node": ({"ZE_FLAT_DEVICE_HIERARCHY": "FLAT"}, True,
                    r"no Intel GPU on this host \(ZE_FLAT_DEVICE_HIERARCHY=FLAT\): no .*renderD"),
}


@pytest.mark.parametrize("api", ["trainer", "fabric"])
@pytest.mark.parametrize("cause", list(CAUSES))
def test_the_xpu_error_names_the_cause(cause, api, xpu_build_without_devices, monkeypatch) -> None:
    environ, xpu_build, expected = CAUSES[cause]
    if not xpu_build:
        monkeypatch.setattr(torch.version, "xpu", None, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Exception, match="XPUAccelerator` can not run on your system") as raised:
        build(api)
    message = str(raised.value)
    diagnosis = message.split("\n", 1)[1]
    assert diagnosis.startswith("XPU cannot be used: ") and diagnosis.endswith(diagnose.DOCTOR_HINT)
    assert len(diagnosis.splitlines()) <= 2
    import re

    assert re.search(expected, diagnosis), diagnosis


def test_a_driver_that_sees_no_device_on_a_gpu_node(xpu_build_without_devices) -> None:
    (xpu_build_without_devices / "renderD128").touch()
    assert "the Level Zero driver reports no device" in (diagnose.unusable_reason() or "")


def test_usable_xpu_has_no_reason(simulated_xpu) -> None:
    simulated_xpu(devices=2)
    assert diagnose.unusable_reason() is None


def test_other_accelerators_never_run_the_diagnosis(monkeypatch) -> None:
    """accelerator="cpu" must not count XPU devices (fork poisoning): the diagnosis runs only for XPU."""
    from lightning.pytorch import Trainer

    def poisoned(*args: object) -> None:
        raise AssertionError("diagnosed XPU off XPU")

    monkeypatch.setattr(diagnose, "unusable_reason", poisoned)
    Trainer(accelerator="cpu", devices=1, logger=False)
    with pytest.raises(Exception, match="can not run on your system") as raised:
        Trainer(accelerator="cuda", logger=False)
    assert "XPU cannot be used" not in str(raised.value)


# Releases whose XPU builds have no `torch.version.xpu` (row version_xpu of tests/xpu_profiles.py: 2.5.1).
WITHOUT_VERSION_XPU = [version for version in ALL_PROFILES if fact("version_xpu", version) == ABSENT]


@pytest.mark.parametrize("version", WITHOUT_VERSION_XPU)
def test_an_xpu_build_without_torch_version_xpu_is_not_called_a_cpu_build(version, simulated_xpu, monkeypatch,
                                                                          tmp_path) -> None:
    """torch 2.5.1 has no `torch.version.xpu` (pytorch#139466): its XPU build is told apart otherwise, so a node
    without GPUs is diagnosed as such, and the doctor reports an xpu build."""
    from lightning_xpu.report.model import torch_build

    sim = simulated_xpu(torch=version, devices=0)
    for name in ("LIGHTNING_XPU_VARIANT", "LIGHTNING_XPU_ROOT", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR",
                 "ZE_FLAT_DEVICE_HIERARCHY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(diagnose, "RENDER_NODES", str(tmp_path / "renderD*"))
    assert not hasattr(torch.version, "xpu")
    assert "no Intel GPU on this host" in (diagnose.unusable_reason() or "")
    assert torch_build()["torch_build"] == "xpu"
    assert not sim.unmodelled
