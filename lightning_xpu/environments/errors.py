"""Launch and device errors, and how an uncaught one is shown: one line, not a wall of traceback.

Creating a `OneLineError` (`LaunchError`, `DeviceError`) puts a small hook in front of `sys.excepthook` (once).
The hook shows an uncaught one as its one line, `<label>: <message>`; any other exception goes to the previous
hook untouched. `LIGHTNING_XPU_DEBUG=1` shows the full traceback instead. The exit status stays Python's for an
uncaught exception (1).
"""

from __future__ import annotations

import functools
import os
import sys
from types import TracebackType

DEBUG_VARIABLE = "LIGHTNING_XPU_DEBUG"


def debug() -> bool:
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


class OneLineError(Exception):
    """An error whose message is the whole story, the cause and the fix, in one line."""

    label = "Error"

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        _install_excepthook()

    @property
    def shown_here(self) -> bool:
        """Whether this process prints the line (all ranks stop; see LaunchMismatch)."""
        return True


class LaunchError(OneLineError, RuntimeError):
    """The launch is malformed or contradicts itself; the message names the variable or argument and the fix."""

    label = "LaunchError"

    def __init__(self, message: str) -> None:
        super().__init__(message)


class DeviceError(OneLineError):
    """XPU was asked for (accelerator "xpu", "gpu" or "auto", devices) and cannot be given: cause and fix."""

    label = "DeviceError"
    kind: type[Exception] | None = None  # the Lightning/builtin type this one also is (see device_error)

    def __reduce__(self) -> tuple[object, ...]:
        # The classes device_error makes are not module attributes: pickle (e.g. an error sent back from a
        # spawned rank) rebuilds the error through device_error instead.
        return device_error, (self.kind or type(self), str(self))


def device_error(kind: type[Exception], message: str) -> DeviceError:
    """A DeviceError that is also a `kind` (the type Lightning raised there, e.g. MisconfigurationException), so
    that code catching Lightning's error still catches it. Raise it `from None`: the chain adds nothing."""
    return _device_error_class(kind)(message)


@functools.cache
def _device_error_class(kind: type[Exception]) -> type[DeviceError]:
    if issubclass(kind, DeviceError):
        return kind
    return type(kind.__name__, (DeviceError, kind),
                {"__module__": __name__, "__doc__": DeviceError.__doc__, "kind": kind})


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
    if isinstance(error, OneLineError) and not debug():
        if error.shown_here:
            print(f"{error.label}: {error}", file=sys.stderr, flush=True)
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
