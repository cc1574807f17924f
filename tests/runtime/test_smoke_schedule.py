"""The smoke job's schedule (`lightning-xpu validate --level smoke`, lightning_xpu/validation/framework.py): without an
accelerator its process-starting checks run at the same time; on a device, or with --require-xpu, one after
another. Reports keep the checks' order either way."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest

from lightning_xpu.validation import PASS, framework
from lightning_xpu.validation.framework import CheckFailed, Context, Outcome, checks_of, run_checks

WAIT_S = 20.0


def stand_in_checks(monkeypatch: pytest.MonkeyPatch, xpu: int, cuda: int, together: bool) -> list[str]:
    """Every check replaced by a recorder. With TOGETHER each process-starting check waits until all of them have
    started, so it passes only if they really run at the same time (one by one, each gives up after WAIT_S)."""
    specs = checks_of("smoke")
    concurrent = [spec.name for spec in specs if spec.parallel_on_cpu]
    all_started = threading.Barrier(len(concurrent))
    events: list[str] = []

    def check(name: str) -> Any:
        def run(_: Context) -> Outcome:
            events.append(f"start {name}")
            if name == "devices":
                return Outcome("stand-in", {"xpu_count": xpu, "cuda_count": cuda})
            if name in concurrent and together:
                try:
                    all_started.wait(timeout=WAIT_S)
                except threading.BrokenBarrierError as exc:
                    raise CheckFailed("ran alone") from exc
            events.append(f"end {name}")
            return Outcome("stand-in")
        return run

    stand_ins = [dataclasses.replace(spec, run=check(spec.name)) for spec in specs]
    monkeypatch.setitem(framework.REGISTRY, "smoke", stand_ins)
    return events


def concurrent_names() -> list[str]:
    return [spec.name for spec in checks_of("smoke") if spec.parallel_on_cpu]


def test_the_process_starting_checks_are_the_issue_12_ones() -> None:
    assert concurrent_names() == ["pip_check", "allreduce", "fit_single_device", "fit_ddp"]
    assert [spec.name for spec in checks_of("smoke") if spec.gate] == ["devices"]


def test_without_an_accelerator_the_process_checks_overlap_and_report_in_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    order = [spec.name for spec in checks_of("smoke")]
    events = stand_in_checks(monkeypatch, xpu=0, cuda=0, together=True)
    reported: list[str] = []
    results = run_checks(Context("auto", 0, tmp_path), progress=lambda c: reported.append(c.name), level="smoke")
    assert all(result.status == PASS for result in results), results
    assert [result.name for result in results] == order
    assert reported == order
    # They start after the device check (which decides), and none ended before all had started.
    starts = [events.index(f"start {name}") for name in concurrent_names()]
    ends = [events.index(f"end {name}") for name in concurrent_names()]
    assert min(starts) > events.index("start devices") and max(starts) < min(ends), events


@pytest.mark.parametrize(("xpu", "cuda", "require_xpu"), [(2, 0, False), (0, 1, False), (0, 0, True)])
def test_on_a_device_or_with_require_xpu_they_run_one_after_another(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xpu: int, cuda: int, require_xpu: bool
) -> None:
    order = [spec.name for spec in checks_of("smoke")]
    events = stand_in_checks(monkeypatch, xpu=xpu, cuda=cuda, together=False)
    results = run_checks(Context("auto", 0, tmp_path, require_xpu=require_xpu), level="smoke")
    assert [result.name for result in results] == order
    # Every check ended before the next one started: the events alternate start/end in the checks' order.
    assert events == [f"{edge} {name}" for name in order for edge in ("start", "end")
                      if not (edge == "end" and name == "devices")], events
