"""oneCCL's "ccl" backend on faithful profiles (tests/xpu_profiles.py row oneccl_needs_ipex_first): on PyTorch
2.5-2.7 the bindings' XPU part loads only when IPEX was imported first; the runtime imports IPEX first and checks that
the XPU part is loaded, in process-group setup and in the smoke job's all-reduce (validation/worker.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import LIGHTNING
from lightning_xpu.validation import worker

REPO = Path(__file__).resolve().parents[2]
BINDINGS, IPEX = "oneccl_bindings_for_pytorch", "intel_extension_for_pytorch"
pytestmark = pytest.mark.usefixtures("rank_zero_only_rank")


def setup_ddp_on_xpu(recorded_process_group, sim, **strategy_kwargs) -> object:
    recorded_process_group(sim.events)
    strategy = LIGHTNING.pytorch_module("strategies").DDPStrategy(**strategy_kwargs)
    trainer = LIGHTNING.pytorch_module("").Trainer(accelerator="xpu", devices=2, strategy=strategy, logger=False)
    trainer.strategy.setup_environment()
    return trainer


def test_ccl_imports_ipex_before_the_bindings_so_their_xpu_part_loads(simulated_xpu, recorded_process_group,
                                                                      capsys) -> None:
    """Fails on main: it imported the bindings alone; on 2.5-2.7 their XPU part then never loads (they only print
    "CCL doesn't work for XPU device") and the smoke job's all-reduce fails."""
    sim = simulated_xpu(torch="2.7", oneccl=True, ipex=True)
    setup_ddp_on_xpu(recorded_process_group, sim)
    assert sim.ipex_imported
    from lightning_xpu.strategies.backend import oneccl_xpu_loaded

    assert oneccl_xpu_loaded(sys.modules[BINDINGS])
    assert "CCL doesn't work for XPU device" not in capsys.readouterr().out


@pytest.mark.parametrize("explicit", [False, True], ids=["chosen", "process_group_backend=ccl"])
def test_ccl_without_ipex_stops_in_process_group_setup_naming_the_fix(simulated_xpu, recorded_process_group,
                                                                      explicit) -> None:
    """Fails on main: setup went on with a ccl backend that cannot do XPU collectives."""
    sim = simulated_xpu(torch="2.7", oneccl=True, ipex=False)
    kwargs = {"process_group_backend": "ccl"} if explicit else {}
    with pytest.raises(RuntimeError, match=rf"XPU part .* is not loaded.*install {IPEX} of the same version"):
        setup_ddp_on_xpu(recorded_process_group, sim, **kwargs)


def test_bindings_imported_before_ipex_are_named_as_the_cause(simulated_xpu, recorded_process_group) -> None:
    sim = simulated_xpu(torch="2.7", oneccl=True, ipex=True)
    __import__(BINDINGS)  # the user's script imported them first
    with pytest.raises(RuntimeError, match=rf"import {IPEX} before {BINDINGS}"):
        setup_ddp_on_xpu(recorded_process_group, sim)


def test_bindings_of_2_8_need_no_ipex(simulated_xpu, recorded_process_group) -> None:
    sim = simulated_xpu(torch="2.8", oneccl=True, ipex=False)
    setup_ddp_on_xpu(recorded_process_group, sim, process_group_backend="ccl")
    assert not sim.ipex_imported


def test_smoke_all_reduce_stops_with_the_same_reason(simulated_xpu, monkeypatch, tmp_path) -> None:
    """The smoke job's ccl all-reduce rank (the validation worker's `collectives`) checks the bindings the same way,
    before any collective."""
    simulated_xpu(torch="2.7", oneccl=True, ipex=False)

    def init_process_group(*args: object, **kwargs: object) -> None:
        raise AssertionError("reached init_process_group with bindings that cannot do XPU")

    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert worker.main(["collectives", "--backend", "ccl", "--device", "xpu", "--out", str(tmp_path)]) == 1
    error = json.loads((tmp_path / "rank-0.json").read_text())["error"]
    assert re.match(r"RuntimeError: .*XPU part .* is not loaded", error), error
