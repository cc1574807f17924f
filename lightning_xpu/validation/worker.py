"""The processes the validation checks launch: `python -m lightning_xpu.validation.worker collectives|fit ...`.

They run wherever a check needs more than one process: over all local tiles (started by `checks` itself, or by
Lightning for a multi-device fit), or under the site launcher (`srun`, `mpiexec`) for the DDP and multi-node
checks, and for the smoke level's all-reduce. Each rank writes `<out>/rank-<global rank>.json`, with the oneCCL
launch variables it saw after its process group was created (`launch_environment`, lightning_xpu/validation/oneccl.py);
the check that launched them judges those files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from lightning_xpu.validation.oneccl import oneccl_variables

BROADCAST_OBJECT = {"from": "rank 0", "text": "lightning-xpu validation"}
FIT_LR = 0.05  # the checks' unit tests set 0 to simulate a loss that does not fall


def _write(out: Path, rank: int, payload: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".rank-{rank}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(payload, sort_keys=True) + "\n")
    os.replace(tmp, out / f"rank-{rank}.json")


def _process_ranks() -> tuple[int, int, int, int]:
    """(global rank, world size, local rank, local world size) of this process: ours (RANK/WORLD_SIZE/LOCAL_RANK,
    set by `checks` for local launches) or the site launcher's, read as lightning_xpu's cluster environments do."""
    from lightning_xpu.environments.launch import SRUN, detect_launcher, launch_ranks

    environ = os.environ
    if "RANK" in environ:
        return int(environ["RANK"]), int(environ["WORLD_SIZE"]), int(environ["LOCAL_RANK"]), int(environ["WORLD_SIZE"])
    launcher = detect_launcher(environ)
    if launcher == SRUN:
        world = int(environ["SLURM_NTASKS"])
        per_node = int(environ.get("SLURM_NTASKS_PER_NODE", world))
        return int(environ["SLURM_PROCID"]), world, int(environ["SLURM_LOCALID"]), per_node
    if launcher is None:
        return 0, 1, 0, 1
    ranks = launch_ranks(launcher, environ)
    return ranks.global_rank, ranks.world_size, ranks.local_rank, ranks.local_world_size


def collectives(args: argparse.Namespace) -> int:
    """All-reduce and object broadcast across every rank (MASTER_ADDR/MASTER_PORT come from the check)."""
    import torch
    import torch.distributed as dist

    rank, world, local, local_world = _process_ranks()
    report: dict[str, Any] = {"global_rank": rank, "world_size": world, "local_rank": local,
                              "host": socket.gethostname(), "backend": args.backend}
    try:
        if args.backend == "ccl":
            from lightning_xpu.strategies.backend import import_oneccl_bindings

            # IPEX first where installed, then the bindings; stops naming the fix if their XPU part did not load.
            import_oneccl_bindings()
        if args.backend in ("ccl", "xccl"):
            from lightning_xpu.strategies.process_group import set_oneccl_launch

            set_oneccl_launch(local, local_world, rank)  # as the strategies do: oneCCL's place of the rank on its node
        device = torch.device(args.device, local) if args.device != "cpu" else torch.device("cpu")
        if args.device == "xpu":
            torch.xpu.set_device(local)
        dist.init_process_group(args.backend, rank=rank, world_size=world)
        report["launch_environment"] = oneccl_variables()  # what oneCCL was given, inside the rank after init
        value = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(value)
        objects: list[Any] = [BROADCAST_OBJECT if rank == 0 else None]
        dist.broadcast_object_list(objects, src=0)
        dist.barrier()
        report.update(device=str(device), all_reduce=float(value.item()), broadcast=objects[0])
        dist.destroy_process_group()
    except Exception as error:  # reported, judged by the check
        report["error"] = f"{type(error).__name__}: {error}"
    _write(args.out, rank, report)
    return 0 if "error" not in report else 1


def weights_sha256(module: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def regression(pl: Any, seen: dict[str, Any]) -> tuple[Any, Any]:
    """(model, loader) of the checks' fits: one full batch of a linear target, so every step sees the same data and
    the loss falls only by learning. `seen` collects "losses", "start_step" and "autocast_dtype"."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(0)
    features = torch.randn(32, 16, generator=generator)
    targets = features @ torch.linspace(-1.0, 1.0, 16).unsqueeze(1)
    seen.update(losses=[], start_step=None, autocast_dtype=None)

    class Regression(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def on_train_start(self) -> None:
            seen["start_step"] = int(self.trainer.global_step)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                seen["launch_environment"] = oneccl_variables()  # inside the rank, after the process group's init

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            out = self.net(x)
            seen["autocast_dtype"] = str(out.dtype)
            loss = torch.nn.functional.mse_loss(out.float(), y)
            seen["losses"].append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=FIT_LR)

    torch.manual_seed(0)
    return Regression(), DataLoader(TensorDataset(features, targets), batch_size=32)


def fit(args: argparse.Namespace) -> int:
    """A short regression fit; `--ckpt-out` saves at the end, `--ckpt-in` resumes from it."""
    from lightning_xpu._namespaces import default_namespace

    pl: Any = __import__(default_namespace().pytorch or "lightning.pytorch", fromlist=["Trainer"])
    seen: dict[str, Any] = {}
    model, loader = regression(pl, seen)
    strategy: Any = args.strategy
    if args.strategy == "fsdp":
        strategy = pl.strategies.FSDPStrategy(state_dict_type=args.state_dict_type)
    trainer = pl.Trainer(accelerator=args.accelerator, devices=args.devices, num_nodes=args.num_nodes,
                         strategy=strategy, precision=args.precision, max_steps=args.max_steps, max_epochs=-1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(args.out))
    trainer.fit(model, loader, ckpt_path=str(args.ckpt_in) if args.ckpt_in else None)
    if args.ckpt_out:
        trainer.save_checkpoint(str(args.ckpt_out))
    environment = getattr(trainer.strategy, "cluster_environment", None)
    report = {
        "global_rank": trainer.global_rank, "world_size": trainer.world_size, "host": socket.gethostname(),
        "device": str(trainer.strategy.root_device), "strategy": type(trainer.strategy).__name__,
        "cluster_environment": type(environment).__name__ if environment is not None else None,
        "precision": str(trainer.precision), "final_step": int(trainer.global_step),
        "weights_sha256": None if args.strategy == "fsdp" else weights_sha256(model), **seen,
    }
    trainer.strategy.barrier()
    _write(args.out, trainer.global_rank, report)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lightning_xpu.validation.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    coll = sub.add_parser("collectives", help="all-reduce + object broadcast over every rank")
    coll.add_argument("--backend", required=True)
    coll.add_argument("--device", default="xpu")
    run = sub.add_parser("fit", help="a short Lightning fit (optionally saving or resuming a checkpoint)")
    run.add_argument("--accelerator", default="xpu")
    run.add_argument("--devices", type=int, default=1)
    run.add_argument("--num-nodes", type=int, default=1)
    run.add_argument("--strategy", default="auto", choices=("auto", "ddp", "fsdp"))
    run.add_argument("--state-dict-type", default="sharded", choices=("sharded", "full"))
    run.add_argument("--precision", default="bf16-mixed")
    run.add_argument("--max-steps", type=int, default=8)
    run.add_argument("--ckpt-in", type=Path)
    run.add_argument("--ckpt-out", type=Path)
    for each in (coll, run):
        each.add_argument("--out", type=Path, required=True, help="directory for rank-<N>.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return collectives(args) if args.mode == "collectives" else fit(args)


if __name__ == "__main__":
    sys.exit(main())
