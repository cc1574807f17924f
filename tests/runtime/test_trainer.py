"""Trainer extras: the device banner, DeviceStatsMonitor, and checkpoints saved on XPU loaded without XPU."""

from __future__ import annotations

import csv
import importlib
import logging
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from lightning_grid import QUIET, TRAINERS, build

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._patching import original_of

PACKAGES = [api.values[1] for api in TRAINERS]


@pytest.fixture
def lightning_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Lightning's loggers do not propagate to the root logger: hand them pytest's capturing handler."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "pytorch_lightning")]
    for logger in loggers:
        logger.addHandler(caplog.handler)
    yield caplog
    for logger in loggers:
        logger.removeHandler(caplog.handler)


def _boring_model(package: str) -> Any:
    return importlib.import_module(f"{package}.demos.boring_classes").BoringModel


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


@pytest.mark.parametrize("package", PACKAGES)
def test_banner_reports_xpu_used_after_lightnings_lines(simulated_xpu, lightning_log, package) -> None:
    """Simulated XPU (2 devices)."""
    simulated_xpu(devices=2)
    build("trainer", package, accelerator="xpu", devices=1)
    lines = _lines(lightning_log)
    assert lines.index("XPU available: True (2 devices), used: True") > lines.index("GPU available: False, used: False")
    assert not [line for line in lines if "not used" in line]


@pytest.mark.parametrize("package", PACKAGES)
def test_banner_warns_when_xpu_is_available_but_not_used(simulated_xpu, lightning_log, package) -> None:
    """Simulated XPU; the Trainer runs on CPU."""
    simulated_xpu(devices=2)
    warning = importlib.import_module(f"{package}.utilities.warnings").PossibleUserWarning
    with pytest.warns(warning, match=r"XPU available but not used\. .*Trainer\(accelerator='xpu'\)"):
        build("trainer", package, accelerator="cpu")
    assert "XPU available: True (2 devices), used: False" in _lines(lightning_log)


@pytest.mark.parametrize("package", PACKAGES)
def test_unpatched_banner_says_nothing_about_xpu(simulated_xpu, lightning_log, package) -> None:
    simulated_xpu(devices=2)
    trainer = build("trainer", package, accelerator="xpu", devices=1).owner
    lightning_log.clear()
    original_of(importlib.import_module(f"{package}.trainer.setup"), "_log_device_info")(trainer)
    assert _lines(lightning_log) and not [line for line in _lines(lightning_log) if "XPU" in line]


@pytest.mark.parametrize("package", PACKAGES)
def test_banner_without_xpu_is_lightnings(lightning_log, package) -> None:
    build("trainer", package, accelerator="cpu")
    assert "GPU available: False, used: False" in _lines(lightning_log)
    assert not [line for line in _lines(lightning_log) if "XPU" in line]


@pytest.mark.parametrize("package", PACKAGES)
def test_device_stats_monitor_logs_xpu_memory(simulated_xpu, tmp_path, package) -> None:
    """Simulated XPU: Lightning's DeviceStatsMonitor and CSVLogger on a Trainer whose root device is xpu:0.

    The callback's batch hook is called directly: a fit cannot run, since tensors cannot move to xpu on the CPU
    build. The statistics are the simulation's `torch.xpu.memory_stats`.
    """
    simulated_xpu(devices=1)
    pl = importlib.import_module(package)
    logger = pl.loggers.CSVLogger(tmp_path)
    monitor = pl.callbacks.DeviceStatsMonitor()
    trainer = pl.Trainer(accelerator="xpu", devices=1, callbacks=[monitor], log_every_n_steps=1,
                         **{**QUIET, "logger": logger})
    assert trainer.strategy.root_device == torch.device("xpu", 0)
    model = _boring_model(package)()
    monitor.setup(trainer, model, "fit")
    monitor.on_train_batch_start(trainer, model, None, 0)
    logger.save()
    with open(Path(logger.log_dir) / "metrics.csv") as metrics:
        row = next(csv.DictReader(metrics))
    logged = {key: value for key, value in row.items() if "on_train_batch_start" in key and value}
    assert {key.split("/")[-1]: float(value) for key, value in logged.items()} == {
        "allocated_bytes.all.current": 1024.0, "reserved_bytes.all.current": 2048.0
    }


def _storage_locations(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        return b"".join(archive.read(name) for name in archive.namelist() if name.endswith("data.pkl"))


@pytest.fixture(scope="module", params=PACKAGES)
def xpu_checkpoint(request, tmp_path_factory) -> tuple[str, Path, dict[str, torch.Tensor]]:
    """A real checkpoint of a one-step CPU fit, saved as if on XPU: every storage location is written as xpu:0."""
    package = request.param
    pl = importlib.import_module(package)
    root = tmp_path_factory.mktemp("checkpoint")
    model = _boring_model(package)()
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, default_root_dir=root, **QUIET)
    trainer.fit(model)
    path = root / "xpu.ckpt"
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: "xpu:0"):
        trainer.save_checkpoint(path)
    locations = _storage_locations(path)
    assert b"xpu:0" in locations and b"cpu" not in locations
    return package, path, {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def test_unpatched_default_map_location_leaves_xpu_storages_on_xpu(xpu_checkpoint) -> None:
    package, path, _ = xpu_checkpoint
    original = original_of(importlib.import_module(f"{package}.core.saving"), "_default_map_location")
    assert original(torch.zeros(1).untyped_storage(), "xpu:0") is None
    with pytest.raises(RuntimeError, match=r"XPU device but torch\.xpu\.is_available"):
        torch.load(path, map_location=original, weights_only=False)


def test_load_from_checkpoint_without_xpu(xpu_checkpoint) -> None:
    package, path, saved = xpu_checkpoint
    model = _boring_model(package).load_from_checkpoint(path)
    loaded = model.state_dict()
    assert loaded.keys() == saved.keys()
    for name, tensor in saved.items():
        assert loaded[name].device == torch.device("cpu") and torch.equal(loaded[name], tensor)


def test_trainer_resumes_from_an_xpu_checkpoint_without_xpu(xpu_checkpoint, tmp_path) -> None:
    package, path, _ = xpu_checkpoint
    pl = importlib.import_module(package)
    trainer = pl.Trainer(accelerator="cpu", max_steps=2, default_root_dir=tmp_path, **QUIET)
    trainer.fit(_boring_model(package)(), ckpt_path=path)
    assert trainer.global_step == 2  # one step restored, one more taken


def test_fabric_loads_an_xpu_checkpoint_without_xpu(xpu_checkpoint) -> None:
    package, path, saved = xpu_checkpoint
    fabric_package = "lightning.fabric" if package == "lightning.pytorch" else "lightning_fabric"
    checkpoint: dict[str, Any] = importlib.import_module(fabric_package).Fabric(accelerator="cpu").load(path)
    for name, tensor in saved.items():
        assert torch.equal(checkpoint["state_dict"][name], tensor)


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize(("root", "expected"), [
    (None, "lightning_xpu: training on cpu"),
    ("/p re/fix/2.13-cpu", "lightning_xpu: training on cpu, in lightning-xpu/2.13-cpu (cpu variant)"),
    ("/prefix/2.13/", "lightning_xpu: training on cpu, in lightning-xpu/2.13 (xpu variant)"),
], ids=["outside", "cpu-variant", "xpu-variant"])
def test_banner_always_states_the_device_and_the_environments_variant(lightning_log, monkeypatch, package, root,
                                                                      expected) -> None:
    monkeypatch.delenv("LIGHTNING_XPU_ROOT", raising=False)
    if root:
        monkeypatch.setenv("LIGHTNING_XPU_ROOT", root)
    build("trainer", package, accelerator="cpu")
    assert expected in _lines(lightning_log)


@pytest.mark.parametrize("package", PACKAGES)
def test_banner_never_queries_xpu_in_an_environment_of_another_variant(simulated_xpu, lightning_log, monkeypatch,
                                                                       package) -> None:
    """A -cpu environment did not ask for XPU: no device query (it could poison a later fork), no XPU line."""
    simulated_xpu(devices=2)
    monkeypatch.setenv("LIGHTNING_XPU_ROOT", "/prefix/2.13-cpu")
    trainer = build("trainer", package, accelerator="cpu").owner
    lightning_log.clear()
    with mock.patch("torch.xpu.is_available", side_effect=AssertionError("queried")), \
            mock.patch("torch.xpu.device_count", side_effect=AssertionError("queried")):
        importlib.import_module(f"{package}.trainer.setup")._log_device_info(trainer)
    assert not [line for line in _lines(lightning_log) if "XPU" in line]
    assert "lightning_xpu: training on cpu, in lightning-xpu/2.13-cpu (cpu variant)" in _lines(lightning_log)
