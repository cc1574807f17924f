"""On a real CUDA machine, the patches of lightning_xpu's "rest" modules leave Lightning's CUDA defaults unchanged.

Profiler activities, available FLOPs, ThroughputMonitor synchronisation, RNG states, OOM detection, cache emptying,
DDP communication hooks and the Fabric CLI process count: each is compared with unpatched Lightning (`original_of`)
on a CUDA device, and no XPU call may happen. Needs an NVIDIA GPU (marker `cuda`); runs in whichever Lightning
namespaces are installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from lightning_grid import TRAINER_NAMESPACES, trainer_on
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import Namespace
from lightning_xpu._patching import original_of
from tests.conftest import require_service

pytestmark = pytest.mark.cuda

CUDA0 = "cuda:0"


@pytest.fixture(autouse=True)
def cuda_only_and_no_xpu_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    require_service("CUDA", torch.cuda.is_available(), "no NVIDIA GPU visible to torch")
    for name in ("synchronize", "empty_cache", "get_rng_state_all", "set_rng_state_all", "get_device_properties"):
        monkeypatch.setattr(torch.xpu, name, lambda *args, _name=name: pytest.fail(f"torch.xpu.{_name} on CUDA"))


@TRAINER_NAMESPACES
def test_profiler_default_activities(namespace: Namespace) -> None:
    cls = namespace.pytorch_module("profilers").PyTorchProfiler
    profiler = cls()
    activities = profiler._profiler_kwargs["activities"]
    assert activities == original_of(cls, "_default_activities")(profiler)
    assert ProfilerActivity.CUDA in activities and ProfilerActivity.XPU not in activities


@TRAINER_NAMESPACES
def test_available_flops(namespace: Namespace) -> None:
    for module in (namespace.fabric_module("utilities.throughput"),
                   namespace.pytorch_module("callbacks.throughput_monitor")):
        for dtype in (torch.float32, torch.bfloat16):
            device = torch.device(CUDA0)
            assert module.get_available_flops(device, dtype) == original_of(module, "get_available_flops")(
                device, dtype
            )


@TRAINER_NAMESPACES
def test_throughput_monitor_synchronises_cuda_only(namespace: Namespace, monkeypatch) -> None:
    synchronized: list[object] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: synchronized.append(args))
    trainer = trainer_on(namespace, CUDA0)
    states = namespace.pytorch_module("trainer.states")
    trainer.state.fn, trainer.state.stage = states.TrainerFn.FITTING, states.RunningStage.TRAINING
    monitor = namespace.pytorch_module("callbacks").ThroughputMonitor(batch_size_fn=len)
    monitor.setup(trainer, None, "fit")
    monitor._start(trainer)
    monitor._update(trainer, None, torch.zeros(4), 1)
    assert len(synchronized) == 1


@TRAINER_NAMESPACES
def test_rng_states(namespace: Namespace) -> None:
    module = namespace.fabric_module("utilities.seed")
    patched, unpatched = module._collect_rng_states(), original_of(module, "_collect_rng_states")()
    assert patched.keys() == unpatched.keys() and "torch.cuda" in patched and "torch.xpu" not in patched
    assert all(torch.equal(a, b) for a, b in zip(patched["torch.cuda"], unpatched["torch.cuda"]))
    module._set_rng_states(patched)


@TRAINER_NAMESPACES
def test_real_cuda_oom_is_still_recognised(namespace: Namespace) -> None:
    module = namespace.pytorch_module("utilities.memory")
    try:
        torch.empty(2**62, dtype=torch.uint8, device=CUDA0)
    except RuntimeError as error:
        assert module.is_oom_error(error) is original_of(module, "is_oom_error")(error) is True
    else:
        pytest.fail("allocating 4 EiB on the GPU did not fail")


@TRAINER_NAMESPACES
def test_cache_is_emptied_for_cuda_only(namespace: Namespace, monkeypatch, tmp_path) -> None:
    emptied: list[str] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append("cuda"))
    trainer = trainer_on(namespace, CUDA0)
    path = tmp_path / "state.ckpt"
    torch.save({"value": torch.ones(1)}, path)
    trainer.strategy.load_checkpoint(str(path))
    trainer.state.fn = namespace.pytorch_module("trainer.states").TrainerFn.FITTING
    trainer._checkpoint_connector.resume_end()
    namespace.pytorch_module("tuner.batch_size_scaling").garbage_collection_cuda()
    assert emptied == ["cuda", "cuda", "cuda"]


@pytest.fixture
def nccl_group() -> Iterator[None]:
    require_service("NCCL", dist.is_nccl_available(), "this torch has no NCCL")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@TRAINER_NAMESPACES
def test_ddp_comm_hook_on_cuda(namespace: Namespace, nccl_group) -> None:
    calls: list[int] = []

    def hook(state, bucket):  # unannotated: DDP checks annotations against its classes
        calls.append(1)
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    strategy = namespace.pytorch_module("strategies").DDPStrategy(
        parallel_devices=[torch.device(CUDA0)], ddp_comm_hook=hook
    )
    strategy.model = DistributedDataParallel(torch.nn.Linear(2, 1).to(CUDA0), device_ids=[0])
    strategy._register_ddp_hooks()
    strategy.model(torch.ones(3, 2, device=CUDA0)).sum().backward()
    torch.cuda.synchronize()
    assert calls == [1]


@TRAINER_NAMESPACES
def test_fabric_cli_counts_cuda_devices(namespace: Namespace) -> None:
    if importlib.util.find_spec("click") is None:
        pytest.skip("click is not installed: Lightning's Fabric CLI needs it")
    cli = namespace.fabric_module("cli")
    for accelerator in ("cuda", "gpu", "auto"):
        assert cli._get_num_processes(accelerator, "1") == original_of(cli, "_get_num_processes")(accelerator, "1")
