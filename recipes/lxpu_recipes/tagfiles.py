"""The install engine's tagfiles module (scripts/common/install/lxpu_engine/tagfiles.py), the one place that
writes a tag's modulefile and setup script and the site's validation job: the renderer uses it to vet and preview
them."""

from __future__ import annotations

import sys
from pathlib import Path

_ENGINE_DIR = Path(__file__).resolve().parents[2] / "scripts/common/install"
if str(_ENGINE_DIR) not in sys.path:
    sys.path.append(str(_ENGINE_DIR))

from lxpu_engine.tagfiles import (  # noqa: E402
    MODULE_DIR,
    MODULEFILE_BODY_NAME,
    SETUP_HELPER,
    SETUP_HELPER_NAME,
    SETUP_LIBRARY_NAME,
    VALIDATION_JOB,
    TagData,
    module_name,
    modulefile_name,
    modulefile_text,
    setup_name,
    setup_text,
    validation_job_text,
)

TAGFILES = "scripts/common/install/lxpu_engine/tagfiles.py"

__all__ = [
    "MODULEFILE_BODY_NAME", "MODULE_DIR", "SETUP_HELPER", "SETUP_HELPER_NAME", "SETUP_LIBRARY_NAME",
    "TAGFILES", "VALIDATION_JOB", "TagData",
    "module_name", "modulefile_name", "modulefile_text", "setup_name", "setup_text", "validation_job_text",
]  # fmt: skip
