"""The ALCF Aurora training workload, shared by the training benchmarks (imported inside worker processes)."""

from __future__ import annotations

import argparse
import time
from typing import Any


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=None, help="samples (default 2048 on a GPU, 128 on CPU)")
    parser.add_argument("--d-model", type=int, default=512, help="Transformer width (default 512, as ALCF)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=6, help="encoder and decoder layers (default 6, as ALCF)")


def add_run_arguments(parser: argparse.ArgumentParser, variants: tuple[str, ...], repeats_help: str,
                      timeout_help: str) -> None:
    """The options every fitting benchmark shares, around the workload's own (add_workload_arguments)."""
    parser.add_argument("--device", default="auto", help="auto (xpu, else cuda, else cpu), cpu, cuda or xpu")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per process; the first is warm-up (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help=f"{repeats_help} (default 3)")
    add_workload_arguments(parser)
    parser.add_argument("--timeout", type=float, default=900.0, help=timeout_help)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", choices=variants, help=argparse.SUPPRESS)


def resolve_run_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Checks and defaults of add_run_arguments' options, once parsed."""
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first epoch of each process is warm-up)")
    if args.device == "auto":
        args.device = pick_device()
    default_samples(args)


def workload_argv(args: argparse.Namespace) -> list[str]:
    return ["--samples", str(args.samples), "--d-model", str(args.d_model), "--heads", str(args.heads),
            "--layers", str(args.layers)]


def pick_device() -> str:
    import torch

    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_samples(args: argparse.Namespace) -> None:
    if args.samples is None:
        args.samples = 2048 if args.device != "cpu" else 128


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "xpu":
        torch.xpu.synchronize()


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    """(dataset, model) exactly as ALCF's example, with the sizes scalable for CPU runs."""
    import torch

    torch.manual_seed(0)
    src = torch.rand((args.samples, 1, args.d_model))
    tgt = torch.rand((args.samples, 20, args.d_model))
    dataset = torch.utils.data.TensorDataset(src, tgt)
    model = torch.nn.Transformer(
        d_model=args.d_model, nhead=args.heads, num_encoder_layers=args.layers, num_decoder_layers=args.layers,
        batch_first=True,
    )
    return dataset, model


def lightning_fit(args: argparse.Namespace, with_lightning_xpu: bool, **trainer_kwargs: Any) -> list[float]:
    """Fit with Lightning; returns the seconds of each epoch (device synchronised at the boundaries)."""
    if with_lightning_xpu:
        import lightning_xpu  # noqa: F401  (patches Lightning on import)
    import lightning as L
    import torch

    dataset, model = build(args)
    times: list[float] = []

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.criterion = torch.nn.CrossEntropyLoss()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            source, targets = batch
            return self.criterion(self.model(source, targets), targets)

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=0.001)

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True)

    class EpochTimer(L.Callback):
        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            synchronize(args.device)
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            synchronize(args.device)
            times.append(time.perf_counter() - self.start)

    trainer = L.Trainer(
        accelerator=args.device, max_epochs=args.epochs, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[EpochTimer()], **trainer_kwargs,
    )
    trainer.fit(Module())
    if trainer.global_rank != 0:
        times.clear()
    return times
