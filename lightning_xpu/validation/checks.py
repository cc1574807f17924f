"""The site validation job's checks (the `site` level of lightning_xpu/validation/framework.py): each exercises one
XPU-only path that CI only simulates.

Every check is a small function registered for the `site` level (framework.checks_of, in the order the job runs
them), with the framework's rules: a one-line reason when it passes, `CheckFailed(reason)`, `CheckSkipped(reason)`;
a check marked `needs_xpu` is skipped with "no Intel GPU" where XPU cannot be used: a machine without an Intel GPU
never reports one as passed.

`Context.accelerator` is where the tensor work runs: "xpu" at a site. The unit tests run the same functions with
"cpu" while `torch.xpu`'s device queries are simulated (tests/conftest.py `simulated_xpu`), because tensors
cannot be placed on "xpu" in a CPU build of PyTorch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lightning_xpu.patch_report import patch_rows
from lightning_xpu.validation.framework import (
    NO_XPU,
    CheckFailed,
    CheckSkipped,
    Context,
    check,
    free_port,
    local_env,
    record_ranks,
    run_check,
    run_checks,
    tail,
)

__all__ = ["NO_XPU", "CheckFailed", "CheckSkipped", "Context", "free_port", "local_env", "run_check",
           "run_checks", "run_worker"]

WORKER = "lightning_xpu.validation.worker"
WORKER_TIMEOUT_S = 600


# ---- helpers ---------------------------------------------------------------------------------------------------


def _namespace() -> Any:
    from lightning_xpu._namespaces import default_namespace

    return default_namespace()


def _pl() -> Any:
    return __import__(_namespace().pytorch or "lightning.pytorch", fromlist=["Trainer"])


def _quiet_trainer(**kwargs: Any) -> Any:
    return _pl().Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, **kwargs)


def _read_ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(out.glob("rank-*.json"))]


def run_worker(context: Context, args: list[str], ranks: int = 1, launcher: list[str] | None = None,
               env: dict[str, str] | None = None, timeout: float = WORKER_TIMEOUT_S,
               module: str = WORKER) -> list[dict[str, Any]]:
    """Run the worker `module` (`ranks` local processes, or once under `launcher`); its rank reports, or
    CheckFailed. The oneCCL launch variables each rank saw are recorded for the running check's result."""
    out = Path(tempfile.mkdtemp(prefix="worker-", dir=context.workdir))
    command = [context.python, "-m", module, *args, "--out", str(out)]
    if launcher is not None:
        launches = [([*launcher, *command], env or dict(os.environ))]
    else:
        base = env or local_env()
        launches = [(command, {**base, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(ranks)}
                     if ranks > 1 else base) for r in range(ranks)]
    # Output goes to files, not pipes: a full pipe would stall a rank (and with it every other rank).
    logs = [out / f"output-{index}.log" for index in range(len(launches))]
    procs = []
    # Local ranks run in the scratch directory, with this process's lightning_xpu first on their path: `-m` puts the
    # working directory first, where a checkout's lightning_xpu would shadow the one being validated. Launched ranks
    # keep both (the other nodes may lack the scratch path).
    cwd = None if launcher is not None else context.workdir
    if cwd is not None:
        here = str(Path(__file__).resolve().parents[2])
        launches = [(argv, {**environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, environ.get("PYTHONPATH")]))})
                    for argv, environ in launches]
    for (argv, environ), log in zip(launches, logs):
        with open(log, "w") as sink:
            procs.append(subprocess.Popen(argv, env=environ, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT))
    outputs = []
    for proc, log in zip(procs, logs):
        try:
            outputs.append((proc.wait(timeout=timeout), log.read_text(errors="replace")))
        except subprocess.TimeoutExpired:
            for each in procs:
                each.kill()
            raise CheckFailed(f"{' '.join(command[2:4])} timed out after {timeout:g} s") from None
    reports = _read_ranks(out)
    record_ranks(reports)
    errors = [report["error"] for report in reports if "error" in report]
    if errors:
        raise CheckFailed(f"rank error: {errors[0]}")
    failed = [(code, text) for code, text in outputs if code != 0]
    if failed:
        raise CheckFailed(f"{' '.join(command[2:4])} exited {failed[0][0]}: {tail(failed[0][1])}")
    return reports


def _require_world(reports: list[dict[str, Any]], world: int, what: str) -> None:
    ranks = sorted(report["global_rank"] for report in reports)
    if ranks != list(range(world)):
        raise CheckFailed(f"{what}: expected rank reports 0..{world - 1}, got {ranks}")


def judge_collectives(reports: list[dict[str, Any]], world: int) -> str:
    from lightning_xpu.validation.worker import BROADCAST_OBJECT

    _require_world(reports, world, "collectives")
    expected = world * (world + 1) / 2
    for report in reports:
        if report.get("all_reduce") != expected:
            raise CheckFailed(f"rank {report['global_rank']}: all-reduce gave {report.get('all_reduce')},"
                              f" expected {expected}")
        if report.get("broadcast") != BROADCAST_OBJECT:
            raise CheckFailed(f"rank {report['global_rank']}: object broadcast gave {report.get('broadcast')!r}")
    hosts = len({report["host"] for report in reports})
    return f"all-reduce and object broadcast over {world} ranks on {hosts} host(s), backend {reports[0]['backend']}"


def _loss_falls(losses: list[float], what: str) -> str:
    if len(losses) < 4:
        raise CheckFailed(f"{what}: only {len(losses)} training steps ran")
    first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
    if not last < first:
        raise CheckFailed(f"{what}: the loss did not decrease ({first:.4g} -> {last:.4g})")
    return f"loss {first:.4g} -> {last:.4g}"


def judge_fit(reports: list[dict[str, Any]], world: int, device_type: str, what: str,
              environments: tuple[str, ...] = ()) -> str:
    _require_world(reports, world, what)
    wrong = sorted({r["device"] for r in reports if not str(r["device"]).startswith(device_type)})
    if wrong:
        raise CheckFailed(f"{what}: ran on {wrong}, not on {device_type}")
    if environments and reports[0]["cluster_environment"] not in environments:
        raise CheckFailed(f"{what}: cluster environment {reports[0]['cluster_environment']}, expected"
                          f" {' or '.join(environments)}")
    hashes = {r["weights_sha256"] for r in reports}
    if None not in hashes and len(hashes) != 1:
        raise CheckFailed(f"{what}: the ranks ended with different weights")
    rank0 = next(r for r in reports if r["global_rank"] == 0)
    return f"{world} ranks, {rank0['strategy']}, {_loss_falls(rank0['losses'], what)}"


def judge_resume(saved: list[dict[str, Any]], resumed: list[dict[str, Any]], world: int, what: str) -> str:
    _require_world(resumed, world, what)
    steps = {r["final_step"] for r in saved}
    for report in resumed:
        if report["start_step"] not in steps:
            raise CheckFailed(f"{what}: rank {report['global_rank']} resumed at step {report['start_step']},"
                              f" the checkpoint was saved at step {sorted(steps)}")
        if report["final_step"] <= report["start_step"]:
            raise CheckFailed(f"{what}: rank {report['global_rank']} did not train after resuming")
    return f"saved at step {sorted(steps)[0]}, resumed there on {world} ranks, trained to {resumed[0]['final_step']}"


def _site_launcher(kind: str, context: Context, ranks_per_node: int) -> list[str]:
    """The launcher command for `kind` over the allocation, or CheckSkipped saying why there is none."""
    if kind not in context.launchers:
        raise CheckSkipped(f"{kind} not requested (--launchers)")
    total = context.nodes * ranks_per_node
    if kind == "srun":
        if "SLURM_JOB_ID" not in os.environ or shutil.which("srun") is None:
            raise CheckSkipped("not inside a Slurm allocation (run the job with sbatch)")
        return ["srun", f"--nodes={context.nodes}", f"--ntasks={total}", f"--ntasks-per-node={ranks_per_node}",
                "--kill-on-bad-exit=1"]
    if shutil.which("mpiexec") is None:
        raise CheckSkipped("no mpiexec on PATH")
    return ["mpiexec", "-n", str(total), "-ppn", str(ranks_per_node)]


def _launcher_env(context: Context) -> dict[str, str]:
    address = "127.0.0.1" if context.nodes == 1 else socket.gethostname()
    return {**os.environ, "MASTER_ADDR": address, "MASTER_PORT": str(free_port()),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def _worker_backend(context: Context) -> str:
    """The XPU collective backend (failing with its cause when there is none); gloo for CPU tensors."""
    from lightning_xpu.diagnosis import collective_backend

    backend, how = collective_backend()
    if backend is None:
        raise CheckFailed(how)
    return backend if context.accelerator == "xpu" else "gloo"


# ---- the checks, in the order the job runs them -------------------------------------------------------------
# (the site level: `lightning-xpu validate`, scripts/common/validate_lightning.sh)


@check("runtime", needs_xpu=False)
def check_runtime(context: Context) -> str:
    """lightning_xpu is active: "xpu" is a registered accelerator of the Trainer and Fabric."""
    namespace = _namespace()
    names = {"Trainer": namespace.pytorch_module("accelerators").AcceleratorRegistry,
             "Fabric": namespace.fabric_module("accelerators").ACCELERATOR_REGISTRY}
    missing = [api for api, registry in names.items() if "xpu" not in registry]
    if missing:
        raise CheckFailed(f"'xpu' is not a registered accelerator of {', '.join(missing)}"
                          " (LIGHTNING_XPU_DISABLE set, or lightning_xpu not imported)")
    return f"xpu registered for the Trainer and Fabric of {namespace.fabric.split('.')[0]}"


@check("patches", needs_xpu=False)
def check_patches(context: Context) -> str:
    """Every patch the manifest expects for the installed Lightning applied (lightning_xpu.versions)."""
    rows = patch_rows()
    if rows is None:
        raise CheckSkipped("lightning_xpu.versions.patch_status is not in this build")
    missing = [f"{row.owner}.{row.name}" for row in rows if row.expected and not row.applied]
    if missing:
        raise CheckFailed(f"expected patches that did not apply: {', '.join(missing)}")
    return f"{sum(row.applied for row in rows)} patches applied, all that the manifest expects"


@check("pins", needs_xpu=False)
def check_pins(context: Context) -> str:
    """Each package the environment pins is installed at its pin, in the environment and the user layer in use,
    and no torch-family package is another torch build's (lightning_xpu/validation/pincheck.py)."""
    from lightning_xpu.validation.pincheck import check_text

    return check_text()


@check("device_properties")
def check_device_properties(context: Context) -> str:
    """Every device reports a name, memory and EU count (a Max 1550 tile: 448 EUs, 64 GiB)."""
    import torch

    from lightning_xpu.diagnosis import device_facts

    count = int(torch.xpu.device_count())
    if count < 1:
        raise CheckFailed("torch.xpu.device_count() is 0")
    facts = device_facts(count)
    for fact in facts:
        for name in ("name", "total_memory", "gpu_eu_count", "driver_version"):
            if fact.get(name) in (None, "", 0):
                raise CheckFailed(f"xpu:{fact['index']} reports no {name}")
    first = facts[0]
    note = " (512 may be PyTorch's fill-in for an unreported EU count)" if first["gpu_eu_count"] == 512 else ""
    return (f"{count} x {first['name']}: {first['total_memory'] / 2**30:.0f} GiB, {first['gpu_eu_count']} EUs{note},"
            f" fp64 {first.get('has_fp64')}, driver {first['driver_version']}")


@check("collectives_local")
def check_collectives_local(context: Context) -> str:
    """XCCL/ccl all-reduce and object broadcast over all local tiles."""
    backend = _worker_backend(context)
    if context.devices < 2:
        raise CheckSkipped(f"{context.devices} device visible: collectives need 2")
    env = local_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    reports = run_worker(context, ["collectives", "--backend", backend, "--device", context.accelerator],
                         ranks=context.devices, env=env)
    return judge_collectives(reports, context.devices)


@check("collectives_nodes")
def check_collectives_nodes(context: Context) -> str:
    """The same over 2 nodes, through the site launcher (given --nodes 2 in a 2-node allocation)."""
    if context.nodes < 2:
        raise CheckSkipped("one node: give --nodes 2 in a 2-node allocation")
    backend = _worker_backend(context)
    kind = next((k for k in context.launchers if k in ("srun", "mpiexec")), "srun")
    launcher = _site_launcher(kind, context, context.devices)
    reports = run_worker(context, ["collectives", "--backend", backend, "--device", context.accelerator],
                         launcher=launcher, env=_launcher_env(context))
    return judge_collectives(reports, context.nodes * context.devices)



def fit_losses(context: Context, precision: str) -> tuple[list[float], str | None, Any]:
    """A short in-process fit on one device: (losses, output dtype inside autocast, the trainer)."""
    from lightning_xpu.validation.worker import regression

    seen: dict[str, Any] = {}
    model, loader = regression(_pl(), seen)
    trainer = _quiet_trainer(accelerator=context.accelerator, devices=1, precision=precision, max_steps=12,
                             max_epochs=-1, default_root_dir=str(context.workdir))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, loader)
    return seen["losses"], seen["autocast_dtype"], trainer


@check("bf16_fit")
def check_bf16_fit(context: Context) -> str:
    """A bf16-mixed fit on one tile autocasts to bfloat16 and its loss decreases."""
    losses, dtype, trainer = fit_losses(context, "bf16-mixed")
    autocast_device = getattr(trainer.precision_plugin, "device", None)
    if autocast_device != context.accelerator:
        raise CheckFailed(f"bf16-mixed autocasts on {autocast_device!r}, not on {context.accelerator!r}")
    if dtype != "torch.bfloat16":
        raise CheckFailed(f"layers ran in {dtype} under bf16-mixed (autocast is not active)")
    return _loss_falls(losses, "bf16-mixed fit") + f", on {trainer.strategy.root_device}"


def _fit_args(context: Context, strategy: str, devices: int, **options: str) -> list[str]:
    args = ["fit", "--accelerator", context.accelerator, "--devices", str(devices), "--strategy", strategy,
            "--num-nodes", str(options.pop("num_nodes", 1))]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", value]
    return args


@check("fsdp_fit")
def check_fsdp_fit(context: Context) -> str:
    """An FSDP bf16-mixed fit over all local tiles (Lightning starts the ranks)."""
    reports = run_worker(context, _fit_args(context, "fsdp", context.devices))
    return judge_fit(reports, context.devices, context.accelerator, "FSDP fit")


def _launched_ddp(context: Context, kind: str, environments: tuple[str, ...]) -> str:
    launcher = _site_launcher(kind, context, context.devices)
    args = _fit_args(context, "ddp", context.devices, num_nodes=str(context.nodes))
    reports = run_worker(context, args, launcher=launcher, env=_launcher_env(context))
    return judge_fit(reports, context.nodes * context.devices, context.accelerator, f"DDP under {kind}",
                     environments)


@check("ddp_srun")
def check_ddp_srun(context: Context) -> str:
    """DDP fit with one rank per tile, started by srun over the allocation."""
    return _launched_ddp(context, "srun", ("SLURMEnvironment",))


@check("ddp_mpiexec")
def check_ddp_mpiexec(context: Context) -> str:
    """DDP fit with one rank per tile, started by mpiexec (MPICH/Intel MPI Hydra or PALS)."""
    return _launched_ddp(context, "mpiexec", ("HydraEnvironment", "PALSEnvironment", "OpenMPIEnvironment"))


@check("profiler_xpu")
def check_profiler(context: Context) -> str:
    """torch.profiler supports XPU activity and records events of a matmul on the device."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if ProfilerActivity.XPU not in torch.profiler.supported_activities():
        raise CheckFailed("this PyTorch build cannot profile XPU (ProfilerActivity.XPU is not supported:"
                          " no Kineto/PTI tracer)")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.XPU] if context.accelerator == "xpu" else [])
    x = torch.randn(64, 64, device=context.device)
    with profile(activities=activities) as prof:
        (x @ x).sum().item()
    events = prof.key_averages()
    if context.accelerator == "xpu":
        device_time = sum(getattr(event, "device_time_total", 0) or 0 for event in events)
        if device_time <= 0:
            raise CheckFailed("the profile holds no XPU kernel time")
        return f"{len(events)} event kinds, {device_time:.0f} us on XPU"
    if not events:
        raise CheckFailed("the profile recorded no events")
    return f"{len(events)} event kinds recorded"


@check("memory_stats")
def check_memory_stats(context: Context) -> str:
    """The accelerator's device stats (DeviceStatsMonitor) hold XPU memory counters."""
    import torch

    from lightning_xpu._namespaces import default_namespace
    from lightning_xpu.accelerator import accelerator_class

    keep = torch.ones(1024, 1024, device=context.device)
    stats = accelerator_class(default_namespace())().get_device_stats(torch.device("xpu", 0))
    del keep
    wanted = ("allocated_bytes.all.current", "reserved_bytes.all.current")
    missing = [key for key in wanted if key not in stats]
    if missing:
        raise CheckFailed(f"torch.xpu.memory_stats() lacks {', '.join(missing)} ({len(stats)} keys)")
    return f"{len(stats)} counters, {stats['allocated_bytes.all.current']} bytes allocated"


def allocate_beyond_memory(context: Context) -> Any:
    """Ask for 1.5 times the first device's memory (at a site the allocation fails at once)."""
    import torch

    total = int(torch.xpu.get_device_properties(0).total_memory)
    return torch.empty(total * 3 // 2, dtype=torch.uint8, device=context.device)


@check("oom_detection")
def check_oom_detection(context: Context) -> str:
    """An XPU out-of-memory error is recognised by Lightning's is_oom_error (batch-size finder)."""
    import torch

    is_oom_error = _namespace().pytorch_module("utilities.memory").is_oom_error
    try:
        allocate_beyond_memory(context)
    except Exception as error:
        if not is_oom_error(error):
            raise CheckFailed(f"not recognised as out of memory: {type(error).__name__}: {error}") from None
        return f"recognised: {str(error).splitlines()[0][:120]}"
    finally:
        torch.xpu.empty_cache()
    raise CheckFailed("allocating 1.5x the device memory did not fail")


@check("rng_round_trip")
def check_rng(context: Context) -> str:
    """Lightning's RNG snapshot includes the XPU generators and restoring it repeats the same numbers."""
    import torch

    seed = _namespace().fabric_module("utilities.seed")
    states = seed._collect_rng_states(include_cuda=True)
    if "torch.xpu" not in states:
        raise CheckFailed(f"no XPU RNG state in Lightning's RNG snapshot (keys: {sorted(states)})")
    first = torch.rand(8, device=context.device).cpu()
    seed._set_rng_states(states)
    second = torch.rand(8, device=context.device).cpu()
    if not torch.equal(first, second):
        raise CheckFailed("restoring the RNG snapshot did not repeat the random numbers")
    return f"{len(states['torch.xpu'])} XPU generator state(s) saved and restored"


class _WouldFork(Exception):
    pass


@contextlib.contextmanager
def _no_fork() -> Iterator[None]:
    """Replace torch.multiprocessing.start_processes so that the check can never fork."""
    import torch.multiprocessing as mp

    original = mp.start_processes

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _WouldFork

    mp.start_processes = refuse
    try:
        yield
    finally:
        mp.start_processes = original


@check("fork_refusal")
def check_fork_refusal(context: Context) -> str:
    """ddp_fork after XPU initialisation is refused before forking, with a message naming ddp_spawn."""
    import torch

    torch.xpu.set_device(0)  # starts the XPU runtime, as any XPU tensor would
    trainer = _quiet_trainer(accelerator="xpu", devices=min(2, max(1, context.devices)), strategy="ddp_fork",
                             default_root_dir=str(context.workdir))
    port = os.environ.get("MASTER_PORT")
    with _no_fork():
        try:
            trainer.strategy.launcher.launch(lambda: None, trainer=trainer)
        except _WouldFork:
            raise CheckFailed("ddp_fork would fork although XPU is initialised (children would fail)") from None
        except RuntimeError as error:
            if "ddp_spawn" not in str(error):
                raise CheckFailed(f"refused, but the message does not name ddp_spawn: {error}") from None
            return "refused before forking: " + str(error)[:100]
        finally:  # Lightning's launcher exports MASTER_PORT before it forks
            if port is None:
                os.environ.pop("MASTER_PORT", None)
            else:
                os.environ["MASTER_PORT"] = port
    raise CheckFailed("ddp_fork launched without error")


@check("throughput_mfu")
def check_throughput(context: Context) -> str:
    """ThroughputMonitor knows the device's peak FLOP/s (so MFU is logged), in bf16 and fp32, without raising."""
    import torch

    available_flops = _namespace().fabric_module("utilities.throughput").get_available_flops
    device = torch.device("xpu", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bf16 = available_flops(device, torch.bfloat16)
        fp32 = available_flops(device, torch.float32)
    if not bf16:
        raise CheckFailed(f"no peak FLOP/s known for {torch.xpu.get_device_name(0)!r}: ThroughputMonitor logs no MFU")
    return f"peak {bf16 / 1e12:.0f} TFLOP/s bf16, {(fp32 or 0) / 1e12:.0f} TFLOP/s fp32"


@check("torch_compile")
def check_torch_compile(context: Context) -> str:
    """torch.compile of a small model on the device gives the eager result."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).to(context.device)
    x = torch.randn(16, 32, device=context.device)
    compiled = torch.compile(model)
    with torch.no_grad():
        expected, got = model(x), compiled(x)
    if not torch.allclose(expected, got, atol=1e-4, rtol=1e-4):
        raise CheckFailed(f"compiled output differs from eager by {float((expected - got).abs().max()):.3g}")
    return "compiled and eager outputs agree"


def _checkpoint_round_trip(context: Context, strategy: str, what: str, **options: str) -> str:
    """Fit and save, then resume in a fresh launch (Lightning starts the ranks over all local tiles)."""
    ckpt = Path(tempfile.mkdtemp(prefix="ckpt-", dir=context.workdir)) / "last.ckpt"
    devices = context.devices
    saved = run_worker(context, _fit_args(context, strategy, devices, max_steps="4", ckpt_out=str(ckpt), **options))
    if not ckpt.exists():
        raise CheckFailed(f"{what}: no checkpoint at {ckpt}")
    resumed = run_worker(context, _fit_args(context, strategy, devices, max_steps="8", ckpt_in=str(ckpt), **options))
    return judge_resume(saved, resumed, devices, what)


@check("checkpoint_ddp")
def check_checkpoint_ddp(context: Context) -> str:
    """Save a checkpoint under DDP over all local tiles and resume from it."""
    return _checkpoint_round_trip(context, "ddp", "DDP checkpoint")


@check("checkpoint_fsdp_sharded")
def check_checkpoint_fsdp_sharded(context: Context) -> str:
    """Save a sharded FSDP checkpoint and resume from it."""
    return _checkpoint_round_trip(context, "fsdp", "FSDP sharded checkpoint", state_dict_type="sharded")


@check("checkpoint_fsdp_full")
def check_checkpoint_fsdp_full(context: Context) -> str:
    """Save a full (consolidated) FSDP checkpoint and resume from it."""
    return _checkpoint_round_trip(context, "fsdp", "FSDP full checkpoint", state_dict_type="full")


