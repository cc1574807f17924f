"""TEST-ONLY rank of tests/runtime/test_rank_masks.py: one of N PALS ranks on a node, each masked to one tile.

Started by the PALS stand-in through a gpu_tile_compact.sh-style wrapper, with the simulated XPU profile applied at
start-up (tests/bootstrap). In one process: a Trainer with devices=N and a wrong value (N+1) are built (no fit),
then Fabric trains a tiny model one step with devices="auto" and one step with devices=N over a real N-rank gloo
process group (gloo stands in for XCCL: the collective is not under test). The simulated XPU has no memory of its
own, so tensors placed on "xpu" live on the CPU (`XPUOnCPU`); DDP then gets no device ids, as for CPU modules.
Arguments: the directory it writes rank-<global rank>.json into, and N.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import lightning_xpu  # noqa: F401  (the patches; outside our environments there is no autoload hook)


def _on_cpu(value: Any) -> Any:
    if isinstance(value, torch.device) and value.type == "xpu":
        return torch.device("cpu")
    if isinstance(value, str) and value.split(":")[0] == "xpu":
        return "cpu"
    return value


class XPUOnCPU(TorchFunctionMode):
    """Every device argument naming an XPU becomes the CPU."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*[_on_cpu(a) for a in args], **{k: _on_cpu(v) for k, v in (kwargs or {}).items()})


def weights(module: torch.nn.Module) -> str:
    data = b"".join(p.detach().cpu().numpy().tobytes() for p in module.parameters())
    return hashlib.sha256(data).hexdigest()


def fabric_step(lightning: Any, devices: Any) -> dict[str, Any]:
    strategy = lightning.fabric.strategies.DDPStrategy(process_group_backend="gloo")
    strategy._determine_ddp_device_ids = lambda: None  # parameters live on the CPU (XPUOnCPU)
    fabric = lightning.Fabric(accelerator="auto", devices=devices, num_nodes=1, strategy=strategy)
    fabric.launch()
    fabric.seed_everything(0)
    model = torch.nn.Linear(4, 1)
    before = weights(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with XPUOnCPU():
        model, optimizer = fabric.setup(model, optimizer)
        inputs = torch.full((8, 4), float(fabric.global_rank + 1), device=fabric.device)  # each rank its own batch
        loss = model(inputs).square().mean()
        fabric.backward(loss)
        optimizer.step()
    return {"accelerator": type(fabric.accelerator).__name__, "device": str(fabric.device),
            "world_size": fabric.world_size, "global_rank": fabric.global_rank, "local_rank": fabric.local_rank,
            "parallel_devices": [str(d) for d in strategy.parallel_devices], "changed": weights(model) != before,
            "weights": weights(model)}


def main(out: Path, ranks: int) -> None:
    import lightning

    report: dict[str, Any] = {"mask": os.environ["ZE_AFFINITY_MASK"], "visible": torch.xpu.device_count()}
    trainer = lightning.Trainer(devices=ranks, num_nodes=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
    report["trainer"] = {"strategy": type(trainer.strategy).__name__, "root": str(trainer.strategy.root_device),
                         "num_devices": trainer.num_devices, "world_size": trainer.world_size}
    try:
        lightning.Fabric(devices=ranks + 1)
        report["wrong"] = None
    except Exception as error:  # the one line a wrong value gets
        report["wrong"] = f"{type(error).__name__}: {error}"
    report["auto"] = fabric_step(lightning, "auto")
    report["n"] = fabric_step(lightning, ranks)
    (out / f"rank-{report['auto']['global_rank']}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
