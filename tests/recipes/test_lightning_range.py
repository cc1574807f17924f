"""The renderer refuses a recipe pinning a Lightning release lightning_xpu/versions.py refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_helpers import Recipes, edit, run_render

from lightning_xpu.versions import ADVISORY, EXCLUDED, REQUIREMENT
from lxpu_admin import paths

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
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


def test_the_renderer_reads_versions_py_without_the_runtime_package() -> None:
    # lightning_xpu is importable here (PYTHONPATH), yet never imported: its import would install the Lightning hook.
    code = "import sys, lxpu_admin.render.lightning_range as r; r.lightning_versions();" \
           " print(sorted(m for m in sys.modules if m.startswith('lightning_xpu')))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(paths.LIB), str(RECIPES.parent)])}
    done = subprocess.run([sys.executable, "-c", code], cwd=RECIPES, env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_list_patches_shows_the_patches_each_lightning_pin_gets(recipes: Recipes) -> None:
    """`list --patches`: per Lightning pin of the recipes, the PyTorch versions pinning it and exactly the patches
    lightning_xpu/versions.py's MANIFEST expects on that Lightning minor."""
    import json

    from lxpu_admin.render.lightning_range import lightning_versions

    versions = lightning_versions()
    done = run_render("list", "--patches", "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    pins = {v.lightning for v in recipes.matrix.versions.values()}
    assert set(listed) == pins
    for lightning, entry in listed.items():
        assert entry["pytorch"] == [m for m, v in recipes.matrix.versions.items() if v.lightning == lightning]
        expected = {f"{owner}.{name}" for owner, name in versions.expected_patches(versions.minor_of(lightning))}
        got = [target for targets in entry["patches"].values() for target in targets]
        assert expected and sorted(got) == sorted(expected)
    text = run_render("list", "--patches")
    assert text.returncode == 0
    heads = [line for line in text.stdout.splitlines() if line.startswith("Lightning ")]
    assert [line.split()[1] for line in heads] == list(listed)
