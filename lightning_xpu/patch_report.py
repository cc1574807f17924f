"""The patch report: which Lightning patches lightning_xpu expected and applied (`lightning_xpu.report()`).

The facts come from `lightning_xpu.versions.patch_status()` (the patch manifest of issue 13), imported lazily;
a build without that module says so instead of printing a table.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

UNAVAILABLE = "patch report unavailable: lightning_xpu.versions.patch_status() is not in this build"


def patch_rows() -> list[Any] | None:
    """`lightning_xpu.versions.patch_status()` where this build has it (helper module of issue 13), else None."""
    try:
        from lightning_xpu import versions  # type: ignore[attr-defined]
    except ImportError:
        return None
    return list(versions.patch_status())


def patch_lines(rows: list[Any] | None) -> list[str]:
    if rows is None:
        return [UNAVAILABLE]
    lines = ["| patch | owner | expected | applied | detail |", "|---|---|---|---|---|"]
    for row in rows:
        flag = "yes" if row.applied else ("**NO**" if row.expected else "no")
        lines.append(f"| {row.name} | {row.owner} | {'yes' if row.expected else 'no'} | {flag} | {row.detail} |")
    missing = [row.name for row in rows if row.expected and not row.applied]
    lines.append(f"{len(rows)} patches, {sum(row.applied for row in rows)} applied"
                 + (f"; expected but NOT applied: {', '.join(missing)}" if missing else "; all expected applied"))
    return lines


def print_patch_report(file: TextIO | None = None) -> None:
    """Print the lightning_xpu version, Lightning's versions and the patch table (for support requests)."""
    from lightning_xpu._version import __version__
    from lightning_xpu.install_facts import DISTRIBUTIONS, distribution_version

    out = file or sys.stdout
    names = ("lightning", "pytorch_lightning")
    found = ", ".join(f"{name} {distribution_version(DISTRIBUTIONS[name]) or 'not installed'}" for name in names)
    print(f"lightning_xpu {__version__}; {found}", file=out)
    for line in patch_lines(patch_rows()):
        print(line, file=out)
