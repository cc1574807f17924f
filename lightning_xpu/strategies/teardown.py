"""Process groups are torn down before the interpreter shuts down, on every device and backend.

Lightning creates the default process group (`_init_dist_connection`) and destroys it only for NCCL, at exit
(lightning/fabric/utilities/distributed.py@2.6.6); PyTorch destroys none at exit (pytorch/pytorch#190489, open; the
atexit fix pytorch/pytorch#179291 was abandoned). A gloo group left to interpreter finalisation can end a finished
run in an abort: Gloo's worker threads still hold work whose tensors need the GIL while the interpreter is torn
down, and one rank dies with "terminate called without an active exception" (exit 6; under Slurm the job is
FAILED after a good run). Whether XCCL/ccl groups do the same is not known, so every backend is covered.

So once a strategy has created the group, one `atexit` handler (per process) destroys what is left, in PyTorch's
own order (`destroy_process_group()` shuts every group down, then forgets them). Why at exit, and why this order:
- Python joins non-daemon threads before it runs `atexit` handlers, and runs the handlers last registered first:
  ours, registered when the group is created, runs after anything registered later that may still use the group
  (loggers, persistent DataLoader workers) and before what was registered earlier, and finalisation comes after
  all of them. Lightning's own NCCL handler, registered just before ours, then finds nothing left to destroy.
- `destroy_process_group` has no barrier: a rank never waits for its peers at exit, whatever they do.
- After an uncaught exception nothing is destroyed (the run failed anyway, and a peer may still be waiting in a
  collective this rank will never join): such a rank exits as it did before. (An interactive session that showed
  an error earlier keeps `sys.last_value` and skips it too.)
- Processes that end with `os._exit` (the children of `ddp_spawn`/`ddp_fork`, through multiprocessing) run no
  `atexit` handler and no finalisation either: nothing to do there.

What it relies on: `destroy_process_group` forgets the groups, but the C++ group, and Gloo's threads that only its
destructor joins, live while anything else holds it. After `fit` Lightning's strategy teardown unwraps the DDP
model, so in a Lightning run the handler leaves no Gloo thread to finalisation (tests/runtime/test_exit.py counts
them). A plain torch script's DDP model holds the group, and so do the default arguments of
torch/distributed/nn/functional.py@v2.13.0 (`group=group.WORLD`, bound when DDP first imports that module after
init): such a group dies in finalisation, and a plain DDP script that destroyed its group itself aborted once at
exit in CI (one rank of four).
"""

from __future__ import annotations

import atexit
import sys
from collections.abc import Callable
from typing import Any

import torch

_registered = False


def _failed() -> bool:
    """Whether the interpreter is exiting after an uncaught exception (Python sets `sys.last_value` when it
    prints one, before the `atexit` handlers run)."""
    return getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None


def destroy_process_groups_at_exit() -> None:
    """The `atexit` handler: destroys every process group still initialised, unless the run failed."""
    distributed = torch.distributed
    if _failed() or not distributed.is_available() or not distributed.is_initialized():
        return
    distributed.destroy_process_group()


def register_teardown() -> None:
    """Once per process, when a process group exists."""
    global _registered
    if not _registered and torch.distributed.is_available() and torch.distributed.is_initialized():
        _registered = True
        atexit.register(destroy_process_groups_at_exit)


def torn_down_at_exit(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a strategy module's `_init_dist_connection`: after it, the group is destroyed at exit (see above)."""

    def _init_dist_connection(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        register_teardown()
        return result

    return _init_dist_connection
