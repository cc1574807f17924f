"""`fabric run --accelerator xpu` (the Fabric CLI) accepts XPU and launches one process per XPU device.

The CLI validates `--accelerator` against a fixed list (`_SUPPORTED_ACCELERATORS`, frozen into the click option when
`cli.py` is imported) and counts processes in `_get_num_processes`, which knows CUDA, MPS and CPU only. "xpu" is
added to the option's choices, and the process count for XPU uses the XPU device parser (Lightning's GPU convention:
a count, "0,2" or a list; "auto" means one device, as the CLI does for CUDA). "gpu" and "auto" count XPU devices
when an XPU is the machine's only GPU, the order in which Lightning picks a GPU backend (MPS, CUDA, then XPU).
The launched processes read `LT_ACCELERATOR=xpu`, which Fabric resolves through its accelerator registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import wrap
from lightning_xpu.device import parse_device_indices, xpu_available

XPU = "xpu"


def xpu_is_the_only_gpu(namespace: Namespace) -> bool:
    accelerators = namespace.fabric_module("accelerators")
    return (
        xpu_available()
        and not accelerators.CUDAAccelerator.is_available()
        and not accelerators.MPSAccelerator.is_available()
    )


def _counts_xpu(namespace: Namespace, accelerator: str | None) -> bool:
    if accelerator == XPU:
        return True
    return accelerator in ("gpu", "auto", None) and xpu_is_the_only_gpu(namespace)


def _xpu_process_count(namespace: Namespace) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def _get_num_processes(accelerator: str | None, devices: str) -> int:
            if not _counts_xpu(namespace, accelerator):
                return original(accelerator, devices)
            indices = parse_device_indices("1" if devices == "auto" else devices)
            return len(indices) if indices is not None else 0

        return _get_num_processes

    return make


def _commands(command: Any) -> Iterator[Any]:
    """A click command and all its subcommands (`fabric run` in 2.3+, `fabric run model` in 2.2)."""
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _commands(sub)


def _accept_xpu_option(cli: ModuleType) -> None:
    if XPU not in cli._SUPPORTED_ACCELERATORS:
        cli._SUPPORTED_ACCELERATORS = (*cli._SUPPORTED_ACCELERATORS, XPU)
    main = getattr(cli, "_main", None)  # absent when click is not installed: then there is no CLI to fix
    if main is None:
        return
    for command in _commands(main):
        for param in command.params:
            choices = getattr(param.type, "choices", None)
            if param.name == "accelerator" and choices is not None and XPU not in choices:
                # click freezes the choices when the option is declared; give the option a widened copy.
                param.type = type(param.type)([*choices, XPU], case_sensitive=param.type.case_sensitive)


def apply_fabric(namespace: Namespace) -> None:
    cli = namespace.fabric_module("cli")
    _accept_xpu_option(cli)
    wrap(cli, "_get_num_processes", _xpu_process_count(namespace))
