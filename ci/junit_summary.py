"""Sum pytest JUnit XML reports into pytest's own summary words (passed, failed, skipped, errors).

ci/test.sh runs pytest several times (one per stage, and once per Lightning venv in the unit stage);
this prints one line of counts per call so that the script can report a stage and the whole run.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


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


def read_report(path: Path) -> Counts:
    """Counts of one report; a missing or unreadable report (pytest crashed) counts as one error."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return Counts(errors=1)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = Counts()
    for suite in suites:
        tests, failed, errors, skipped = (
            int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")
        )
        counts.add(Counts(tests - failed - errors - skipped, failed, skipped, errors))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path, help="JUnit XML files written by pytest --junitxml")
    args = parser.parse_args(argv)
    total = Counts()
    for report in args.reports:
        total.add(read_report(report))
    print(total.words())
    return 0


if __name__ == "__main__":
    sys.exit(main())
