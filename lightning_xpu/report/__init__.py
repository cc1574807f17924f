"""One reporting module for the smoke and site validation jobs (`lightning-xpu validate`), `lightning-xpu doctor`
and the patch report (`lightning_xpu.report()`, `lightning-xpu report`).

- `model`: a check (name, status pass|fail|skip, reason) and a report (checks + every version involved);
- `schema.json` + `schema`: the committed JSON schema of a report and the small validator that enforces it;
- `markdown`: the readable rendering;
- `diagnose`: why `accelerator="xpu"` cannot be used (`unusable_reason`) and the doctor's facts;
- `framework`: the one check framework of `lightning-xpu validate` (CheckFailed/CheckSkipped, the registry per
  level, the schedule, local launches); `smoke` (the install's smoke job) and `checks` (the site validation job,
  + `worker`, the processes they launch) are its two levels; `oneccl`: the launch variables each rank records;
- `cli`: the `lightning-xpu` command.

Importing this package imports neither torch nor Lightning.

`lightning_xpu.report` is both this package and the public function of issue 13: `lightning_xpu.report()` prints
the patch report. Importing a subpackage sets it as an attribute of its parent, which would hide a function of the
same name, so the package's module object itself is callable.
"""

from __future__ import annotations

import sys
import types
from typing import Any, TextIO

from lightning_xpu.report.model import FAIL, PASS, SKIP, STATUSES, Check, Report

__all__ = ["FAIL", "PASS", "SKIP", "STATUSES", "Check", "Report"]


class _CallableReportModule(types.ModuleType):
    def __call__(self, file: TextIO | None = None) -> None:
        """Print the patch report: lightning_xpu's and Lightning's versions, and each patch expected/applied."""
        from lightning_xpu.report.patches import print_patch_report

        print_patch_report(file)

    def __repr__(self) -> Any:
        return "<lightning_xpu.report: call it to print the patch report>"


sys.modules[__name__].__class__ = _CallableReportModule
