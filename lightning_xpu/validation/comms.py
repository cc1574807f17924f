"""The site validation job's communication check (`communication`, the `site` level of
lightning_xpu/validation/framework.py).

It times all-reduce, all-gather and reduce-scatter over message sizes from 8 bytes up to a cap (`--comm-max-bytes`:
1 GiB on XPU, 64 KiB where gloo stands in on CPU), within a node (one rank per device, started here) and across two
nodes (through the site launcher), in `lightning_xpu/validation/comms_worker.py`. It reports latency and bus bandwidth
with nccl-tests' formulas (NVIDIA/nccl-tests doc/PERFORMANCE.md and src/all_reduce.cu, all_gather.cu,
reduce_scatter.cu @v2.19.6): algbw = S/t, S the whole buffer (the gathered output, the scattered input), and
busbw = algbw * 2(n-1)/n for all-reduce, algbw * (n-1)/n for all-gather and reduce-scatter; GB/s are 10^9 bytes/s.
Bus bandwidth is compared with the link's nominal figure (`--link-gbps` across nodes, `--node-link-gbps` within
one: the site file's `[validation]` `link_gbps`/`node_link_gbps`, in Gbit/s).

Every rank records what oneCCL itself said it used (lightning_xpu/validation/oneccl_log.py). Every attempt has a
deadline (`--comm-deadline`, seconds): a collective that fails or hangs is retried with the documented alternatives
one by one (ATL ofi/mpi, KVS pmi/mpi, CCL_OP_SYNC 0/1, then the site's other launchers; docs/aurora.md, docs/dawn.md),
and the check names the combination that works and the lines to put in the site file. The site's own settings
failing is a failed check even when an alternative works: the shipped module would hang.

On CPU gloo stands in for oneCCL: the CCL_* variables of an attempt are set but nothing reads them.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from lightning_xpu.validation import checks
from lightning_xpu.validation.comms_report import CHECK_NAME
from lightning_xpu.validation.framework import CheckFailed, CheckSkipped, Context, Outcome, check, local_env

WORKER = "lightning_xpu.validation.comms_worker"
DEFAULT_MAX_BYTES = {"xpu": 1 << 30, "cpu": 64 << 10}  # on CPU, gloo proves the path, not a link
DEFAULT_DEADLINE_S = {"xpu": 600.0, "cpu": 120.0}
# The documented alternatives, in the order they are tried (each alone, against the site's own settings).
ALTERNATIVES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("CCL_ATL_TRANSPORT", ("ofi", "mpi")),
    ("CCL_KVS_MODE", ("pmi", "mpi")),
    ("CCL_OP_SYNC", ("0", "1")),
)
BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n}
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def parse_bytes(text: str) -> int:
    """A size such as 1048576, 64MiB, 1GiB or 512K, in bytes; ValueError with the accepted forms."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or int(match.group(1)) * _UNITS[unit] < 8:
        raise ValueError(f"a size of at least 8 bytes, such as 1048576, 64MiB or 1GiB; got '{text}'")
    return int(match.group(1)) * _UNITS[unit]


def bandwidths(operation: str, size: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (10^9 bytes/s) of one collective of `size` bytes on `world` ranks (nccl-tests)."""
    algbw = size / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, algbw * BUSBW_FACTOR[operation](world)


@dataclass(frozen=True)
class Combination:
    """One attempt's settings: the CCL_* values it sets (None: leave the site's) and the launcher across nodes."""

    changes: tuple[tuple[str, str], ...] = ()
    launcher: str | None = None

    def label(self, environ: dict[str, str]) -> str:
        settings = [f"{name}={environ.get(name, 'unset')}" for name, _ in ALTERNATIVES]
        settings = [f"{name}={value}" for name, value in self.changes] or settings
        what = "the site's settings (" + ", ".join(settings) + ")" if not self.changes else ", ".join(settings)
        return what + (f", launcher {self.launcher}" if self.launcher else "")

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """The ranks' environment: `base`, this combination's changes, and oneCCL's info log unless a level is set
        (given before the ranks start: oneCCL may read it as its library loads, before the worker runs)."""
        return {"CCL_LOG_LEVEL": "info", **base, **dict(self.changes)}


def combinations(environ: dict[str, str], launchers: tuple[str, ...]) -> list[Combination]:
    """The site's settings first, then each documented alternative alone, then each other launcher."""
    found = [Combination(launcher=launchers[0] if launchers else None)]
    for name, values in ALTERNATIVES:
        for value in values:
            if environ.get(name) != value:
                found.append(Combination(((name, value),), found[0].launcher))
    found += [Combination(launcher=other) for other in launchers[1:]]
    return found


@dataclass
class Scope:
    """Within a node or across nodes: how its ranks start, and what happened."""

    name: str  # "node" or "nodes"
    ranks: int
    nominal_gbps: float | None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    working: Combination | None = None
    first: Combination | None = None  # the site's own settings
    reports: list[dict[str, Any]] = field(default_factory=list)


def _options(context: Context) -> tuple[int, float]:
    kind = "xpu" if context.xpu else "cpu"
    return (int(context.extra.get("comm_max_bytes") or DEFAULT_MAX_BYTES[kind]),
            float(context.extra.get("comm_deadline_s") or DEFAULT_DEADLINE_S[kind]))


def _backend(context: Context) -> tuple[str, str]:
    """(backend, device): the XPU collective backend on XPU, gloo on CPU (it stands in for oneCCL)."""
    if not context.xpu:
        return "gloo", "cpu"
    return checks._worker_backend(context), context.accelerator


def _attempt(context: Context, scope: Scope, combination: Combination, max_bytes: int,
             deadline: float) -> list[dict[str, Any]]:
    """Run the sweep once with `combination` (CheckFailed on a failure or when the deadline passes)."""
    backend, device = _backend(context)
    args = ["--backend", backend, "--device", device, "--max-bytes", str(max_bytes)]
    if scope.name == "node":
        env = combination.environment(local_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(checks.free_port())))
        return checks.run_worker(context, args, ranks=scope.ranks, env=env, timeout=deadline, module=WORKER)
    per_node = scope.ranks // context.nodes
    launcher = checks._site_launcher(combination.launcher or "srun", context, per_node)
    # The launcher gets the deadline itself (SIGTERM, then KILL): it stops its ranks on every node, which killing
    # the launcher alone might not.
    bounded = ["timeout", "--kill-after=5", f"{deadline:g}", *launcher]
    env = combination.environment(checks._launcher_env(context))
    try:
        return checks.run_worker(context, args, launcher=bounded, env=env, timeout=deadline + 15, module=WORKER)
    except CheckFailed as failed:  # timeout(1) exits 124 (137 after its KILL) when the deadline passed
        if re.search(r"exited (124|137)\b", str(failed)):
            raise CheckFailed(f"hit the deadline of {deadline:g} s ({failed})") from None
        raise


def run_scope(context: Context, scope: Scope, max_bytes: int, deadline: float) -> None:
    """Try the combinations in order until one completes; record every attempt."""
    environ = dict(os.environ)
    launchers = context.launchers if scope.name == "nodes" else ()
    tried = combinations(environ, launchers)
    scope.first = tried[0]
    for combination in tried:
        start = time.monotonic()
        try:
            reports = _attempt(context, scope, combination, max_bytes, deadline)
            _require_ranks(reports, scope.ranks)
        except CheckFailed as failed:
            scope.attempts.append({"combination": combination.label(environ), "status": "fail",
                                   "reason": str(failed), "seconds": round(time.monotonic() - start, 1)})
            continue
        scope.attempts.append({"combination": combination.label(environ), "status": "pass",
                               "seconds": round(time.monotonic() - start, 1)})
        scope.working, scope.reports = combination, reports
        return


def _require_ranks(reports: list[dict[str, Any]], world: int) -> None:
    ranks = sorted(int(report["global_rank"]) for report in reports)
    if ranks != list(range(world)):
        raise CheckFailed(f"expected rank reports 0..{world - 1}, got {ranks}")


def results_table(scope: Scope) -> list[dict[str, Any]]:
    """Rank 0's timings with latency (microseconds) and bandwidths, and the share of the nominal link figure."""
    rank0 = next(report for report in scope.reports if int(report["global_rank"]) == 0)
    rows = []
    for result in rank0.get("results", []):
        algbw, busbw = bandwidths(result["operation"], result["bytes"], result["seconds"], scope.ranks)
        row = {"operation": result["operation"], "bytes": result["bytes"],
               "latency_us": _figures(result["seconds"] * 1e6), "algbw_gbs": _figures(algbw),
               "busbw_gbs": _figures(busbw)}
        if scope.nominal_gbps:
            row["busbw_of_nominal"] = _figures(busbw / (scope.nominal_gbps / 8))
        rows.append(row)
    return rows


def _figures(value: float) -> float:
    """Four significant figures (a CPU stand-in's bandwidths are tiny, a site's large)."""
    return float(f"{value:.4g}")


def oneccl_facts(scope: Scope) -> list[dict[str, Any]]:
    """Per rank: what oneCCL's log said and the libmpi mapped into the rank."""
    return [{"scope": scope.name, "rank": int(report["global_rank"]), "host": str(report.get("host", "")),
             **report.get("oneccl_log", {}), "mpi_library_mapped": report.get("mpi_library_mapped")}
            for report in sorted(scope.reports, key=lambda r: int(r["global_rank"]))]


def site_lines(scope: Scope, site: str, host: str) -> list[str]:
    """The lines to put in recipes/sites/<site>.toml for the combination that worked where the site's did not."""
    if scope.working is None or not scope.attempts or scope.attempts[0]["status"] == "pass":
        return []
    source = (f"lightning-xpu validate ({CHECK_NAME}) on {host}, {time.strftime('%Y-%m-%d')}:"
              f" {scope.attempts[0]['combination']} failed ({scope.attempts[0]['reason'][:80]})")
    lines = [f"# recipes/sites/{site}.toml"]
    if scope.working.changes:
        lines.append("[env]")
        lines += [f'{name} = {{ value = "{value}", source = "{source}" }}' for name, value in scope.working.changes]
    if scope.first is not None and scope.working.launcher != scope.first.launcher:
        lines += ["[validation]", f'launchers = ["{scope.working.launcher}"]']
    return lines


def _summary(scope: Scope, backend: str) -> str:
    rows = results_table(scope)
    reduce_rows = [row for row in rows if row["operation"] == "all_reduce"]
    best = max(reduce_rows, key=lambda row: row["busbw_gbs"])
    share = f" ({best['busbw_of_nominal']:.0%} of {scope.nominal_gbps:g} Gb/s)" if scope.nominal_gbps else ""
    where = "within a node" if scope.name == "node" else "across nodes"
    return (f"{where}, {scope.ranks} ranks ({backend}): all-reduce {reduce_rows[0]['latency_us']:.0f} us at"
            f" {reduce_rows[0]['bytes']} B, busbw {best['busbw_gbs']:.3g} GB/s at {best['bytes']} B{share}")


def _site_name() -> str:
    from lightning_xpu.install_facts import install_manifest

    return str((install_manifest().get("recipe") or {}).get("site") or "<site>")


@check(CHECK_NAME, needs_xpu=False)
def check_communication(context: Context) -> Outcome:
    """All-reduce, all-gather and reduce-scatter latency and bus bandwidth, within a node and across nodes; on a
    failure or hang, the documented alternatives one by one (lightning_xpu/validation/comms.py)."""
    max_bytes, deadline = _options(context)
    backend, _ = _backend(context)
    per_node = context.devices if context.xpu else 2
    if per_node < 2 and context.nodes < 2:
        raise CheckSkipped(f"{per_node} device visible and one node: collectives need 2 ranks")
    scopes = []
    if per_node >= 2:
        scopes.append(Scope("node", per_node, context.extra.get("node_link_gbps")))
    if context.nodes >= 2:
        scopes.append(Scope("nodes", context.nodes * (context.devices if context.xpu else 1),
                            context.extra.get("link_gbps")))
    detail: dict[str, Any] = {"backend": backend, "max_bytes": max_bytes, "deadline_s": deadline, "scopes": {}}
    skipped = ""
    for scope in scopes:
        try:
            run_scope(context, scope, max_bytes, deadline)
        except CheckSkipped as why:  # no launcher for the nodes' scope here
            skipped = f"; across nodes skipped: {why}"
            continue
        detail["scopes"][scope.name] = _scope_detail(scope)
    if context.nodes < 2:
        skipped = "; across nodes skipped: one node (give --nodes 2 in a 2-node allocation)"
    return _verdict(scopes, detail, backend, skipped)


def _scope_detail(scope: Scope) -> dict[str, Any]:
    found: dict[str, Any] = {"ranks": scope.ranks, "nominal_gbps": scope.nominal_gbps, "attempts": scope.attempts}
    if scope.working is not None:
        found.update(results=results_table(scope), oneccl_log=oneccl_facts(scope),
                     site_lines=site_lines(scope, _site_name(), socket.gethostname()))
    return found


def _verdict(scopes: list[Scope], detail: dict[str, Any], backend: str, skipped: str) -> Outcome:
    ran = [scope for scope in scopes if scope.name in detail["scopes"]]
    if not ran:
        raise CheckSkipped(skipped.removeprefix("; "))
    broken = [scope for scope in ran if scope.working is None]
    if broken:
        attempts = broken[0].attempts
        raise CheckFailed(f"{broken[0].name}: every combination failed ({len(attempts)} tried; first:"
                          f" {attempts[0]['reason']})", detail)
    moved = [scope for scope in ran if scope.attempts[0]["status"] != "pass"]
    if moved:
        lines = detail["scopes"][moved[0].name]["site_lines"]
        print("\n".join(["communication: the site's settings failed; this combination works:", *lines]), flush=True)
        raise CheckFailed(f"{moved[0].name}: {moved[0].attempts[0]['combination']} failed"
                          f" ({moved[0].attempts[0]['reason'][:120]}); works with"
                          f" {moved[0].attempts[-1]['combination']}: put in the site file: {' / '.join(lines[1:])}",
                          detail)
    return Outcome("; ".join(_summary(scope, backend) for scope in ran) + skipped, detail)
