"""The report: checks (name, status, reason) plus every version involved, written as JSON and Markdown.

Collecting versions reads package metadata and `torch.version`; it never counts XPU devices (counting poisons
fork on PyTorch 2.5-2.12): device facts enter a report only where the caller asked for XPU and passes them in.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning_xpu.install_facts import (
    DISTRIBUTIONS,
    distribution_version,
    environment_variant,
    install_manifest,
    is_xpu_build,
)

PASS, FAIL, SKIP = "pass", "fail", "skip"
STATUSES = (PASS, FAIL, SKIP)
SCHEMA_VERSION = 1

# Environment variables a report records (values as set; unset ones are left out).
ENV_PREFIXES = ("ZE_", "ONEAPI_", "SYCL_", "CCL_", "FI_", "I_MPI_", "LIGHTNING_XPU_", "UR_")
ENV_NAMES = ("OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "PBS_JOBID",
             "LMOD_FAMILY_LIGHTNING_XPU", "LOADEDMODULES")


@dataclass
class Check:
    name: str
    status: str
    reason: str
    seconds: float = 0.0
    detail: dict[str, Any] | None = None  # structured facts of a passed check (the smoke level's)
    oneccl: list[dict[str, Any]] | None = None  # per rank {"rank", "host", "variables"}: validation/oneccl.py

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status must be one of {', '.join(STATUSES)}, got {self.status!r}")


@dataclass
class Report:
    kind: str  # "validation" or "doctor"
    versions: dict[str, str | None]
    level: str | None = None  # a validation's level: "smoke" or "site" (lightning_xpu/validation/framework.py)
    checks: list[Check] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    host: str = field(default_factory=socket.gethostname)

    @property
    def ok(self) -> bool:
        return all(check.status != FAIL for check in self.checks)

    def summary(self) -> dict[str, int]:
        return {status: sum(check.status == status for check in self.checks) for status in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "kind": self.kind,
            "created": self.created,
            "host": self.host,
            "ok": self.ok,
            "summary": self.summary(),
            "versions": dict(self.versions),
            "devices": list(self.devices),
            "environment": dict(self.environment),
            "notes": list(self.notes),
            "checks": [{key: value for key, value in asdict(check).items() if value is not None}
                       for check in self.checks],
            **({"level": self.level} if self.level else {}),
        }

    def write(self, json_path: Path, markdown_path: Path | None = None) -> None:
        """Validate against the committed schema, then write (temporary file + rename: nothing half-written)."""
        from lightning_xpu.validation.markdown import render
        from lightning_xpu.validation.schema import check_report

        data = self.to_dict()
        check_report(data)
        _write_atomic(json_path, json.dumps(data, indent=2) + "\n")
        if markdown_path is not None:
            _write_atomic(markdown_path, render(data))


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def torch_build() -> dict[str, str | None]:
    """torch's version and build flavour, from `torch.version` (imports torch, counts nothing)."""
    import torch

    xpu = getattr(torch.version, "xpu", None)
    cuda = getattr(torch.version, "cuda", None)
    build = "xpu" if is_xpu_build() else ("cuda" if cuda else ("rocm" if getattr(torch.version, "hip", None) else
                                                                "cpu"))
    return {"torch": torch.__version__, "torch_build": build, "torch_xpu_runtime": xpu, "torch_cuda": cuda,
            "torch_git": getattr(torch.version, "git_version", None)}


def versions() -> dict[str, str | None]:
    """Every version involved: Python, platform, torch and its build, Lightning (both namespaces), lightning_xpu,
    IPEX and the oneCCL bindings where installed, the variant and the install's tag and site."""
    from lightning_xpu._version import __version__

    variant, variant_source = environment_variant()
    manifest = install_manifest()
    recipe = manifest.get("recipe") or {}
    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "lightning_xpu": __version__,
        "variant": variant,
        "variant_source": variant_source,
        "install_tag": manifest.get("tag"),
        "install_site": recipe.get("site"),
        "install_commit": (manifest.get("repository") or {}).get("commit"),
    }
    found.update(torch_build())
    found.update({key: distribution_version(dist) for key, dist in DISTRIBUTIONS.items()})
    return found


def relevant_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = dict(os.environ) if environ is None else environ
    return {name: value for name, value in sorted(environ.items())
            if name.startswith(ENV_PREFIXES) or name in ENV_NAMES}
