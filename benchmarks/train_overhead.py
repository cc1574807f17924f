#!/usr/bin/env python3
"""Training overhead: raw PyTorch loop vs plain Lightning vs Lightning with lightning_xpu, on one device.

Workload (ALCF Aurora's PyTorch guide): `torch.nn.Transformer(batch_first=True)`, 2048 samples of shape (1, 512)
-> (20, 512), batch 32, Adam(lr=1e-3), CrossEntropyLoss. Each variant runs in a fresh process; variants are
interleaved over the repetitions; the first epoch of each process is warm-up and not counted.

On an Intel GPU, plain Lightning cannot train on the XPU at all, so that variant is reported as not applicable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from _common import machine, print_table, rotations, run_worker, self_command, summary, worker_env, write_json
from _workload import add_run_arguments, build, lightning_fit, resolve_run_arguments, synchronize, workload_argv

VARIANTS = ("raw", "lightning", "lightning_xpu")


def worker_raw(args: argparse.Namespace) -> list[float]:
    import torch

    dataset, model = build(args)
    device = torch.device(args.device)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True)
    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    criterion = torch.nn.CrossEntropyLoss()
    model.train()
    times: list[float] = []
    for _ in range(args.epochs):
        synchronize(args.device)
        start = time.perf_counter()
        for source, targets in loader:
            source, targets = source.to(device), targets.to(device)
            optimizer.zero_grad()
            with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed"):
                output = model(source, targets)
                loss = criterion(output, targets)
            loss.backward()
            optimizer.step()
        synchronize(args.device)
        times.append(time.perf_counter() - start)
    return times


def run_worker_mode(args: argparse.Namespace) -> None:
    if args.worker == "raw":
        times = worker_raw(args)
    else:
        times = lightning_fit(args, args.worker == "lightning_xpu", devices=1, precision=args.precision)
    print(json.dumps({"variant": args.worker, "epoch_seconds": times}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="32-true", help="32-true, bf16-mixed, or both (reports bf16/fp32)")
    add_run_arguments(parser, VARIANTS, "fresh processes per variant", "seconds allowed per worker process")
    args = parser.parse_args(argv)
    resolve_run_arguments(parser, args)
    if args.worker:
        run_worker_mode(args)
        return 0

    precisions = ["32-true", "bf16-mixed"] if args.precision == "both" else [args.precision]
    variants = [v for v in VARIANTS if not (args.device == "xpu" and v == "lightning")]
    results: dict[str, Any] = {"machine": machine(), "device": args.device, "args": vars(args), "precisions": {}}
    for precision in precisions:
        epochs: dict[str, list[float]] = {v: [] for v in variants}
        for order in rotations(variants, args.repeats):
            for variant in order:
                command = [*self_command(), "--worker", variant, "--device", args.device, "--precision", precision,
                           "--epochs", str(args.epochs), *workload_argv(args)]
                out = run_worker(command, worker_env(variant == "lightning_xpu"), args.timeout)
                epochs[variant].extend(out["epoch_seconds"][1:])
        stats = {v: summary(epochs[v]) for v in variants}
        ratios = {"lightning_xpu/raw": stats["lightning_xpu"]["median"] / stats["raw"]["median"]}
        if "lightning" in stats:
            ratios["lightning_xpu/lightning"] = stats["lightning_xpu"]["median"] / stats["lightning"]["median"]
            ratios["lightning/raw"] = stats["lightning"]["median"] / stats["raw"]["median"]
        results["precisions"][precision] = {"epoch_seconds": stats, "ratios": ratios}
        print_table(
            f"seconds per epoch on {args.device}, {precision} ({args.samples} samples, {args.repeats} processes x "
            f"{args.epochs - 1} timed epochs each)",
            ["variant", "median", "min", "max", "n"],
            [[v, s["median"], s["min"], s["max"], s["n"]] for v, s in stats.items()],
        )
        print_table("ratios (medians)", ["ratio", "value"], [[k, v] for k, v in ratios.items()])
    if len(precisions) == 2:
        per = results["precisions"]
        bf16 = {v: per["bf16-mixed"]["epoch_seconds"][v]["median"] / per["32-true"]["epoch_seconds"][v]["median"]
                for v in variants}
        results["bf16_over_fp32"] = bf16
        print_table("bf16-mixed / 32-true (medians)", ["variant", "ratio"], [[k, v] for k, v in bf16.items()])
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
