"""Every class lightning_xpu builds per Lightning package is built one way (`_namespaced_classes`) and survives
pickling (the ddp_spawn launcher pickles the Trainer with its accelerator, plugins, callbacks and environment)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from lightning_xpu._namespaces import LIGHTNING, STANDALONE, Namespace
from lightning_xpu.accelerator import accelerator_class
from lightning_xpu.environments.cluster import environment_class
from lightning_xpu.environments.launch import HYDRA, OPENMPI, PALS
from lightning_xpu.ipex import ipex_callback_class
from lightning_xpu.precision import fsdp_precision_class, mixed_precision_class

NAMESPACES = pytest.mark.parametrize("namespace", [LIGHTNING, STANDALONE], ids=lambda ns: str(ns.pytorch))


def _instances(namespace: Namespace) -> list[Any]:
    assert namespace.pytorch is not None
    return [
        accelerator_class(namespace)(),
        mixed_precision_class(namespace.pytorch)("bf16-mixed", "xpu"),
        mixed_precision_class(namespace.fabric)("bf16-mixed", "xpu"),
        fsdp_precision_class(namespace.pytorch)("bf16-true"),
        ipex_callback_class(namespace)(level="O1"),
        *(environment_class(namespace, launcher)() for launcher in (HYDRA, PALS, OPENMPI)),
    ]


@NAMESPACES
def test_namespaced_instances_round_trip_through_pickle(namespace: Namespace) -> None:
    for instance in _instances(namespace):
        copy = pickle.loads(pickle.dumps(instance))
        assert type(copy) is type(instance)
        assert type(instance)._lightning_package in (namespace.pytorch, namespace.fabric)
        assert vars(copy) == vars(instance)


@NAMESPACES
def test_a_pickled_environment_reads_the_environment_of_its_process(namespace: Namespace) -> None:
    import os

    environment = environment_class(namespace, HYDRA)()
    assert pickle.loads(pickle.dumps(environment)).environ is os.environ
    fixed = environment_class(namespace, HYDRA)({"PMI_RANK": "1"})
    assert pickle.loads(pickle.dumps(fixed)).environ == {"PMI_RANK": "1"}
