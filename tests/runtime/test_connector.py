"""Accelerator, devices and strategy choices of the Trainer and Fabric connectors on simulated XPU.

Every test here runs on the CPU build of torch with `torch.xpu`'s device queries patched (`simulated_xpu`): the
choices are Lightning's real ones, but nothing runs on an Intel GPU. Each patch has a test showing what Lightning
alone does (`unpatched`), so the patch can be dropped the day upstream fixes it.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from lightning_grid import APIS, TRAINERS, build, connector_module, require_feature, strategies, unpatched

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu.accelerator import is_xpu_accelerator

xpu = torch.device


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize(
    ("devices", "strategy", "expected"),
    [
        (1, "SingleDeviceStrategy", ["xpu:0"]),
        ("1", "SingleDeviceStrategy", ["xpu:0"]),
        ([1], "SingleDeviceStrategy", ["xpu:1"]),
        (2, "DDPStrategy", ["xpu:0", "xpu:1"]),
        ([1, 3], "DDPStrategy", ["xpu:1", "xpu:3"]),
        ("0,2", "DDPStrategy", ["xpu:0", "xpu:2"]),
        (-1, "DDPStrategy", ["xpu:0", "xpu:1", "xpu:2", "xpu:3"]),
        ("auto", "DDPStrategy", ["xpu:0", "xpu:1", "xpu:2", "xpu:3"]),
    ],
)
def test_every_devices_form_chooses_what_cuda_would(simulated_xpu, api, package, devices, strategy, expected) -> None:
    """Simulated XPU (4 devices): one device -> single device on that xpu, several -> DDP over them."""
    simulated_xpu(devices=4)
    built = build(api, package, accelerator="xpu", devices=devices)
    assert is_xpu_accelerator(built.accelerator)
    assert type(built.strategy).__name__ == strategy
    assert built.strategy.root_device == torch.device(expected[0])
    if strategy == "DDPStrategy":
        assert [str(d) for d in built.strategy.parallel_devices] == expected


@pytest.mark.parametrize(("api", "package"), APIS)
def test_unpatched_lightning_puts_one_xpu_device_on_cpu(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=2)
    connector = build(api, package, accelerator="xpu", devices=[1]).connector
    assert unpatched(connector, "_choose_strategy")().root_device == torch.device("cpu")


@pytest.mark.parametrize(("api", "package"), APIS)
def test_an_accelerator_instance_works_like_the_name(simulated_xpu, api, package) -> None:
    """Simulated XPU: `XPUAccelerator()` of that namespace, given as an instance."""
    simulated_xpu(devices=2)
    accelerator = build(api, package, accelerator="xpu").accelerator
    built = build(api, package, accelerator=type(accelerator)(), devices=1, precision="bf16-mixed")
    assert built.strategy.root_device == torch.device("xpu", 0)
    assert built.precision.device == "xpu"


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize("flag", ["auto", "gpu"])
def test_auto_and_gpu_pick_xpu_when_it_is_the_only_gpu(simulated_xpu, api, package, flag) -> None:
    """Simulated XPU, no CUDA, no MPS."""
    simulated_xpu(devices=2)
    built = build(api, package, accelerator=flag, devices=1)
    assert is_xpu_accelerator(built.accelerator)
    assert built.strategy.root_device == torch.device("xpu", 0)


@pytest.mark.parametrize(("api", "package"), APIS)
def test_unpatched_lightning_picks_cpu_for_auto_and_finds_no_gpu(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=2)
    connector = build(api, package, accelerator="xpu").connector
    assert unpatched(connector, "_choose_auto_accelerator")() == "cpu"
    with pytest.raises(Exception, match="No supported gpu backend found"):
        unpatched(connector, "_choose_gpu_accelerator_backend")()


# Lightning's own tests of accelerator="gpu" with neither MPS nor CUDA (at 2.6.5:
# tests/tests_pytorch/trainer/connectors/test_accelerator_connector.py::test_gpu_accelerator_misconfiguration_exception,
# tests/tests_fabric/test_connector.py::test_gpu_accelerator_no_gpu_backend_found_error): the type and the text.
LIGHTNINGS_NO_GPU_BACKEND = "No supported gpu backend found!"


@pytest.mark.parametrize(("api", "package"), APIS)
def test_gpu_with_no_gpu_at_all_raises_lightnings_exact_error(api, package, monkeypatch) -> None:
    """This CPU-only machine (a CPU build of torch: no CUDA, no MPS, no XPU), lightning_xpu loaded: Lightning's
    tests still pass (same mocks, same `pytest.raises`), and Lightning's message is the start of ours, unchanged."""
    accelerators = f"{package}.accelerators"
    for module, name in (("mps", "MPSAccelerator"), ("cuda", "CUDAAccelerator")):
        monkeypatch.setattr(getattr(importlib.import_module(f"{accelerators}.{module}"), name), "is_available",
                            lambda: False)
    if api == "trainer":
        expected: type[Exception] = importlib.import_module(f"{package}.utilities.exceptions").MisconfigurationException
        with pytest.raises(expected, match=LIGHTNINGS_NO_GPU_BACKEND) as raised:
            importlib.import_module(package).Trainer(accelerator="gpu")
    else:
        with pytest.raises(RuntimeError, match=LIGHTNINGS_NO_GPU_BACKEND) as raised:
            connector_module(api, package)._Connector(accelerator="gpu")
    message = str(raised.value)
    assert message.startswith(LIGHTNINGS_NO_GPU_BACKEND + " "), message
    assert "XPU cannot be used" in message and "\n" not in message, message  # the diagnosis follows, one line


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize("flag", ["auto", "gpu"])
def test_cuda_keeps_priority_over_xpu(simulated_xpu, simulated_cuda, api, package, flag) -> None:
    """Simulated XPU and simulated CUDA on one machine: Lightning's choice (CUDA) stands."""
    simulated_xpu(devices=2)
    simulated_cuda(2)
    built = build(api, package, accelerator=flag, devices=2)
    assert type(built.accelerator).__name__ == "CUDAAccelerator"
    assert [str(d) for d in built.strategy.parallel_devices] == ["cuda:0", "cuda:1"]


@pytest.mark.parametrize(("api", "package"), APIS)
def test_cpu_stays_cpu_on_an_xpu_machine(simulated_xpu, api, package) -> None:
    """Simulated XPU; the user asked for CPU."""
    simulated_xpu(devices=2)
    built = build(api, package, accelerator="cpu", devices=1, precision="bf16-mixed")
    assert type(built.accelerator).__name__ == "CPUAccelerator"
    assert built.strategy.root_device == torch.device("cpu")
    assert built.precision.device == "cpu"


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize("accelerator", ["auto", "gpu", "xpu"])
def test_xpu_parallel_devices_imply_the_xpu_accelerator(simulated_xpu, api, package, accelerator) -> None:
    """Simulated XPU: `DDPStrategy(parallel_devices=[xpu:0, xpu:1])`."""
    simulated_xpu(devices=2)
    ddp = strategies(package).DDPStrategy(parallel_devices=[xpu("xpu", 0), xpu("xpu", 1)])
    built = build(api, package, accelerator=accelerator, strategy=ddp)
    assert is_xpu_accelerator(built.accelerator)
    assert built.strategy is ddp and ddp.root_device == torch.device("xpu", 0)


@pytest.mark.parametrize(("api", "package"), APIS)
def test_xpu_parallel_devices_with_another_accelerator_are_refused(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=2)
    ddp = strategies(package).DDPStrategy(parallel_devices=[xpu("xpu", 0), xpu("xpu", 1)])
    with pytest.raises(ValueError, match=r"XPU parallel_devices set through DDPStrategy, but accelerator='cpu'"):
        build(api, package, accelerator="cpu", strategy=ddp)


@pytest.mark.parametrize(("api", "package"), APIS)
def test_unpatched_lightning_ignores_xpu_parallel_devices(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=2)
    ddp = strategies(package).DDPStrategy(parallel_devices=[xpu("xpu", 0), xpu("xpu", 1)])
    connector = build(api, package, accelerator="xpu").connector
    flags = {"strategy": ddp, "accelerator": "auto", "precision": None, "plugins": None}
    if api == "trainer":
        flags["sync_batchnorm"] = False
    unpatched(connector, "_check_config_and_set_final_flags")(**flags)
    assert connector._accelerator_flag == "auto"  # and "auto" then resolves to CPU


@pytest.mark.parametrize(("api", "package"), APIS)
def test_auto_devices_in_a_notebook_use_one_xpu_as_for_cuda(simulated_xpu, monkeypatch, api, package) -> None:
    """Simulated XPU (2 devices) in an interactive session."""
    simulated_xpu(devices=2)
    monkeypatch.setattr(connector_module(api, package), "_IS_INTERACTIVE", True)
    built = build(api, package, accelerator="xpu")
    assert built.strategy.root_device == torch.device("xpu", 0)
    assert type(built.strategy).__name__ == "SingleDeviceStrategy"
    built.connector._devices_flag = "auto"
    unpatched(built.connector, "_set_devices_flag_if_auto_passed")()
    assert built.connector._devices_flag == 2  # Lightning alone: every device, then DDP by fork


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize("strategy", ["fsdp", "fsdp_cpu_offload", "FSDPStrategy()"])
def test_fsdp_is_accepted_on_xpu(simulated_xpu, api, package, strategy) -> None:
    """Simulated XPU (2 devices)."""
    simulated_xpu(devices=2)
    fsdp = strategies(package).FSDPStrategy
    given = fsdp() if strategy == "FSDPStrategy()" else strategy
    built = build(api, package, accelerator="xpu", devices=2, strategy=given)
    assert isinstance(built.strategy, fsdp)
    assert [str(d) for d in built.strategy.parallel_devices] == ["xpu:0", "xpu:1"]


@pytest.mark.parametrize(("api", "package"), APIS)
def test_unpatched_lightning_refuses_fsdp_on_xpu(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=2)
    connector = build(api, package, accelerator="xpu", devices=2, strategy="fsdp").connector
    connector._strategy_flag = "fsdp"
    with pytest.raises(Exception, match=r"(?i)fsdp"):
        unpatched(connector, "_check_strategy_and_fallback")()


@pytest.mark.parametrize(("api", "package"), APIS)
def test_fsdp_is_still_refused_on_cpu(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=2)
    with pytest.raises(Exception, match=r"(?i)fsdp"):
        build(api, package, accelerator="cpu", devices=2, strategy="fsdp")


@pytest.mark.parametrize(("api", "package"), APIS)
def test_model_parallel_strategy_is_accepted_on_xpu(simulated_xpu, api, package) -> None:
    """Simulated XPU (2 devices); ModelParallelStrategy exists from Lightning 2.3."""
    simulated_xpu(devices=2)
    require_feature("model_parallel", package)
    model_parallel = strategies(package).ModelParallelStrategy
    strategy = model_parallel(parallelize_fn=lambda module, mesh: module) if api == "fabric" else model_parallel()
    built = build(api, package, accelerator="xpu", devices=2, strategy=strategy, precision="bf16-mixed")
    assert [str(d) for d in built.strategy.parallel_devices] == ["xpu:0", "xpu:1"]
    assert built.precision.device == "xpu"


@pytest.mark.parametrize(("api", "package"), APIS)
def test_without_xpu_the_xpu_accelerator_is_not_available(api, package) -> None:
    with pytest.raises(Exception, match=r"^XPU cannot be used: "):
        build(api, package, accelerator="xpu")


@pytest.mark.parametrize(("api", "package"), TRAINERS)
def test_ddp_spawn_on_xpu_keeps_its_launcher(simulated_xpu, api, package) -> None:
    """Simulated XPU: the strategy string still decides the start method."""
    simulated_xpu(devices=2)
    built = build(api, package, accelerator="xpu", devices=2, strategy="ddp_spawn")
    assert built.strategy.launcher._start_method == "spawn"
    assert [str(d) for d in built.strategy.parallel_devices] == ["xpu:0", "xpu:1"]
