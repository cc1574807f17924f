"""What oneCCL says it used, read from its own log (`CCL_LOG_LEVEL=info`), one rank's output at a time.

The format is oneCCL's, at tag 2021.14 (the newest tag of oneapi-src/oneCCL; whether 2021.15+ print the same is
unverified, docs/xpu-guide.md "What no source settles"):
- every line starts with `%Y:%m:%d-%H:%M:%S:(<tid, width 5>) ` and a level mark, `|CCL_INFO| `, `|CCL_WARN| `,
  `|CCL_ERROR| ` or `|CCL_DEBUG| <file>:<line> <function>: ` (src/common/log/log.cpp `write_prefix`,
  src/common/log/log.hpp `LOG_INFO`/`LOG_WARN`/`LOG_DEBUG`);
- every rank: `process launcher: <hydra|torchrun|pmix|none>, local_proc_idx: <i>, local_proc_count: <n>`
  (src/common/global/global.cpp `set_local_coord`), or, without a place from the launcher, the warning
  `could not get local_idx/count from environment variables, trying to get them from ATL` (same file);
- rank 0 only (src/common/env/env.cpp `env_data::print`): `library version: <v>` (CMakeLists.txt
  `CCL_PRODUCT_FULL`: `Gold-2021.14.0 <build date> <vcs info>`), `CCL_ATL_TRANSPORT: <ofi|mpi>`,
  `CCL_KVS_MODE: <pmi|mpi>` (names: src/atl/atl_def.h `kvs_mode_names`), `CCL_PROCESS_LAUNCHER: <name>`,
  `CCL_LOCAL_RANK: <n|<not specified>>`, `CCL_LOCAL_SIZE: ...`, `CCL_MPI_LIBRARY_PATH: <path|<not specified>>`;
- with ATL mpi, rank 0 of the world: a block `atl-mpi:` `{` ... `  mpi_lib_attr.type: <impi|mpich|none>` ... `}`
  (src/atl/mpi/atl_mpi_comm.cpp, src/atl/mpi/atl_mpi_ctx.cpp `to_string`);
- a transport fallback: `OFI transport was not initialized, fallback to MPI transport` (or the reverse;
  src/common/api_wrapper/api_wrapper.cpp);
- the path of the `libmpi` oneCCL opened only at debug level: `MPI lib path: <path>`
  (src/common/api_wrapper/mpi_api_wrapper.cpp). At info level the rank itself reads it from /proc/self/maps
  (`mapped_mpi_library`).
"""

from __future__ import annotations

import re
from typing import Any

_PREFIX = re.compile(r"^(?:\d{4}:\d\d:\d\d-\d\d:\d\d:\d\d:\(\s*\d+\)\s+)?\|CCL_(INFO|WARN|ERROR|DEBUG)\|\s?(.*)$")
_LAUNCHER = re.compile(r"process launcher: (\S+), local_proc_idx: (-?\d+), local_proc_count: (-?\d+)")
_SETTINGS = {
    "CCL_ATL_TRANSPORT": "atl_transport",
    "CCL_KVS_MODE": "kvs_mode",
    "CCL_PROCESS_LAUNCHER": "process_launcher_setting",
    "CCL_LOCAL_RANK": "local_rank_setting",
    "CCL_LOCAL_SIZE": "local_size_setting",
    "CCL_MPI_LIBRARY_PATH": "mpi_library_path_setting",
}
_MPI_TYPE = re.compile(r"^\s*mpi_lib_attr\.type: (\S+)")
_MPI_PATH = re.compile(r"MPI lib path: (\S+)")
_NO_PLACE = "could not get local_idx/count from environment variables"
_FALLBACK = re.compile(r"(OFI|MPI) transport was not initialized, fallback to (MPI|OFI) transport")
MAX_WARNINGS = 8


def parse_oneccl_log(text: str) -> dict[str, Any]:
    """The facts one rank's oneCCL log states (keys absent where it says nothing; `warnings` its |CCL_WARN| and
    |CCL_ERROR| lines, at most MAX_WARNINGS)."""
    found: dict[str, Any] = {}
    warnings: list[str] = []
    for line in text.splitlines():
        match = _PREFIX.match(line.strip())
        if match is None:  # a continuation line (the atl-mpi block) or another program's output
            typed = _MPI_TYPE.match(line)
            if typed:
                found["mpi_library_type"] = typed.group(1)
            continue
        level, message = match.groups()
        _read_message(level, message.strip(), found, warnings)
    if warnings:
        found["warnings"] = warnings[:MAX_WARNINGS]
    return found


def _read_message(level: str, message: str, found: dict[str, Any], warnings: list[str]) -> None:
    if level in ("WARN", "ERROR"):
        warnings.append(message)
    launcher = _LAUNCHER.search(message)
    if launcher:
        found.update(launcher=launcher.group(1), local_index=int(launcher.group(2)),
                     local_count=int(launcher.group(3)))
    if _NO_PLACE in message:
        found["local_place_from_environment"] = False
    fallback = _FALLBACK.search(message)
    if fallback:
        found["atl_fallback"] = f"{fallback.group(1).lower()} -> {fallback.group(2).lower()}"
    path = _MPI_PATH.search(message)
    if path:
        found["mpi_library_path"] = path.group(1)
    if message.startswith("library version: "):  # CCL_PRODUCT_FULL: "Gold-2021.14.0 <build date> <vcs>"
        text = message.split(": ", 1)[1].strip()
        number = re.search(r"\d{4}\.\d+(?:\.\d+)?", text)
        found["library_version"] = number.group(0) if number else text
    name, _, value = message.partition(": ")
    if name in _SETTINGS and value:
        found[_SETTINGS[name]] = value.strip()


def mapped_mpi_library(maps_text: str) -> str | None:
    """The first `libmpi.so*` (or `libmpi_*`) mapped into a process, from its /proc/<pid>/maps text."""
    for line in maps_text.splitlines():
        path = line.split()[-1] if line.split() else ""
        if re.search(r"/libmpi(?:\.so|_[a-z]+\.so)", path):
            return path
    return None
