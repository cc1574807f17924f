"""The install engine's tagfiles module (scripts/common/install/lxpu_engine/tagfiles.py), the one place that
writes a tag's modulefile and setup script and the site's validation job: the renderer uses it to vet and preview
them."""

from __future__ import annotations

import sys
from pathlib import Path

_ENGINE_DIR = Path(__file__).resolve().parents[2] / "scripts/common/install"
if str(_ENGINE_DIR) not in sys.path:
    sys.path.append(str(_ENGINE_DIR))

from lxpu_engine.tagfiles import VALIDATION_JOB, TagData, modulefile_text, setup_text, validation_job_text  # noqa: E402

TAGFILES = "scripts/common/install/lxpu_engine/tagfiles.py"

__all__ = ["TAGFILES", "VALIDATION_JOB", "TagData", "modulefile_text", "setup_text", "validation_job_text"]
