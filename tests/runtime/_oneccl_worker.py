"""One rank of a launch: the patched strategy's process-group setup and one all_reduce on simulated XPU."""
import json
import os
import sys
from pathlib import Path

from tests.runtime.launches import is_launch_variable

launch_environment = {name: value for name, value in os.environ.items() if is_launch_variable(name)}
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from lightning.fabric import Fabric  # noqa: E402

import lightning_xpu  # noqa: E402,F401
from lightning_xpu.environments.oneccl import ONECCL_LAUNCH_VARIABLES  # noqa: E402

fabric = Fabric(accelerator="xpu", devices=2, strategy="ddp")
fabric.launch()
value = torch.tensor([float(fabric.global_rank + 1)])
dist.all_reduce(value)
report = {"profile": os.environ["LXPU_SIM_PROFILE"], "global_rank": fabric.global_rank,
          "local_rank": fabric.local_rank, "all_reduce": value.item(), "launch_environment": launch_environment,
          "cluster_environment": type(fabric.strategy.cluster_environment).__name__,
          "oneccl": {name: os.environ.get(name) for name in ONECCL_LAUNCH_VARIABLES}}
Path(sys.argv[1], f"{report['profile']}-rank{fabric.global_rank}.json").write_text(json.dumps(report))
dist.destroy_process_group()
