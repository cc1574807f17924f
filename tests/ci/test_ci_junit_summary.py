"""ci/junit_summary.py sums pytest JUnit reports into pytest's summary words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.ci.ci_helpers import REPO


def write_report(path: Path, tests: int, failures: int, errors: int, skipped: int) -> Path:
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
        f'tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}"/></testsuites>'
    )
    return path


def summary(*paths: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(REPO / "ci" / "junit_summary.py"), *map(str, paths)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def test_sums_reports_of_several_runs(tmp_path: Path) -> None:
    first = write_report(tmp_path / "a.xml", tests=10, failures=1, errors=0, skipped=2)
    second = write_report(tmp_path / "b.xml", tests=5, failures=0, errors=1, skipped=0)
    assert summary(first, second) == "11 passed, 1 failed, 2 skipped, 1 errors"


def test_zero_skips_and_errors_are_left_out(tmp_path: Path) -> None:
    assert summary(write_report(tmp_path / "a.xml", 3, 0, 0, 0)) == "3 passed, 0 failed"


def test_missing_or_broken_report_counts_as_an_error(tmp_path: Path) -> None:
    (tmp_path / "broken.xml").write_text("<testsuites")
    assert summary(tmp_path / "absent.xml", tmp_path / "broken.xml") == "0 passed, 0 failed, 2 errors"


def test_no_reports_is_zero() -> None:
    assert summary() == "0 passed, 0 failed"


# ---- re-runs on older Lightning, and the expected skips -----------------------------------------------------------

EXPECTED_SKIPS = REPO / "tests" / "ci" / "expected_skips.toml"


def write_cases(path: Path, *cases: tuple[str, str, str | None]) -> Path:
    """A report of (classname, name, skip message or None for a pass) test cases, as pytest writes it."""
    rows = "".join(
        f'<testcase classname="{classname}" name="{name}" time="0.1">'
        + (f'<skipped type="pytest.skip" message="{message}">{classname}: {message}</skipped>' if message else "")
        + "</testcase>"
        for classname, name, message in cases
    )
    skipped = sum(message is not None for _, _, message in cases)
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
                    f'failures="0" skipped="{skipped}" tests="{len(cases)}">{rows}</testsuite></testsuites>')
    return path


def check(*paths: Path, allowed: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "ci" / "junit_summary.py"), "--expected-skips", str(allowed), *map(str, paths)],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip


def test_re_runs_on_older_lightning_are_counted_apart(tmp_path: Path) -> None:
    """ci/test.sh names a run in an older Lightning venv <stage>-<version> (its venv's name)."""
    newest = write_report(tmp_path / "unit-1.xml", tests=10, failures=0, errors=0, skipped=0)
    older = [write_report(tmp_path / f"unit-{version}.xml", tests=4, failures=0, errors=0, skipped=1)
             for version in ("2.2.5", "2.5.6")]
    services = write_report(tmp_path / "services-1.xml", tests=3, failures=1, errors=0, skipped=0)
    expected = "12 passed, 1 failed; re-runs on older Lightning: 6 passed, 0 failed, 2 skipped"
    assert summary(newest, *older, services) == expected


def allow_list(tmp_path: Path, runs: str) -> Path:
    path = tmp_path / "expected.toml"
    path.write_text('[[skip]]\ntest = "tests/runtime/test_exit.py::*"\nmessage = "* does not exist in this Lightning"\n'
                    f'runs = "{runs}"\nreason = "the module came with a later Lightning"\n')
    return path


def test_a_skip_on_the_list_passes_and_one_off_it_fails(tmp_path: Path) -> None:
    listed = ("tests.runtime.test_exit", "test_teardown[fabric]", "strategies/fsdp.py does not exist in this Lightning")
    unlisted = ("tests.runtime.test_exit", "test_other", "no GPU here")
    allowed = allow_list(tmp_path, "any")
    assert check(write_cases(tmp_path / "unit-1.xml", listed, ("tests.runtime.test_exit", "test_ok", None)),
                 allowed=allowed).returncode == 0
    done = check(write_cases(tmp_path / "unit-2.xml", listed, unlisted), allowed=allowed)
    assert done.returncode == 1 and done.stdout == "0 passed, 0 failed, 2 skipped\n"
    assert done.stderr.splitlines() == [
        f"unexpected skip: tests/runtime/test_exit.py::test_other (no GPU here) in unit-2.xml: make it run, or add it"
        f" to {allowed} with the reason"]


def test_a_skip_allowed_on_older_lightning_fails_on_the_newest(tmp_path: Path) -> None:
    skip = ("tests.runtime.test_exit", "test_teardown", "strategies/fsdp.py does not exist in this Lightning")
    allowed = allow_list(tmp_path, "older-lightning")
    assert check(write_cases(tmp_path / "unit-2.2.5.xml", skip), allowed=allowed).returncode == 0
    assert check(write_cases(tmp_path / "unit-1.xml", skip), allowed=allowed).returncode == 1


def test_an_entry_without_a_reason_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "expected.toml"
    path.write_text('[[skip]]\ntest = "tests/*"\nmessage = "*"\nruns = "any"\n')
    done = check(allowed=path)
    assert done.returncode == 1 and "skip entry 1 needs test, message, runs" in done.stderr and "reason" in done.stderr


def test_the_committed_list_is_short_reasoned_and_names_tests_that_exist() -> None:
    """Each entry says why; its pattern names test files that exist (a stale entry would hide a new skip); no entry
    allows every skip of a directory."""
    import tomllib

    entries = tomllib.loads(EXPECTED_SKIPS.read_text())["skip"]
    assert 0 < len(entries) <= 8, f"{len(entries)} expected skips: the list must stay short"
    assert check(allowed=EXPECTED_SKIPS).returncode == 0  # well formed: every key, a known `runs`
    for entry in entries:
        assert len(entry["reason"].split()) >= 5, entry
        assert entry["message"].strip("*"), f"an entry that allows any message: {entry}"
        files = sorted(REPO.glob(entry["test"].split("::")[0]))
        assert any(path.name.startswith("test_") and path.suffix == ".py" for path in files), entry
