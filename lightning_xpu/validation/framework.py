"""The one check framework of `lightning-xpu validate`: checks registered per level, run in order, reported as
`Check`s (lightning_xpu/validation/model.py, schema.json).

Levels:
- `smoke`: the install's smoke job (`lightning-xpu validate --level smoke`, run by the install engine inside the
  new environment before it is published): imports, devices, the autoload hook, the patches, `pip check`,
  backends, a 2-rank all-reduce and two Lightning toy fits (lightning_xpu/validation/smoke.py);
- `site`: the site validation job (lightning_xpu/validation/checks.py), the XPU-only paths CI only simulates.

A check is a function of a `Context`. It returns a one-line reason (or an `Outcome` with structured detail) when it
passes, raises `CheckFailed(reason)` when it fails and `CheckSkipped(reason)` when it does not apply here. A check
marked `needs_xpu` is skipped with "no Intel GPU" where XPU cannot be used. Every check whose ranks created a process
group records the oneCCL launch variables each rank saw (`oneccl`, lightning_xpu/validation/oneccl.py).

Schedule: checks run one after another, in their registered order, except where the check marked `gate` (the smoke
level's device report) found no accelerator: then the checks marked `parallel_on_cpu` start at once, right after
it (they only wait on the processes they start; on a device they would share it, and a failure should have one
cause). Results are reported in the registered order either way.

Test-only: LIGHTNING_XPU_SMOKE_INJECT_FAILURE=<check>[,<check>...] makes those checks fail on purpose.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from lightning_xpu.validation.model import FAIL, PASS, SKIP, Check
from lightning_xpu.validation.oneccl import oneccl_variables

NO_XPU = "no Intel GPU"
INJECT_VARIABLE = "LIGHTNING_XPU_SMOKE_INJECT_FAILURE"
# Each level and the modules that register its checks, in the order they run (imported when the level is asked for;
# the communication check comes after the site's other checks and builds on them, so it is a module of its own).
LEVEL_MODULES = {
    "smoke": ("lightning_xpu.validation.smoke",),
    "site": ("lightning_xpu.validation.checks", "lightning_xpu.validation.comms"),
}
LEVELS = tuple(LEVEL_MODULES)
# Launcher variables a local launch must not inherit from the batch script (else Lightning takes it for srun, and
# the smoke job would test the job's task layout instead of the environment).
LAUNCHER_PREFIXES = ("SLURM_", "PMI_", "PMIX_", "PALS_", "OMPI_", "HYDRA_", "TORCHELASTIC_", "PBS_")
LAUNCHER_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                  "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE")
# Under a launcher's prefix but no launch: where Slurm's commands find the cluster (slurm.conf(5), "SLURM_CONF: the
# location of the Slurm configuration file"). Dropped, srun and sbatch find no cluster where a site sets it.
SCHEDULER_CONFIGURATION = ("SLURM_CONF",)


def is_launcher_variable(name: str) -> bool:
    """Whether NAME is a variable by which a launcher tells a process it was launched."""
    return (name.startswith(LAUNCHER_PREFIXES) and name not in SCHEDULER_CONFIGURATION) or name in LAUNCHER_NAMES


class CheckFailed(Exception):
    """The check ran and found a problem; the message is the reason (`detail`: the facts it still measured)."""

    def __init__(self, reason: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.detail = detail


class CheckSkipped(Exception):
    """The check does not apply here; the message is the reason."""


@dataclass
class Outcome:
    """A passed check's one-line reason and its structured facts (kept in the report's `detail`)."""

    reason: str
    detail: dict[str, Any] | None = None


@dataclass
class Context:
    accelerator: str  # "xpu" at a site; "cpu" in the unit tests (tensor work only; XPU queries are simulated)
    devices: int  # local devices (tiles) to use
    workdir: Path  # scratch space for the launched processes (never the environment, never the working directory)
    xpu: bool = True  # whether an Intel GPU is usable here
    unusable: str = ""  # why not, when xpu is False
    nodes: int = 1
    launchers: tuple[str, ...] = ("srun", "mpiexec")
    python: str = sys.executable
    require_xpu: bool = False  # smoke level: fail unless the fits ran on an XPU device (the xpu variant)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> Any:
        import torch

        return torch.device(self.accelerator, 0) if self.accelerator != "cpu" else torch.device("cpu")

    @classmethod
    def detect(cls, workdir: Path, nodes: int = 1) -> Context:
        """The context of this process. Asks torch for XPU devices: call only where XPU was asked for."""
        from lightning_xpu.diagnosis import unusable_reason

        reason = unusable_reason()
        if reason is not None:
            return cls("xpu", 0, workdir, xpu=False, unusable=reason, nodes=nodes)
        import torch

        return cls("xpu", int(torch.xpu.device_count()), workdir, nodes=nodes)


CheckFunction = Callable[[Context], Union[str, Outcome]]


@dataclass(frozen=True)
class ValidationCheck:
    name: str
    run: CheckFunction
    needs_xpu: bool
    summary: str
    level: str = "site"
    gate: bool = False  # its detail's xpu_count/cuda_count decide the schedule (see the module's docstring)
    parallel_on_cpu: bool = False


REGISTRY: dict[str, list[ValidationCheck]] = {level: [] for level in LEVELS}


def check(name: str, needs_xpu: bool = True, level: str = "site", gate: bool = False,
          parallel_on_cpu: bool = False) -> Callable[[CheckFunction], CheckFunction]:
    def register(function: CheckFunction) -> CheckFunction:
        summary = (function.__doc__ or name).strip().splitlines()[0]
        REGISTRY[level].append(ValidationCheck(name, function, needs_xpu, summary, level, gate, parallel_on_cpu))
        return function

    return register


def checks_of(level: str) -> list[ValidationCheck]:
    """The registered checks of a level, in the order they run (importing the module that defines them)."""
    if level not in REGISTRY:
        raise ValueError(f"unknown level {level!r}; known: {', '.join(LEVELS)}")
    for module in LEVEL_MODULES[level]:
        __import__(module)
    return REGISTRY[level]


# The ranks the running check's launched processes reported (one list per thread: checks may run at once).
_ranks_seen = threading.local()


def record_ranks(reports: list[dict[str, Any]]) -> None:
    """Keep, for the running check, the oneCCL launch variables each rank saw at process-group creation (a rank
    report's `launch_environment`, captured inside the rank after init)."""
    seen = getattr(_ranks_seen, "ranks", None)
    if seen is None:
        return
    for report in sorted(reports, key=lambda r: int(r.get("global_rank", 0))):
        if "launch_environment" in report:
            entry = {"rank": int(report.get("global_rank", 0)),
                     "variables": oneccl_variables(report["launch_environment"])}
            host = report.get("host") or report.get("hostname")
            if host:
                entry["host"] = str(host)
            seen.append(entry)


def run_check(spec: ValidationCheck, context: Context, injected: frozenset[str] = frozenset()) -> Check:
    start = time.perf_counter()
    if spec.needs_xpu and not context.xpu:
        return Check(spec.name, SKIP, NO_XPU)  # the cause is in the report once, in its notes
    _ranks_seen.ranks = []
    detail = None
    try:
        if spec.name in injected:
            raise CheckFailed(f"failure injected by {INJECT_VARIABLE} (test only)")
        result = spec.run(context)
        status, reason = PASS, result.reason if isinstance(result, Outcome) else result
        detail = result.detail if isinstance(result, Outcome) else None
    except CheckSkipped as skipped:
        status, reason = SKIP, str(skipped)
    except CheckFailed as failed:
        status, reason, detail = FAIL, str(failed), failed.detail
    except Exception as error:  # a crash is a failed check, never a crashed job
        status, reason = FAIL, f"{type(error).__name__}: {error}"
    finally:
        oneccl = _ranks_seen.ranks or None
        _ranks_seen.ranks = None
    return Check(spec.name, status, reason or "passed", round(time.perf_counter() - start, 3), detail, oneccl)


def injected_failures() -> frozenset[str]:
    return frozenset(name for name in os.environ.get(INJECT_VARIABLE, "").split(",") if name)


def cpu_only(result: Check, context: Context) -> bool:
    """From the gate check's result: it passed and found neither XPU nor CUDA devices (and none is required)."""
    detail = result.detail or {}
    return (result.status == PASS and not context.require_xpu
            and detail.get("xpu_count") == detail.get("cuda_count") == 0)


def run_checks(context: Context, only: list[str] | None = None, progress: Callable[[Check], None] | None = None,
               level: str = "site") -> list[Check]:
    """Every check of the level (or those in `only`), reported in the registered order."""
    specs = checks_of(level)
    unknown = sorted(set(only or ()) - {spec.name for spec in specs})
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(s.name for s in specs)}")
    chosen = [spec for spec in specs if not only or spec.name in only]
    parallel = [spec for spec in chosen if spec.parallel_on_cpu]
    injected = injected_failures()
    results: list[Check] = []
    started: dict[str, Future[Check]] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(parallel))) as pool:
        for spec in chosen:
            result = started[spec.name].result() if spec.name in started else run_check(spec, context, injected)
            results.append(result)
            if progress is not None:
                progress(result)
            if spec.gate and cpu_only(result, context):
                started = {each.name: pool.submit(run_check, each, context, injected) for each in parallel}
    return results


# ---- helpers shared by the levels -------------------------------------------------------------------------------


def local_env(**extra: str) -> dict[str, str]:
    """This process's environment without the launcher variables of the job it runs in, for a local launch."""
    env = {name: value for name, value in os.environ.items() if not is_launcher_variable(name)}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def tail(text: str, lines: int = 6, separator: str = " | ") -> str:
    return separator.join(text.strip().splitlines()[-lines:])
