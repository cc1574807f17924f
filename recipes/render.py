#!/usr/bin/env python3
"""Renders lightning-xpu install artifacts from the version matrix, site profiles and templates.

Run `python recipes/render.py --help`; every command (list, render, check, lock) has its own --help.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info < (3, 11):
    sys.exit("render.py: error: needs Python 3.11 or newer (for tomllib): run it with python3.11")
sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from lxpu_recipes.cli import main
except ImportError as exc:
    sys.exit(f"render.py: error: {exc}: install the renderer's packages (pip install jinja2 packaging)")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], default_recipes=Path(__file__).resolve().parent))
