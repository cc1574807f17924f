"""Validation and reports: `lightning-xpu validate` (the install's smoke job and the site validation job), the
report they and `lightning-xpu doctor` write, and its schema.

- `model`: a check (name, status pass|fail|skip, reason) and a report (checks + every version involved);
- `schema.json` + `schema`: the committed JSON schema of a report and the small validator that enforces it;
- `markdown`: the readable rendering;
- `framework`: the one check framework of `lightning-xpu validate` (CheckFailed/CheckSkipped, the registry per
  level, the schedule, local launches); `smoke` (the install's smoke job) and `checks` (the site validation job,
  + `worker`, the processes they launch) are its two levels; `oneccl`: the launch variables each rank records;
  `pincheck`: whether the installed packages are still the environment's pins.

A tool: the runtime (everything in lightning_xpu outside `commands/` and `validation/`) never imports it
(tests/runtime/test_import_graph.py). Importing this package imports neither torch nor Lightning.
"""

from __future__ import annotations

from lightning_xpu.validation.model import FAIL, PASS, SKIP, STATUSES, Check, Report

__all__ = ["FAIL", "PASS", "SKIP", "STATUSES", "Check", "Report"]
