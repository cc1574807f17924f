"""The compatibility table (docs/compatibility.md), generated from the returned reports in docs/reports/:
`python -m lightning_xpu.validation.compat` writes it, `--check` exits 1 when the committed table differs.

One row per report: its site, PyTorch, Lightning, oneCCL (as oneCCL's own log named its version; gloo where it
stood in), the checks that passed and failed. A report named `ci-*.json` is CI's own CPU run, marked as such: it
shows the report path works end to end, and nothing about Intel GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lightning_xpu.validation.comms import CHECK_NAME
from lightning_xpu.validation.schema import check_report

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "docs" / "reports"
TABLE = REPO / "docs" / "compatibility.md"
CI_PREFIX = "ci-"
HEADER = """# Compatibility: what returned reports show

Generated from [`docs/reports/`](reports/README.md) by `python -m lightning_xpu.validation.compat` (do not edit; a
test checks that this file matches). Each row is one site validation report sent back
([how to send one](xpu-guide.md#sending-a-report-back)); rows marked *CI* are this project's own CPU run (no Intel
GPU: every XPU check skipped, gloo standing in for oneCCL), which proves the report's path, not the hardware.
What no report has settled yet is listed in one place: [what no source settles](xpu-guide.md#what-no-source-settles).

| report | site | PyTorch | Lightning | oneCCL | passed | failed |
|---|---|---|---|---|---|---|
"""


def load(folder: Path) -> dict[str, dict[str, Any]]:
    """Every `*.json` report in `folder`, schema-checked (a broken one raises with its file name)."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        try:
            check_report(data)
        except ValueError as error:
            raise ValueError(f"{path.name}: {error}") from None
        found[path.name] = data
    return found


def oneccl_of(report: dict[str, Any]) -> str:
    """The oneCCL version the communication check's ranks logged, or what stood in for it."""
    for check in report["checks"]:
        detail = check.get("detail") or {}
        if check["name"] != CHECK_NAME or not detail:
            continue
        versions = {rank.get("library_version") for scope in detail.get("scopes", {}).values()
                    for rank in scope.get("oneccl_log", []) if rank.get("library_version")}
        if versions:
            return ", ".join(sorted(str(v) for v in versions))
        if detail.get("backend") == "gloo":
            return "none (gloo)"
    return "-"


def row(name: str, report: dict[str, Any]) -> str:
    versions = report["versions"]
    site = versions.get("install_site") or name.removeprefix(CI_PREFIX).split("-")[0]
    site += " (*CI*, CPU)" if name.startswith(CI_PREFIX) else ""
    lightning = versions.get("lightning") or versions.get("pytorch_lightning") or "-"
    passed = ", ".join(c["name"] for c in report["checks"] if c["status"] == "pass") or "-"
    failed = ", ".join(c["name"] for c in report["checks"] if c["status"] == "fail") or "-"
    return (f"| [{name}](reports/{name}) | {site} | {versions.get('torch') or '-'} | {lightning} |"
            f" {oneccl_of(report)} | {passed} | {failed} |")


def render(folder: Path = REPORTS) -> str:
    """The whole table file; CI's entries first."""
    reports = load(folder)
    names = sorted(reports, key=lambda name: (not name.startswith(CI_PREFIX), name))
    return HEADER + "".join(row(name, reports[name]) + "\n" for name in names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lightning_xpu.validation.compat", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=Path, default=REPORTS, help="folder of returned reports")
    parser.add_argument("--out", type=Path, default=TABLE, help="the table to write")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when the table differs")
    args = parser.parse_args(argv)
    text = render(args.reports)
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            print(f"{args.out} is not the table of {args.reports}: run python -m lightning_xpu.validation.compat",
                  file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text.splitlines()) - HEADER.count(chr(10))} report(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
