#!/usr/bin/env python3
"""DDP scaling: throughput on 1 and N devices, plain Lightning vs Lightning with lightning_xpu.

Same ALCF workload as train_overhead.py, per-device batch 32 (each rank gets samples/N). Efficiency =
N-device throughput / (N x 1-device throughput). Lightning launches the ranks itself (`strategy="ddp"`). Each
(variant, devices) pair runs in fresh processes, interleaved; the first epoch of each process is warm-up. On
CPU the "devices" are gloo processes (the machine's cores are shared, so CPU efficiency says little).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from _common import machine, print_table, rotations, run_worker, self_command, summary, worker_env, write_json
from _workload import add_run_arguments, lightning_fit, resolve_run_arguments, workload_argv

VARIANTS = ("lightning", "lightning_xpu")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2, help="the N of the N-device run (default 2)")
    add_run_arguments(parser, VARIANTS, "fresh runs per configuration", "seconds allowed per run")
    parser.add_argument("--worker-devices", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    resolve_run_arguments(parser, args)
    if args.worker:
        kwargs: dict[str, Any] = {"devices": args.worker_devices}
        if args.worker_devices > 1:
            kwargs["strategy"] = "ddp"
        times = lightning_fit(args, args.worker == "lightning_xpu", **kwargs)
        if times:  # rank 0 only
            print(json.dumps({"epoch_seconds": times}))
        return 0

    if args.device == "xpu":
        parser.error("plain Lightning cannot run DDP on XPU: compare on CUDA or CPU")
    configurations = [(variant, n) for variant in VARIANTS for n in (1, args.devices)]
    names = [f"{variant}@{n}" for variant, n in configurations]
    epochs: dict[str, list[float]] = {name: [] for name in names}
    for order in rotations(names, args.repeats):
        for name in order:
            variant, n = name.split("@")
            command = [*self_command(), "--worker", variant, "--worker-devices", n, "--device", args.device,
                       "--epochs", str(args.epochs), *workload_argv(args)]
            out = run_worker(command, worker_env(variant == "lightning_xpu"), args.timeout)
            epochs[name].extend(out["epoch_seconds"][1:])
    stats = {name: summary(values) for name, values in epochs.items()}
    throughput = {name: args.samples / stat["median"] for name, stat in stats.items()}
    efficiency = {
        variant: throughput[f"{variant}@{args.devices}"] / (args.devices * throughput[f"{variant}@1"])
        for variant in VARIANTS
    }
    results = {"machine": machine(), "device": args.device, "args": vars(args), "epoch_seconds": stats,
               "samples_per_second": throughput, "efficiency": efficiency,
               "efficiency_ratio_xpu_over_plain": efficiency["lightning_xpu"] / efficiency["lightning"]}
    print_table(
        f"seconds per epoch on {args.device} ({args.samples} samples, {args.repeats} runs x {args.epochs - 1} epochs)",
        ["configuration", "median", "min", "max", "n", "samples/s"],
        [[name, s["median"], s["min"], s["max"], s["n"], throughput[name]] for name, s in stats.items()],
    )
    print_table(f"efficiency ({args.devices} devices / {args.devices} x 1 device)", ["variant", "efficiency"],
                [[k, v] for k, v in efficiency.items()])
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
