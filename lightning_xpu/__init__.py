"""Intel GPU (XPU) support for PyTorch Lightning.

`import lightning_xpu` is cheap (no torch, no Lightning): it patches the Lightning namespaces already imported and
hooks the import of the others. `LIGHTNING_XPU_DISABLE=1` turns all patching off.
"""

import sys

from lightning_xpu import _autoload
from lightning_xpu._startup import WATCHED_TOP_LEVEL

# Not typing's TYPE_CHECKING, nor `from __future__ import annotations`: the start-up hook imports this package in
# every Python of an environment.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["XPUAccelerator", "__version__", "report"]

_autoload.install()
# Patching machinery only where a Lightning namespace is already imported (never at interpreter start-up).
if any(name in sys.modules for name in WATCHED_TOP_LEVEL):
    from lightning_xpu._apply import apply_to_imported

    apply_to_imported()


def __getattr__(name: str) -> "Any":
    # Resolved lazily so that importing lightning_xpu does not import Lightning.
    if name == "XPUAccelerator":
        from lightning_xpu._namespaces import default_namespace
        from lightning_xpu.accelerator import accelerator_class

        return accelerator_class(default_namespace())
    if name == "__version__":  # not imported at start-up: the hook imports this package in every Python
        from lightning_xpu._version import __version__

        return __version__
    if name == "report":  # `lightning_xpu.report()` prints the patch report (issue 13)
        from lightning_xpu.patch_report import print_patch_report

        return print_patch_report
    raise AttributeError(f"module 'lightning_xpu' has no attribute {name!r}")
