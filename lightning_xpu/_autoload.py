"""Zero-code-change hook: patch Lightning as soon as it is imported, without `import lightning_xpu`.

Our environments carry a `.pth` line that imports this module at interpreter start-up (see
docs/architecture.md), in every Python of the environment: DataLoader workers, launchers, `python -c pass`. So it
imports nothing but `os`/`sys` and `lightning_xpu._startup` (issue 30: at most 2 ms added to `python -c pass`; no
`typing`, `importlib.abc`, `dataclasses` or `inspect`): it puts a duck-typed finder on `sys.meta_path` that
 - when a watched Lightning top-level package is imported, runs the patches right after it finishes executing;
 - when `torch` or `triton` is first looked up, makes sure the node-local compile caches the module or setup
   script pointed at exist on this node and are private (`lightning_xpu._caches`), before any cache is read.
Everything else is imported only then.
"""

import os
import sys

from lightning_xpu._startup import DISABLE_VARIABLE, WATCHED_TOP_LEVEL, disabled

# Not typing's TYPE_CHECKING, nor `from __future__ import annotations` (quoted annotations instead): each import
# costs every Python start of the environment.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

__all__ = ["DISABLE_VARIABLE", "disabled", "install"]

# Looked up before any compile cache is used (Triton, TorchInductor and the SYCL/Level Zero runtime all load with
# torch; Triton can be imported alone).
CACHE_USERS = ("torch", "triton")
# Set by the module and setup script (lxpu_admin/envside/setup_lib.py cache_exports): the cache variables they chose.
CACHE_VARIABLES = "LIGHTNING_XPU_CACHE_VARIABLES"


class _PatchAfterExec:
    """Delegates to the real loader, then applies the patches for the package it just executed."""

    def __init__(self, loader: "Loader", fullname: str) -> None:
        self._loader = loader
        self._fullname = fullname

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        return self._loader.create_module(spec)

    def exec_module(self, module: "ModuleType") -> None:
        # Lightning reads RANK, LOCAL_RANK and SLURM_PROCID with a bare int() while it is imported: a malformed
        # one must be refused by the one launch-input rule first (lightning_xpu/environments/inputs.py).
        from lightning_xpu._apply import apply_for_top_level
        from lightning_xpu.environments.inputs import check_launch_variables

        check_launch_variables(os.environ)
        self._loader.exec_module(module)
        apply_for_top_level(self._fullname)

    def __getattr__(self, name: str) -> "Any":  # resource readers, get_filename, is_package, ...
        return getattr(self._loader, name)


class _LightningFinder:
    """A meta-path finder, duck-typed (importlib.abc costs start-up time): patches Lightning (`patch`), makes
    this node's caches before torch or triton loads (`caches`)."""

    def __init__(self, patch: bool, caches: bool) -> None:
        self.patch = patch
        self.caches = caches

    def find_spec(
        self, fullname: str, path: "Sequence[str] | None", target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        if self.caches and fullname in CACHE_USERS:
            self.caches = False  # once per process: the check is about this node, not about each package
            from lightning_xpu._caches import ensure_node_caches

            ensure_node_caches()
        if not self.patch or fullname not in WATCHED_TOP_LEVEL:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchAfterExec(spec.loader, fullname)  # type: ignore[assignment]
                return spec
        return None


def install() -> None:
    """Put the finder first on `sys.meta_path` (once): for the patches unless disabled, for the caches when the
    module or setup script chose node-local ones."""
    patch, caches = not disabled(), bool(os.environ.get(CACHE_VARIABLES))
    if not (patch or caches) or any(isinstance(finder, _LightningFinder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _LightningFinder(patch, caches and "torch" not in sys.modules))


install()
