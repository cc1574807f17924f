"""The README's install command, run once per CI run and shared by the stages that need a 2.13-cpu install.

A real install takes minutes here; the docs, multinode and benchmarks stages each needed one (issue 28). So
`bash ci/test.sh` runs the README's own install block (the one marked `role=install`) once before its stages, exactly
as the docs test runs it (`run_block`, `block_env`: the repository as cwd, HOME a fresh directory), and records what
it printed and how it exited beside that HOME. The docs test then reads that record instead of installing again
(`LXPU_SHARED_INSTALL_HOME`), and checks it as it checks its own run: same block, same assertions. The multinode
stage's ranks load the same install through its modulefile.

    python -m tests.docs.readme_install HOME   # run the README's install block with HOME, record it, exit as it did
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docs.docs_blocks import REPO, block_env, run_block, transcript
from tests.docs.docs_services import DocsInstall, readme_block

INSTALL_TIMEOUT_S = 1800
# Set by ci/test.sh: the HOME whose lightning-xpu/ the README's install block made in this CI run.
SHARED_HOME_VARIABLE = "LXPU_SHARED_INSTALL_HOME"
RECORD_NAME = "readme-install.json"


def record_path(home: Path) -> Path:
    """Where the run of the README's install block with this HOME is recorded (beside HOME, not in it)."""
    return home.parent / f"{home.name}.{RECORD_NAME}"


def run_readme_install(home: Path) -> dict[str, Any]:
    """Run the README's install block with HOME (created) and record the run beside HOME; the record."""
    record_path(home).unlink(missing_ok=True)  # an earlier run's record never stands for this one
    block = readme_block("install")
    home.mkdir(parents=True, exist_ok=True)
    result = run_block(block, cwd=REPO, env=block_env(home), script=home.parent / f"{home.name}.install-block.sh",
                       timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    record = {"where": block.where, "block": block.text, "returncode": result.returncode,
              "output": result.stdout + result.stderr, "transcript": transcript(block, result)}  # fmt: skip
    record_path(home).write_text(json.dumps(record))
    return record


def installed(home: Path, record: dict[str, Any]) -> DocsInstall:
    """The install a recorded run of the README's install block made; fails the test where that run failed."""
    if record["returncode"] != 0:
        pytest.fail("the README's install command failed:\n" + record["transcript"])
    return DocsInstall(home, record["output"])


def shared_readme_install() -> DocsInstall | None:
    """The README install this CI run made (LXPU_SHARED_INSTALL_HOME), None where no such run is named. Fails the
    test where its record is missing, where the README's block has changed since, or where the block failed."""
    shared = os.environ.get(SHARED_HOME_VARIABLE)
    if not shared:
        return None
    home = Path(shared)
    path = record_path(home)
    if not path.is_file():
        pytest.fail(f"{SHARED_HOME_VARIABLE}={home} but {path} is missing: run the README's install block with"
                    f" python -m tests.docs.readme_install {home} (bash ci/test.sh does), or unset it")
    record = json.loads(path.read_text())
    if record["block"] != readme_block("install").text:
        pytest.fail(f"{path} records another install block than the README's: rerun"
                    f" python -m tests.docs.readme_install {home}, or unset {SHARED_HOME_VARIABLE}")
    return installed(home, record)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1].strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    home = Path(argv[0]).resolve()
    record = run_readme_install(home)
    print(record["output"], end="")
    print(f"{record['where']}: exited {record['returncode']} (HOME={home}; recorded in {record_path(home)})")
    return int(record["returncode"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
