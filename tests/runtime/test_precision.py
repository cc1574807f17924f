"""Mixed and reduced precision on simulated XPU: autocast and gradient scaling happen on "xpu", not "cuda".

Simulated XPU throughout (`simulated_xpu`): `torch.autocast("xpu")` and `GradScaler("xpu")` are real on the CPU build,
so whether autocast is enabled for xpu is really observed; no tensor runs on an Intel GPU.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from lightning_grid import APIS, TRAINERS, build, unpatched

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu.precision import fsdp_precision_class, mixed_precision_class

REPO = Path(__file__).resolve().parents[2]
DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
PACKAGES = ("lightning.pytorch", "pytorch_lightning", "lightning.fabric", "lightning_fabric")


def _autocast_probe(package: str) -> type:
    """A LightningModule whose training_step records the autocast state it runs under."""

    class AutocastProbe(importlib.import_module(package).LightningModule):
        seen: tuple[bool, torch.dtype, bool] | None = None

        def training_step(self, batch, batch_idx):
            AutocastProbe.seen = (
                torch.is_autocast_enabled("xpu"), torch.get_autocast_dtype("xpu"), torch.is_autocast_enabled("cuda")
            )

    return AutocastProbe


@pytest.mark.parametrize(("api", "package"), TRAINERS)
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_training_step_runs_under_xpu_autocast(simulated_xpu, api, package, precision) -> None:
    """Simulated XPU: the LightningModule's training_step, run by the Trainer's strategy under its precision plugin."""
    simulated_xpu(devices=1)
    trainer = build(api, package, accelerator="xpu", devices=1, precision=precision).owner
    probe = _autocast_probe(package)
    trainer.strategy.connect(probe())
    trainer.strategy.training_step(torch.zeros(1), 0)
    assert probe.seen == (True, DTYPES[precision], False)


@pytest.mark.parametrize(("api", "package"), APIS)
def test_unpatched_lightning_autocasts_on_cuda_so_xpu_trains_in_fp32(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=1)
    built = build(api, package, accelerator="xpu", devices=1, precision="bf16-mixed")
    lightnings = unpatched(built.connector, "_check_and_init_precision")()
    assert lightnings.device == "cuda"
    with warnings.catch_warnings(), lightnings.forward_context():
        warnings.simplefilter("ignore")  # "CUDA is not available ... Disabling autocast"
        assert not torch.is_autocast_enabled("xpu")


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_plugin_is_on_xpu(simulated_xpu, api, package, precision) -> None:
    """Simulated XPU, Trainer and Fabric: device "xpu", a GradScaler on xpu for 16-mixed only, no CUDA warning."""
    simulated_xpu(devices=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = build(api, package, accelerator="xpu", devices=2, strategy="ddp", precision=precision)
    assert not [w for w in caught if "CUDA" in str(w.message)]
    plugin = built.precision
    assert isinstance(plugin, importlib.import_module(f"{package}.plugins.precision").MixedPrecision)
    assert (plugin.device, plugin.precision) == ("xpu", precision)
    if precision == "16-mixed":
        assert isinstance(plugin.scaler, torch.amp.GradScaler)
        assert (plugin.scaler._device, plugin.scaler.is_enabled()) == ("xpu", True)
    else:
        assert plugin.scaler is None
    with plugin.forward_context():
        assert torch.is_autocast_enabled("xpu") and torch.get_autocast_dtype("xpu") == DTYPES[precision]


@pytest.mark.parametrize(("api", "package"), [api for api in APIS if api.values[0] == "fabric"])
def test_fabric_autocast_is_on_xpu(simulated_xpu, api, package) -> None:
    """Simulated XPU: `fabric.autocast()`."""
    simulated_xpu(devices=1)
    fabric = build(api, package, accelerator="xpu", devices=1, precision="bf16-mixed").owner
    with fabric.autocast():
        assert torch.is_autocast_enabled("xpu") and not torch.is_autocast_enabled("cuda")


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize("precision", ["bf16-true", "16-true", "32-true"])
def test_true_precisions_are_lightnings_own(simulated_xpu, api, package, precision) -> None:
    """Simulated XPU: device-agnostic plugins are left as Lightning builds them."""
    simulated_xpu(devices=1)
    plugin = build(api, package, accelerator="xpu", devices=1, precision=precision).precision
    expected = "Precision" if precision == "32-true" else "HalfPrecision"
    assert type(plugin).__name__ == expected and type(plugin).__module__.startswith(package)


@pytest.mark.parametrize(("api", "package"), APIS)
def test_a_plugin_the_user_passed_is_kept(simulated_xpu, api, package) -> None:
    """Simulated XPU: plugins=[MixedPrecision("bf16-mixed", "cpu")] is the user's choice, not ours to change."""
    simulated_xpu(devices=1)
    mine = importlib.import_module(f"{package}.plugins.precision").MixedPrecision("bf16-mixed", "cpu")
    assert build(api, package, accelerator="xpu", devices=1, plugins=[mine]).precision is mine


@pytest.mark.parametrize(("api", "package"), APIS)
def test_16_mixed_falls_back_to_bf16_without_fp64(simulated_xpu, api, package) -> None:
    """Simulated XPU without fp64 (as Arc A-series): decided when the training process converts the module."""
    simulated_xpu(devices=1, fp64=False)
    plugin = build(api, package, accelerator="xpu", devices=1, precision="16-mixed").precision
    assert plugin.scaler is not None  # nothing queried the device while choosing (a launcher may fork later)
    with pytest.warns(UserWarning, match=r"precision='16-mixed' needs fp64 .*precision='bf16-mixed' instead"):
        plugin.convert_module(torch.nn.Linear(2, 2))
    assert (plugin.precision, plugin.scaler, plugin.device) == ("bf16-mixed", None, "xpu")
    with plugin.forward_context():
        assert torch.get_autocast_dtype("xpu") == torch.bfloat16


@pytest.mark.parametrize(("api", "package"), APIS)
def test_16_mixed_keeps_its_scaler_with_fp64(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=1, fp64=True)
    plugin = build(api, package, accelerator="xpu", devices=1, precision="16-mixed").precision
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plugin.convert_module(torch.nn.Linear(2, 2))
    assert plugin.precision == "16-mixed" and plugin.scaler._device == "xpu"


@pytest.mark.parametrize(("api", "package"), APIS)
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_fsdp_precision_autocasts_and_scales_on_xpu(simulated_xpu, api, package, precision) -> None:
    """Simulated XPU (2 devices), `strategy="fsdp"`."""
    simulated_xpu(devices=2)
    plugin = build(api, package, accelerator="xpu", devices=2, strategy="fsdp", precision=precision).precision
    assert isinstance(plugin, importlib.import_module(f"{package}.plugins.precision").FSDPPrecision)
    with plugin.forward_context():
        assert torch.is_autocast_enabled("xpu") and torch.get_autocast_dtype("xpu") == DTYPES[precision]
    if precision == "16-mixed":
        assert plugin.scaler._device == "xpu"
    else:
        assert plugin.scaler is None
    assert plugin.mixed_precision_config.reduce_dtype == DTYPES[precision]


@pytest.mark.parametrize(("api", "package"), APIS)
def test_fsdp_true_precision_keeps_lightnings_dtype_context(simulated_xpu, api, package) -> None:
    simulated_xpu(devices=2)
    plugin = build(api, package, accelerator="xpu", devices=2, strategy="fsdp", precision="bf16-true").precision
    with plugin.forward_context():
        assert not torch.is_autocast_enabled("xpu") and torch.get_default_dtype() == torch.bfloat16


@pytest.mark.parametrize(("api", "package"), APIS)
def test_unpatched_fsdp_precision_autocasts_on_cuda_with_a_cuda_scaler(api, package) -> None:
    fsdp_precision = importlib.import_module(f"{package}.plugins.precision").FSDPPrecision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available. Disabling."
        lightnings = fsdp_precision("16-mixed")
        with lightnings.forward_context():
            assert not torch.is_autocast_enabled("xpu")
    assert lightnings.scaler._device == "cuda"


def test_precision_plugins_unpickle_in_a_fresh_process() -> None:
    """`ddp_spawn` pickles the Trainer with its plugin; the worker has not built our per-namespace classes yet."""
    plugins = []
    for package in PACKAGES:
        plugins.append(mixed_precision_class(package)("16-mixed", "xpu", scaler=torch.amp.GradScaler("xpu")))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plugins.append(fsdp_precision_class(package)("bf16-mixed"))
    code = (
        "import pickle, sys\n"
        "for p in pickle.loads(sys.stdin.buffer.read()):\n"
        "    scaler = p.scaler\n"
        "    print(type(p).__mro__[2].__module__, p.precision, type(scaler).__name__, getattr(scaler, '_device', ''))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(plugins), capture_output=True, env=env)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().splitlines() == [
        line
        for package in PACKAGES
        for line in (f"{package}.plugins.precision.amp 16-mixed GradScaler xpu",
                     f"{package}.plugins.precision.fsdp bf16-mixed NoneType ")
    ]
