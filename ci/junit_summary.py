"""Sum pytest JUnit XML reports into pytest's own summary words (passed, failed, skipped, errors), and check that
every skip is one CI expects.

ci/test.sh runs pytest several times (one per stage, and once per Lightning venv in the unit stage); this prints
one line of counts per call so that the script can report a stage and the whole run. The unit stage's re-runs of
tests/runtime on the older Lightning venvs (reports named `<stage>-<Lightning version>.xml`, as ci/test.sh names
them) are counted apart: "N passed, ...; re-runs on older Lightning: M passed, ...".

With `--expected-skips FILE` (tests/ci/expected_skips.toml) every skipped test of the reports must match an entry
of FILE; each one that does not is printed on stderr, one line, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import tomllib

# ci/test.sh's name for a run in an older Lightning venv: <stage>-<version>, the venv's directory name (2.2.5).
OLDER_LIGHTNING_RUN = re.compile(r".+-[0-9]+(\.[0-9]+)+")
RUNS = ("any", "older-lightning")


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0

    def add(self, other: Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped
        self.errors += other.errors

    def words(self) -> str:
        """pytest's wording: passed and failed always, skipped and errors when there are any."""
        parts = [f"{self.passed} passed", f"{self.failed} failed"]
        if self.skipped:
            parts.append(f"{self.skipped} skipped")
        if self.errors:
            parts.append(f"{self.errors} errors")
        return ", ".join(parts)


@dataclass(frozen=True)
class Skip:
    test: str  # path::name[params], like pytest's node id
    message: str
    report: Path


@dataclass(frozen=True)
class Expected:
    test: str  # fnmatch patterns
    message: str
    runs: str  # "any" or "older-lightning"
    reason: str

    def allows(self, skip: Skip) -> bool:
        if self.runs == "older-lightning" and not is_older_lightning_run(skip.report):
            return False
        return fnmatch.fnmatchcase(skip.test, self.test) and fnmatch.fnmatchcase(skip.message, self.message)


def is_older_lightning_run(report: Path) -> bool:
    return OLDER_LIGHTNING_RUN.fullmatch(report.stem) is not None


def _suites(path: Path) -> list[ET.Element]:
    root = ET.parse(path).getroot()
    return [root] if root.tag == "testsuite" else root.findall("testsuite")


def read_report(path: Path) -> Counts:
    """Counts of one report; a missing or unreadable report (pytest crashed) counts as one error."""
    try:
        suites = _suites(path)
    except (OSError, ET.ParseError):
        return Counts(errors=1)
    counts = Counts()
    for suite in suites:
        tests, failed, errors, skipped = (
            int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")
        )
        counts.add(Counts(tests - failed - errors - skipped, failed, skipped, errors))
    return counts


def node_id(classname: str, name: str, root: Path) -> str:
    """pytest's node id from JUnit's classname (dotted path of the file, then any class) and name."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (root / path).is_file():
            return "::".join([path, *parts[end:], name])
    return "::".join(["/".join(parts) + ".py", name])


def read_skips(path: Path, root: Path) -> list[Skip]:
    """The skipped tests of one report (none where it is unreadable: read_report counts that as an error)."""
    try:
        suites = _suites(path)
    except (OSError, ET.ParseError):
        return []
    return [Skip(node_id(case.get("classname", ""), case.get("name", ""), root), skipped.get("message", ""), path)
            for suite in suites for case in suite.iter("testcase") for skipped in case.findall("skipped")]


def read_expected(path: Path) -> list[Expected]:
    """The allow-list: [[skip]] entries with test, message, runs and a reason, each given."""
    entries = tomllib.loads(path.read_text()).get("skip", [])
    expected = []
    for number, entry in enumerate(entries, 1):
        missing = [key for key in ("test", "message", "runs", "reason") if not str(entry.get(key, "")).strip()]
        if missing or entry["runs"] not in RUNS:
            raise ValueError(f"{path}: skip entry {number} needs test, message, runs (one of {', '.join(RUNS)}) and"
                             f" a reason; missing or wrong: {', '.join(missing) or 'runs'}")
        expected.append(Expected(entry["test"], entry["message"], entry["runs"], entry["reason"]))
    return expected


def unexpected_skips(reports: list[Path], expected: list[Expected], root: Path) -> list[Skip]:
    return [skip for report in reports for skip in read_skips(report, root)
            if not any(entry.allows(skip) for entry in expected)]


def summary(reports: list[Path]) -> str:
    """One line: the counts of the runs, then those of the re-runs on older Lightning where there are any."""
    main, reruns = Counts(), Counts()
    for report in reports:
        (reruns if is_older_lightning_run(report) else main).add(read_report(report))
    if not any(is_older_lightning_run(report) for report in reports):
        return main.words()
    return f"{main.words()}; re-runs on older Lightning: {reruns.words()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path, help="JUnit XML files written by pytest --junitxml")
    parser.add_argument("--expected-skips", type=Path, metavar="FILE",
                        help="exit 1 on a skipped test that no entry of FILE allows (tests/ci/expected_skips.toml)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository the tests are in (default: .)")
    args = parser.parse_args(argv)
    print(summary(args.reports))
    if args.expected_skips is None:
        return 0
    try:
        expected = read_expected(args.expected_skips)
    except (OSError, ValueError) as error:  # tomllib.TOMLDecodeError is a ValueError
        print(f"cannot read the expected skips: {error}", file=sys.stderr)
        return 1
    found = unexpected_skips(args.reports, expected, args.root)
    for skip in found:
        print(f"unexpected skip: {skip.test} ({skip.message}) in {skip.report.name}: make it run, or add it to"
              f" {args.expected_skips} with the reason", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
