"""Launch errors, and how an uncaught one is shown: one line, not a wall of traceback.

Creating a `LaunchError` puts a small hook in front of `sys.excepthook` (once). The hook shows an uncaught
LaunchError as its one line; any other exception goes to the previous hook untouched. `LIGHTNING_XPU_DEBUG=1`
shows the full traceback instead. The exit status stays Python's for an uncaught exception (1).
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

DEBUG_VARIABLE = "LIGHTNING_XPU_DEBUG"


def debug() -> bool:
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


class LaunchError(RuntimeError):
    """The launch is malformed or contradicts itself; the message names the variable or argument and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        _install_excepthook()

    @property
    def shown_here(self) -> bool:
        """Whether this process prints the line (all ranks stop; see LaunchMismatch)."""
        return True


class LaunchMismatch(LaunchError, ValueError):
    """Lightning's arguments do not describe the launch. Every rank raises it; only local rank 0 of each node
    prints it, so a node of 12 ranks shows one line. A ValueError too, as Lightning's `validate_settings` raises."""

    def __init__(self, message: str, local_rank: int) -> None:
        super().__init__(message)
        self.local_rank = local_rank

    @property
    def shown_here(self) -> bool:
        return self.local_rank == 0


def _show_launch_errors(
    kind: type[BaseException], error: BaseException, traceback: TracebackType | None
) -> None:
    if isinstance(error, LaunchError) and not debug():
        if error.shown_here:
            print(f"LaunchError: {error}", file=sys.stderr, flush=True)
        return
    _previous(kind, error, traceback)


_previous = sys.excepthook
_installed = False


def _install_excepthook() -> None:
    """Once per process: a hook installed later that chains to ours must not be chained to again."""
    global _previous, _installed
    if not _installed:
        _installed = True
        _previous = sys.excepthook
        sys.excepthook = _show_launch_errors
