#!/usr/bin/env python3
"""Renders lightning-xpu install artifacts from the version matrix, site profiles and templates.

Run `python recipes/render.py --help`; every command (list, render, check, lock) has its own --help. The renderer
is lib/lxpu_admin/render: this file hands over to `python -m lxpu_admin.render` on the same Python, with lib/ on
PYTHONPATH (as bin/lightning-xpu-admin does), so the command users know stays.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    lib = str(Path(__file__).resolve().parent.parent / "lib")
    known = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([lib, known]) if known else lib
    os.execv(sys.executable, [sys.executable, "-m", "lxpu_admin.render", *sys.argv[1:]])
