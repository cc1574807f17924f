"""TEST-ONLY rank bootstrap of the XPU simulation (never installed, never used outside tests).

Ranks started by mpiexec, srun or Lightning's own launchers cannot inherit the `simulated_xpu` pytest fixture. A
test that launches them puts this directory first on PYTHONPATH and sets `LXPU_SIM_PROFILE=<torch>[,pyzes][,ipex]
[,no-pti]` (optionally `LXPU_SIM_DEVICES=N`, `LXPU_SIM_ONECCL=1`); see `tests.xpu_simulation.bootstrap_env`. Python
imports `sitecustomize` at start-up, and this one applies the same profile (tests/xpu_profiles.py) to the rank
before any user code runs. Without `LXPU_SIM_PROFILE` it does nothing.
"""

import os

if os.environ.get("LXPU_SIM_PROFILE"):  # bootstrap_env puts the repository on PYTHONPATH beside this directory
    from tests.xpu_simulation import bootstrap_from_environment

    bootstrap_from_environment()
