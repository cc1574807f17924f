#!/usr/bin/env python3
"""Seconds to ready and shared-file-system metadata operations per node, for each staging mode (issue 30): none
(ranks run from the shared install), copy (the image unpacked on the node) and mount (the image mounted with
squashfuse), each without and with a user layer (`lightning-xpu user-env`).

Per mode: `LIGHTNING_XPU_STAGE=<mode> lightning-xpu-stage --shell` (copy and mount; none stages nothing) runs under
`strace -f -y -e trace=%file` once, then one rank's `python -c 'import lightning, lightning_xpu'` from what it
staged, classified as benchmarks/metadata_ops.py does (the same classifier and counts; the user layer counts as
shared, with the install prefix and the base interpreter). Per node: the staging's shared operations plus R ranks'.
Seconds to ready: the untraced `--shell` into a fresh job directory (median of --repeats), what a node waits before
its ranks start. A mode the environment's lightning-xpu-stage does not offer (no mount without squashfuse or FUSE,
or a build from before mount mode) is reported as unavailable with the helper's own line, not measured as another.

    python benchmarks/staging_modes.py --root "$PREFIX/2.13-cpu" [--layer ~/.local/lightning-xpu/2.13-cpu]
        [--modes none,copy,mount] [--ranks 12] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from metadata_ops import IMPORT_CODE, Classifier, base_prefix, count, shared_env, staged_env, strace, strace_command

MODES = ("none", "copy", "mount")


def layer_env(env: dict[str, str], layer: Path | None) -> dict[str, str]:
    """ENV with the user layer in front, as the module sets it (its bin/ first, VIRTUAL_ENV)."""
    if layer is None:
        return dict(env)
    return {**env, "PATH": f"{layer}/bin:{env['PATH']}", "VIRTUAL_ENV": str(layer)}


def mounted_under(local: Path) -> bool:
    """Whether something is mounted under LOCAL (the mount mode's image), from /proc/self/mounts."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[1].startswith(str(local)) for line in mounts if len(line.split()) > 1)


@contextmanager
def traced_staging(stage: Path, trace: Path, env: dict[str, str], work: Path, timeout: float) -> Iterator[str]:
    """`--shell` under `strace -f`: what it printed, while what it staged is in place. Mount mode leaves a holder
    per node (`--hold-node` and squashfuse), which strace follows and waits for; so the printed lines come through a
    file, and on leaving `--cleanup` ends the holder, then strace ends and TRACE is complete (the holder's own
    operations, squashfuse's open of the image among them, count with the staging)."""
    out, status, log = (trace.with_suffix(suffix) for suffix in (".out", ".rc", ".log"))
    wrapper = '"$@" >"$LXPU_BENCH_OUT"; echo "$?" >"$LXPU_BENCH_RC"'
    with log.open("w") as errors:
        tracer = subprocess.Popen(
            [*strace_command(trace), "bash", "-c", wrapper, "staging", str(stage), "--shell"],
            env={**env, "LXPU_BENCH_OUT": str(out), "LXPU_BENCH_RC": str(status)}, cwd=work,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors)  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while not status.exists() or not status.read_text().strip():
            if tracer.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"staging_modes.py: {stage} --shell under strace did not finish: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        if status.read_text().strip() != "0":
            sys.exit(f"staging_modes.py: {stage} --shell failed ({status.read_text().strip()}): "
                     f"{log.read_text()[-2000:]}")  # fmt: skip
        yield out.read_text()
    finally:
        subprocess.run([str(stage), "--cleanup"], env=env, cwd=work, capture_output=True, timeout=timeout,
                       check=False)  # fmt: skip
        try:
            tracer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            tracer.kill()
            tracer.wait()


def stage_once(stage: Path, env: dict[str, str], work: Path, timeout: float) -> float:
    """Seconds of one untraced `--shell` into a fresh job directory; the copy or mount removed after."""
    started = time.perf_counter()
    subprocess.run([str(stage), "--shell"], env=env, cwd=work, capture_output=True, timeout=timeout, check=True)
    seconds = time.perf_counter() - started
    subprocess.run([str(stage), "--cleanup"], env=env, cwd=work, capture_output=True, timeout=timeout, check=False)
    return seconds


def measure_mode(root: Path, mode: str, layer: Path | None, ranks: int, repeats: int, timeout: float,
                 code: str = IMPORT_CODE) -> dict[str, Any]:
    stage = root / "bin" / "lightning-xpu-stage"
    with tempfile.TemporaryDirectory(prefix=f"lxpu-modes-{mode}-") as tmp:
        work, local = Path(tmp) / "job", Path(tmp) / "node-local"
        work.mkdir()
        local.mkdir()
        shared = [root, root.parent, *([layer] if layer else [])]
        classifier = Classifier.build(shared, [base_prefix(root / "bin" / "python")], work, [local])
        env = layer_env(shared_env(root), layer)
        result: dict[str, Any] = {"mode": mode, "layer": str(layer) if layer else None}
        stage_shared = 0
        if mode == "none":
            strace(["python", "-c", code], Path(tmp) / "rank.trace", env, work, timeout)
        else:
            env.update(LIGHTNING_XPU_STAGE=mode, LIGHTNING_XPU_STAGE_DIR=str(local),
                       LIGHTNING_XPU_STAGE_JOB=f"modes-{mode}")  # fmt: skip
            with traced_staging(stage, Path(tmp) / "stage.trace", env, work, timeout) as exports:
                used = "mount" if mounted_under(local) else "copy"
                staged = "LIGHTNING_XPU_STAGED=" in exports
                if staged and used == mode:
                    strace(["python", "-c", code], Path(tmp) / "rank.trace", staged_env(exports, env), work, timeout)
            if not staged or used != mode:
                why = f"staged as {used}" if staged else "nothing staged"
                return {**result, "available": False,
                        "why": f"{why}: this build's lightning-xpu-stage does not offer {mode} here"}
            result["stage"] = count(Path(tmp) / "stage.trace", classifier)
            stage_shared = result["stage"]["shared"]
        result["rank"] = count(Path(tmp) / "rank.trace", classifier)
        if mode != "none":
            seconds = []
            for n in range(repeats):
                env["LIGHTNING_XPU_STAGE_JOB"] = f"modes-{mode}-timed-{n}"
                seconds.append(stage_once(stage, env, work, timeout))
            result["ready_seconds"] = {"median": statistics.median(seconds), "min": min(seconds),
                                       "max": max(seconds), "n": len(seconds)} if seconds else None  # fmt: skip
        else:
            result["ready_seconds"] = {"median": 0.0, "min": 0.0, "max": 0.0, "n": 0}
        result["available"] = True
        result["shared_per_node"] = stage_shared + ranks * result["rank"]["shared"]
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, required=True, help="the installed environment, <prefix>/<tag>")
    parser.add_argument("--layer", type=Path, help="a user layer (lightning-xpu user-env) to measure with, too")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of none,copy,mount (default all)")
    parser.add_argument("--ranks", type=int, default=12, help="ranks per node of the per-node figure (default 12)")
    parser.add_argument("--repeats", type=int, default=3, help="untraced stagings timed per mode (default 3)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--code", default=IMPORT_CODE, help=f"what each rank runs (default {IMPORT_CODE!r})")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    modes = [mode for mode in args.modes.split(",") if mode]
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes takes a comma-separated list of {', '.join(MODES)}, not {args.modes!r}")
    root = args.root.absolute()
    if not (root / "bin" / "python").exists():
        parser.error(f"{root}/bin/python does not exist: give --root <prefix>/<tag> of an install")
    layers = [None, args.layer.absolute()] if args.layer else [None]
    results = [measure_mode(root, mode, layer, args.ranks, args.repeats, args.timeout, args.code)
               for layer in layers for mode in modes]  # fmt: skip
    print(f"{'mode':6} {'user layer':11} {'ready s (median)':>17} {'shared ops: staging':>20} {'per rank':>9} "
          f"{f'per node ({args.ranks} ranks)':>22}")
    for result in results:
        layer = "with" if result["layer"] else "without"
        if not result["available"]:
            print(f"{result['mode']:6} {layer:11} unavailable: {result['why']}")
            continue
        staging = result.get("stage", {}).get("shared", 0)
        print(f"{result['mode']:6} {layer:11} {result['ready_seconds']['median']:17.2f} {staging:20d} "
              f"{result['rank']['shared']:9d} {result['shared_per_node']:22d}")
    if args.json:
        args.json.write_text(json.dumps({"root": str(root), "ranks": args.ranks, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
