"""Why `accelerator="xpu"` cannot be used, in one or two lines, and the facts `lightning-xpu doctor` prints.

Call these only where XPU was asked for (`accelerator="xpu"`, the doctor, the validation job):
`unusable_reason` asks `torch.xpu.is_available()`, which counts devices, and counting poisons fork on PyTorch
2.5-2.12 (`torch/csrc/xpu/Module.cpp`; from 2.13 only where Level Zero Sysman counting fails). The causes themselves
are read from the environment, torch's build (`install_facts.is_xpu_build`) and /dev/dri, in order: a non-xpu variant, a
torch build without XPU, selector variables, then why Level Zero shows no device.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib
import os
from collections.abc import Mapping
from typing import Any

from lightning_xpu.install_facts import environment_variant, is_xpu_build

DOCTOR_HINT = "Run `lightning-xpu doctor` for the full picture."
HIERARCHIES = ("FLAT", "COMPOSITE", "COMBINED")
RENDER_NODES = "/dev/dri/renderD*"


def _selector_hides_level_zero(selector: str) -> bool:
    """ONEAPI_DEVICE_SELECTOR terms are `backend:devices` separated by ';'; PyTorch's XPU runtime uses Level Zero.
    A selector hides it when no positive term names level_zero or `*`, or a negative term excludes all of it."""
    terms = [term.strip().lower() for term in selector.split(";") if term.strip()]
    positive = [term for term in terms if not term.startswith("!")]
    negative = [term[1:] for term in terms if term.startswith("!")]
    if any(term.split(":", 1)[0] in ("level_zero", "*") and term.split(":", 1)[-1] in ("*", "gpu")
           for term in negative):
        return True
    return bool(positive) and not any(term.split(":", 1)[0] in ("level_zero", "*") for term in positive)


def static_reason(environ: Mapping[str, str] | None = None) -> str | None:
    """Causes visible without asking the driver: a non-xpu variant, a torch build without XPU, bad selectors."""
    import torch

    environ = os.environ if environ is None else environ
    variant, source = environment_variant()
    if variant and variant != "xpu":
        return (f"the {variant} variant of lightning-xpu is loaded ({source}): its PyTorch cannot use Intel GPUs;"
                " load the xpu variant (module lightning-xpu/<version> without a suffix, or"
                " lightning-setup-<version>.sh).")
    if not is_xpu_build():
        build = "CUDA" if getattr(torch.version, "cuda", None) else "CPU"
        return (f"PyTorch {torch.__version__} is a {build} build without XPU support (not compiled with XPU);"
                " use an XPU build (the xpu variant of the install job).")
    selector = environ.get("ONEAPI_DEVICE_SELECTOR")
    if selector and _selector_hides_level_zero(selector):
        return (f"ONEAPI_DEVICE_SELECTOR={selector} hides the Level Zero GPUs PyTorch uses;"
                " unset it or select level_zero:gpu.")
    hierarchy = environ.get("ZE_FLAT_DEVICE_HIERARCHY")
    if hierarchy and hierarchy not in HIERARCHIES:
        return f"ZE_FLAT_DEVICE_HIERARCHY={hierarchy} is not one of {', '.join(HIERARCHIES)}; unset it or fix it."
    return None


def no_device_reason(environ: Mapping[str, str] | None = None) -> str:
    """Why Level Zero shows no device to an XPU build of torch."""
    environ = os.environ if environ is None else environ
    mask = environ.get("ZE_AFFINITY_MASK")
    if mask is not None:
        return (f"Level Zero shows no device: ZE_AFFINITY_MASK={mask!r} selects none that exists here (it lists"
                " device or card.tile indices, from 0); unset it or fix it.")
    selector = environ.get("ONEAPI_DEVICE_SELECTOR")
    if selector:
        return f"Level Zero shows no device: ONEAPI_DEVICE_SELECTOR={selector} selects none that exists here."
    hierarchy = environ.get("ZE_FLAT_DEVICE_HIERARCHY")
    where = f" (ZE_FLAT_DEVICE_HIERARCHY={hierarchy})" if hierarchy else ""
    if not glob.glob(RENDER_NODES):
        return (f"no Intel GPU on this host{where}: no {RENDER_NODES} device node, so this is not a GPU node or the"
                " job did not request GPUs (Slurm --gres=gpu:N, PBS select on a GPU queue).")
    return (f"the Level Zero driver reports no device{where} although {RENDER_NODES} exists: check the GPU driver"
            " (level-zero loader, intel compute runtime) and that you may open /dev/dri (groups render, video).")


def unusable_reason() -> str | None:
    """The cause, in one or two lines, when `accelerator="xpu"` cannot be used; None when XPU is usable."""
    import torch

    if torch.xpu.is_available():
        return None
    return f"XPU cannot be used: {static_reason() or no_device_reason()} {DOCTOR_HINT}"


# ---- facts for the doctor ------------------------------------------------------------------------------------

DEVICE_FIELDS = ("name", "total_memory", "gpu_eu_count", "max_compute_units", "has_fp64", "driver_version",
                 "platform_name")


def device_facts(count: int) -> list[dict[str, Any]]:
    """Properties of each visible XPU device (call only where XPU was asked for)."""
    import torch

    facts = []
    for index in range(count):
        properties = torch.xpu.get_device_properties(index)
        entry: dict[str, Any] = {"index": index}
        for name in DEVICE_FIELDS:
            value = getattr(properties, name, None)
            entry[name] = value if isinstance(value, (int, float, bool)) or value is None else str(value)
        entry["name"] = str(entry["name"])
        facts.append(entry)
    return facts


def driver_facts() -> dict[str, str | None]:
    """What is visible of the driver stack without the GPU: kernel module, Level Zero loader, render nodes."""
    kernel = [name for name in ("xe", "i915") if os.path.isdir(f"/sys/module/{name}")]
    return {
        "kernel_driver": ",".join(kernel) or None,
        "level_zero_loader": ctypes.util.find_library("ze_loader"),
        "render_nodes": ",".join(sorted(glob.glob(RENDER_NODES))) or None,
    }


def collective_backend() -> tuple[str | None, str]:
    """(backend, how it was found) for XPU collectives, or (None, the problem). Imports the oneCCL bindings where
    needed (after IPEX, which they need on PyTorch 2.5-2.7: research table row 3)."""
    import torch.distributed as dist

    from lightning_xpu.strategies.backend import CCL, ONECCL_MODULE, XCCL, xccl_available

    if not dist.is_available():
        return None, "torch.distributed is not available in this PyTorch build"
    if xccl_available():
        return XCCL, "built into PyTorch (torch.distributed.is_xccl_available())"
    try:
        importlib.import_module("intel_extension_for_pytorch")
    except ImportError:
        pass
    try:
        module = importlib.import_module(ONECCL_MODULE)
    except ImportError as error:
        return None, (f"PyTorch has no XCCL and {ONECCL_MODULE} cannot be imported ({error}): use PyTorch >= 2.8"
                      " for XPU, or install the oneCCL bindings of your PyTorch version")
    if CCL not in dist.Backend.backend_list:
        return None, f"{ONECCL_MODULE} imported but registered no 'ccl' process-group backend"
    return CCL, f"{ONECCL_MODULE} {getattr(module, '__version__', '(version unknown)')}"


def launcher_facts(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The launcher that started this process (lightning_xpu.environments' detection) and the scheduler job."""
    from lightning_xpu.environments.launch import detect_launcher

    environ = os.environ if environ is None else environ
    scheduler = ("slurm" if "SLURM_JOB_ID" in environ else "pbs" if "PBS_JOBID" in environ else None)
    return {"launcher": detect_launcher(environ), "scheduler": scheduler,
            "job": environ.get("SLURM_JOB_ID") or environ.get("PBS_JOBID")}
