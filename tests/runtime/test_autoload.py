"""Zero code change (issue 2, item 10): the `.pth` hook patches Lightning when it is imported, nothing more.

Each case runs in a fresh interpreter that processes a site directory holding `lightning_xpu-autoload.pth` with the
line docs/architecture.md prescribes (`site.addsitedir` does what interpreter start-up does for site-packages), then
imports Lightning the way a user script does, without `import lightning_xpu`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lightning_grid import ON_NEWEST_LIGHTNING, newest_lightning_only

REPO = Path(__file__).resolve().parents[2]

# Runs in the subprocess: argv[1] = site dir (or "" for none), argv[2] = statements to run, then reports.
REPORT = r"""
import json, site, sys
if sys.argv[1]:
    site.addsitedir(sys.argv[1])
after_pth = sorted(m for m in ("torch", "lightning", "pytorch_lightning", "lightning_fabric") if m in sys.modules)
exec(sys.argv[2])
from lightning_xpu._patching import applied, is_wrapped
report = {"after_pth": after_pth, "hook": "lightning_xpu._autoload" in sys.modules,
          "imported": sorted(m for m in ("lightning", "pytorch_lightning", "lightning_fabric") if m in sys.modules),
          "patches": len(applied()), "distinct": len({(id(p.owner), p.name) for p in applied()})}
for trainer, fabric in (("lightning.pytorch", "lightning.fabric"), ("pytorch_lightning", "lightning_fabric")):
    if fabric in sys.modules:
        connector = sys.modules[fabric + ".connector"]._Connector
        report[fabric] = ["xpu" in sys.modules[fabric + ".accelerators"].ACCELERATOR_REGISTRY,
                          is_wrapped(connector, "_choose_strategy"), is_wrapped(connector, "_check_and_init_precision")]
    if trainer in sys.modules:
        connector = sys.modules[trainer + ".trainer.connectors.accelerator_connector"]._AcceleratorConnector
        report[trainer] = ["xpu" in sys.modules[trainer + ".accelerators"].AcceleratorRegistry,
                           is_wrapped(connector, "_choose_strategy"),
                           is_wrapped(sys.modules[trainer + ".trainer.setup"], "_log_device_info")]
        try:
            sys.modules[trainer].Trainer(accelerator="xpu", logger=False)
        except Exception as error:
            report[trainer].append(str(error).split(" since ")[0].split(":")[0])
print(json.dumps(report))
"""

CASES: dict[str, tuple[bool, str, dict[str, str]]] = {
    # name: (with the .pth, statements, extra environment)
    "import lightning": (True, "import lightning", {}),
    "from lightning.pytorch import Trainer": (True, "from lightning.pytorch import Trainer", {}),
    "import pytorch_lightning": (True, "import pytorch_lightning", {}),
    "import lightning_fabric": (True, "import lightning_fabric", {}),
    "disabled": (True, "import lightning, pytorch_lightning", {"LIGHTNING_XPU_DISABLE": "1"}),
    "import lightning_xpu twice, after Lightning": (
        True, "import lightning\nimport lightning_xpu\nimport lightning_xpu\nlightning_xpu._apply.apply_to_imported()",
        {},
    ),
    "no .pth, import lightning_xpu after Lightning": (False, "import lightning\nimport lightning_xpu", {}),
}


# On every Lightning: the hook patches each namespace when a user script imports it (what the hook waits for is
# Lightning's module layout, which changes between releases). The other cases check our own code (the disable switch,
# patching once, the hook for lightning_fabric alone and for a `from` import, which go through the same hook): one
# Lightning is enough for them, and each case is an interpreter importing all of Lightning.
EVERY_LIGHTNING = ("import lightning", "import pytorch_lightning")


def _pth_line() -> str:
    """The one line docs/architecture.md prescribes for `lightning_xpu-autoload.pth`."""
    text = (REPO / "docs" / "architecture.md").read_text()
    lines = re.findall(r"^\s*`(import .*lightning_xpu\._autoload.*)`\.?\s*$", text, flags=re.MULTILINE)
    assert len(lines) == 1, "docs/architecture.md should show exactly one .pth line"
    return lines[0]


def _run(site_dir: Path, with_pth: bool, statements: str, extra: dict[str, str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "LIGHTNING_XPU_DISABLE"}
    env.update(extra, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    argv = [sys.executable, "-c", REPORT, str(site_dir) if with_pth else "", statements]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    site_dir = tmp_path_factory.mktemp("site-packages")
    (site_dir / "lightning_xpu-autoload.pth").write_text(_pth_line() + "\n")
    names = list(CASES) if ON_NEWEST_LIGHTNING else list(EVERY_LIGHTNING)
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        results = pool.map(lambda name: _run(site_dir, *CASES[name]), names)
        return dict(zip(names, results))


PATCHED_TRAINER = [True, True, True, "XPU cannot be used"]
PATCHED_FABRIC = [True, True, True]


def test_the_pth_line_is_cheap(reports) -> None:
    assert reports["import lightning"]["after_pth"] == []  # neither torch nor Lightning imported at start-up
    assert reports["import lightning"]["hook"]


@pytest.mark.parametrize("case", ["import lightning",
                                  pytest.param("from lightning.pytorch import Trainer", marks=newest_lightning_only)])
def test_importing_lightning_applies_the_patches(reports, case) -> None:
    report = reports[case]
    assert report["lightning.pytorch"] == PATCHED_TRAINER
    assert report["lightning.fabric"] == PATCHED_FABRIC


def test_importing_pytorch_lightning_applies_the_patches(reports) -> None:
    report = reports["import pytorch_lightning"]
    assert report["pytorch_lightning"] == PATCHED_TRAINER
    assert report["lightning_fabric"] == PATCHED_FABRIC


@newest_lightning_only
def test_importing_lightning_fabric_alone_patches_fabric_only(reports) -> None:
    report = reports["import lightning_fabric"]
    assert report["imported"] == ["lightning_fabric"]
    assert report["lightning_fabric"] == PATCHED_FABRIC


@newest_lightning_only
def test_disable_turns_everything_off(reports) -> None:
    report = reports["disabled"]
    assert report["patches"] == 0
    assert report["lightning.pytorch"] == [False, False, False, "You selected an invalid accelerator name"]
    assert report["pytorch_lightning"][:3] == [False, False, False]
    assert report["lightning.fabric"] == report["lightning_fabric"] == [False, False, False]


@newest_lightning_only
@pytest.mark.parametrize("case", ["import lightning_xpu twice, after Lightning",
                                  "no .pth, import lightning_xpu after Lightning"])
def test_importing_again_or_after_lightning_patches_once(reports, case) -> None:
    report = reports[case]
    assert report["lightning.pytorch"] == PATCHED_TRAINER
    # each (owner, name) wrapped once: a second wrap of the same method would be a second entry
    assert report["patches"] == report["distinct"] == reports["import lightning"]["patches"] > 0
