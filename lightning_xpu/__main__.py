"""`python -m lightning_xpu doctor|validate|report` (the same as the `lightning-xpu` command)."""

from __future__ import annotations

import sys

from lightning_xpu.commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
