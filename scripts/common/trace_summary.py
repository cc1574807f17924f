#!/usr/bin/env python3
"""Print where the time went in a PyTorch profiler trace (a Chrome trace, ``*.pt.trace.json``).

The profiled rank of a training job writes one (see docs/dawn.md, "Profile one rank"). This prints the top
operators by total time, device kernels (XPU or CUDA) apart from CPU operators, so a job can be judged from a
terminal; for the timeline, open the file in https://ui.perfetto.dev or chrome://tracing.

    python trace_summary.py profile/*.pt.trace.json [--top 15]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

# Kineto's categories for work that ran on the device (XPU kernels come through PTI with the same names).
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATEGORIES = ("cpu_op",)


def load_events(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"trace_summary: cannot read {path} as a Chrome trace: {error}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        raise SystemExit(f"trace_summary: {path} has no traceEvents list: is it a *.pt.trace.json file?")
    return [event for event in events if isinstance(event, dict)]


def totals(events: list[dict[str, Any]], categories: tuple[str, ...]) -> dict[str, tuple[float, int]]:
    """Total duration (microseconds) and count per event name, over the complete events of these categories."""
    found: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.get("ph") == "X" and str(event.get("cat", "")).lower() in categories:
            found[str(event.get("name"))].append(float(event.get("dur", 0)))
    return {name: (sum(durations), len(durations)) for name, durations in found.items()}


def table(title: str, rows: dict[str, tuple[float, int]], top: int) -> list[str]:
    if not rows:
        return [f"{title}: none recorded"]
    lines = [f"{title} (top {min(top, len(rows))} of {len(rows)}, by total time):"]
    for name, (total, count) in sorted(rows.items(), key=lambda item: -item[1][0])[:top]:
        lines.append(f"  {total / 1000:10.3f} ms  {count:6d} x  {name[:100]}")
    return lines


def summary(path: Path, top: int) -> str:
    events = load_events(path)
    lines = [f"{path}: {len(events)} events"]
    lines += table("device kernels", totals(events, DEVICE_CATEGORIES), top)
    lines += table("CPU operators", totals(events, HOST_CATEGORIES), top)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+", type=Path, help="*.pt.trace.json files")
    parser.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be positive")
    print("\n\n".join(summary(path, args.top) for path in args.traces))
    return 0


if __name__ == "__main__":
    sys.exit(main())
