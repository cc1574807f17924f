"""The rule that binds a lock to its recipe lives with the install engine, which runs it at install time from the
repository the job installs from: scripts/common/install/lockbind.py (standard library only). The renderer loads
that one file by path, so `check`, `render`, `lock` and the install apply the same rule."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

LOCKBIND_PY = Path(__file__).resolve().parents[2] / "scripts" / "common" / "install" / "lockbind.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_lxpu_lockbind", LOCKBIND_PY)
    assert spec is not None and spec.loader is not None, LOCKBIND_PY
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_RULE = _load()
HASH_LINE = _RULE.HASH_LINE
RECIPE_LINE: str = _RULE.RECIPE_LINE
LIGHTNING_PACKAGES: tuple[str, ...] = _RULE.LIGHTNING_PACKAGES
header_lines = _RULE.header_lines
lightning_mismatch = _RULE.lightning_mismatch
problem = _RULE.problem
