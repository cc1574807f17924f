"""Everything lightning_xpu knows about Lightning versions, in one place.

- The supported range (`SUPPORTED`, `REQUIREMENT`), the releases it refuses (`EXCLUDED`) and the versions CI tests
  (`TESTED_VERSIONS`). pyproject.toml, the README, recipes/matrix.toml and ci/venvs.sh are checked against these by
  tests/runtime/test_versions.py; the recipe renderer refuses a pin in `EXCLUDED`.
- The feature probes: what differs between Lightning minors that the patches must ask about (`FEATURES`).
- The patch manifest: for each Lightning minor, which Lightning targets (owner and attribute) lightning_xpu wraps
  (`MANIFEST`). `patch_status()` compares it with what `wrap` recorded in this process; `check_selected()` runs when
  an XPU accelerator is first created and warns about an expected patch that found no target.

Owners are named below the Lightning package, the same in both namespaces: `pytorch.X` is `lightning.pytorch.X`
and `pytorch_lightning.X`, `fabric.X` is `lightning.fabric.X` and `lightning_fabric.X`.

Importing this module imports neither torch nor Lightning, nor any other lightning_xpu module (the recipe renderer
loads it by path).
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from dataclasses import dataclass

# ---- the supported range ---------------------------------------------------------------------------------------

# The latest patch release of each supported minor: the CI unit stage runs once per version (ci/venvs.sh).
TESTED_VERSIONS: tuple[str, ...] = ("2.2.5", "2.3.3", "2.4.0", "2.5.6", "2.6.6")
LOWEST = "2.2"  # inclusive
BELOW = "2.7"  # exclusive
# Releases never to install. 2.6.2 and 2.6.3 (2026-04-30) were a supply-chain compromise carrying malware
# (advisory GHSA-w37p-236h-pfx3: https://github.com/Lightning-AI/pytorch-lightning/security/advisories/
# GHSA-w37p-236h-pfx3; confirmed by the maintainers in Lightning-AI/pytorch-lightning#21691).
ADVISORY = "GHSA-w37p-236h-pfx3"
EXCLUDED: dict[str, str] = {
    "2.6.2": f"a compromised release carrying malware ({ADVISORY})",
    "2.6.3": f"a compromised release carrying malware ({ADVISORY})",
}
SUPPORTED = f">={LOWEST},<{BELOW}," + ",".join(f"!={version}" for version in EXCLUDED)
REQUIREMENT = f"lightning{SUPPORTED}"
MINORS: tuple[str, ...] = tuple(".".join(version.split(".")[:2]) for version in TESTED_VERSIONS)


def release(version: str) -> tuple[int, ...]:
    """(2, 6, 6) from "2.6.6", "2.6.6rc1" or "2.6.6+local"; the numeric release only."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(0).split("."))


def minor_of(version: str) -> str:
    return ".".join(str(part) for part in (*release(version), 0)[:2])


def excluded_reason(version: str) -> str | None:
    """Why `version` must not be installed (one line naming the fix), or None."""
    normalised = ".".join(str(part) for part in (*release(version), 0, 0)[:3])
    why = EXCLUDED.get(normalised)
    if why is None:
        return None
    return f"Lightning {version} is {why}: install another version ({REQUIREMENT}) and follow the advisory."


def is_supported(version: str) -> bool:
    return release(LOWEST) <= release(version) < release(BELOW) and excluded_reason(version) is None


# ---- feature probes --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Feature:
    """Something that exists from Lightning `since` on; `probe(package)` asks the installed Lightning."""

    name: str
    since: str
    what: str


FEATURES: dict[str, Feature] = {
    "model_parallel": Feature(
        "model_parallel", "2.3", "strategies.model_parallel.ModelParallelStrategy (Trainer and Fabric)"
    ),
    "auto_accelerator_staticmethod": Feature(
        "auto_accelerator_staticmethod", "2.3",
        "the connectors' _choose_auto_accelerator is a staticmethod (an instance method in 2.2)",
    ),
    "fabric_run_command": Feature(
        "fabric_run_command", "2.3", "`fabric run` is the command itself (2.2: the group of `fabric run model`)"
    ),
    "fsdp_device_mesh": Feature(
        "fsdp_device_mesh", "2.3", "FSDPStrategy takes device_mesh=, a tuple of which it turns into a CUDA mesh"
    ),
    "process_group_device_id": Feature(
        "process_group_device_id", "2.5.5", "strategies bind the process group to the root device (device_id=)"
    ),
}


def probe(feature: str, package: str) -> bool:
    """Ask the Lightning package `package` ("lightning.pytorch", "lightning_fabric", ...) about `feature`."""
    if feature == "model_parallel":
        from lightning_xpu._namespaces import optional_module

        module = optional_module(package, "strategies.model_parallel")
        return module is not None and hasattr(module, "ModelParallelStrategy")
    if feature == "auto_accelerator_staticmethod":
        relative = "connector" if "fabric" in package else "trainer.connectors.accelerator_connector"
        module = importlib.import_module(f"{package}.{relative}")
        cls = module._Connector if "fabric" in package else module._AcceleratorConnector
        return isinstance(cls.__dict__["_choose_auto_accelerator"], staticmethod)
    if feature == "fsdp_device_mesh":
        import inspect

        fsdp = importlib.import_module(f"{package}.strategies").FSDPStrategy
        return "device_mesh" in inspect.signature(fsdp.__init__).parameters
    if feature == "process_group_device_id":
        import inspect

        from lightning_xpu._patching import original_of

        ddp = importlib.import_module(f"{package}.strategies").DDPStrategy
        method = "_setup_distributed" if "fabric" in package else "setup_distributed"
        return "device_id" in inspect.getsource(original_of(ddp, method))
    if feature == "fabric_run_command":
        main = getattr(importlib.import_module(f"{package}.cli"), "_main", None)  # None without click
        run = None if main is None else main.commands.get("run")
        return run is not None and not hasattr(run, "commands")
    raise ValueError(f"unknown feature {feature!r} (known: {', '.join(FEATURES)})")


# ---- the patch manifest ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchGroup:
    """The attributes of one Lightning owner that lightning_xpu wraps, in the minors from `since` on."""

    owner: str  # below the Lightning package: "pytorch.trainer.setup", "fabric.connector._Connector"
    names: tuple[str, ...]
    by: str  # the lightning_xpu module applying them
    since: str = LOWEST


_CONNECTOR = (
    "_choose_auto_accelerator",
    "_choose_gpu_accelerator_backend",
    "_check_config_and_set_final_flags",
    "_set_devices_flag_if_auto_passed",
    "_choose_strategy",
    "_check_strategy_and_fallback",
    "_check_and_init_precision",
    "_set_parallel_devices_and_init_accelerator",  # the XPU "not available" error names its cause (report/)
)
_STRATEGY = ("_get_process_group_backend", "barrier", "broadcast")


def _strategy_groups(side: str, ddp: tuple[str, ...], fsdp: tuple[str, ...]) -> tuple[PatchGroup, ...]:
    """lightning_xpu.strategies' targets on one side; `ddp`/`fsdp`: the methods beyond `_STRATEGY` it wraps there
    (ModelParallel, from 2.3, has `_setup_distributed` on both sides)."""
    by = "lightning_xpu.strategies"
    groups: list[PatchGroup] = [PatchGroup(f"{side}.strategies.launchers.multiprocessing._MultiProcessingLauncher",
                                           ("launch",), by)]
    for module, cls, names, since in (
        ("ddp", "DDPStrategy", ddp, LOWEST),
        ("fsdp", "FSDPStrategy", fsdp, LOWEST),
        ("model_parallel", "ModelParallelStrategy", ("_setup_distributed",), "2.3"),
    ):
        groups.append(PatchGroup(f"{side}.strategies.{module}", ("_init_dist_connection",), by, since))
        groups.append(PatchGroup(f"{side}.strategies.{module}.{cls}", (*_STRATEGY, *names), by, since))
    return tuple(groups)
_RNG = ("_collect_rng_states", "_set_rng_states")
_MEMORY = ("is_oom_error", "garbage_collection_cuda")

MANIFEST: tuple[PatchGroup, ...] = (
    # Trainer (lightning.pytorch / pytorch_lightning)
    PatchGroup("pytorch.trainer.connectors.accelerator_connector._AcceleratorConnector", _CONNECTOR,
               "lightning_xpu.connector"),
    PatchGroup("pytorch.trainer.connectors.accelerator_connector._AcceleratorConnector",
               ("_choose_and_init_cluster_environment", "_lazy_init_strategy"), "lightning_xpu.environments.selection"),
    *_strategy_groups("pytorch", ("setup_distributed", "_setup_model"), ("setup_environment",)),
    PatchGroup("pytorch.strategies.ddp.DDPStrategy", ("_register_ddp_hooks",), "lightning_xpu.strategies.comm_hooks"),
    PatchGroup("pytorch.trainer.setup", ("_log_device_info",), "lightning_xpu.trainer"),
    PatchGroup("pytorch.core.saving", ("_default_map_location",), "lightning_xpu.trainer"),
    PatchGroup("pytorch.profilers.pytorch.PyTorchProfiler", ("_default_activities",), "lightning_xpu.profiler"),
    PatchGroup("pytorch.callbacks.throughput_monitor", ("get_available_flops",), "lightning_xpu.throughput"),
    PatchGroup("pytorch.callbacks.throughput_monitor.ThroughputMonitor", ("_update",), "lightning_xpu.throughput"),
    PatchGroup("pytorch.utilities.seed", _RNG, "lightning_xpu.rng"),
    PatchGroup("pytorch.strategies.launchers.multiprocessing", _RNG, "lightning_xpu.rng"),
    PatchGroup("pytorch.utilities.memory", _MEMORY, "lightning_xpu.memory"),
    PatchGroup("pytorch.tuner.batch_size_scaling", _MEMORY, "lightning_xpu.memory"),
    PatchGroup("pytorch.strategies.strategy.Strategy", ("load_checkpoint",), "lightning_xpu.memory"),
    PatchGroup("pytorch.trainer.connectors.checkpoint_connector._CheckpointConnector", ("resume_end",),
               "lightning_xpu.memory"),
    # Fabric (lightning.fabric / lightning_fabric)
    PatchGroup("fabric.connector._Connector", _CONNECTOR, "lightning_xpu.connector"),
    PatchGroup("fabric.connector._Connector", ("_choose_and_init_cluster_environment", "_lazy_init_strategy"),
               "lightning_xpu.environments.selection"),
    PatchGroup("fabric.plugins.environments.slurm.SLURMEnvironment", ("detect", "_validate_srun_used"),
               "lightning_xpu.environments.selection"),
    *_strategy_groups("fabric", ("_setup_distributed", "setup_module"), ("_setup_distributed", "setup_environment")),
    PatchGroup("fabric.utilities.throughput", ("get_available_flops",), "lightning_xpu.throughput"),
    PatchGroup("fabric.utilities.seed", _RNG, "lightning_xpu.rng"),
    PatchGroup("fabric.strategies.launchers.multiprocessing", _RNG, "lightning_xpu.rng"),
    PatchGroup("fabric.strategies.strategy.Strategy", ("load_checkpoint",), "lightning_xpu.memory"),
    PatchGroup("fabric.cli", ("_get_num_processes",), "lightning_xpu.fabric_cli"),
)


def expected_patches(minor: str, side: str | None = None) -> frozenset[tuple[str, str]]:
    """(owner, name) of every patch the manifest expects on Lightning `minor` ("2.4"); `side`: "pytorch"/"fabric"."""
    return frozenset(
        (group.owner, name)
        for group in MANIFEST
        if release(group.since) <= release(minor) and (side is None or group.owner.split(".")[0] == side)
        for name in group.names
    )


# ---- patch status ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchStatus:
    """One patch in one Lightning package: expected by the manifest for the installed version, and applied."""

    name: str  # the attribute: "_choose_auto_accelerator"
    owner: str  # the qualified owner in the installed package: "lightning.pytorch.trainer.setup"
    expected: bool
    applied: bool
    detail: str


def installed_version(package: str) -> str:
    """The version of the Lightning distribution holding `package` ("lightning.pytorch" -> lightning's)."""
    top = sys.modules.get(package.split(".")[0])
    return str(getattr(top, "__version__", "0"))


def known_minor(version: str) -> str | None:
    """The manifest minor for `version`, or None when the manifest does not know it (older or newer)."""
    minor = minor_of(version)
    return minor if minor in MINORS else None


def _imported_packages() -> list[str]:
    """The Lightning packages whose patches ran in this process (importing `lightning` if none did)."""
    from lightning_xpu._namespaces import default_namespace, imported_namespaces

    namespaces = imported_namespaces()
    if not namespaces:
        importlib.import_module(default_namespace().pytorch or default_namespace().fabric)
        namespaces = imported_namespaces()
    packages: list[str] = []
    for namespace in namespaces:
        for package in (namespace.pytorch, namespace.fabric):
            if package is not None and package not in packages:
                packages.append(package)
    return packages


def patch_status() -> list[PatchStatus]:
    """Every patch the manifest expects, and every one attempted, in each Lightning package of this process.

    For a Lightning the manifest does not know, the newest known minor's patches are "expected" (the best guess);
    `check_selected` only notes such a version as untested. Imports Lightning when no namespace is imported yet.
    """
    from lightning_xpu._apply import disabled
    from lightning_xpu._patching import outcomes

    packages = _imported_packages()  # first: it may import Lightning, which applies the patches
    recorded = {(outcome.package, outcome.owner, outcome.name): outcome for outcome in outcomes()}
    statuses: list[PatchStatus] = []
    for package in packages:
        side = "pytorch" if package in ("lightning.pytorch", "pytorch_lightning") else "fabric"
        version = installed_version(package)
        expected = expected_patches(known_minor(version) or MINORS[-1], side)
        attempted = {(owner, name) for (pkg, owner, name) in recorded if pkg == package}
        for owner, name in sorted(expected | attempted):
            outcome = recorded.get((package, owner, name))
            qualified = package + owner[len(side):]
            if outcome is None:
                # Never attempted: patching is off, or the patch module failed (recorded as "<module>").
                failed = [o.detail for (pkg, _, n), o in recorded.items() if pkg == package and n.startswith("<")]
                detail = "patching disabled (LIGHTNING_XPU_DISABLE)" if disabled() else "; ".join(failed)
                statuses.append(PatchStatus(name, qualified, True, False, detail or "not attempted"))
                continue
            detail = outcome.detail or f"by {outcome.by}"
            statuses.append(PatchStatus(outcome.name, qualified, (owner, name) in expected, outcome.applied, detail))
    return statuses


def problems(statuses: list[PatchStatus] | None = None) -> list[str]:
    """One line per expected patch that did not apply, on a Lightning the manifest knows; [] when all is well."""
    statuses = patch_status() if statuses is None else statuses
    return [
        f"{status.owner}.{status.name}: {status.detail}"
        for status in statuses
        if status.expected and not status.applied and known_minor(installed_version(status.owner)) is not None
    ]


def failures(statuses: list[PatchStatus] | None = None) -> list[str]:
    """What must fail a smoke or validation job: `problems`, and an installed Lightning that is refused."""
    statuses = patch_status() if statuses is None else statuses
    refused = {excluded_reason(installed_version(status.owner)) for status in statuses} - {None}
    return sorted(line for line in refused if line is not None) + problems(statuses)


class PatchWarning(UserWarning):
    """A patch lightning_xpu needs on this Lightning did not apply, or this Lightning is untested or refused."""


_checked = False


def _short(status: PatchStatus) -> str:
    return f"{status.owner.rsplit('.', 1)[-1]}.{status.name}"


def selection_messages() -> list[str]:
    """What `check_selected` warns about, one line each (tests and the smoke job read it too)."""
    statuses = patch_status()
    messages: list[str] = []
    for version in sorted({installed_version(status.owner) for status in statuses}):
        mine = [status for status in statuses if installed_version(status.owner) == version]
        refused = excluded_reason(version)
        if refused is not None:
            messages.append(f"lightning_xpu: {refused}")
        if known_minor(version) is None:
            applied = sorted({_short(status) for status in mine if status.applied})
            missing = sorted({_short(status) for status in mine if not status.applied})
            messages.append(
                f"lightning_xpu: Lightning {version} is untested (lightning_xpu knows {MINORS[0]} to {MINORS[-1]}):"
                f" {len(applied)} patches applied ({', '.join(applied)}); {len(missing)} did not apply"
                f" ({', '.join(missing) or 'none'})."
            )
            continue
        missing_lines = problems(mine)
        if missing_lines:
            messages.append(
                f"lightning_xpu: {len(missing_lines)} patch(es) needed on Lightning {version} found no target, so"
                f" XPU runs may silently fall back (CPU, fp32): {'; '.join(missing_lines)}. Please report this with"
                " the output of `python -m lightning_xpu.versions`."
            )
    return messages


def check_selected() -> None:
    """Called when an XPU accelerator is created: once per process, on a machine with an XPU, warn about what
    `selection_messages` finds. Off XPU it does nothing (and checks again at the next selection)."""
    global _checked
    if _checked:
        return
    from lightning_xpu.device import xpu_available

    if not xpu_available():
        return
    _checked = True
    for message in selection_messages():
        warnings.warn(message, PatchWarning, stacklevel=3)


# ---- copies of Lightning logic ---------------------------------------------------------------------------------
# Where a wrapper cannot fix Lightning's result, it repeats a few lines of Lightning's method with "xpu" in place of
# "cuda". Each such copy is named here with the upstream function it mirrors and that function's source hash on
# every supported minor (None: absent there). tests/runtime/test_versions.py fails when a hash changes: review the
# copy against the new upstream source, then record the new hash (`python -m lightning_xpu.versions --hashes`).


@dataclass(frozen=True)
class Copy:
    ours: str  # the lightning_xpu function holding the copied lines
    upstream: str  # the Lightning function mirrored, below the package ("pytorch.strategies.ddp.DDPStrategy.barrier")
    hashes: dict[str, str | None]  # Lightning minor -> `source_hash` of `upstream`


def _from(*changes: tuple[str, str | None]) -> dict[str, str | None]:
    """Hashes per minor from (first minor, hash) pairs: each hash holds until the next pair's minor."""
    hashes: dict[str, str | None] = {}
    for minor in MINORS:
        for since, value in changes:
            if release(since) <= release(minor):
                hashes[minor] = value
    return hashes


# Barrier and broadcast: every strategy whose methods `lightning_xpu.strategies` wraps, with the hashes of its
# `barrier`; its `broadcast` is the same function everywhere (BROADCAST_HASH) from the minor the strategy exists.
_BARRIERS: dict[str, dict[str, str | None]] = {
    "pytorch.strategies.ddp.DDPStrategy": _from(("2.2", "b465ca480ac080e8")),
    "pytorch.strategies.fsdp.FSDPStrategy": _from(("2.2", "2f0c5880de4824a8")),
    "pytorch.strategies.model_parallel.ModelParallelStrategy": _from(("2.2", None), ("2.3", "2f0c5880de4824a8")),
    "fabric.strategies.ddp.DDPStrategy": _from(("2.2", "52ac8c6a1317f55a"), ("2.5", "17ede1e2fe1bb04f")),
    "fabric.strategies.fsdp.FSDPStrategy": _from(("2.2", "c63c3f44b7495e09")),
    "fabric.strategies.model_parallel.ModelParallelStrategy": _from(("2.2", None), ("2.3", "c63c3f44b7495e09")),
}
BROADCAST_HASH = "381f72e3f49a26ff"

COPIES: tuple[Copy, ...] = (
    Copy(
        "lightning_xpu.strategies.ddp_module.on_xpu_stream",
        "pytorch.strategies.ddp.DDPStrategy._setup_model",
        _from(("2.2", "e8abd82ba4d8da0b")),
    ),
    Copy(
        "lightning_xpu.strategies.ddp_module.on_xpu_stream",
        "fabric.strategies.ddp.DDPStrategy.setup_module",
        _from(("2.2", "1b15eae2fdc5c383")),
    ),
    Copy(
        "lightning_xpu.strategies.comm_hooks.register_hooks_on_xpu",
        "pytorch.strategies.ddp.DDPStrategy._register_ddp_hooks",
        _from(("2.2", "dcdad5dc143f32be")),
    ),
    Copy(
        "lightning_xpu.strategies.device_mesh.mesh_on_xpu",
        "pytorch.strategies.fsdp.FSDPStrategy.setup_environment",
        _from(("2.2", "24d5f8c885d836b4"), ("2.3", "32f4b6ceef42f625"), ("2.5", "59cf1369abd64710")),
    ),
    Copy(
        "lightning_xpu.strategies.device_mesh.mesh_on_xpu",
        "fabric.strategies.fsdp.FSDPStrategy.setup_environment",
        _from(("2.2", "29987a2e6a414a67"), ("2.3", "6f91acc4b673e132")),
    ),
    Copy(
        "lightning_xpu.device.parse_device_indices",
        "fabric.utilities.device_parser._parse_gpu_ids",
        _from(("2.2", "289762090c382e8b")),
    ),
    *(Copy("lightning_xpu.strategies.collectives.barrier_with_device", f"{owner}.barrier", hashes)
      for owner, hashes in _BARRIERS.items()),
    *(Copy("lightning_xpu.strategies.collectives.broadcast_objects_safely", f"{owner}.broadcast",
           {minor: None if hashes[minor] is None else BROADCAST_HASH for minor in MINORS})
      for owner, hashes in _BARRIERS.items()),
)


def upstream_function(package: str, upstream: str) -> object | None:
    """The unpatched Lightning function `upstream` names in `package` ("lightning.pytorch", ...), None if absent."""
    from lightning_xpu._patching import original_of

    parts = upstream.split(".")[1:]
    for split in range(len(parts) - 1, 0, -1):
        name = f"{package}.{'.'.join(parts[:split])}"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is not None and name.startswith(error.name):
                continue  # not a module (a class further down), or absent in this Lightning
            raise
        owner: object = module
        for name in parts[split:-1]:
            owner = getattr(owner, name, None)
            if owner is None:
                return None
        return original_of(owner, parts[-1]) if hasattr(owner, parts[-1]) else None
    return None


def source_hash(function: object) -> str:
    """sha256 (16 hex digits) of the function's syntax tree without comments, docstring, annotations and
    decorators, with the standalone package names written as `lightning.*`: what changes when its logic does."""
    import ast
    import hashlib
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.decorator_list, node.returns = [], None
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                node.body = body[1:] or [ast.Pass()]
        elif isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    text = ast.dump(tree)
    for standalone, bundled in (("pytorch_lightning", "lightning.pytorch"), ("lightning_fabric", "lightning.fabric")):
        text = text.replace(standalone, bundled)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m lightning_xpu.versions",
        description="Lightning-version knowledge of lightning_xpu. --hashes prints the source hash of every upstream"
        " function a copy in COPIES mirrors, in the installed Lightning (to record after reviewing a copy);"
        " without options: the patch status of this process.",
    )
    parser.add_argument("--hashes", action="store_true", help="print upstream source hashes for COPIES")
    args = parser.parse_args(argv)
    if args.hashes:
        from lightning_xpu._namespaces import default_namespace

        namespace = default_namespace()
        for copy in COPIES:
            package = namespace.fabric if copy.upstream.startswith("fabric.") else str(namespace.pytorch)
            function = upstream_function(package, copy.upstream)
            digest = None if function is None else source_hash(function)
            print(f"{installed_version(package)} {copy.upstream} {digest}")
        return 0
    for status in patch_status():
        state = "applied" if status.applied else "NOT APPLIED"
        expected = "expected" if status.expected else "extra"
        print(f"{state:<12} {expected:<8} {status.owner}.{status.name}: {status.detail}")
    for message in selection_messages():
        print(message)
    return 1 if failures() else 0


if __name__ == "__main__":
    sys.exit(main())
