"""lxpu_admin/install/tagfiles.py on its own: every tag of recipes/matrix.toml gets a modulefile and setup script that
compile, a rerun sees them current and rewrites a changed one, and bad data is one line (the site validation
job: test_site_validation.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from recipe_helpers import require

from lxpu_admin.install.tagfiles import TagData, TagDataError, tag_files_current, write_tag_files
from lxpu_admin.render.artifacts import Renderer
from lxpu_admin.render.recipes import Recipes


def _luac() -> str | None:
    return shutil.which("luac5.3") or shutil.which("luac")


def test_every_tag_writes_files_that_compile_and_rerun_restores_them(recipes: Recipes, tmp_path: Path) -> None:
    luac = _luac()
    require(luac is not None, "luac (lua5.3)")
    prefix = tmp_path / "pre fix"
    renderer = Renderer(recipes)
    for version in recipes.matrix.versions.values():
        for variant in version.variants:
            tag = TagData.from_mapping(renderer.tag_data(version, variant))
            assert not tag_files_current(prefix, tag)
            modulefile, setup = write_tag_files(prefix, tag)
            assert modulefile == prefix / f"modulefiles/lightning-xpu/{version.tag(variant)}.lua"
            assert setup == prefix / f"lightning-setup-{version.tag(variant)}.sh"
            assert setup.stat().st_mode & 0o777 == 0o755 and modulefile.stat().st_mode & 0o777 == 0o644
            assert subprocess.run([luac, "-p", str(modulefile)], capture_output=True).returncode == 0
            assert subprocess.run(["bash", "-n", str(setup)], capture_output=True).returncode == 0
            assert tag_files_current(prefix, tag)
            setup.write_text(setup.read_text() + "# edited\n")
            assert not tag_files_current(prefix, tag)
            write_tag_files(prefix, tag)
            assert tag_files_current(prefix, tag)
    assert not [p for p in prefix.rglob("*.tmp")]  # temporary files were renamed, none left


def test_bad_tag_data_is_one_line(recipes: Recipes) -> None:
    version = next(iter(recipes.matrix.versions.values()))
    data = Renderer(recipes).tag_data(version, next(iter(version.variants)))
    del data["torch"]
    with pytest.raises(TagDataError, match=r"^tag data: 'torch' must be a non-empty string \(got None\)$"):
        TagData.from_mapping(data)

