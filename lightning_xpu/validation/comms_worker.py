"""A rank of the communication check (lightning_xpu/validation/comms.py):
`python -m lightning_xpu.validation.comms_worker --backend B --device D --max-bytes N --out DIR`.

Started like the other checks' workers (local ranks by the check, or once under the site launcher); reads its place
as lightning_xpu/validation/worker.py does. It times all-reduce, all-gather and reduce-scatter over message sizes from
8 bytes up to --max-bytes, and writes `<out>/rank-<global rank>.json` with the timings (rank 0's are the ones
reported: every rank waits for the slowest), what oneCCL printed (its stdout goes to `<out>/ccl-<rank>.log`,
`CCL_LOG_LEVEL=info` unless set; parsed by lightning_xpu/validation/oneccl_log.py) and the `libmpi` mapped into it.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

OPERATIONS = ("all_reduce", "all_gather", "reduce_scatter")
ELEMENT_BYTES = 4  # float32
SIZE_STEP = 4  # each message size is 4 times the last (nccl-tests' -f 4), the cap always included


def message_sizes(max_bytes: int, min_bytes: int = 8) -> list[int]:
    """8, 32, 128, ... bytes, up to and including `max_bytes`."""
    sizes, size = [], min_bytes
    while size < max_bytes:
        sizes.append(size)
        size *= SIZE_STEP
    return [*sizes, max_bytes] if max_bytes >= min_bytes else [min_bytes]


def iterations(size: int) -> int:
    """Fewer repetitions for big messages: about 32 MiB moved per size, between 2 and 20 repetitions."""
    return max(2, min(20, (32 << 20) // max(size, 1)))


def _collective(name: str) -> Any:
    """The tensor form of a collective: `all_gather_single`/`reduce_scatter_single` where this torch has them
    (2.13 deprecates the `_tensor` names), else the `_tensor` forms (2.5-2.12)."""
    import torch.distributed as dist

    if name == "all_reduce":
        return dist.all_reduce
    return getattr(dist, f"{name}_single", None) or getattr(dist, f"{name}_{'into_' if 'gather' in name else ''}tensor")


def buffers(name: str, size: int, world: int, device: Any) -> tuple[list[Any], int]:
    """The arguments of one collective of `size` bytes (nccl-tests' size: the whole buffer, the gathered output or
    the scattered input) and the size actually moved (whole elements, divisible by the world)."""
    import torch

    per_rank = max(1, size // (ELEMENT_BYTES * world)) if name != "all_reduce" else max(1, size // ELEMENT_BYTES)
    if name == "all_reduce":
        return [torch.ones(per_rank, device=device)], per_rank * ELEMENT_BYTES
    whole = torch.ones(per_rank * world, device=device)
    part = torch.ones(per_rank, device=device)
    args = [whole, part] if name == "all_gather" else [part, whole]
    return args, per_rank * world * ELEMENT_BYTES


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "xpu":
        torch.xpu.synchronize()


def time_collective(name: str, size: int, world: int, device: Any) -> dict[str, Any]:
    """Seconds per call (mean over the repetitions after one warm-up), timed between barriers."""
    import torch.distributed as dist

    args, moved = buffers(name, size, world, device)
    run = _collective(name)
    run(*args)
    _synchronize(device)
    repeat = iterations(moved)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(repeat):
        run(*args)
    _synchronize(device)
    seconds = (time.perf_counter() - start) / repeat
    return {"operation": name, "bytes": moved, "seconds": seconds, "repetitions": repeat}


def capture_stdout(log: Path) -> None:
    """Send this process's stdout (file descriptor 1: where oneCCL's info lines go) to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.close(fd)


def mapped_mpi() -> str | None:
    from lightning_xpu.validation.oneccl_log import mapped_mpi_library

    try:
        return mapped_mpi_library(Path("/proc/self/maps").read_text())
    except OSError:
        return None


def sweep(args: argparse.Namespace, rank: int, world: int, local: int, local_world: int) -> dict[str, Any]:
    """Initialise the process group as the other workers do, time every collective and size, tear down."""
    import torch
    import torch.distributed as dist

    from lightning_xpu.validation.oneccl import oneccl_variables

    if args.backend == "ccl":
        from lightning_xpu.strategies.backend import import_oneccl_bindings

        import_oneccl_bindings()
    if args.backend in ("ccl", "xccl"):
        from lightning_xpu.strategies.process_group import set_oneccl_launch

        set_oneccl_launch(local, local_world, rank)
    device = torch.device(args.device, local) if args.device != "cpu" else torch.device("cpu")
    if args.device == "xpu":
        torch.xpu.set_device(local)
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    found: dict[str, Any] = {"launch_environment": oneccl_variables(), "results": []}
    for name in OPERATIONS:
        for size in message_sizes(args.max_bytes):
            found["results"].append(time_collective(name, size, world, device))
    dist.barrier()
    dist.destroy_process_group()
    return found


def main(argv: list[str] | None = None) -> int:
    from lightning_xpu.validation.oneccl_log import parse_oneccl_log
    from lightning_xpu.validation.worker import _process_ranks, _write

    args = parse_args(argv)
    rank, world, local, local_world = _process_ranks()
    log = args.out / f"ccl-{rank}.log"
    capture_stdout(log)
    os.environ.setdefault("CCL_LOG_LEVEL", "info")  # before oneCCL starts: what it used, in its own words
    report: dict[str, Any] = {"global_rank": rank, "world_size": world, "local_rank": local,
                              "host": socket.gethostname(), "backend": args.backend}
    try:
        report.update(sweep(args, rank, world, local, local_world))
    except Exception as error:  # reported, judged by the check
        report["error"] = f"{type(error).__name__}: {error}"
    sys.stdout.flush()
    report["oneccl_log"] = parse_oneccl_log(log.read_text(errors="replace"))
    report["mpi_library_mapped"] = mapped_mpi()
    _write(args.out, rank, report)
    return 0 if "error" not in report else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lightning_xpu.validation.comms_worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", required=True, help="xccl, ccl or gloo (gloo stands in on CPU)")
    parser.add_argument("--device", default="xpu", help="xpu or cpu")
    parser.add_argument("--max-bytes", type=int, required=True, help="the largest message, in bytes")
    parser.add_argument("--out", type=Path, required=True, help="directory for rank-<N>.json and ccl-<N>.log")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
