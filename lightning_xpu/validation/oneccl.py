"""The oneCCL launch variables a validation report records for each rank of a check.

oneCCL takes a rank's place on its node from the launcher (oneCCL `src/common/global/global.cpp`, with
`CCL_PROCESS_LAUNCHER` choosing whose variables): Intel MPI/MPICH Hydra's `MPI_LOCALRANKID`/`MPI_LOCALNRANKS` and
PMI's `PMI_RANK`/`PMI_SIZE`, PALS' `PALS_RANKID`/`PALS_LOCAL_RANKID`/`PALS_LOCAL_SIZE` (and `PMIX_RANK` under
`--pmi=pmix`), torchrun's `LOCAL_RANK`/`LOCAL_WORLD_SIZE`, and its own `CCL_LOCAL_RANK`/`CCL_LOCAL_SIZE` with
`CCL_PROCESS_LAUNCHER=none`; every other `CCL_*` variable (`CCL_ATL_TRANSPORT`, `CCL_KVS_MODE`, ...) changes how it
starts. Without a local rank it prints "could not get local_idx/count from environment variables" and falls back,
so a report that shows what each rank saw tells a site why a collective hung (issue 18).

The ranks capture them themselves, after the process group was created (what lightning_xpu's runtime set for
oneCCL included): `lightning_xpu/validation/worker.py` and `scripts/common/toy_fit.py` write them into their rank
reports as `launch_environment`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

ONECCL_PREFIX = "CCL_"
ONECCL_LAUNCH_NAMES = ("MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PALS_RANKID",
                       "PALS_LOCAL_RANKID", "PALS_LOCAL_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def oneccl_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The oneCCL launch variables set in `environ` (this process's environment by default), sorted by name."""
    environ = os.environ if environ is None else environ
    return {name: str(value) for name, value in sorted(environ.items())
            if name.startswith(ONECCL_PREFIX) or name in ONECCL_LAUNCH_NAMES}
