"""Each validation check passes on a healthy simulated XPU and fails, with its reason, on a broken one.

The XPU device queries are simulated (`simulated_xpu`, tests/conftest.py); the tensor work runs on CPU
(`Context.accelerator="cpu"`), since a CPU build of PyTorch cannot place tensors on "xpu". Checks that launch
processes are judged on the rank reports their worker writes: canned here, real in test_validate_job.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lightning_xpu.validation import FAIL, PASS, SKIP, checks, worker
from lightning_xpu.validation.checks import NO_XPU, Context, run_check
from lightning_xpu.validation.framework import checks_of, local_env

BY_NAME = {spec.name: spec for spec in checks_of("site")}


@pytest.fixture
def context(simulated_xpu, tmp_path: Path) -> Context:
    simulated_xpu(devices=2)
    return Context("cpu", devices=2, workdir=tmp_path)


def outcome(name: str, context: Context) -> tuple[str, str]:
    result = run_check(BY_NAME[name], context)
    return result.status, result.reason


def test_without_an_intel_gpu_every_xpu_check_is_skipped(tmp_path: Path) -> None:
    context = Context("xpu", 0, tmp_path, xpu=False, unusable="XPU cannot be used: CPU build")
    results = {spec.name: run_check(spec, context) for spec in checks_of("site") if spec.needs_xpu}
    assert len(results) >= 15
    assert {(r.status, r.reason) for r in results.values()} == {(SKIP, NO_XPU)}


def test_the_check_names_are_unique_and_cover_the_issue() -> None:
    names = [spec.name for spec in checks_of("site")]
    assert len(names) == len(set(names))
    for wanted in ("device_properties", "collectives_local", "collectives_nodes", "bf16_fit", "fsdp_fit", "ddp_srun",
                   "ddp_mpiexec", "profiler_xpu", "memory_stats", "oom_detection", "rng_round_trip",
                   "fork_refusal", "throughput_mfu", "torch_compile", "checkpoint_ddp", "checkpoint_fsdp_sharded",
                   "checkpoint_fsdp_full"):
        assert wanted in names


def test_device_properties(context, monkeypatch) -> None:
    assert outcome("device_properties", context)[0] == PASS
    # A deliberately broken device, not a torch behaviour (every real release reports total_memory,
    # c10/xpu/XPUDeviceProp.h): the check must fail on it.
    monkeypatch.setattr(torch.xpu, "get_device_properties",
                        lambda device=None: SimpleNamespace(name="Max 1550", gpu_eu_count=448, driver_version="1"))
    assert outcome("device_properties", context) == (FAIL, "xpu:0 reports no total_memory")


def test_collectives_over_local_tiles(context, monkeypatch) -> None:
    """Healthy: one process per tile (the worker runs for real under mpiexec in test_report_job.py)."""
    from lightning_xpu.validation.worker import BROADCAST_OBJECT

    launches = []

    def run_worker(ctx: Context, args: list[str], ranks: int = 1, **kwargs: Any) -> list[dict[str, Any]]:
        launches.append((args, ranks, kwargs["env"]["MASTER_ADDR"]))
        return [{"global_rank": r, "host": "h", "backend": "xccl", "all_reduce": 3.0, "broadcast": BROADCAST_OBJECT}
                for r in range(ranks)]

    monkeypatch.setattr(checks, "run_worker", run_worker)
    assert outcome("collectives_local", context) == (
        PASS, "all-reduce and object broadcast over 2 ranks on 1 host(s), backend xccl")
    assert launches == [(["collectives", "--backend", "gloo", "--device", "cpu"], 2, "127.0.0.1")]
    context.devices = 1
    assert outcome("collectives_local", context) == (SKIP, "1 device visible: collectives need 2")


@pytest.mark.parametrize(
    ("simulation", "reason"),
    [
        ({"xccl": False, "oneccl": False}, "PyTorch has no XCCL and oneccl_bindings_for_pytorch cannot be imported"),
        ({"xccl": False, "oneccl": True}, "oneccl_bindings_for_pytorch imported but registered no 'ccl'"),
    ],
)
def test_collectives_without_a_registered_xpu_backend_fail(simulated_xpu, tmp_path, simulation, reason) -> None:
    simulated_xpu(devices=2, **simulation)
    status, text = outcome("collectives_local", Context("cpu", 2, tmp_path))
    assert status == FAIL and text.startswith(reason)


def test_collectives_judge_wrong_sums_and_missing_ranks() -> None:
    good = [{"global_rank": r, "host": "h", "backend": "xccl", "all_reduce": 3.0, "broadcast": worker.BROADCAST_OBJECT}
            for r in range(2)]
    assert checks.judge_collectives(good, 2).startswith("all-reduce and object broadcast over 2 ranks")
    with pytest.raises(checks.CheckFailed, match=r"rank 1: all-reduce gave 2\.0, expected 3\.0"):
        checks.judge_collectives([good[0], {**good[1], "all_reduce": 2.0}], 2)
    with pytest.raises(checks.CheckFailed, match=r"expected rank reports 0..1, got \[0\]"):
        checks.judge_collectives(good[:1], 2)
    with pytest.raises(checks.CheckFailed, match="object broadcast gave None"):
        checks.judge_collectives([good[0], {**good[1], "broadcast": None}], 2)


def test_collectives_over_nodes_need_two_nodes(context) -> None:
    assert outcome("collectives_nodes", context) == (SKIP, "one node: give --nodes 2 in a 2-node allocation")


def test_bf16_fit(context, monkeypatch) -> None:
    status, reason = outcome("bf16_fit", context)
    assert status == PASS and reason.startswith("loss ")
    monkeypatch.setattr(worker, "FIT_LR", 0.0)
    status, reason = outcome("bf16_fit", context)
    assert status == FAIL and "bf16-mixed fit: the loss did not decrease" in reason


def test_bf16_fit_fails_when_autocast_is_off(context, monkeypatch) -> None:
    real = checks.fit_losses
    monkeypatch.setattr(checks, "fit_losses", lambda ctx, precision: real(ctx, "32-true"))
    status, reason = outcome("bf16_fit", context)
    assert status == FAIL and "bf16-mixed autocasts on None" in reason


def rank_reports(world: int, device: str = "cpu", **changes: Any) -> list[dict[str, Any]]:
    return [{"global_rank": r, "world_size": world, "device": f"{device}:{r}" if device != "cpu" else "cpu",
             "strategy": "FSDPStrategy", "cluster_environment": "LightningEnvironment", "weights_sha256": None,
             "losses": [1.0, 0.9, 0.7, 0.5, 0.4], "start_step": 0, "final_step": 8, **changes}
            for r in range(world)]


def canned_worker(monkeypatch, *runs: list[dict[str, Any]]) -> list[list[str]]:
    """Replace the worker launch by canned rank reports (one list per launch); returns the recorded args."""
    calls: list[list[str]] = []
    queue = list(runs)

    def run_worker(context: Context, args: list[str], **kwargs: Any) -> list[dict[str, Any]]:
        calls.append(args)
        if "--ckpt-out" in args:
            Path(args[args.index("--ckpt-out") + 1]).touch()
        return queue.pop(0)

    monkeypatch.setattr(checks, "run_worker", run_worker)
    return calls


def test_fsdp_fit(context, monkeypatch) -> None:
    calls = canned_worker(monkeypatch, rank_reports(2), rank_reports(1), rank_reports(2, losses=[1.0] * 5))
    assert outcome("fsdp_fit", context) == (PASS, "2 ranks, FSDPStrategy, loss 0.95 -> 0.45")
    assert calls[0][:2] == ["fit", "--accelerator"] and "fsdp" in calls[0]
    assert outcome("fsdp_fit", context) == (FAIL, "FSDP fit: expected rank reports 0..1, got [0]")
    assert outcome("fsdp_fit", context) == (FAIL, "FSDP fit: the loss did not decrease (1 -> 1)")


def test_a_fit_on_the_wrong_device_fails(tmp_path, simulated_xpu, monkeypatch) -> None:
    simulated_xpu(devices=2)
    canned_worker(monkeypatch, rank_reports(2, device="cpu"))
    assert outcome("fsdp_fit", Context("xpu", 2, tmp_path)) == (FAIL, "FSDP fit: ran on ['cpu'], not on xpu")


@pytest.mark.parametrize(("name", "environment"),
                         [("ddp_srun", "SLURMEnvironment"), ("ddp_mpiexec", "HydraEnvironment")])
def test_launched_ddp(context, monkeypatch, name, environment) -> None:
    kind = name.split("_")[1]
    monkeypatch.setattr(checks, "_site_launcher", lambda k, ctx, n: [k, "-n", str(n)])
    good = rank_reports(2, cluster_environment=environment, strategy="DDPStrategy", weights_sha256="a")
    calls = canned_worker(monkeypatch, good, rank_reports(2, cluster_environment="LightningEnvironment"),
                          [good[0], {**good[1], "weights_sha256": "b"}])
    assert outcome(name, context)[0] == PASS and "--num-nodes" in calls[0]
    assert outcome(name, context) == (
        FAIL, f"DDP under {kind}: cluster environment LightningEnvironment, expected {environment}"
        + (" or PALSEnvironment or OpenMPIEnvironment" if kind == "mpiexec" else ""))
    assert outcome(name, context) == (FAIL, f"DDP under {kind}: the ranks ended with different weights")


def test_launched_ddp_is_skipped_without_the_launcher(context, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert outcome("ddp_srun", context) == (SKIP, "not inside a Slurm allocation (run the job with sbatch)")
    assert outcome("ddp_mpiexec", context) == (SKIP, "no mpiexec on PATH")
    context.launchers = ("srun",)
    assert outcome("ddp_mpiexec", context) == (SKIP, "mpiexec not requested (--launchers)")


def test_profiler(context, monkeypatch) -> None:
    assert outcome("profiler_xpu", context)[0] == PASS
    monkeypatch.setattr(torch.profiler, "supported_activities", lambda: {torch.profiler.ProfilerActivity.CPU})
    status, reason = outcome("profiler_xpu", context)
    assert status == FAIL and "cannot profile XPU" in reason


def test_memory_stats(context, monkeypatch) -> None:
    assert outcome("memory_stats", context) == (PASS, "2 counters, 1024 bytes allocated")
    # A deliberately broken allocator, not a torch behaviour (real releases report allocated_bytes.all.current,
    # torch/xpu/memory.py): the check must fail on it.
    monkeypatch.setattr(torch.xpu, "memory_stats", lambda device=None: {})
    status, reason = outcome("memory_stats", context)
    assert status == FAIL and "lacks allocated_bytes.all.current" in reason


def test_oom_detection(context, monkeypatch) -> None:
    def raises(error: BaseException | None) -> Any:
        def allocate(ctx: Context) -> None:
            if error is not None:
                raise error

        return allocate

    monkeypatch.setattr(checks, "allocate_beyond_memory", raises(torch.OutOfMemoryError(
        "XPU out of memory. Tried to allocate 96.00 GiB (GPU 0; 64.00 GiB total capacity)")))
    assert outcome("oom_detection", context)[0] == PASS
    monkeypatch.setattr(checks, "allocate_beyond_memory", raises(RuntimeError("level_zero backend failed: 1")))
    assert outcome("oom_detection", context) == (
        FAIL, "not recognised as out of memory: RuntimeError: level_zero backend failed: 1")
    monkeypatch.setattr(checks, "allocate_beyond_memory", raises(None))
    assert outcome("oom_detection", context) == (FAIL, "allocating 1.5x the device memory did not fail")


def test_rng_round_trip(context, monkeypatch) -> None:
    assert outcome("rng_round_trip", context) == (PASS, "2 XPU generator state(s) saved and restored")
    monkeypatch.setattr("lightning_xpu.rng.xpu_available", lambda: False)  # as without the RNG patch
    status, reason = outcome("rng_round_trip", context)
    assert status == FAIL and reason.startswith("no XPU RNG state in Lightning's RNG snapshot")


def test_fork_refusal(context, monkeypatch) -> None:
    monkeypatch.delenv("MASTER_PORT", raising=False)
    status, reason = outcome("fork_refusal", context)
    assert status == PASS and reason.startswith("refused before forking")
    import os

    assert "MASTER_PORT" not in os.environ
    context.devices = 1  # a partial node: one tile is enough to show the refusal
    assert outcome("fork_refusal", context)[0] == PASS
    monkeypatch.setattr(torch.xpu, "is_initialized", lambda: False)  # as if the guard did not see the XPU runtime
    assert outcome("fork_refusal", context) == (
        FAIL, "ddp_fork would fork although XPU is initialised (children would fail)")


def test_throughput_mfu(simulated_xpu, tmp_path) -> None:
    simulated_xpu(devices=1)
    status, reason = outcome("throughput_mfu", Context("cpu", 1, tmp_path))
    assert status == PASS and reason.startswith("peak ")
    simulated_xpu(devices=1, name="Intel(R) Graphics [0x0bd5] unknown")
    status, reason = outcome("throughput_mfu", Context("cpu", 1, tmp_path))
    assert status == FAIL and "no peak FLOP/s known for 'Intel(R) Graphics [0x0bd5] unknown'" in reason


def test_torch_compile(context, monkeypatch) -> None:
    monkeypatch.setattr(torch, "compile", lambda model: model)  # the real one needs a C++ toolchain: too slow here
    assert outcome("torch_compile", context) == (PASS, "compiled and eager outputs agree")
    monkeypatch.setattr(torch, "compile", lambda model: lambda x: model(x) + 1)
    assert outcome("torch_compile", context) == (FAIL, "compiled output differs from eager by 1")
    def no_backend(model: Any) -> Any:
        raise RuntimeError("no XPU inductor backend")

    monkeypatch.setattr(torch, "compile", no_backend)
    assert outcome("torch_compile", context) == (FAIL, "RuntimeError: no XPU inductor backend")


@pytest.mark.parametrize(("name", "options"), [("checkpoint_ddp", ["ddp"]),
                                               ("checkpoint_fsdp_sharded", ["fsdp", "--state-dict-type", "sharded"]),
                                               ("checkpoint_fsdp_full", ["fsdp", "--state-dict-type", "full"])])
def test_checkpoint_round_trip(context, monkeypatch, name, options) -> None:
    saved = rank_reports(2, final_step=4)
    calls = canned_worker(monkeypatch, saved, rank_reports(2, start_step=4, final_step=8),
                          saved, rank_reports(2, start_step=0, final_step=8))
    status, reason = outcome(name, context)
    assert (status, reason) == (PASS, "saved at step 4, resumed there on 2 ranks, trained to 8")
    assert options[0] in calls[0] and "--ckpt-out" in calls[0] and "--ckpt-in" in calls[1]
    assert all(option in calls[1] for option in options)
    status, reason = outcome(name, context)
    assert status == FAIL and "rank 0 resumed at step 0, the checkpoint was saved at step [4]" in reason


def test_patches(context, monkeypatch) -> None:
    row = SimpleNamespace
    monkeypatch.setattr(checks, "patch_rows", lambda: None)
    assert outcome("patches", context) == (SKIP, "lightning_xpu.versions.patch_status is not in this build")
    rows = [row(name="a", owner="X", expected=True, applied=True, detail=""),
            row(name="b", owner="Y", expected=True, applied=False, detail="target missing")]
    monkeypatch.setattr(checks, "patch_rows", lambda: rows)
    assert outcome("patches", context) == (FAIL, "expected patches that did not apply: Y.b")
    monkeypatch.setattr(checks, "patch_rows", lambda: rows[:1])
    assert outcome("patches", context) == (PASS, "1 patches applied, all that the manifest expects")


def test_runtime(context, monkeypatch) -> None:
    assert outcome("runtime", context)[0] == PASS
    # As with LIGHTNING_XPU_DISABLE=1: registries without "xpu" (a stand-in namespace; Lightning 2.2's registry
    # `get` instantiates, so monkeypatch.delitem could not restore the real one).
    registries = SimpleNamespace(AcceleratorRegistry={"cpu": {}}, ACCELERATOR_REGISTRY={"cpu": {}})
    stand_in = SimpleNamespace(fabric="lightning.fabric", pytorch_module=lambda name: registries,
                               fabric_module=lambda name: registries)
    monkeypatch.setattr(checks, "_namespace", lambda: stand_in)
    assert outcome("runtime", context) == (
        FAIL, "'xpu' is not a registered accelerator of Trainer, Fabric (LIGHTNING_XPU_DISABLE set, or lightning_xpu"
        " not imported)")


def test_the_xpu_guide_documents_every_check() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "xpu-guide.md").read_text()
    section = guide.split("## Site validation job", 1)[1].split("\n## ", 1)[0]
    assert [spec.name for spec in checks_of("site") if f"`{spec.name}`" not in section] == []


def test_a_local_launch_drops_the_jobs_launch_variables_but_keeps_where_slurm_is_configured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks' local launches must not look launched by the job around them, yet srun and sbatch inside them
    still need the site's SLURM_CONF (a site that keeps slurm.conf elsewhere sets it for every job)."""
    for name, value in {"SLURM_CONF": "/site/slurm.conf", "SLURM_PROCID": "1", "PMI_RANK": "1", "RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    env = local_env()
    assert env["SLURM_CONF"] == "/site/slurm.conf"
    assert not {"SLURM_PROCID", "PMI_RANK", "RANK"} & set(env)
