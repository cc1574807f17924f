"""The report: checks (name, status, reason) plus every version involved, written as JSON and Markdown.

Collecting versions reads package metadata and `torch.version`; it never counts XPU devices (counting poisons
fork on PyTorch 2.5-2.12): device facts enter a report only where the caller asked for XPU and passes them in.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, SKIP = "pass", "fail", "skip"
STATUSES = (PASS, FAIL, SKIP)
SCHEMA_VERSION = 1

# Distributions whose versions a report names (None when not installed). Lightning comes in two namespaces. A tuple:
# the same package under the names it had, the first installed one counts. Triton for XPU is `triton-xpu` from
# PyTorch 2.10/2.11 on (intel/torch-xpu-ops#2814; `.github/workflows/_linux_build.yml`@release/2.11..release/2.14
# install `triton-xpu==`), `pytorch-triton-xpu` before.
DISTRIBUTIONS: dict[str, str | tuple[str, ...]] = {
    "lightning": "lightning",
    "pytorch_lightning": "pytorch-lightning",
    "lightning_fabric": "lightning-fabric",
    "lightning_utilities": "lightning-utilities",
    "intel_extension_for_pytorch": "intel-extension-for-pytorch",
    "oneccl_bindings_for_pytorch": "oneccl-bind-pt",
    "triton_xpu": ("triton-xpu", "pytorch-triton-xpu"),
    "numpy": "numpy",
}
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
    oneccl: list[dict[str, Any]] | None = None  # per rank {"rank", "host", "variables"}: report/oneccl.py

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status must be one of {', '.join(STATUSES)}, got {self.status!r}")


@dataclass
class Report:
    kind: str  # "validation" or "doctor"
    versions: dict[str, str | None]
    level: str | None = None  # a validation's level: "smoke" or "site" (lightning_xpu/report/framework.py)
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
        from lightning_xpu.report.markdown import render
        from lightning_xpu.report.schema import check_report

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


def distribution_version(names: str | tuple[str, ...]) -> str | None:
    """The version of the first of `names` installed, None when none is."""
    for name in (names,) if isinstance(names, str) else names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def install_manifest() -> dict[str, Any]:
    """The install job's manifest.json of the environment this Python runs in ({} outside our installs)."""
    for root in (os.environ.get("LIGHTNING_XPU_ROOT"), sys.prefix):
        if root:
            try:
                return dict(json.loads((Path(root) / "manifest.json").read_text()))
            except (OSError, ValueError):
                continue
    return {}


# A pinned build is <prefix>/.envs/<tag>.<build-id>, the build id being <YYYYmmddTHHMMSS>-<pid> (install engine).
_BUILD_ID = re.compile(r"\.\d{8}T\d{6}-\d+$")


def environment_tag() -> str | None:
    """The tag (`2.13`, `2.13-cpu`) of the lightning-xpu environment this process runs in, None outside one: the
    install manifest's, else the name of `LIGHTNING_XPU_ROOT` (`<prefix>/<tag>`, or the build the module pinned)."""
    tag = install_manifest().get("tag")
    if tag:
        return str(tag)
    root = os.environ.get("LIGHTNING_XPU_ROOT", "").rstrip("/")
    return (_BUILD_ID.sub("", Path(root).name) or None) if root else None


def variant_of(tag: str) -> str:
    """`<ver>` is the xpu variant, `<ver>-<variant>` any other (lib/lxpu_admin/render/matrix.py `tag_of`)."""
    return tag.partition("-")[2] or "xpu"


def environment_variant() -> tuple[str | None, str]:
    """(variant, where it came from): `LIGHTNING_XPU_VARIANT`, else the install manifest, else the tag of
    `LIGHTNING_XPU_ROOT` (`<prefix>/2.13-cpu` -> cpu, `<prefix>/2.13` -> xpu), else (None, "not in an install")."""
    variant = os.environ.get("LIGHTNING_XPU_VARIANT")
    if variant:
        return variant, "LIGHTNING_XPU_VARIANT"
    recipe = install_manifest().get("recipe") or {}
    if recipe.get("variant"):
        return str(recipe["variant"]), "the install manifest"
    tag = environment_tag()
    if tag:
        return variant_of(tag), f"LIGHTNING_XPU_ROOT ({tag})"
    return None, "not in a lightning-xpu install (no module or setup script loaded)"


def is_xpu_build() -> bool:
    """Whether the installed torch was compiled with XPU (imports torch, counts nothing). `torch.version.xpu` says
    so from 2.6 on; 2.5.1 has no such attribute (added by pytorch/pytorch#139466), so there the compiled-in flag
    answers (`torch.xpu._is_compiled()`, torch/xpu/__init__.py@v2.5.1)."""
    import torch

    if hasattr(torch.version, "xpu"):
        return bool(torch.version.xpu)
    is_compiled = getattr(torch.xpu, "_is_compiled", None)
    return bool(is_compiled is not None and is_compiled())


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
    import lightning_xpu

    variant, variant_source = environment_variant()
    manifest = install_manifest()
    recipe = manifest.get("recipe") or {}
    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "lightning_xpu": lightning_xpu.__version__,
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
