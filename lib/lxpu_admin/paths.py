"""Where this package sits in the repository: the one place that knows (as Spack's spack/paths.py), so no other
module counts parent folders. Standard library only."""

from __future__ import annotations

from pathlib import Path

LIB = Path(__file__).resolve().parent.parent  # what PYTHONPATH holds to find this package
REPOSITORY = LIB.parent
RECIPES = REPOSITORY / "recipes"
