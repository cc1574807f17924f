"""What the start-up hook (`_autoload`, run by the environment's `.pth` line in every interpreter) must know before
anything is imported: the switch that turns patching off and the packages whose import it waits for.

Standard library `os` only, and nothing at module level but constants: every Python start of an environment
imports this module (issue 30: the hook may add at most 2 ms to `python -c pass`).
"""

import os

DISABLE_VARIABLE = "LIGHTNING_XPU_DISABLE"

# The top-level packages whose import triggers patching.
WATCHED_TOP_LEVEL = ("lightning", "pytorch_lightning", "lightning_fabric")


def disabled() -> bool:
    """`LIGHTNING_XPU_DISABLE=1` (or true/yes) turns every patch off."""
    return os.environ.get(DISABLE_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")
