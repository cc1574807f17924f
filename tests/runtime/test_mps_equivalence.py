"""On a Mac, lightning_xpu leaves every MPS choice of Lightning's connectors as plain Lightning makes it (README:
"CPU, CUDA and MPS behave exactly as in plain Lightning").

The equivalence probe (`_equivalence_probe.py`, size `mps`) runs in two fresh processes, with and without
lightning_xpu (`LIGHTNING_XPU_DISABLE=1`), on a simulated Apple Silicon Mac (`tests.conftest.simulate_mps`: what a
real Mac's torch reports, where Lightning reads it), over every accelerator name that can mean MPS ("auto", "gpu",
"mps", and "cpu"), device counts, strategies and precisions; the accelerator, strategy, devices, precision and its
device, the warnings, the log lines and any error must be the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lightning_grid import newest_lightning_only
from test_equivalence import PROBE, _environment, assert_same_choices

RUNS = ("lightning:mps", "standalone:mps")
# Two fresh interpreters: once per CI run, on the newest Lightning, like the equivalence grid.
pytestmark = newest_lightning_only


def _probe(patched: bool, cwd: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(PROBE), *RUNS], env=_environment("none", patched), cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, f"probe patched={patched} failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict[str, Any]]:
    cwd = tmp_path_factory.mktemp("mps")
    return {patched: _probe(patched, cwd) for patched in (True, False)}


@pytest.mark.parametrize("run", RUNS)
def test_mps_choices_are_unpatched_lightnings(probes: dict[bool, dict[str, Any]], run: str) -> None:
    patched, unpatched = probes[True][run], probes[False][run]
    assert_same_choices(patched, unpatched)


@pytest.mark.parametrize("run", RUNS)
def test_the_simulated_mac_reaches_mps(probes: dict[bool, dict[str, Any]], run: str) -> None:
    """Guards the comparison above against a simulation Lightning does not believe: "auto", "gpu" and "mps" put
    plain Lightning on mps:0, and mixed precision autocasts on "mps"."""
    labelled = [(json.loads(label), result) for label, result in probes[False][run]["points"]]
    for name in ("auto", "gpu", "mps"):
        for api in ("trainer", "fabric"):
            wanted = {"api": api, "cuda_devices": 0, "accelerator": name, "devices": 1, "strategy": "auto"}
            choice = next(result["choice"] for label, result in labelled if label == wanted)
            assert choice["accelerator"] == "MPSAccelerator" and choice["root_device"] == "mps:0", (wanted, choice)
    mixed = [result["choice"]["precision"] for label, result in probes[False][run]["points"]
             if json.loads(label).get("precision") == "bf16-mixed" and "choice" in result]  # fmt: skip
    assert ["MixedPrecision", "bf16-mixed", "mps"] in mixed, mixed
