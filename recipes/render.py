#!/usr/bin/env python3
"""Renders lightning-xpu install artifacts from the version matrix, site profiles and templates.

Run `python recipes/render.py --help`; every command (list, render, check, lock) has its own --help.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lxpu_recipes.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], default_recipes=Path(__file__).resolve().parent))
