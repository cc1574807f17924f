"""The smoke level of `lightning-xpu validate` (lightning_xpu/validation/framework.py): proves that this Python
environment can train with Lightning, on XPU where there is one. The install engine runs it inside each new
environment before publishing it (`lightning-xpu validate --level smoke --json <env>/share/lightning-xpu/smoke.json`).

Checks, in order: imports (torch, lightning, lightning_xpu), a device report, the zero-code-change autoload hook,
every Lightning patch lightning_xpu's manifest expects applied (lightning_xpu/versions.py), `pip check`, the
available distributed backends, a 2-rank all-reduce, a 1-epoch toy fit on one device and a DDP toy fit over all
local devices (2 CPU processes when there is no accelerator). Without an accelerator `pip check` and the last three
start at once, right after the device report. With `require_xpu` (the xpu variant) it also fails unless the fits
really ran on an XPU device.

The launches are local: launcher variables inherited from a scheduler job (SLURM_*, PMI_*, ...) are removed from
their environment, so the smoke job tests the environment, not the job's task layout. The fits run
`scripts/common/toy_fit.py`, which the install copies into `<env>/share/lightning-xpu/`: a script outside this
package, so that only the autoload hook can load lightning_xpu in the fit's processes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightning_xpu.validation.framework import (
    CheckFailed,
    Context,
    Outcome,
    check,
    free_port,
    local_env,
    record_ranks,
    tail,
)

SUBPROCESS_TIMEOUT_S = 180
TOY_FIT = Path("share") / "lightning-xpu" / "toy_fit.py"


def smoke(name: str, gate: bool = False, parallel_on_cpu: bool = False) -> Any:
    return check(name, needs_xpu=False, level="smoke", gate=gate, parallel_on_cpu=parallel_on_cpu)


def run(context: Context, cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """A local process in the scratch directory (never a checkout whose lightning_xpu would shadow the environment's,
    never the user's working directory)."""
    try:
        return subprocess.run(cmd, env=local_env(), cwd=context.workdir, capture_output=True, text=True,
                              timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"timed out after {SUBPROCESS_TIMEOUT_S} s: {' '.join(cmd)}") from exc


def xpu_count() -> int:
    import torch

    xpu = getattr(torch, "xpu", None)
    return int(xpu.device_count()) if xpu is not None and xpu.is_available() else 0


def toy_fit_script() -> Path:
    """The toy fit of this environment (`<prefix>/share/lightning-xpu/toy_fit.py`, copied there by the install),
    else the repository's when lightning_xpu runs from a checkout."""
    checkout = Path(__file__).resolve().parents[2] / "scripts" / "common" / "toy_fit.py"
    for path in (Path(sys.prefix) / TOY_FIT, checkout):
        if path.is_file():
            return path
    raise CheckFailed(f"no toy fit: {Path(sys.prefix) / TOY_FIT} is missing (the install job copies it there)")


# ---- checks ---------------------------------------------------------------------------------------------------


@smoke("imports")
def check_imports(_: Context) -> Outcome:
    """torch, lightning and lightning_xpu import."""
    detail: dict[str, Any] = {}
    for name in ("torch", "lightning", "lightning_xpu"):
        start = time.perf_counter()
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise CheckFailed(f"import {name} failed: {type(exc).__name__}: {exc}") from exc
        detail[name] = {
            "version": str(getattr(module, "__version__", "unknown")),
            "seconds": round(time.perf_counter() - start, 3),
        }
    return Outcome(", ".join(f"{name} {facts['version']}" for name, facts in detail.items()), detail)


@smoke("devices", gate=True)
def check_devices(context: Context) -> Outcome:
    """The XPU (and CUDA) devices torch sees, with their properties."""
    import torch

    count = xpu_count()
    detail: dict[str, Any] = {"xpu_count": count, "cuda_count": torch.cuda.device_count()}
    if count == 0:
        if context.require_xpu:
            raise CheckFailed("no XPU device visible to torch, and --require-xpu was given")
        detail["summary"] = "no XPU: ran on CPU"
        return Outcome(detail["summary"], detail)
    devices = []
    for index in range(count):
        props = torch.xpu.get_device_properties(index)
        fields = ("name", "total_memory", "driver_version", "max_compute_units", "has_fp64", "platform_name")
        devices.append({field: str(getattr(props, field, "n/a")) for field in fields})
    detail["xpu"] = devices
    detail["summary"] = f"{count} XPU device(s): {devices[0]['name']}"
    return Outcome(detail["summary"], detail)


@smoke("autoload_hook")
def check_autoload(context: Context) -> Outcome:
    """A fresh interpreter has lightning_xpu loaded by the lightning_xpu-autoload.pth hook."""
    # A fresh interpreter that imports nothing itself: only the .pth hook can load lightning_xpu.
    result = run(context, [sys.executable, "-c", "import sys; print('lightning_xpu' in sys.modules)"])
    if result.returncode != 0 or result.stdout.strip() != "True":
        raise CheckFailed(
            "the lightning_xpu-autoload.pth hook did not load lightning_xpu at interpreter start"
            f" (rc={result.returncode}, out={result.stdout.strip()!r}, err={tail(result.stderr, 5, chr(10))!r})"
        )
    return Outcome("lightning_xpu loaded at interpreter start", {"loaded_at_startup": True})


@smoke("lightning_patches")
def check_patches(_: Context) -> Outcome:
    """Every patch lightning_xpu's manifest expects for this Lightning found its target (lightning_xpu/versions.py);
    a Lightning the manifest does not know is noted, a refused one (2.6.2/2.6.3) fails."""
    import lightning  # noqa: F401  (patched on import)

    from lightning_xpu import versions

    statuses = versions.patch_status()
    failures = versions.failures(statuses)
    if failures:
        raise CheckFailed("; ".join(failures))
    detail = {
        "applied": sum(status.applied for status in statuses),
        "expected": sum(status.expected for status in statuses),
        "notes": versions.selection_messages(),
    }
    return Outcome(f"{detail['applied']} patches applied, {detail['expected']} expected", detail)


@smoke("pinned_packages")
def check_pinned_packages(_: Context) -> str:
    """Each package the environment pins (share/lightning-xpu/constraints.txt) is installed at its pin, and no
    torch-family package is another torch build's (lightning_xpu/validation/pincheck.py)."""
    from lightning_xpu.validation.pincheck import check_text

    return check_text()


def installed_here(project: str) -> bool:
    """Whether a distribution lives in this environment (not in a base Python seen through it)."""
    try:
        location = Path(str(importlib.metadata.distribution(project).locate_file(""))).resolve()
    except importlib.metadata.PackageNotFoundError:
        return True
    prefix = Path(sys.prefix).resolve()
    return location == prefix or prefix in location.parents


@smoke("pip_check", parallel_on_cpu=True)
def check_pip(context: Context) -> Outcome:
    """`pip check` finds no broken requirement of a package in this environment."""
    result = run(context, [sys.executable, "-m", "pip", "check"])
    if result.returncode == 0:
        return Outcome(result.stdout.strip() or "no broken requirements",
                       {"problems": [], "summary": result.stdout.strip()})
    # Over a base Python (--base-python), that Python's own inconsistencies are its admin's business:
    # recorded, not fatal. A problem of a package in this environment fails the check.
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    ours = [line for line in lines if installed_here(line.split()[0])]
    if ours or not lines:
        raise CheckFailed(f"pip check: {tail(chr(10).join(ours) or result.stdout + result.stderr, 15, chr(10))}")
    return Outcome(f"no broken requirements here; {len(lines)} in the base Python",
                   {"problems": [], "base_python_problems": lines})


@smoke("distributed_backends")
def check_backends(_: Context) -> Outcome:
    """torch.distributed and the process-group backends this build has."""
    import torch.distributed as dist

    detail: dict[str, Any] = {"distributed": dist.is_available()}
    if not dist.is_available():
        raise CheckFailed("torch.distributed is not available in this build")
    for backend in ("gloo", "nccl", "mpi", "xccl", "ucc"):
        probe = getattr(dist, f"is_{backend}_available", None)
        detail[backend] = bool(probe()) if probe is not None else False
    detail["ccl (oneccl_bindings_for_pytorch)"] = (
        importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None
    )
    found = [name.split()[0] for name, value in detail.items() if value is True and name != "distributed"]
    return Outcome(f"available: {', '.join(found) or 'none'}", detail)


def allreduce_plan() -> tuple[str, str]:
    """(backend, device) for the all-reduce: the accelerator's backend given 2 devices, else gloo."""
    import torch
    import torch.distributed as dist

    if xpu_count() >= 2:
        if getattr(dist, "is_xccl_available", lambda: False)():
            return "xccl", "xpu"
        if importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None:
            return "ccl", "xpu"
    if torch.cuda.device_count() >= 2 and dist.is_nccl_available():
        return "nccl", "cuda"
    return "gloo", "cpu"


@smoke("allreduce", parallel_on_cpu=True)
def check_allreduce(context: Context) -> Outcome:
    """A 2-rank all-reduce (and object broadcast) over the accelerator's backend, else gloo."""
    from lightning_xpu.validation.checks import judge_collectives, run_worker

    backend, device = allreduce_plan()
    env = local_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    reports = run_worker(context, ["collectives", "--backend", backend, "--device", device], ranks=2, env=env,
                         timeout=SUBPROCESS_TIMEOUT_S)
    reason = judge_collectives(reports, 2)
    return Outcome(reason, {"backend": backend, "device": device, "ranks": 2, "sum": 3.0})


def fit_plan() -> tuple[str, int]:
    """(accelerator, number of local devices) for the DDP fit."""
    import torch

    count = xpu_count()
    if count:
        return "xpu", count
    if torch.cuda.device_count():
        return "gpu", torch.cuda.device_count()
    return "cpu", 2


def run_fit(context: Context, name: str, accelerator: str, devices: int, strategy: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix=f"lxpu-smoke-{name}-", dir=context.workdir) as out:
        cmd = [sys.executable, str(toy_fit_script()), "--out", out, "--accelerator", accelerator,
               "--devices", str(devices), "--strategy", strategy]
        result = run(context, cmd)
        reports = [json.loads(path.read_text()) for path in sorted(Path(out).glob("rank-*.json"))]
    if result.returncode != 0:
        raise CheckFailed(f"toy fit exited {result.returncode}: {tail(result.stderr, 15, chr(10))}")
    if len(reports) != devices:
        raise CheckFailed(f"toy fit wrote {len(reports)} rank reports, expected {devices}")
    return reports


def require_device(reports: list[dict[str, Any]], context: Context) -> None:
    """The fits must run where the variant says and with the runtime loaded by the hook."""
    if not all(r["lightning_xpu_imported"] for r in reports):
        raise CheckFailed("lightning_xpu was not loaded in the fit's processes (autoload hook missing?)")
    if context.require_xpu and not all(str(r["device"]).startswith("xpu") for r in reports):
        devices = sorted({str(r["device"]) for r in reports})
        raise CheckFailed(f"--require-xpu: the fit ran on {devices}, not on XPU")


@smoke("fit_single_device", parallel_on_cpu=True)
def check_fit_single(context: Context) -> Outcome:
    """A 1-epoch toy fit on one device changes the weights."""
    accelerator = "xpu" if context.require_xpu else "auto"
    (report,) = run_fit(context, "single", accelerator, 1, "auto")
    require_device([report], context)
    if report["final_weights_sha256"] == report["initial_weights_sha256"]:
        raise CheckFailed("the toy fit did not change the weights")
    detail = {key: report[key] for key in ("device", "accelerator", "strategy", "lightning_xpu_imported")}
    return Outcome(f"trained on {report['device']} with {report['strategy']}", detail)


@smoke("fit_ddp", parallel_on_cpu=True)
def check_fit_ddp(context: Context) -> Outcome:
    """A DDP toy fit over all local devices (2 CPU processes without an accelerator): disjoint shards, equal
    weights."""
    accelerator, devices = fit_plan()
    reports = run_fit(context, "ddp", accelerator, devices, "ddp")
    record_ranks(reports)
    require_device(reports, context)
    ranks = sorted(r["global_rank"] for r in reports)
    finals = {r["final_weights_sha256"] for r in reports}
    shards = [set(r["data_indices"]) for r in reports]
    if ranks != list(range(devices)) or any(r["world_size"] != devices for r in reports):
        raise CheckFailed(f"expected global ranks 0..{devices - 1} of world size {devices}, got {ranks}")
    if len(finals) != 1 or finals == {reports[0]["initial_weights_sha256"]}:
        raise CheckFailed("ranks ended with different weights, or weights that never changed")
    if devices > 1 and shards[0] == shards[1]:
        raise CheckFailed("rank 0 and rank 1 trained on the same samples")
    detail = {
        "accelerator": accelerator,
        "devices": devices,
        "device": sorted({str(r["device"]) for r in reports}),
        "backend": reports[0].get("process_group_backend"),
        "cluster_environment": reports[0]["cluster_environment"],
    }
    return Outcome(f"{devices} ranks on {', '.join(detail['device'])}, backend {detail['backend']},"
                   f" {detail['cluster_environment']}", detail)
