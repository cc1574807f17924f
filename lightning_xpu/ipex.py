"""Opt-in `ipex.optimize` for stacks that still ship Intel Extension for PyTorch (IPEX, PyTorch 2.5-2.10).

Optional and absent on newer stacks: IPEX is retired and native `torch.xpu` needs none of it. Its last documented
release is v2.8.10+xpu (PyTorch 2.8; `docs/tutorials/releases.md`); the tags v2.9.10+xpu and v2.10.10+xpu
(intel/intel-extension-for-pytorch, branch xpu-main) pair with PyTorch 2.9 and 2.10 (ALCF's Aurora frameworks module
installs 2.10.10 next to torch 2.10); the repository was archived in March 2026, with nothing for 2.11 or later.
Nothing here runs unless the user asks for it:

- Trainer: `Trainer(callbacks=[IPEXOptimize()])` (from `lightning_xpu.ipex`) applies `ipex.optimize` to the
  LightningModule and its optimizer when fitting starts, after the strategy has moved the model to the device and
  created the optimizer. IPEX then fuses the optimizer step in place (`fuse_update_step`).
- Fabric or plain PyTorch: `model, optimizer = lightning_xpu.ipex.optimize(model, optimizer)` with the model already
  on the XPU, before `fabric.setup(...)`.

Both optimise in place (`inplace=True`), because Lightning (and DDP, already wrapped by the time `on_fit_start` runs)
keep references to the original module and optimizer. For the same reason `dtype=torch.bfloat16` (IPEX converts the
parameters and splits master weights) is refused when the run has more than one process; use
`precision="bf16-mixed"` there.
"""

from __future__ import annotations

import importlib
from typing import Any

from lightning_xpu._namespaced_classes import NamespacedClasses
from lightning_xpu._namespaces import Namespace, default_namespace

IPEX_MODULE = "intel_extension_for_pytorch"


def import_ipex() -> Any:
    try:
        return importlib.import_module(IPEX_MODULE)
    except ImportError as error:
        raise ModuleNotFoundError(
            f"ipex.optimize needs {IPEX_MODULE}, which exists only for PyTorch 2.5-2.10 XPU stacks and is not"
            " installed here; remove IPEXOptimize / lightning_xpu.ipex.optimize (native torch.xpu needs no IPEX)."
        ) from error


def optimize(model: Any, optimizer: Any = None, **kwargs: Any) -> tuple[Any, Any]:
    """`ipex.optimize(model, optimizer=optimizer, inplace=True, **kwargs)`, checked to have kept both objects."""
    if kwargs.pop("inplace", True) is not True:
        raise ValueError("lightning_xpu.ipex.optimize works in place only: drop inplace=False.")
    new_model, new_optimizer = _as_pair(import_ipex().optimize(model, optimizer=optimizer, inplace=True, **kwargs))
    if new_model is not model or new_optimizer is not optimizer:
        raise RuntimeError(
            "ipex.optimize returned new model/optimizer objects despite inplace=True; Lightning keeps the originals,"
            " so this IPEX version cannot be used through lightning_xpu.ipex."
        )
    return new_model, new_optimizer


def _as_pair(result: Any) -> tuple[Any, Any]:
    # ipex.optimize returns the model alone when no optimizer is given.
    return (result[0], result[1]) if isinstance(result, tuple) else (result, None)


class _IPEXOptimizeMethods:
    """The callback's behaviour; mixed in front of each namespace's `Callback` base class."""

    def __init__(self, dtype: Any = None, **optimize_kwargs: Any) -> None:
        super().__init__()
        self.dtype = dtype
        self.optimize_kwargs = optimize_kwargs

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        # Fail before any work is done, with the reason and the fix.
        import_ipex()
        device_type = trainer.strategy.root_device.type
        if device_type not in ("xpu", "cpu"):
            raise ValueError(f"IPEXOptimize runs on Intel GPUs (xpu) or CPUs, not {device_type}; remove the callback.")
        if self.dtype is not None and trainer.world_size > 1:
            raise ValueError(
                "IPEXOptimize(dtype=...) converts parameters after DDP has wrapped them; with several processes"
                " use precision='bf16-mixed' and IPEXOptimize() without dtype."
            )

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        optimizers = trainer.strategy.optimizers
        if len(optimizers) > 1:
            raise ValueError(f"ipex.optimize takes one optimizer, this LightningModule has {len(optimizers)}.")
        optimizer = optimizers[0] if optimizers else None
        kwargs = dict(self.optimize_kwargs)
        if self.dtype is not None:
            kwargs["dtype"] = self.dtype
        optimize(pl_module, optimizer, **kwargs)


_CLASSES = NamespacedClasses(__name__)
_CLASSES.define(
    "IPEXOptimize", lambda package: (_IPEXOptimizeMethods, importlib.import_module(f"{package}.callbacks").Callback)
)


def ipex_callback_class(namespace: Namespace) -> type:
    return _CLASSES.get("IPEXOptimize", str(namespace.pytorch))


def __getattr__(name: str) -> Any:
    # `from lightning_xpu.ipex import IPEXOptimize` gives the class for `lightning` (or `pytorch_lightning` alone).
    if name == "IPEXOptimize":
        return ipex_callback_class(default_namespace())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
