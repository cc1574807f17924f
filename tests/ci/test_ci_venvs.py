"""The venvs ci/venvs.sh builds: one per Lightning version, each on base's one torch 2.13.0+cpu."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.ci.ci_helpers import require_env_path

REPORT = """
import json, os, importlib.metadata as m, torch
print(json.dumps({
    "torch": torch.__version__,
    "torch_file": os.path.realpath(torch.__file__),
    "lightning": m.version("lightning"),
    "pytorch-lightning": m.version("pytorch-lightning"),
}))
"""


def test_each_lightning_venv_has_its_version_on_base_torch() -> None:
    venv_dir = require_env_path("LXPU_VENV_DIR")
    base = require_env_path("LXPU_PYTHON").parent.parent.resolve()
    venvs = sorted(path for path in venv_dir.iterdir())
    assert [path.name.rsplit(".", 1)[0] for path in venvs] == ["2.2", "2.3", "2.4", "2.5", "2.6"]
    for venv in venvs:
        result = subprocess.run(
            [str(venv / "bin" / "python"), "-c", REPORT],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        report = json.loads(result.stdout.strip().splitlines()[-1])
        assert report["torch"] == "2.13.0+cpu", venv
        assert Path(report["torch_file"]).is_relative_to(base), venv
        assert report["lightning"] == report["pytorch-lightning"] == venv.name
    own_torch = [
        venv for venv in venvs if not venv.is_symlink() and list(venv.glob("lib/*/site-packages/torch"))
    ]
    assert not own_torch, "these venvs hold a torch of their own"
