"""The default of a bare `module load lightning-xpu` (issue 28): with 2.13, 2.13-cpu and 2.14-cuda published, Lmod
alone picks the highest version string, 2.14-cuda; the install marks the newest shown xpu tag instead
(lxpu_admin/install/moduledefault.py), and a site's own `default` link wins. Real Lmod loads stand-in modulefiles that
only say which tag they are: what is tested is which file Lmod picks."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import install_harness as h
import pytest

from lxpu_admin.install.entrypoints import set_module_default, set_modulefile_hidden
from lxpu_admin.install.state import State
from lxpu_admin.install.tagfiles import MODULE_DIR
from tests.conftest import require_service

pytestmark = pytest.mark.lmod


def _prefix(root: Path, *tags: str) -> Path:
    for tag in tags:
        path = root / MODULE_DIR / f"{tag}.lua"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'setenv("LXPU_TEST_PICKED", "{tag}")\n')
    return root


def _state(prefix: Path, tag: str) -> State:
    state = State()
    state.prefix, state.tag, state.dry, state.shared_group = str(prefix), tag, False, ""
    return state


def _bare_load(prefix: Path) -> str:
    require_service("lmod", h.lmod_available(), f"no Lmod at {h.LMOD_INIT}: run bash ci/services/install.sh")
    script = (f"source {h.q(h.LMOD_INIT)}; module use {h.q(prefix / 'modulefiles')}; module load lightning-xpu; "
              'echo "picked=$LXPU_TEST_PICKED"')  # fmt: skip
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().removeprefix("picked=")


def test_without_a_marked_default_lmod_loads_the_highest_string(tmp_path: Path) -> None:
    """What the install corrects: Lmod's own choice among 2.13, 2.13-cpu and 2.14-cuda."""
    assert _bare_load(_prefix(tmp_path, "2.13", "2.13-cpu", "2.14-cuda")) == "2.14-cuda"


def test_the_install_marks_the_newest_xpu_tag_as_the_default(tmp_path: Path) -> None:
    prefix = _prefix(tmp_path, "2.12", "2.13", "2.13-cpu", "2.14-cuda")
    set_module_default(_state(prefix, "2.13"))
    assert _bare_load(prefix) == "2.13"
    # --uninstall hides 2.13 while its builds are in use: the default moves to the newest xpu tag still shown.
    set_modulefile_hidden(_state(prefix, "2.13"), True)
    assert _bare_load(prefix) == "2.12"
    set_modulefile_hidden(_state(prefix, "2.13"), False)
    assert _bare_load(prefix) == "2.13"


def test_a_tag_being_published_counts_before_its_modulefile_exists(tmp_path: Path) -> None:
    prefix = _prefix(tmp_path, "2.13", "2.13-cpu")
    set_module_default(_state(prefix, "2.14"), published="2.14")
    _prefix(tmp_path, "2.14")  # written next, as write_entry_points does
    assert _bare_load(prefix) == "2.14"


def test_a_sites_default_link_wins_and_is_left_alone(tmp_path: Path) -> None:
    """docs/administrators.md: a site sets its own default with a `default` link, which Lmod prefers."""
    prefix = _prefix(tmp_path, "2.13", "2.13-cpu", "2.14-cuda")
    link = prefix / MODULE_DIR / "default"
    os.symlink("2.13-cpu.lua", link)
    set_module_default(_state(prefix, "2.13"))
    assert _bare_load(prefix) == "2.13-cpu"
    assert os.readlink(link) == "2.13-cpu.lua"
