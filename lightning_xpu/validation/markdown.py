"""The readable rendering of a report (the JSON stays the record; this is what a person reads or pastes)."""

from __future__ import annotations

from typing import Any

_MARK = {"pass": "passed", "fail": "**FAILED**", "skip": "skipped"}


def _cell(value: Any) -> str:
    text = "-" if value is None or value == "" else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render(data: dict[str, Any]) -> str:
    summary = data["summary"]
    title = f"{data.get('level', 'site')} validation" if data["kind"] == "validation" else "doctor"
    lines = [
        f"# lightning-xpu {title} report",
        "",
        f"{'All checks passed or were skipped' if data['ok'] else 'Some checks FAILED'}:"
        f" {summary['pass']} passed, {summary['fail']} failed, {summary['skip']} skipped."
        f" Host `{data['host']}`, {data['created']}.",
        "",
    ]
    if data["checks"]:
        lines += ["## Checks", "", "| check | result | reason | seconds |", "|---|---|---|---|"]
        lines += [f"| `{c['name']}` | {_MARK[c['status']]} | {_cell(c['reason'])} | {c['seconds']:.1f} |"
                  for c in data["checks"]]
        lines.append("")
    from lightning_xpu.validation.comms_report import markdown_section

    lines += markdown_section(data)
    launched = [check for check in data["checks"] if check.get("oneccl")]
    if launched:
        lines += ["## oneCCL launch variables", "",
                  "What each rank of a check saw after its process group was created (`CCL_*` and the launcher's"
                  " local-rank variables oneCCL reads).", "",
                  "| check | rank | host | variables |", "|---|---|---|---|"]
        lines += [f"| `{check['name']}` | {rank['rank']} | {_cell(rank.get('host'))} |"
                  f" {_cell(', '.join(f'{k}={v}' for k, v in rank['variables'].items()) or 'none set')} |"
                  for check in launched for rank in check["oneccl"]]
        lines.append("")
    lines += ["## Versions", "", "| component | version |", "|---|---|"]
    lines += [f"| {name} | {_cell(value)} |" for name, value in data["versions"].items()]
    lines.append("")
    if data["devices"]:
        keys = sorted({key for device in data["devices"] for key in device} - {"index", "name"})
        lines += ["## Devices", "", "| index | name | " + " | ".join(keys) + " |",
                  "|---|---|" + "---|" * len(keys)]
        lines += [f"| {d['index']} | {_cell(d['name'])} | " + " | ".join(_cell(d.get(k)) for k in keys) + " |"
                  for d in data["devices"]]
        lines.append("")
    if data["notes"]:
        lines += ["## Notes", ""] + [f"- {note}" for note in data["notes"]] + [""]
    if data["environment"]:
        lines += ["## Environment", "", "```"] + [f"{k}={v}" for k, v in data["environment"].items()] + ["```", ""]
    return "\n".join(lines)
