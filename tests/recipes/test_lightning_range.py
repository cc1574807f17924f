"""The renderer refuses a recipe pinning a Lightning release lightning_xpu/versions.py refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from recipe_helpers import edit, run_render

from lightning_xpu.versions import ADVISORY, EXCLUDED, REQUIREMENT

PIN = 'lightning = { version = "2.6.6"'


@pytest.mark.parametrize("version", [*EXCLUDED, "2.1.4"])
def test_refused_lightning_pin(temp_recipes: Path, version: str) -> None:
    edit(temp_recipes / "recipes" / "matrix.toml", PIN, f'lightning = {{ version = "{version}"')
    done = run_render("list", repo=temp_recipes)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "recipes/matrix.toml" in line and ".pins.lightning" in line
    expected = ADVISORY if version in EXCLUDED else "outside the supported range"
    assert expected in line and REQUIREMENT in line, line
