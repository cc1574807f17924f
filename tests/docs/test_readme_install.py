"""The README install shared by a CI run (tests/docs/readme_install.py) stands for the docs test's own run only
where it is this README's install block, recorded by this run, and it passed: anything else fails the docs test
in one line naming the fix, never passes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.docs.docs_services import readme_block
from tests.docs.readme_install import SHARED_HOME_VARIABLE, record_path, shared_readme_install


def write_record(home: Path, **fields: object) -> None:
    record = {"where": "README.md:1", "block": readme_block("install").text, "returncode": 0,
              "output": "lightning-xpu 2.13-cpu: installed ...\n", "transcript": "the end of its output"}
    record.update(fields)
    record_path(home).write_text(json.dumps(record))


def failure(monkeypatch: pytest.MonkeyPatch, home: Path) -> str:
    monkeypatch.setenv(SHARED_HOME_VARIABLE, str(home))
    with pytest.raises(pytest.fail.Exception) as failed:
        shared_readme_install()
    return str(failed.value)


def test_no_shared_install_is_named_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARED_HOME_VARIABLE, raising=False)
    assert shared_readme_install() is None


def test_the_recorded_run_of_this_readmes_block_is_the_install(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_record(home)
    monkeypatch.setenv(SHARED_HOME_VARIABLE, str(home))
    install = shared_readme_install()
    assert install is not None and install.home == home
    assert install.output == "lightning-xpu 2.13-cpu: installed ...\n"


def test_a_missing_record_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    message = failure(monkeypatch, tmp_path / "home")
    assert f"{record_path(tmp_path / 'home')} is missing" in message
    assert "python -m tests.docs.readme_install" in message


def test_a_record_of_another_block_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write_record(tmp_path / "home", block="bash scripts/generic/install_lightning_2.12.sh\n")
    assert "records another install block than the README's" in failure(monkeypatch, tmp_path / "home")


def test_a_failed_run_fails_with_its_output(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write_record(tmp_path / "home", returncode=1, transcript="README.md:32 exited 1 ... FAILED at step [4/11]")
    message = failure(monkeypatch, tmp_path / "home")
    assert message.startswith("the README's install command failed:") and "FAILED at step [4/11]" in message
