#!/usr/bin/env python3
"""Start-up cost: `import lightning` alone, with `import lightning_xpu`, and through the zero-code-change hook;
lightning_xpu's own share from `python -X importtime`; and a first import without byte-compiled files against one
with them.

The headline figure is what `import lightning_xpu` adds to `import lightning`: the cumulative `-X importtime` entry
of lightning_xpu (its patching included) after `import lightning`, best of 5 fresh processes. The budget is 30 ms
(issue 13); it is reported, never a pass/fail test.

Each figure is the median over fresh processes, variants interleaved. "Without byte-compiled files" points
`PYTHONPYCACHEPREFIX` at an empty directory with `PYTHONDONTWRITEBYTECODE=1`, so every module is compiled from
source, as in an environment installed with `pip --no-compile` on a read-only or fresh file system; "with" uses
the environment's own `__pycache__` (what the install job's byte-compilation step produces).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO, machine, print_table, rotations, summary, worker_env, write_json

BUDGET_SECONDS = 0.030

PTH_LINE = (
    'import sys; any(hasattr(f, "find_spec") and f.find_spec("lightning_xpu", None) for f in sys.meta_path)'
    ' and __import__("lightning_xpu._autoload")\n'
)

TIMED = "import time; t0 = time.perf_counter(); {body}; print(time.perf_counter() - t0)"
BODIES = {
    "lightning": "import lightning",
    "lightning+lightning_xpu": "import lightning; import lightning_xpu",
    "hook (.pth) + lightning": "import site; site.addsitedir({hook_dir!r}); import lightning",
}


def timed_run(body: str, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", TIMED.format(body=body)], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def own_share(env: dict[str, str]) -> float:
    """Cumulative microseconds of the top-level lightning_xpu import (patching included) after lightning."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import lightning; import lightning_xpu"],
                          env=env, capture_output=True, text=True, check=True)
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| lightning_xpu$", line)
        if match:
            return int(match.group(1)) / 1e6
    raise RuntimeError("lightning_xpu not found in -X importtime output")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10, help="fresh processes per variant (default 10)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--importtime-runs", type=int, default=5,
                        help="fresh processes for the -X importtime headline figure, best of (default 5)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as hook_dir, tempfile.TemporaryDirectory() as empty_cache:
        Path(hook_dir, "lightning_xpu-autoload.pth").write_text(PTH_LINE)
        bodies = {name: body.format(hook_dir=hook_dir) for name, body in BODIES.items()}
        samples: dict[str, list[float]] = {name: [] for name in bodies}
        for order in rotations(list(bodies), args.repeats):
            for name in order:
                samples[name].append(timed_run(bodies[name], worker_env(name != "lightning")))
        shares = [own_share(worker_env(True)) for _ in range(args.repeats)]

        cold_env = worker_env(True) | {"PYTHONPYCACHEPREFIX": empty_cache, "PYTHONDONTWRITEBYTECODE": "1"}
        compiled: dict[str, list[float]] = {"no byte-compiled files": [], "byte-compiled": []}
        for order in rotations(list(compiled), max(1, args.repeats // 3)):
            for name in order:
                env = cold_env if name == "no byte-compiled files" else worker_env(True)
                compiled[name].append(timed_run(bodies["lightning+lightning_xpu"], env))

        # The headline's fresh processes: the -X importtime runs above are the same command, so they count first.
        runs = max(1, args.importtime_runs)
        best = min(shares[:runs] + [own_share(worker_env(True)) for _ in range(runs - len(shares[:runs]))])

    stats = {name: summary(values) for name, values in samples.items()}
    base = stats["lightning"]["median"]
    added = {name: stats[name]["median"] - base for name in stats if name != "lightning"}
    compiled_stats = {name: summary(values) for name, values in compiled.items()}
    results = {
        "machine": machine(), "python": sys.executable, "repo": str(REPO), "import_seconds": stats,
        "added_seconds_over_lightning": added, "lightning_xpu_importtime_seconds": summary(shares),
        "lightning_xpu_adds_seconds_best": best, "importtime_runs": args.importtime_runs,
        "budget_seconds": BUDGET_SECONDS,
        "byte_compilation": compiled_stats,
        "ratio_no_bytecode_over_bytecode": compiled_stats["no byte-compiled files"]["median"]
        / compiled_stats["byte-compiled"]["median"],
    }
    print_table(f"import seconds ({args.repeats} fresh processes each)", ["variant", "median", "min", "max", "n"],
                [[k, s["median"], s["min"], s["max"], s["n"]] for k, s in stats.items()])
    print_table("added over `import lightning` (medians)", ["variant", "seconds"], [[k, v] for k, v in added.items()])
    share = summary(shares)
    print(f"\nlightning_xpu own import time after lightning (-X importtime): median {share['median']:.4f} s")
    verdict = "within" if best <= BUDGET_SECONDS else "OVER"
    print(f"import lightning_xpu adds {best * 1000:.1f} ms to import lightning (-X importtime, best of"
          f" {args.importtime_runs}): {verdict} the {BUDGET_SECONDS * 1000:.0f} ms budget")
    print_table("first import of lightning + lightning_xpu", ["case", "median", "min", "max", "n"],
                [[k, s["median"], s["min"], s["max"], s["n"]] for k, s in compiled_stats.items()])
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
