"""Trainers whose strategy sits on a simulated device, for tests of patches that look at `root_device`.

Use with the `simulated_xpu` fixture active. The strategy is passed explicitly, so these tests do not depend on how
the connector picks strategies for "xpu".
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_xpu._namespaces import Namespace

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def trainer_on(namespace: Namespace, device: str, **kwargs: Any) -> Any:
    """`Trainer` of `namespace` with a SingleDeviceStrategy on `device` ("xpu:0", "cpu")."""
    root = torch.device(device)
    strategy = namespace.pytorch_module("strategies").SingleDeviceStrategy(root)
    trainer_class = namespace.pytorch_module("").Trainer
    return trainer_class(accelerator=root.type, devices=1, strategy=strategy, **{**QUIET, **kwargs})
