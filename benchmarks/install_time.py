#!/usr/bin/env python3
"""Install time: the cpu-variant install job end to end (build, smoke job, publish) with uv (the default) and with
pip, each from an empty and a warm cache, against a plain `pip install torch==<ver> lightning==<ver>` into a new
venv; the install step alone (uv against pip, paired in this run), the smoke job's own duration (both from the
installs' manifests: the smoke job shares the machine with the packing of the image there), the smoke job run
again alone in the warm-cache install (`lightning-xpu validate --level smoke`), a second install into another
prefix from the same uv cache, and an unchanged re-run (a no-op). conda-warm-cache: the same install with
--env-manager conda (the conda layer through py-rattler, against --conda-channel: by default the CI's local channel,
built by ci/conda_channel.py), paired with uv-warm-cache in the same run (its py-rattler bootstrap included: a fresh
prefix has no <prefix>/.tools). baseline-warm-cache (with --baseline CHECKOUT, e.g. a `git worktree` of an earlier
commit): that checkout's install job, same arguments, same warm uv cache, fresh prefix, in this run; the ratio
install_job_over_baseline_warm compares the two (list it next to uv-warm-cache in --cases). --repeats N runs the
list N times over (medians; the steps are the last round's).

Every case gets a fresh prefix (or venv). "Empty cache" points the installer's cache (LIGHTNING_XPU_UV_CACHE_DIR
for uv, PIP_CACHE_DIR for pip) at a new empty directory; "warm" reuses the cache the empty-cache run of the same
kind filled. Note: where the machine's pip configuration finds torch on local disk (as here), torch is never
downloaded, so the cache mostly affects Lightning and its dependencies. Ratios are formed only within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, machine, print_table, write_json

CASES = (
    "uv-empty-cache", "uv-warm-cache", "conda-warm-cache", "uv-second-prefix", "uv-rerun-noop",
    "pip-empty-cache", "pip-warm-cache", "plain-empty-cache", "plain-warm-cache", "baseline-warm-cache",
)
# Steps of the install job's manifest reported on their own.
INSTALL_STEP = "install pinned packages"
SMOKE_STEP = "smoke"
# The case whose published environment runs the smoke job again, alone (the "smoke job alone" figure).
SMOKE_ALONE_CASE = "uv-warm-cache"


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
    parser.add_argument("--cases", help=f"comma-separated subset of: {', '.join(CASES)} (default: all but baseline)")
    parser.add_argument("--workdir", help="where prefixes and caches go (default: a temporary directory)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per case")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--conda-channel", help="channel of the conda case (default: ci/conda_channel.py's, built)")
    parser.add_argument("--baseline", help="a checkout whose install job is the baseline-warm-cache case")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds: each runs every case once, in order; figures are medians, and a ratio to the"
                             " baseline is the median of each round's own ratio (for a machine whose speed drifts)")
    parser.set_defaults(cases=",".join(case for case in CASES if not case.startswith("baseline")))
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    script = REPO / "scripts" / args.site / f"install_lightning_{args.torch}.sh"
    if not script.is_file():
        parser.error(f"no install job {script.relative_to(REPO)}: render it with python recipes/render.py render")
    baseline_script = Path(args.baseline or REPO) / "scripts" / args.site / f"install_lightning_{args.torch}.sh"
    if "baseline-warm-cache" in cases and (args.baseline is None or not baseline_script.is_file()):
        parser.error(f"baseline-warm-cache needs --baseline CHECKOUT with {baseline_script.relative_to(Path(args.baseline or REPO))}")  # noqa: E501

    if args.workdir is not None:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        root = Path(work)
        caches = {kind: root / f"cache-{kind}" for kind in ("uv", "pip", "plain")}
        samples: dict[str, list[float]] = {}
        steps: dict[str, dict[str, float]] = {}
        smoke_alone_seconds: float | None = None

        def cache_env(kind: str, empty: bool) -> dict[str, str]:
            cache = caches[kind]
            if empty and cache.exists():
                subprocess.run(["rm", "-rf", str(cache)], check=True)
            cache.mkdir(exist_ok=True)
            if kind == "uv":
                return dict(os.environ, LIGHTNING_XPU_UV_CACHE_DIR=str(cache))
            return dict(os.environ, PIP_CACHE_DIR=str(cache))

        for round_, case in ((r, c) for r in range(args.repeats) for c in cases):
            kind, _, state = case.partition("-")
            if kind == "plain":
                env = cache_env("plain", state == "empty-cache")
                venv = root / f"venv-{case}-{round_}"
                subprocess.run([args.python, "-m", "venv", str(venv)], check=True)
                command = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           f"torch=={args.torch_pin}", f"lightning=={args.lightning_pin}"]
                samples.setdefault(case, []).append(timed(command, env, args.timeout))
                continue
            if state == "rerun-noop":
                prefix = next((p for p in sorted(root.glob(f"prefix {kind}-*")) if p.is_dir()), None)
                if prefix is None:
                    parser.error(f"{case} needs another {kind} case before it")
                env = cache_env(kind, empty=False)
            else:
                # uv-second-prefix: another prefix, the same (warm) cache: what a second PyTorch version of a site
                # gets from the cache the first one filled.
                env = cache_env("uv" if kind in ("conda", "baseline") else kind, state == "empty-cache")
                prefix = root / f"prefix {case} {round_}"  # a space in the path, as users have
            if kind == "conda":
                # The conda layer, then the same uv pip step as uv-warm-cache (its cache).
                command = ["bash", str(script), "--prefix", str(prefix), "--installer", "uv", "--env-manager", "conda",
                           "--conda-channel", args.conda_channel or conda_channel(), *args.install_args.split()]
            else:
                job, installer = (baseline_script, "uv") if kind == "baseline" else (script, kind)
                command = ["bash", str(job), "--prefix", str(prefix), "--installer", installer,
                           *args.install_args.split()]
            samples.setdefault(case, []).append(timed(command, env, args.timeout))
            if state != "rerun-noop":
                steps[case] = published_steps(prefix)
            if case == SMOKE_ALONE_CASE and round_ == 0:
                smoke_alone_seconds = smoke_alone(prefix, root, args.timeout)

    results = {case: statistics.median(seconds) for case, seconds in samples.items()}
    payload: dict[str, object] = {"machine": machine(), "args": vars(args), "seconds": results, "samples": samples,
                                  "steps": steps, "smoke_alone_seconds": smoke_alone_seconds}
    ratios = {}
    for state in ("warm-cache", "empty-cache"):
        uv, pip = steps.get(f"uv-{state}", {}), steps.get(f"pip-{state}", {})
        if INSTALL_STEP in uv and INSTALL_STEP in pip:
            ratios[f"install_step_uv_over_pip_{state.split('-')[0]}"] = uv[INSTALL_STEP] / pip[INSTALL_STEP]
        if f"uv-{state}" in results and f"pip-{state}" in results:
            ratios[f"install_job_uv_over_pip_{state.split('-')[0]}"] = results[f"uv-{state}"] / results[f"pip-{state}"]
    if "conda-warm-cache" in results and "uv-warm-cache" in results:
        ratios["install_job_conda_over_venv_warm"] = results["conda-warm-cache"] / results["uv-warm-cache"]
    if "baseline-warm-cache" in results and "uv-warm-cache" in results:
        paired = zip(samples["uv-warm-cache"], samples["baseline-warm-cache"])
        ratios["install_job_over_baseline_warm"] = statistics.median(new / old for new, old in paired)
    if "uv-second-prefix" in results and "uv-warm-cache" in results:
        ratios["second_prefix_over_warm"] = results["uv-second-prefix"] / results["uv-warm-cache"]
    payload["ratios"] = ratios
    print_table(f"install seconds (median of {args.repeats} run(s) each)", ["case", "seconds", "runs"],
                [[case, seconds, " ".join(f"{s:.1f}" for s in samples[case])] for case, seconds in results.items()])
    rows = [[case, by_step.get(INSTALL_STEP, float("nan")), smoke_of(by_step)] for case, by_step in steps.items()]
    print_table("from the manifests", ["case", "install step s", "smoke job s"], rows)
    if smoke_alone_seconds is not None:
        print(f"smoke job alone ({SMOKE_ALONE_CASE}'s environment): {smoke_alone_seconds:.1f} s")
    for key, value in ratios.items():
        print(f"{key}: {value:.2f}")
    write_json(args.json, payload)
    return 0


def conda_channel() -> str:
    """The CI's local conda channel (built once, cached under build/), as a URL."""
    done = subprocess.run([sys.executable, str(REPO / "ci" / "conda_channel.py")], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def published_steps(prefix: Path) -> dict[str, float]:
    """Step name -> seconds from the published environment's manifest (the one symlink <prefix>/<tag>)."""
    manifests = [p for p in prefix.glob("*/manifest.json") if p.parent.is_symlink()]
    if not manifests:
        return {}
    return {step["name"]: step["seconds"] for step in json.loads(manifests[0].read_text()).get("steps", [])}


def smoke_alone(prefix: Path, root: Path, timeout: float) -> float:
    """The published install's smoke job as an administrator reruns it (its setup script, then
    `lightning-xpu validate --level smoke`), with nothing else running."""
    manifest = next(p for p in prefix.glob("*/manifest.json") if p.parent.is_symlink())
    setup = prefix / f"lightning-setup-{json.loads(manifest.read_text())['tag']}.sh"
    command = ["bash", "-c", 'source "$1" && exec lightning-xpu validate --level smoke --json "$2"', "smoke-alone",
               str(setup), str(root / "smoke.json")]
    return timed(command, dict(os.environ), timeout)


def smoke_of(by_step: dict[str, float]) -> float:
    return next((seconds for name, seconds in by_step.items() if SMOKE_STEP in name), float("nan"))

if __name__ == "__main__":
    sys.exit(main())
