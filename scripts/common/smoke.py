#!/usr/bin/env python3
"""Smoke job: prove that this Python environment can train with Lightning (on XPU where there is one).

Checks, in order: imports (torch, lightning, lightning_xpu), a device report, the zero-code-change autoload
hook, every Lightning patch lightning_xpu's manifest expects applied (lightning_xpu/versions.py), `pip check`,
the available distributed backends, a 2-rank all-reduce, a 1-epoch toy fit on one device and a DDP toy fit over
all local devices (2 CPU processes when there is no accelerator). Without an accelerator `pip check` and the
last three start at once, right after the device report. Writes one JSON entry per check (`ok`, `seconds`,
`detail`) and exits non-zero if any check fails. With `--require-xpu` (the xpu variant) it also fails unless the
fits really ran on an XPU device.

The fits are local launches: launcher variables inherited from a scheduler job (SLURM_*, PMI_*, ...) are
removed from their environment, so the smoke job tests the environment, not the job's task layout.

Test-only: LIGHTNING_XPU_SMOKE_INJECT_FAILURE=<check>[,<check>...] makes those checks fail on purpose.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOY_FIT = HERE / "toy_fit.py"
INJECT_VARIABLE = "LIGHTNING_XPU_SMOKE_INJECT_FAILURE"
SUBPROCESS_TIMEOUT_S = 180
# Prefixes and names of launcher variables that must not leak into the local test launches.
LAUNCHER_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "PALS_", "OMPI_", "HYDRA_", "TORCHELASTIC_", "PBS_")
LAUNCHER_NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "LOCAL_WORLD_SIZE",
)


class CheckFailed(Exception):
    """A check ran and found a problem; the message is the detail."""


def local_launch_env() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(LAUNCHER_PREFIXES) and name not in LAUNCHER_NAMES
    }
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            cmd, env=env or local_launch_env(), capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"timed out after {SUBPROCESS_TIMEOUT_S} s: {' '.join(cmd)}") from exc


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def xpu_count() -> int:
    import torch

    xpu = getattr(torch, "xpu", None)
    return int(xpu.device_count()) if xpu is not None and xpu.is_available() else 0


# ---- checks ---------------------------------------------------------------------------------------------


def check_imports(_: argparse.Namespace) -> dict[str, Any]:
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
    return detail


def check_autoload(_: argparse.Namespace) -> dict[str, Any]:
    # A fresh interpreter that imports nothing itself: only the .pth hook can load lightning_xpu.
    code = "import sys; print('lightning_xpu' in sys.modules)"
    result = run([sys.executable, "-c", code])
    if result.returncode != 0 or result.stdout.strip() != "True":
        raise CheckFailed(
            "the lightning_xpu-autoload.pth hook did not load lightning_xpu at interpreter start"
            f" (rc={result.returncode}, out={result.stdout.strip()!r}, err={tail(result.stderr, 5)!r})"
        )
    return {"loaded_at_startup": True}


def check_patches(_: argparse.Namespace) -> dict[str, Any]:
    """Every patch lightning_xpu's manifest expects for this Lightning found its target (lightning_xpu/versions.py);
    a Lightning the manifest does not know is noted, a refused one (2.6.2/2.6.3) fails."""
    import lightning  # noqa: F401  (patched on import)

    from lightning_xpu import versions

    statuses = versions.patch_status()
    failures = versions.failures(statuses)
    if failures:
        raise CheckFailed("; ".join(failures))
    return {
        "applied": sum(status.applied for status in statuses),
        "expected": sum(status.expected for status in statuses),
        "notes": versions.selection_messages(),
    }


def installed_here(project: str) -> bool:
    """Whether a distribution lives in this environment (not in a base Python seen through it)."""
    try:
        location = Path(str(importlib.metadata.distribution(project).locate_file(""))).resolve()
    except importlib.metadata.PackageNotFoundError:
        return True
    prefix = Path(sys.prefix).resolve()
    return location == prefix or prefix in location.parents


def check_pip(_: argparse.Namespace) -> dict[str, Any]:
    result = run([sys.executable, "-m", "pip", "check"])
    if result.returncode == 0:
        return {"problems": [], "summary": result.stdout.strip()}
    # Over a base Python (--base-python), that Python's own inconsistencies are its admin's business:
    # recorded, not fatal. A problem of a package in this environment fails the check.
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    ours = [line for line in lines if installed_here(line.split()[0])]
    if ours or not lines:
        raise CheckFailed(f"pip check: {tail(chr(10).join(ours) or result.stdout + result.stderr)}")
    return {"problems": [], "base_python_problems": lines}


def check_devices(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    count = xpu_count()
    detail: dict[str, Any] = {"xpu_count": count, "cuda_count": torch.cuda.device_count()}
    if count == 0:
        if args.require_xpu:
            raise CheckFailed("no XPU device visible to torch, and --require-xpu was given")
        detail["summary"] = "no XPU: ran on CPU"
        return detail
    devices = []
    for index in range(count):
        props = torch.xpu.get_device_properties(index)
        fields = ("name", "total_memory", "driver_version", "max_compute_units", "has_fp64", "platform_name")
        devices.append({field: str(getattr(props, field, "n/a")) for field in fields})
    detail["xpu"] = devices
    detail["summary"] = f"{count} XPU device(s): {devices[0]['name']}"
    return detail


def check_backends(_: argparse.Namespace) -> dict[str, Any]:
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
    return detail


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


def check_allreduce(_: argparse.Namespace) -> dict[str, Any]:
    backend, device = allreduce_plan()
    port = free_port()
    cmds = [
        [
            sys.executable,
            __file__,
            "--allreduce-rank",
            str(rank),
            "--allreduce-backend",
            backend,
            "--allreduce-device",
            device,
            "--allreduce-port",
            str(port),
        ]
        for rank in range(2)
    ]
    procs = [
        subprocess.Popen(
            cmd, env=local_launch_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for cmd in cmds
    ]
    outputs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            for other in procs:
                other.kill()
            raise CheckFailed(f"all-reduce timed out after {SUBPROCESS_TIMEOUT_S} s") from exc
        outputs.append((proc.returncode, out.strip(), err))
    results = [out for rc, out, _ in outputs if rc == 0]
    if len(results) != 2 or any(out != "3.0" for out in results):
        problems = "; ".join(f"rc={rc} out={out!r} err={tail(err, 5)!r}" for rc, out, err in outputs)
        raise CheckFailed(
            f"2-rank all-reduce over {backend} on {device} did not give 3.0 on both: {problems}"
        )
    return {"backend": backend, "device": device, "ranks": 2, "sum": 3.0}


def allreduce_worker(rank: int, backend: str, device: str, port: int) -> int:
    import torch
    import torch.distributed as dist

    if backend == "ccl":
        # IPEX first where installed, then the bindings; stops naming the fix if their XPU part did not load.
        from lightning_xpu.strategies.backend import import_oneccl_bindings

        import_oneccl_bindings()
    target = torch.device(device, rank) if device != "cpu" else torch.device("cpu")
    if device == "xpu":
        torch.xpu.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    value = torch.tensor([float(rank + 1)], device=target)
    dist.all_reduce(value)
    print(float(value.item()))
    dist.destroy_process_group()
    return 0


def fit_plan(args: argparse.Namespace) -> tuple[str, int]:
    """(accelerator, number of local devices) for the DDP fit."""
    import torch

    count = xpu_count()
    if count:
        return "xpu", count
    if torch.cuda.device_count():
        return "gpu", torch.cuda.device_count()
    return "cpu", 2


def run_fit(name: str, accelerator: str, devices: int, strategy: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix=f"lxpu-smoke-{name}-") as out:
        cmd = [
            sys.executable,
            str(TOY_FIT),
            "--out",
            out,
            "--accelerator",
            accelerator,
            "--devices",
            str(devices),
            "--strategy",
            strategy,
        ]
        result = run(cmd)
        reports = [json.loads(path.read_text()) for path in sorted(Path(out).glob("rank-*.json"))]
    if result.returncode != 0:
        raise CheckFailed(f"toy fit exited {result.returncode}: {tail(result.stderr)}")
    if len(reports) != devices:
        raise CheckFailed(f"toy fit wrote {len(reports)} rank reports, expected {devices}")
    return reports


def require_device(reports: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The fits must run where the variant says and with the runtime loaded by the hook."""
    if not all(r["lightning_xpu_imported"] for r in reports):
        raise CheckFailed("lightning_xpu was not loaded in the fit's processes (autoload hook missing?)")
    if args.require_xpu and not all(str(r["device"]).startswith("xpu") for r in reports):
        devices = sorted({str(r["device"]) for r in reports})
        raise CheckFailed(f"--require-xpu: the fit ran on {devices}, not on XPU")


def check_fit_single(args: argparse.Namespace) -> dict[str, Any]:
    accelerator = "xpu" if args.require_xpu else "auto"
    (report,) = run_fit("single", accelerator, 1, "auto")
    require_device([report], args)
    if report["final_weights_sha256"] == report["initial_weights_sha256"]:
        raise CheckFailed("the toy fit did not change the weights")
    return {key: report[key] for key in ("device", "accelerator", "strategy", "lightning_xpu_imported")}


def check_fit_ddp(args: argparse.Namespace) -> dict[str, Any]:
    accelerator, devices = fit_plan(args)
    reports = run_fit("ddp", accelerator, devices, "ddp")
    require_device(reports, args)
    ranks = sorted(r["global_rank"] for r in reports)
    finals = {r["final_weights_sha256"] for r in reports}
    shards = [set(r["data_indices"]) for r in reports]
    if ranks != list(range(devices)) or any(r["world_size"] != devices for r in reports):
        raise CheckFailed(f"expected global ranks 0..{devices - 1} of world size {devices}, got {ranks}")
    if len(finals) != 1 or finals == {reports[0]["initial_weights_sha256"]}:
        raise CheckFailed("ranks ended with different weights, or weights that never changed")
    if devices > 1 and shards[0] == shards[1]:
        raise CheckFailed("rank 0 and rank 1 trained on the same samples")
    return {
        "accelerator": accelerator,
        "devices": devices,
        "device": sorted({str(r["device"]) for r in reports}),
        "backend": reports[0].get("process_group_backend"),
        "cluster_environment": reports[0]["cluster_environment"],
    }


CHECKS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "imports": check_imports,
    "devices": check_devices,
    "autoload_hook": check_autoload,
    "lightning_patches": check_patches,
    "pip_check": check_pip,
    "distributed_backends": check_backends,
    "allreduce": check_allreduce,
    "fit_single_device": check_fit_single,
    "fit_ddp": check_fit_ddp,
}


# Checks that only wait on the processes they start. Where the device check finds no accelerator they start at
# once, right after it (a third of the smoke job's time on a 2-core node); on a device they run one after another:
# they would share it, and a failure should have one cause.
CONCURRENT_ON_CPU = ("pip_check", "allreduce", "fit_single_device", "fit_ddp")


def run_check(name: str, args: argparse.Namespace, injected: set[str]) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        if name in injected:
            raise CheckFailed(f"failure injected by {INJECT_VARIABLE} (test only)")
        entry = {"ok": True, "detail": CHECKS[name](args)}
    except CheckFailed as exc:
        entry = {"ok": False, "detail": str(exc)}
    except Exception as exc:  # a crash in a check is a failed check, never a crashed smoke job
        entry = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    entry["seconds"] = round(time.perf_counter() - start, 3)
    return entry


def cpu_only(devices: dict[str, Any], args: argparse.Namespace) -> bool:
    """From the device check's entry: it passed and found neither XPU nor CUDA devices."""
    return bool(devices["ok"] and not args.require_xpu
                and devices["detail"]["xpu_count"] == devices["detail"]["cuda_count"] == 0)


def run_checks(args: argparse.Namespace) -> dict[str, Any]:
    """Every check, reported in CHECKS order."""
    injected = {name for name in os.environ.get(INJECT_VARIABLE, "").split(",") if name}
    results: dict[str, Any] = {}
    started: dict[str, Future[dict[str, Any]]] = {}
    with ThreadPoolExecutor(max_workers=len(CONCURRENT_ON_CPU)) as pool:
        for name in CHECKS:
            entry = started[name].result() if name in started else run_check(name, args, injected)
            results[name] = entry
            state = "ok" if entry["ok"] else f"FAILED: {entry['detail']}"
            print(f"smoke: {name}: {state} ({entry['seconds']} s)", flush=True)
            if name == "devices" and cpu_only(entry, args):
                started = {check: pool.submit(run_check, check, args, injected) for check in CONCURRENT_ON_CPU}
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="where to write the JSON result (required)")
    parser.add_argument(
        "--require-xpu", action="store_true", help="fail unless the fits ran on an XPU device"
    )
    # Internal: one rank of the all-reduce check.
    parser.add_argument("--allreduce-rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--allreduce-backend", default="gloo", help=argparse.SUPPRESS)
    parser.add_argument("--allreduce-device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--allreduce-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.allreduce_rank is None and args.json is None:
        parser.error("--json PATH is required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.allreduce_rank is not None:
        return allreduce_worker(
            args.allreduce_rank, args.allreduce_backend, args.allreduce_device, args.allreduce_port
        )
    start = time.perf_counter()
    checks = run_checks(args)
    ok = all(entry["ok"] for entry in checks.values())
    result = {
        "ok": ok,
        "require_xpu": args.require_xpu,
        "python": sys.executable,
        "hostname": socket.gethostname(),
        "seconds": round(time.perf_counter() - start, 3),
        "checks": checks,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.json.with_name(f".{args.json.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, args.json)
    failed = [name for name, entry in checks.items() if not entry["ok"]]
    print(f"smoke: {'passed' if ok else 'FAILED: ' + ', '.join(failed)} in {result['seconds']} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
