"""Zero-code-change hook: patch Lightning as soon as it is imported, without `import lightning_xpu`.

Our environments carry a `.pth` line that imports this module at interpreter start-up (see
docs/architecture.md). It must stay cheap: it imports neither torch nor Lightning, it only puts a finder on
`sys.meta_path` that runs the patches right after a watched Lightning top-level package finishes executing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from lightning_xpu._apply import DISABLE_VARIABLE, apply_for_top_level, disabled
from lightning_xpu._namespaces import WATCHED_TOP_LEVEL

__all__ = ["DISABLE_VARIABLE", "disabled", "install"]


class _PatchAfterExec(importlib.abc.Loader):
    """Delegates to the real loader, then applies the patches for the package it just executed."""

    def __init__(self, loader: importlib.abc.Loader, fullname: str) -> None:
        self._loader = loader
        self._fullname = fullname

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Lightning reads RANK, LOCAL_RANK and SLURM_PROCID with a bare int() while it is imported: a malformed
        # one must be refused by the one launch-input rule first (lightning_xpu/environments/inputs.py).
        from lightning_xpu.environments.inputs import check_launch_variables

        check_launch_variables(os.environ)
        self._loader.exec_module(module)
        apply_for_top_level(self._fullname)

    def __getattr__(self, name: str) -> Any:  # resource readers, get_filename, is_package, ...
        return getattr(self._loader, name)


class _LightningFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in WATCHED_TOP_LEVEL:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchAfterExec(spec.loader, fullname)
                return spec
        return None


def install() -> None:
    """Put the finder first on `sys.meta_path` (once). Does nothing when disabled."""
    if disabled() or any(isinstance(finder, _LightningFinder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _LightningFinder())


install()
