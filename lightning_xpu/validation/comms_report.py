"""The communication check's part of a report (lightning_xpu/validation/comms.py): its picture, bus bandwidth against
message size as SVG (written with the standard library, one polyline per scope and collective, the nominal link
figure dashed), and its Markdown section (tables, the picture's link, the attempts, the site-file lines, what oneCCL
said per rank)."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

# The check's name in reports (lightning_xpu/validation/comms.py registers it under this name).
CHECK_NAME = "communication"
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 720, 420, 70, 180, 30, 50
COLOURS = {"all_reduce": "#1f77b4", "all_gather": "#2ca02c", "reduce_scatter": "#d62728"}
DASHES = {"node": "", "nodes": "6,3"}


def _size_label(size: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def svg_chart(scopes: dict[str, dict[str, Any]]) -> str:
    """Bus bandwidth (GB/s) against message size (bytes, log2 axis) of every scope's results."""
    points = [row for scope in scopes.values() for row in scope.get("results", [])]
    if not points:
        raise ValueError("no results to draw")
    nominal = [scope["nominal_gbps"] / 8 for scope in scopes.values() if scope.get("nominal_gbps")]
    low, high = math.log2(min(r["bytes"] for r in points)), math.log2(max(r["bytes"] for r in points))
    top = max([r["busbw_gbs"] for r in points] + nominal) * 1.1 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(size: float) -> float:
        return LEFT + (math.log2(size) - low) / ((high - low) or 1) * plot_w

    def y(value: float) -> float:
        return TOP + plot_h - value / top * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif"'
             ' font-size="11">',
             '<title>lightning-xpu communication check: bus bandwidth against message size</title>',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>',
             f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">message size</text>',
             f'<text x="15" y="{TOP + plot_h / 2}" transform="rotate(-90 15 {TOP + plot_h / 2})"'
             ' text-anchor="middle">bus bandwidth (GB/s)</text>']
    for exponent in range(math.ceil(low), math.floor(high) + 1, 4):
        parts.append(f'<text x="{x(2 ** exponent):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">'
                     f'{escape(_size_label(2 ** exponent))}</text>')
    for tick in range(5):
        value = top * tick / 4
        parts.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.3g}</text>')
    legend = TOP
    for scope_name, scope in scopes.items():
        for operation, colour in COLOURS.items():
            rows = [r for r in scope.get("results", []) if r["operation"] == operation]
            if not rows:
                continue
            line = " ".join(f"{x(r['bytes']):.1f},{y(r['busbw_gbs']):.1f}" for r in rows)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"'
                         f' stroke-dasharray="{DASHES.get(scope_name, "")}" points="{line}"/>')
            parts.append(f'<text x="{WIDTH - RIGHT + 10}" y="{legend + 4}" fill="{colour}">'
                         f'{escape(operation)} ({escape(scope_name)})</text>')
            legend += 16
        if scope.get("nominal_gbps"):
            level = y(scope["nominal_gbps"] / 8)
            parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{level:.1f}" y2="{level:.1f}" stroke="#888"'
                         ' stroke-dasharray="2,4"/>')
            parts.append(f'<text x="{LEFT + 4}" y="{level - 4:.1f}" fill="#555">nominal {scope_name}:'
                         f' {scope["nominal_gbps"]:g} Gb/s</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_pictures(checks: list[Any], markdown_path: Path) -> list[Path]:
    """Write the communication check's picture next to the Markdown report (<stem>-communication.svg) and name it
    in the check's detail (`svg`, relative to the report); the paths written."""
    written = []
    for result in checks:
        scopes = (result.detail or {}).get("scopes") if result.name == CHECK_NAME else None
        if not scopes or not any(scope.get("results") for scope in scopes.values()):
            continue
        path = markdown_path.with_name(f"{markdown_path.stem}-{CHECK_NAME}.svg")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg_chart(scopes))
        result.detail["svg"] = path.name
        written.append(path)
    return written


def markdown_section(data: dict[str, Any]) -> list[str]:
    """The report's "Communication" section (empty when the check did not run)."""
    found = next((c for c in data["checks"] if c["name"] == CHECK_NAME and c.get("detail")), None)
    if found is None:
        return []
    detail = found["detail"]
    lines = ["## Communication", "",
             f"Backend {detail['backend']}, messages up to {_size_label(detail['max_bytes'])}, deadline"
             f" {detail['deadline_s']:g} s per attempt. Bus bandwidth as nccl-tests computes it (busbw = algbw x"
             " 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and reduce-scatter; GB/s = 10^9 bytes/s).", ""]
    if detail.get("svg"):
        lines += [f"![bus bandwidth against message size]({detail['svg']})", ""]
    for name, scope in detail["scopes"].items():
        lines += _scope_lines(name, scope)
    return lines


def _scope_lines(name: str, scope: dict[str, Any]) -> list[str]:
    title = "Within a node" if name == "node" else "Across nodes"
    nominal = f", nominal link {scope['nominal_gbps']:g} Gb/s" if scope.get("nominal_gbps") else ", no nominal figure"
    lines = [f"### {title}: {scope['ranks']} ranks{nominal}", "", "| attempt | result | seconds | reason |",
             "|---|---|---|---|"]
    lines += [f"| {a['combination']} | {a['status']} | {a['seconds']} | {a.get('reason', '-')} |"
              for a in scope["attempts"]]
    lines.append("")
    if scope.get("site_lines"):
        lines += ["The site's settings failed; put these lines in the site file:", "", "```toml",
                  *scope["site_lines"], "```", ""]
    if scope.get("results"):
        share = " | of nominal" if scope.get("nominal_gbps") else ""
        lines += [f"| collective | bytes | latency (us) | algbw (GB/s) | busbw (GB/s){share} |",
                  "|---|---|---|---|---|" + ("---|" if share else "")]
        lines += [f"| {r['operation']} | {r['bytes']} | {r['latency_us']} | {r['algbw_gbs']} | {r['busbw_gbs']}"
                  + (f" | {r['busbw_of_nominal'] * 100:.3g}%" if share else "") + " |" for r in scope["results"]]
        lines.append("")
    if scope.get("oneccl_log"):
        lines += ["What oneCCL said it used (its `CCL_LOG_LEVEL=info` log; the libmpi mapped into the rank):", "",
                  "| rank | host | launcher | local index/count | ATL | KVS | libmpi | warnings |",
                  "|---|---|---|---|---|---|---|---|"]
        for rank in scope["oneccl_log"]:
            place = (f"{rank['local_index']}/{rank['local_count']}" if "local_index" in rank else "-")
            libmpi = rank.get("mpi_library_path") or rank.get("mpi_library_mapped") or "-"
            lines.append(f"| {rank['rank']} | {rank['host']} | {rank.get('launcher', '-')} | {place} |"
                         f" {rank.get('atl_transport', '-')} | {rank.get('kvs_mode', '-')} | {libmpi} |"
                         f" {'; '.join(rank.get('warnings', [])) or '-'} |")
        lines.append("")
    return lines
