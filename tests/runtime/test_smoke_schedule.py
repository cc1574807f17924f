"""The smoke job's schedule (scripts/common/smoke.py): without an accelerator its process-starting checks run at
the same time; on a device, or with --require-xpu, one after another. Reports keep the checks' order either way."""

from __future__ import annotations

import argparse
import importlib.util
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 20.0


def load_smoke() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lxpu_smoke_schedule", REPO / "scripts" / "common" / "smoke.py")
    assert spec is not None and spec.loader is not None
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    return smoke


def stand_in_checks(smoke: ModuleType, monkeypatch: pytest.MonkeyPatch, xpu: int, cuda: int,
                    together: bool) -> list[str]:
    """Every check replaced by a recorder. With TOGETHER each process-starting check waits until all of them have
    started, so it passes only if they really run at the same time (one by one, each gives up after WAIT_S)."""
    concurrent = smoke.CONCURRENT_ON_CPU
    all_started = threading.Barrier(len(concurrent))
    events: list[str] = []

    def check(name: str) -> Any:
        def run(_: argparse.Namespace) -> Any:
            events.append(f"start {name}")
            if name == "devices":
                return {"xpu_count": xpu, "cuda_count": cuda}
            if name in concurrent and together:
                try:
                    all_started.wait(timeout=WAIT_S)
                except threading.BrokenBarrierError as exc:
                    raise smoke.CheckFailed("ran alone") from exc
            events.append(f"end {name}")
            return {}
        return run

    monkeypatch.setattr(smoke, "CHECKS", {name: check(name) for name in smoke.CHECKS})
    return events


def test_without_an_accelerator_the_process_checks_overlap_and_report_in_order(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    smoke = load_smoke()
    order = list(smoke.CHECKS)
    events = stand_in_checks(smoke, monkeypatch, xpu=0, cuda=0, together=True)
    results = smoke.run_checks(argparse.Namespace(require_xpu=False))
    assert all(entry["ok"] for entry in results.values()), results
    assert list(results) == order
    printed = [line.split(":")[1].strip() for line in capsys.readouterr().out.splitlines()]
    assert printed == order
    # They start after the device check (which decides), and none ended before all had started.
    starts = [events.index(f"start {name}") for name in smoke.CONCURRENT_ON_CPU]
    ends = [events.index(f"end {name}") for name in smoke.CONCURRENT_ON_CPU]
    assert min(starts) > events.index("start devices") and max(starts) < min(ends), events


@pytest.mark.parametrize(("xpu", "cuda", "require_xpu"), [(2, 0, False), (0, 1, False), (0, 0, True)])
def test_on_a_device_or_with_require_xpu_they_run_one_after_another(
    monkeypatch: pytest.MonkeyPatch, xpu: int, cuda: int, require_xpu: bool
) -> None:
    smoke = load_smoke()
    events = stand_in_checks(smoke, monkeypatch, xpu=xpu, cuda=cuda, together=False)
    results = smoke.run_checks(argparse.Namespace(require_xpu=require_xpu))
    assert list(results) == list(smoke.CHECKS)
    # Every check ended before the next one started: the events alternate start/end in the checks' order.
    assert events == [f"{edge} {name}" for name in smoke.CHECKS for edge in ("start", "end")
                      if not (edge == "end" and name == "devices")], events
