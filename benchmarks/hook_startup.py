#!/usr/bin/env python3
"""What the zero-code-change hook adds to every Python start of an environment (issue 30: at most 2 ms).

Two venvs of the same interpreter (`--without-pip`), each with lightning_xpu copied into its site-packages and
byte-compiled, as an install leaves it: one with the hook's `.pth` line (the install's, lxpu_admin/install/build.py),
one without. `python -c pass` runs in each, in pairs (which goes first alternates), and the figures are the medians of
the pairs' differences, in wall time and in CPU time (user + system, from wait4): drift of the machine hits both
halves of a pair alike, and CPU time is what the process itself spent, steady where other load makes wall time
noisy. `-X importtime` of the hooked
venv lists the modules the hook imports, with their cumulative microseconds (best of the runs). Nothing here is a
pass/fail test: the figures go into docs/performance.md.

    python benchmarks/hook_startup.py [--pairs 40] [--python /usr/bin/python3.11] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, print_table, summary, write_json

BUDGET_SECONDS = 0.002
PTH_NAME = "lightning_xpu-autoload.pth"


def hook_line() -> str:
    """The line the install writes (lxpu_admin/install/build.py _HOOK): measured as shipped, never a copy of it. Read
    by a child that finds the admin package as bin/lightning-xpu-admin does (PYTHONPATH=lib)."""
    done = subprocess.run([sys.executable, "-c", "from lxpu_admin.install.build import _HOOK; print(_HOOK, end='')"],
                          env={**os.environ, "PYTHONPATH": str(REPO / "lib")}, capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout


def make_venv(dest: Path, python: str, source: Path, line: str | None) -> Path:
    """A venv of PYTHON with lightning_xpu (from SOURCE) byte-compiled in its site-packages, and LINE as the
    hook's .pth when given. Its python."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(dest)], check=True)
    (site,) = dest.glob("lib/python3*/site-packages")
    shutil.copytree(source / "lightning_xpu", site / "lightning_xpu", ignore=shutil.ignore_patterns("__pycache__"))
    python_of = str(dest / "bin" / "python")  # its own interpreter compiles: the byte code matches its version
    subprocess.run([python_of, "-m", "compileall", "-q", str(site / "lightning_xpu")], check=True)
    if line is not None:
        (site / PTH_NAME).write_text(line)
    return dest / "bin" / "python"


def start_seconds(python: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one `python -c pass`. CPU time is what the hook costs the
    process itself, and stays steady where other load on the machine makes wall time noisy."""
    started = time.perf_counter()
    child = subprocess.Popen([str(python), "-c", "pass"], env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"hook_startup.py: {python} -c pass failed with status {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def hook_imports(python: Path, env: dict[str, str], runs: int) -> dict[str, int]:
    """Modules imported at start-up by the hooked venv that the plain one does not import: cumulative us, best of
    RUNS (the hook's own share of -X importtime)."""
    best: dict[str, int] = {}
    for _ in range(runs):
        done = subprocess.run([str(python), "-X", "importtime", "-c", "pass"], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        for match in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)", done.stderr):
            if match.group(2) == "" or match.group(3).startswith("lightning_xpu"):
                name, micros = match.group(3), int(match.group(1))
                best[name] = min(micros, best.get(name, micros))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=40, help="paired runs of `python -c pass` (default 40)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter both venvs are made from")
    parser.add_argument("--source", type=Path, default=REPO,
                        help="checkout whose lightning_xpu is measured (default this one; another, e.g. the main "
                             "branch's, with its own --line, for a before/after)")  # fmt: skip
    parser.add_argument("--line", help="the .pth line (default the one the install writes, "
                        "lxpu_admin/install/build.py)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    line = args.line.replace("\\n", "\n") if args.line else hook_line()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LIGHTNING_XPU_", "VIRTUAL_ENV"))}
    with tempfile.TemporaryDirectory(prefix="lxpu-hook-") as tmp:
        plain = make_venv(Path(tmp) / "plain", args.python, args.source, None)
        hooked = make_venv(Path(tmp) / "hooked", args.python, args.source, line)
        for python in (plain, hooked):  # warm the page cache; check that both start
            start_seconds(python, env)
        samples: dict[str, dict[str, list[float]]] = {"wall": {"without hook": [], "with hook": []},
                                                      "cpu": {"without hook": [], "with hook": []}}
        differences: dict[str, list[float]] = {"wall": [], "cpu": []}
        for pair in range(args.pairs):
            order = ("with hook", "without hook") if pair % 2 else ("without hook", "with hook")
            seconds = {name: start_seconds(hooked if name == "with hook" else plain, env) for name in order}
            for index, clock in enumerate(("wall", "cpu")):
                for name, values in seconds.items():
                    samples[clock][name].append(values[index])
                differences[clock].append(seconds["with hook"][index] - seconds["without hook"][index])
        plain_imports = hook_imports(plain, env, 3)
        added = {name: micros for name, micros in hook_imports(hooked, env, 3).items()
                 if name not in plain_imports}  # fmt: skip
    added_median = {clock: statistics.median(values) for clock, values in differences.items()}
    results = {
        "python": args.python, "source": str(args.source), "pth_line": line, "pairs": args.pairs,
        "start_seconds": {clock: {name: summary(values) for name, values in by_name.items()}
                          for clock, by_name in samples.items()},
        "added_seconds_median_of_pairs": added_median,
        "added_seconds_pairs": {clock: summary(values) for clock, values in differences.items()},
        "hook_imports_microseconds": added, "budget_seconds": BUDGET_SECONDS,
    }  # fmt: skip
    for clock, by_name in results["start_seconds"].items():
        print_table(f"python -c pass, {args.pairs} pairs ({clock} seconds)", ["variant", "median", "min", "max", "n"],
                    [[k, s["median"], s["min"], s["max"], s["n"]] for k, s in by_name.items()])
    print_table("modules the hook imports at start-up (-X importtime, cumulative, best of 3)", ["module", "us"],
                sorted(added.items(), key=lambda item: -item[1]))
    for clock, value in added_median.items():
        verdict = "within" if value <= BUDGET_SECONDS else "OVER"
        print(f"\nthe hook adds {value * 1000:.2f} ms of {clock} time to python -c pass (median of {args.pairs} "
              f"paired differences): {verdict} the {BUDGET_SECONDS * 1000:.0f} ms budget")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
