"""One reporting module for the site validation job (`lightning-xpu validate`), `lightning-xpu doctor` and the
patch report (`lightning_xpu.report()`, `lightning-xpu report`).

- `model`: a check (name, status pass|fail|skip, reason) and a report (checks + every version involved);
- `schema.json` + `schema`: the committed JSON schema of a report and the small validator that enforces it;
- `markdown`: the readable rendering;
- `diagnose`: why `accelerator="xpu"` cannot be used (`unusable_reason`) and the doctor's facts;
- `checks` (+ `worker`, the processes they launch): the validation checks, one registered list;
- `cli`: the `lightning-xpu` command.

Importing this package imports neither torch nor Lightning.
"""

from __future__ import annotations

from lightning_xpu.report.model import FAIL, PASS, SKIP, STATUSES, Check, Report

__all__ = ["FAIL", "PASS", "SKIP", "STATUSES", "Check", "Report"]
