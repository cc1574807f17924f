#!/usr/bin/env python3
"""TEST STAND-IN for PALS's `mpiexec` (HPE Cray PALS, Aurora), so the Aurora job scripts run unmodified on one CI host.

It is not PALS and proves nothing about PALS itself: it starts every rank on this host and gives each the
variables PALS gives a rank. Those names come from published sources, as lightning_xpu/environments/launch.py
records (Slurm's mpi/cray_shasta plugin, Flux's cray_pals plugin; PALS_LOCAL_SIZE from Aurora job scripts):
PALS_RANKID, PALS_LOCAL_RANKID, PALS_NODEID, PALS_LOCAL_SIZE, PALS_APID, and PMIX_RANK under --pmi=pmix.
PMI_SIZE is set only with LXPU_PALS_STANDIN_PMI_SIZE=1: under --pmi=pmix PALS may not set it, and the runtime
then counts the hosts of PBS_NODEFILE.

What it checks, as PALS and oneCCL would fail otherwise:
- only the options the job scripts use: --pmi=pmix|pmi, --envall, -n/--np N, --ppn/-ppn P, --cpu-bind=LIST;
- one host: N must equal P (the stand-in cannot start ranks on another host);
- CCL_PROCESS_LAUNCHER=pmix needs --pmi=pmix (oneCCL's vars.hpp pairs them).
Each call is appended as one JSON line to LXPU_PALS_RECORD when that is set; with LXPU_PALS_STANDIN_DRY=1 it
only records (and starts nothing), for launches too big for a CI host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def fail(message: str) -> int:
    print(f"pals-standin mpiexec: {message}", file=sys.stderr)
    return 2


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        word = argv[index]
        name, equals, value = word.partition("=")
        if name in ("--envall",):
            options["envall"] = "1"
        elif name in ("--pmi", "--cpu-bind") and equals:
            options[name.lstrip("-")] = value
        elif name in ("-n", "--np", "--ppn", "-ppn") and not equals and index + 1 < len(argv):
            options["n" if name in ("-n", "--np") else "ppn"] = argv[index + 1]
            index += 1
        else:
            raise ValueError(f"option {word!r} is not one the stand-in knows")
        index += 1
    return options, argv[index:]


def main(argv: list[str]) -> int:
    try:
        options, command = parse(argv)
    except ValueError as error:
        return fail(str(error))
    record = os.environ.get("LXPU_PALS_RECORD")
    if record:
        with open(record, "a") as stream:
            stream.write(json.dumps({"argv": argv, "options": options, "command": command}) + "\n")
    if not command:
        return fail("no command to run")
    if os.environ.get("CCL_PROCESS_LAUNCHER") == "pmix" and options.get("pmi") != "pmix":
        return fail("CCL_PROCESS_LAUNCHER=pmix needs mpiexec --pmi=pmix (oneCCL pairs them)")
    if os.environ.get("LXPU_PALS_STANDIN_DRY") == "1":
        return 0
    if not options.get("n", "").isdigit() or options.get("n") != options.get("ppn"):
        return fail(f"-n {options.get('n')} with --ppn {options.get('ppn')}: this stand-in runs one host only")
    size = int(options["n"])
    processes = []
    for rank in range(size):
        env = dict(os.environ)
        env.update(
            PALS_RANKID=str(rank),
            PALS_LOCAL_RANKID=str(rank),
            PALS_NODEID="0",
            PALS_LOCAL_SIZE=str(size),
            PALS_APID=f"standin-{os.getpid()}",
        )
        if options.get("pmi") == "pmix":
            env["PMIX_RANK"] = str(rank)
        if os.environ.get("LXPU_PALS_STANDIN_PMI_SIZE") == "1":
            env["PMI_SIZE"] = str(size)
        processes.append(subprocess.Popen(command, env=env))
    codes = [process.wait() for process in processes]
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
