"""py-rattler, held at arm's length: run by conda_layer.py on an interpreter that has py-rattler
(`python -m lxpu_admin.install.conda_worker`), never imported by the engine. One request (a JSON file) in, one
result (a JSON file) out, then os._exit: py-rattler 0.28 crashes at interpreter teardown in about half of the runs
(SIGSEGV/abort), so the interpreter is never torn down.

  solve REQUEST RESULT     channels + specs -> the records (url, sha256, file name) of the solution
  install REQUEST RESULT   verified local package files -> installed into a prefix (no solve), every file copied
                           (or reflinked) from rattler's cache, never hard-linked
  index REQUEST RESULT     a directory of packages in <subdir>/ -> its repodata.json files (a local channel)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback


def _solve(request: dict) -> dict:
    import rattler

    virtual = rattler.VirtualPackage.detect()
    records = asyncio.run(
        rattler.solve(
            sources=request["channels"],
            specs=request["specs"],
            platforms=[str(rattler.Platform.current()), "noarch"],
            virtual_packages=virtual,
        )
    )
    return {
        "records": [
            {"url": str(r.url), "sha256": r.sha256.hex() if r.sha256 else "", "file_name": r.file_name} for r in records
        ]
    }


# rattler hard-links files from its package cache by default: a published build would share their inodes with the
# cache (issue 27). Reflinks (copy-on-write) are separate inodes; where the file system has none, rattler copies.
LINKS = "allow-hard-links = false\nallow-ref-links = true\n"


def _install(request: dict) -> dict:
    import rattler
    from rattler.config import Config

    async def records() -> list:
        out = []
        for package in request["packages"]:
            record = await rattler.RepoDataRecord.from_package_archive(package["path"])
            # conda-meta records the channel the package came from; the url is the verified local copy.
            out.append(rattler.RepoDataRecord(record, record.file_name, package["local_url"], package["channel"]))
        return out

    asyncio.run(
        rattler.install(
            asyncio.run(records()),
            target_prefix=request["target"],
            alternative_target_prefix=request["final"],
            cache_dir=request["cache"],
            show_progress=False,
            config=Config.from_toml(LINKS),
        )
    )
    return {"installed": len(request["packages"])}


def _index(request: dict) -> dict:
    from rattler.index import index_fs

    asyncio.run(index_fs(request["channel"], write_zst=False, write_shards=False))
    return {}


def main(argv: list[str]) -> None:
    command, request_path, result_path = argv
    try:
        request = json.loads(open(request_path, encoding="utf-8").read())
        result = {"solve": _solve, "install": _install, "index": _index}[command](request)
        result["ok"] = True
    except Exception as error:
        result = {
            "ok": False,
            "error": f"{type(error).__name__}: {error}".splitlines()[0],
            "trace": traceback.format_exc(),
        }
    with open(result_path + ".tmp", "w", encoding="utf-8") as out:
        json.dump(result, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(result_path + ".tmp", result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
