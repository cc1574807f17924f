#!/usr/bin/env python3
"""A small, deterministic Lightning fit that reports what each rank saw.

Used by the smoke job, the install tests and the multi-node harness. It must work however it is launched:
by Lightning itself (``--devices 2 --strategy ddp``), by ``srun`` or by ``mpiexec`` (no mpi4py needed here;
detecting such launches is the runtime's job). Every rank writes ``<out>/rank-<global_rank>.json``; the
fields are the contract in docs (see ``RANK_FIELDS``).

The script does not import ``lightning_xpu`` itself unless asked (``--import-lightning-xpu``): inside our
environments the autoload hook must do it, and ``lightning_xpu_imported`` records whether it happened.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import socket
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

RANK_FIELDS = (
    "global_rank",
    "local_rank",
    "node_rank",
    "world_size",
    "hostname",
    "host_address",
    "master_addr",
    "master_port",
    "cluster_environment",
    "accelerator",
    "strategy",
    "precision",
    "device",
    "data_indices",
    "initial_weights_sha256",
    "final_weights_sha256",
    "lightning_xpu_imported",
)

# Launcher variables worth keeping in the report when a launch goes wrong, with every CCL_* variable: together
# they hold the launch variables oneCCL reads (lightning_xpu/validation/oneccl.py picks those for validation reports).
LAUNCH_PREFIX = "CCL_"
LAUNCH_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "PMIX_RANK",
    "PALS_RANKID",
    "PALS_LOCAL_RANKID",
    "PALS_LOCAL_SIZE",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
)


def parse_devices(value: str) -> int | str:
    """Lightning takes ints for counts and strings for "auto" and device lists ("0,2")."""
    try:
        return int(value)
    except ValueError:
        return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, type=Path, help="directory for rank-<global_rank>.json")
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument(
        "--devices", default="auto", type=parse_devices, help="N, -1, auto or a list like 0,2"
    )
    parser.add_argument("--num-nodes", default=1, type=int)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--epochs", default=1, type=int)
    parser.add_argument("--samples", default=64, type=int)
    parser.add_argument("--batch-size", default=8, type=int)
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument(
        "--namespace",
        choices=("auto", "lightning", "pytorch_lightning"),
        default="auto",
        help="which Lightning package to use (auto: lightning.pytorch if installed, else pytorch_lightning)",
    )
    parser.add_argument(
        "--profile-rank",
        type=int,
        default=None,
        help="profile this global rank only, with Lightning's PyTorchProfiler (XPU kernels included on XPU)",
    )
    parser.add_argument(
        "--profile-dir",
        type=Path,
        default=Path("profile"),
        help="where the profiled rank writes its Chrome trace (*.pt.trace.json) and summary (default: profile)",
    )
    parser.add_argument(
        "--import-lightning-xpu",
        action="store_true",
        help="import lightning_xpu explicitly before Lightning (outside our environments there is no hook)",
    )
    args = parser.parse_args(argv)
    if args.samples < 1 or args.batch_size < 1 or args.epochs < 1:
        parser.error("--samples, --batch-size and --epochs must be positive")
    return args


def import_lightning(namespace: str) -> ModuleType:
    if namespace in ("auto", "lightning"):
        try:
            return importlib.import_module("lightning.pytorch")
        except ImportError:
            if namespace == "lightning":
                raise
    return importlib.import_module("pytorch_lightning")


def weights_sha256(module: Any) -> str:
    """Hash of every parameter's float32 bytes, in name order: equal hashes mean equal weights."""
    import torch

    digest = hashlib.sha256()
    for name, param in sorted(module.named_parameters()):
        digest.update(name.encode())
        flat = param.detach().to("cpu", torch.float32).reshape(-1).contiguous().view(torch.uint8)
        digest.update(bytes(flat.tolist()))
    return digest.hexdigest()


def host_address() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "unknown"


def build(pl: ModuleType, samples: int, batch_size: int) -> tuple[Any, Any]:
    """The model and its data; identical on every rank because the seed is set before this runs."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    features = torch.randn(samples, 8)
    targets = features @ torch.linspace(-1.0, 1.0, 8) + 0.1 * torch.randn(samples)
    dataset = TensorDataset(features, targets.unsqueeze(1), torch.arange(samples))

    class ToyModel(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
            self.seen: list[int] = []
            self.launch_seen: dict[str, str] = {}

        def on_fit_start(self) -> None:
            # After the process group was created: what oneCCL was given, as the runtime left it.
            self.launch_seen = launch_environment()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y, index = batch
            self.seen.extend(int(i) for i in index.tolist())
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    # Under DDP Lightning swaps in a DistributedSampler (seeded, the same on every rank), so each rank's
    # indices are a disjoint shard of the samples.
    return ToyModel(), DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0)


def launch_environment() -> dict[str, str]:
    return {name: value for name, value in sorted(os.environ.items())
            if name in LAUNCH_VARIABLES or name.startswith(LAUNCH_PREFIX)}


def cluster_environment(trainer: Any) -> Any:
    env = getattr(trainer.strategy, "cluster_environment", None)
    if env is None:  # single-device strategies keep it on the connector only
        env = getattr(getattr(trainer, "_accelerator_connector", None), "cluster_environment", None)
    return env


def rank_report(trainer: Any, model: Any, initial_sha: str) -> dict[str, Any]:
    import torch

    env = cluster_environment(trainer)
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    report: dict[str, Any] = {
        "global_rank": trainer.global_rank,
        "local_rank": trainer.local_rank,
        "node_rank": trainer.node_rank,
        "world_size": trainer.world_size,
        "hostname": socket.gethostname(),
        "host_address": host_address(),
        "master_addr": env.main_address if env is not None else None,
        "master_port": env.main_port if env is not None else None,
        "cluster_environment": type(env).__name__ if env is not None else None,
        "accelerator": type(trainer.accelerator).__name__,
        "strategy": type(trainer.strategy).__name__,
        "precision": str(trainer.precision),
        "device": str(trainer.strategy.root_device),
        "data_indices": model.seen,
        "initial_weights_sha256": initial_sha,
        "final_weights_sha256": weights_sha256(model),
        "lightning_xpu_imported": "lightning_xpu" in sys.modules,
        # Extra context (not part of the contract) for debugging launches.
        "process_group_backend": torch.distributed.get_backend() if distributed else None,
        "pid": os.getpid(),
        "python": sys.executable,
        "torch_version": torch.__version__,
        "lightning_module": type(trainer).__module__.split(".")[0],
        "launch_environment": model.launch_seen or launch_environment(),
    }
    return report


def write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.import_lightning_xpu:
        importlib.import_module("lightning_xpu")
    pl = import_lightning(args.namespace)
    import torch

    pl.seed_everything(args.seed, workers=True)  # no verbose=: Lightning 2.2-2.3 lack it
    model, loader = build(pl, args.samples, args.batch_size)
    initial_sha = weights_sha256(model)
    args.out.mkdir(parents=True, exist_ok=True)
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        num_nodes=args.num_nodes,
        strategy=args.strategy,
        precision=args.precision,
        max_epochs=args.epochs,
        default_root_dir=str(args.out),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    if args.profile_rank is not None and trainer.global_rank == args.profile_rank:
        # Set after construction, when the rank is known: every other rank keeps Lightning's PassThroughProfiler.
        profilers = importlib.import_module(f"{pl.__name__}.profilers")
        trainer.profiler = profilers.PyTorchProfiler(
            dirpath=str(args.profile_dir), filename=f"rank{trainer.global_rank}", export_to_chrome=True
        )
    trainer.fit(model, loader)
    report = rank_report(trainer, model, initial_sha)
    write_json(args.out / f"rank-{trainer.global_rank}.json", report)
    # Leave together and tear the process group down explicitly: exiting with it alive occasionally aborts
    # ("terminate called without an active exception").
    trainer.strategy.barrier()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
