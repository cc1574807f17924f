"""Shared by the benchmark scripts: fresh-process workers, interleaved repetitions, statistics, output.

Every measured variant runs in its own fresh Python process, and the variants are interleaved (A B C, B C A, ...)
so that drift of the machine (thermal, other load) hits all of them alike. Ratios are only ever formed between
numbers measured in the same run.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def worker_env(with_lightning_xpu: bool) -> dict[str, str]:
    """Environment for a worker process: the repository importable; patches off for the baseline."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if with_lightning_xpu:
        env.pop("LIGHTNING_XPU_DISABLE", None)
    else:
        # Also neutralises the zero-code-change hook if this environment has it.
        env["LIGHTNING_XPU_DISABLE"] = "1"
    return env


def run_worker(argv: Sequence[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run one worker; it prints one JSON object as its last stdout line."""
    done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rotations(names: Sequence[str], repeats: int) -> list[list[str]]:
    """Interleaving order: each repetition starts with the next variant."""
    return [[names[(start + i) % len(names)] for i in range(len(names))] for start in range(repeats)]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "host_cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpus"] = torch.cuda.device_count()
        elif hasattr(torch, "xpu") and torch.xpu.is_available():
            info["gpu"] = torch.xpu.get_device_name(0)
            info["gpus"] = torch.xpu.device_count()
    except ImportError:
        pass
    try:
        import lightning

        info["lightning"] = lightning.__version__
    except ImportError:
        pass
    return info


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=2) + "\n")


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in header]] + [[f"{c:.4f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
        if n == 0:
            print("  ".join("-" * width for width in widths))


def self_command() -> list[str]:
    return [sys.executable, str(Path(sys.argv[0]).resolve())]
