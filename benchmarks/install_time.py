#!/usr/bin/env python3
"""Install time: the cpu-variant install job end to end (build, smoke job, publish) with an empty and with a warm
pip cache, against a plain `pip install torch==<ver> lightning==<ver>` into a new venv on the same machine; the
smoke job's own duration (from the install's manifest) and the time of an unchanged re-run (a no-op).

Every case gets a fresh prefix (or venv). "Empty cache" points PIP_CACHE_DIR at a new empty directory; "warm"
reuses the cache the empty-cache run of the same kind filled. Note: where the machine's pip configuration finds
torch on local disk (as here), torch is never downloaded, so the cache mostly affects Lightning and its
dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine, print_table, write_json

CASES = ("install-empty-cache", "install-warm-cache", "install-rerun-noop", "plain-empty-cache", "plain-warm-cache")


def timed(command: list[str], env: dict[str, str], timeout: float) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        output = done.stdout[-2000:] + done.stderr[-2000:]
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{output}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", default="2.13", help="PyTorch minor of the install job (default 2.13)")
    parser.add_argument("--site", default="generic", help="site of the install job (default generic)")
    parser.add_argument("--torch-pin", default="2.13.0", help="torch version for the plain pip baseline")
    parser.add_argument("--lightning-pin", default="2.6.6", help="lightning version for the plain pip baseline")
    parser.add_argument("--python", default="python3.11", help="Python for the plain baseline venv")
    parser.add_argument("--install-args", default="--variant cpu --pip-source system",
                        help="extra install-job arguments (default: --variant cpu --pip-source system)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}")
    parser.add_argument("--workdir", help="where prefixes and caches go (default: a temporary directory)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per case")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    script = REPO / "scripts" / args.site / f"install_lightning_{args.torch}.sh"
    if not script.is_file():
        parser.error(f"no install job {script.relative_to(REPO)}: render it with python recipes/render.py render")

    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        root = Path(work)
        caches = {"install": root / "cache-install", "plain": root / "cache-plain"}
        results: dict[str, float] = {}
        smoke_seconds: float | None = None

        def env_with_cache(kind: str, empty: bool) -> dict[str, str]:
            cache = caches[kind]
            if empty and cache.exists():
                subprocess.run(["rm", "-rf", str(cache)], check=True)
            cache.mkdir(exist_ok=True)
            return dict(os.environ, PIP_CACHE_DIR=str(cache))

        for case in cases:
            kind, _, cache_state = case.partition("-")
            if case == "install-rerun-noop":
                prefix = root / "prefix install-empty-cache"
                if not prefix.exists():
                    prefix = root / "prefix install-warm-cache"
                if not prefix.exists():
                    parser.error("install-rerun-noop needs install-empty-cache or install-warm-cache before it")
                env = dict(os.environ, PIP_CACHE_DIR=str(caches["install"]))
                command = ["bash", str(script), "--prefix", str(prefix), *args.install_args.split()]
            elif kind == "install":
                env = env_with_cache("install", cache_state == "empty-cache")
                prefix = root / f"prefix {case}"  # a space in the path, as users have
                command = ["bash", str(script), "--prefix", str(prefix), *args.install_args.split()]
            else:
                env = env_with_cache("plain", cache_state == "empty-cache")
                venv = root / f"venv-{case}"
                subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
                command = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           f"torch=={args.torch_pin}", f"lightning=={args.lightning_pin}"]
            results[case] = timed(command, env, args.timeout)
            if kind == "install" and case != "install-rerun-noop":
                # The published environment is the one symlink <prefix>/<tag>; its manifest has the step timings.
                manifests = [p for p in prefix.glob("*/manifest.json") if p.parent.is_symlink()]
                manifest = json.loads(manifests[0].read_text()) if manifests else {}
                for step in manifest.get("steps", []):
                    if "smoke" in step["name"]:
                        smoke_seconds = step["seconds"]

    payload = {"machine": machine(), "args": vars(args), "seconds": results, "smoke_job_seconds": smoke_seconds}
    if "install-warm-cache" in results and "plain-warm-cache" in results:
        payload["ratio_install_over_plain_warm"] = results["install-warm-cache"] / results["plain-warm-cache"]
    if "install-empty-cache" in results and "plain-empty-cache" in results:
        payload["ratio_install_over_plain_empty"] = results["install-empty-cache"] / results["plain-empty-cache"]
    print_table("install seconds (one run each)", ["case", "seconds"], [[k, v] for k, v in results.items()])
    if smoke_seconds is not None:
        print(f"\nsmoke job (from the manifest): {smoke_seconds:.1f} s")
    for key in ("ratio_install_over_plain_warm", "ratio_install_over_plain_empty"):
        if key in payload:
            print(f"{key}: {payload[key]:.2f}")
    write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
