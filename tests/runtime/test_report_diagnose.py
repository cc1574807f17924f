"""`accelerator="xpu"` (and "gpu" on an XPU build) where XPU cannot be used: one line that names the cause and the
fix and points to `lightning-xpu doctor`, with no chained traceback.

Each cause is simulated: `simulated_xpu(devices=0)` (tests/conftest.py) makes torch see no device, and
`torch.version.xpu` is set where the cause needs an XPU build of torch (the build here is 2.13.0+cpu).
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_xpu import diagnosis as diagnose
from lightning_xpu.environments.errors import DeviceError
from tests.xpu_profiles import ABSENT, ALL_PROFILES, fact


def build(api: str, accelerator: str = "xpu") -> None:
    if api == "trainer":
        from lightning.pytorch import Trainer

        Trainer(accelerator=accelerator, logger=False)
    else:
        from lightning.fabric import Fabric

        Fabric(accelerator=accelerator)


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


def one_line_device_error(error: BaseException) -> str:
    """The error's message, checked to be a one-line DeviceError with no chained traceback."""
    message = str(error)
    assert isinstance(error, DeviceError), type(error).__mro__
    copy = pickle.loads(pickle.dumps(error))  # as an error sent back from a spawned rank
    assert type(copy) is type(error) and str(copy) == message
    assert "\n" not in message, message
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)  # nothing chained
    return message


@pytest.mark.parametrize("api", ["trainer", "fabric"])
@pytest.mark.parametrize("cause", list(CAUSES))
def test_the_xpu_error_names_the_cause(cause, api, xpu_build_without_devices, monkeypatch) -> None:
    environ, xpu_build, expected = CAUSES[cause]
    if not xpu_build:
        monkeypatch.setattr(torch.version, "xpu", None, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Exception, match=r"^XPU cannot be used: ") as raised:
        build(api)
    diagnosis = one_line_device_error(raised.value)
    assert diagnosis.endswith(diagnose.DOCTOR_HINT)
    assert re.search(expected, diagnosis), diagnosis


@pytest.mark.parametrize("api", ["trainer", "fabric"])
@pytest.mark.parametrize("cause", ["affinity mask", "selector selects nothing", "no gpu node", "cpu build",
                                   "cpu variant"])
def test_gpu_without_a_device_names_the_cause(cause, api, xpu_build_without_devices, monkeypatch) -> None:
    """accelerator="gpu" on an XPU build without a device, or on a CPU build: Lightning finds no CUDA or MPS, and
    we say why XPU is not there either, as a one-line error that is still Lightning's type (code catching it keeps
    working)."""
    environ, xpu_build, expected = CAUSES[cause]
    if not xpu_build:
        monkeypatch.setattr(torch.version, "xpu", None, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    plain = build_connector_error(api)
    with pytest.raises(type(plain)) as raised:
        build(api, accelerator="gpu")
    message = one_line_device_error(raised.value)
    assert message.startswith(f"{plain} "), (message, str(plain))  # Lightning's message first, unchanged
    assert re.search(expected, message) and message.endswith(diagnose.DOCTOR_HINT), message


def build_connector_error(api: str) -> Exception:
    """What plain Lightning raises for accelerator="gpu" without CUDA and MPS (its unpatched method)."""
    from lightning_xpu._patching import original_of

    if api == "trainer":
        from lightning.pytorch.trainer.connectors.accelerator_connector import _AcceleratorConnector as connector
    else:
        from lightning.fabric.connector import _Connector as connector
    try:
        original_of(connector, "_choose_gpu_accelerator_backend")()
    except Exception as error:
        return error
    raise AssertionError("plain Lightning found a gpu backend here")


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


@pytest.mark.parametrize("api", ["trainer", "fabric"])
def test_gpu_without_an_xpu_build_is_lightnings_error_with_the_cause(api, monkeypatch) -> None:
    """torch without XPU and no CUDA or MPS: accelerator="gpu" raises plain Lightning's error type and message, in
    one line followed by the cause (a build without XPU) and the fix (issue 20; Lightning's text unchanged and first,
    issue 29)."""
    monkeypatch.setattr(torch.version, "xpu", None, raising=False)
    plain = build_connector_error(api)
    with pytest.raises(type(plain)) as raised:
        build(api, accelerator="gpu")
    message = one_line_device_error(raised.value)
    assert message.startswith(f"{plain} ") and "without XPU support" in message, message


@pytest.mark.parametrize("accelerator", ["xpu", "auto", "gpu"])
@pytest.mark.parametrize("devices", [3, "0,5", [0, 0]])
def test_devices_xpu_cannot_give_are_one_line(simulated_xpu, accelerator, devices) -> None:
    """Two simulated XPUs and `devices` they cannot meet, on each path that picks XPU: a one-line ValueError."""
    from lightning.pytorch import Trainer

    simulated_xpu(devices=2)
    with pytest.raises(ValueError) as raised:
        Trainer(accelerator=accelerator, devices=devices, logger=False)
    assert "xpu" in one_line_device_error(raised.value).lower()


def test_a_device_index_this_process_cannot_see_is_one_line(simulated_xpu) -> None:
    import lightning_xpu

    simulated_xpu(devices=2)
    with pytest.raises(RuntimeError) as raised:
        lightning_xpu.XPUAccelerator().setup_device(torch.device("xpu", 2))
    assert "use an index below 2" in one_line_device_error(raised.value)


def test_uncaught_the_error_is_one_line_on_stderr(tmp_path: Path, newest_lightning_only) -> None:
    """The excepthook: a script that asks for XPU on this CPU build prints one line and exits 1;
    LIGHTNING_XPU_DEBUG=1 brings the traceback back."""
    repo = Path(__file__).resolve().parents[2]
    script = "import lightning_xpu\nfrom lightning.pytorch import Trainer\nTrainer(accelerator='xpu', logger=False)\n"
    env = {**os.environ, "PYTHONPATH": str(repo)}
    env.pop("LIGHTNING_XPU_DEBUG", None)
    shown, debug = (subprocess.run([sys.executable, "-c", script], env=extra, capture_output=True, text=True,
                                   timeout=300, cwd=tmp_path)
                    for extra in (env, {**env, "LIGHTNING_XPU_DEBUG": "1"}))
    assert shown.returncode == 1 and debug.returncode == 1
    lines = shown.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("DeviceError: XPU cannot be used: PyTorch "), shown.stderr
    assert lines[0].endswith(diagnose.DOCTOR_HINT)
    assert "Traceback (most recent call last)" in debug.stderr and lines[0].split(": ", 1)[1] in debug.stderr


# Releases whose XPU builds have no `torch.version.xpu` (row version_xpu of tests/xpu_profiles.py: 2.5.1).
WITHOUT_VERSION_XPU = [version for version in ALL_PROFILES if fact("version_xpu", version) == ABSENT]


@pytest.mark.parametrize("version", WITHOUT_VERSION_XPU)
def test_an_xpu_build_without_torch_version_xpu_is_not_called_a_cpu_build(version, simulated_xpu, monkeypatch,
                                                                          tmp_path) -> None:
    """torch 2.5.1 has no `torch.version.xpu` (pytorch#139466): its XPU build is told apart otherwise, so a node
    without GPUs is diagnosed as such, and the doctor reports an xpu build."""
    from lightning_xpu.validation.model import torch_build

    sim = simulated_xpu(torch=version, devices=0)
    for name in ("LIGHTNING_XPU_VARIANT", "LIGHTNING_XPU_ROOT", "ZE_AFFINITY_MASK", "ONEAPI_DEVICE_SELECTOR",
                 "ZE_FLAT_DEVICE_HIERARCHY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(diagnose, "RENDER_NODES", str(tmp_path / "renderD*"))
    assert not hasattr(torch.version, "xpu")
    assert "no Intel GPU on this host" in (diagnose.unusable_reason() or "")
    assert torch_build()["torch_build"] == "xpu"
    assert not sim.unmodelled
