"""XPU generator states are saved and restored where Lightning does it for CUDA (simulated XPU, tests/conftest.py).

The simulation gives each device a CPU generator standing in for its XPU generator, so drawing from it consumes
"XPU" randomness the way a kernel would.
"""

from __future__ import annotations

import pytest
import torch
from lightning_grid import FABRIC_NAMESPACE_LIST, TRAINER_NAMESPACE_LIST, TRAINER_NAMESPACES

import lightning_xpu  # noqa: F401  (applies the patches)
from lightning_xpu._namespaces import LIGHTNING, Namespace
from lightning_xpu._patching import original_of
from lightning_xpu.rng import XPU_KEY


def draw(sim) -> list[float]:
    """Consume randomness from every simulated XPU generator."""
    return [torch.rand(1, generator=generator).item() for generator in sim.generators]


def seed_modules() -> list[object]:
    """Every module holding `_collect_rng_states`/`_set_rng_states`, in both namespaces."""
    return [
        *(ns.fabric_module(name) for ns in FABRIC_NAMESPACE_LIST
          for name in ("utilities.seed", "strategies.launchers.multiprocessing")),
        *(ns.pytorch_module(name) for ns in TRAINER_NAMESPACE_LIST
          for name in ("utilities.seed", "strategies.launchers.multiprocessing")),
    ]


@pytest.mark.parametrize("module", seed_modules(), ids=lambda module: module.__name__)
def test_unpatched_lightning_loses_the_xpu_rng_state(simulated_xpu, module) -> None:
    """Simulated XPU: Lightning alone neither saves nor restores the XPU generators."""
    sim = simulated_xpu()
    states = original_of(module, "_collect_rng_states")()
    assert XPU_KEY not in states
    first = draw(sim)
    original_of(module, "_set_rng_states")(states)
    assert draw(sim) != first


@pytest.mark.parametrize("module", seed_modules(), ids=lambda module: module.__name__)
def test_xpu_rng_state_is_saved_and_restored(simulated_xpu, module) -> None:
    """Simulated XPU: the patched pair round-trips every device's generator."""
    sim = simulated_xpu(devices=3)
    states = module._collect_rng_states()
    first = draw(sim)
    module._set_rng_states(states)
    assert draw(sim) == first


@TRAINER_NAMESPACES
def test_isolate_rng_isolates_the_xpu_generators(simulated_xpu, namespace: Namespace) -> None:
    """Simulated XPU: randomness consumed inside `isolate_rng` (sanity check, LR finder) is given back."""
    sim = simulated_xpu()
    with namespace.pytorch_module("utilities.seed").isolate_rng():
        inside = draw(sim)
    assert draw(sim) == inside


def test_isolate_rng_leaves_xpu_alone_when_devices_are_excluded(simulated_xpu) -> None:
    """Simulated XPU: `include_cuda=False` (forked processes, no device re-initialisation) covers XPU too."""
    simulated_xpu()
    assert XPU_KEY not in LIGHTNING.fabric_module("utilities.seed")._collect_rng_states(include_cuda=False)


@pytest.mark.parametrize(
    "launcher", ["lightning.fabric", "lightning_fabric", "lightning.pytorch", "pytorch_lightning"]
)
def test_spawn_snapshot_hands_the_xpu_state_to_workers(simulated_xpu, launcher: str) -> None:
    """Simulated XPU: the spawn launchers' snapshot restores the parent's XPU generators in the worker."""
    sim = simulated_xpu()
    module = __import__(f"{launcher}.strategies.launchers.multiprocessing", fromlist=["_GlobalStateSnapshot"])
    snapshot = module._GlobalStateSnapshot.capture()
    expected = draw(sim)
    snapshot.restore()
    assert draw(sim) == expected


@pytest.mark.parametrize("module", seed_modules(), ids=lambda module: module.__name__)
def test_cpu_rng_states_are_unchanged(module) -> None:
    patched, unpatched = module._collect_rng_states(), original_of(module, "_collect_rng_states")()
    assert patched.keys() == unpatched.keys()
    assert torch.equal(patched["torch"], unpatched["torch"])
    module._set_rng_states(patched)  # restores without touching any XPU
    assert torch.equal(torch.get_rng_state(), unpatched["torch"])
