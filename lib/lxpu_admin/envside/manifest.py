"""manifest.json of a new build: the recipe, the inputs, where every package came from (with its sha256 where
known), the steps' timings, the smoke job's result and the packed image.

Run by the install (lxpu_admin/install/build.py, the manifest step) on the new environment's own interpreter,
whose installed distributions it lists: `python -m lxpu_admin.envside.manifest ENV --tag=... ...` (every value an
option: see `--help`). It reads share/lightning-xpu/ (steps.tsv, smoke.json, pip-report.json, requirements.txt, wheels/,
bytecompile-failures.txt, pack/pack.json) and writes ENV/manifest.json by one rename.

First it makes the build its own (lxpu_admin/envside/filerecord.py): every file that shares its inode with another path
(a cache's) or belongs to another account is replaced by a copy, and the file-hash record of the whole build is
written (share/lightning-xpu/RECORD, pip's RECORD format), whose sha256 manifest.json keeps;
`lightning-xpu-admin verify` checks a build against both (lxpu_admin/install/verify.py).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import pwd
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from lxpu_admin import paths
from lxpu_admin.envside import filerecord

SCHEMA = 1
RECORD = "share/lightning-xpu/RECORD"
# What must change after the record is written, so it is not in it: manifest.json holds the record's sha256, and
# the publish step writes the rollback pointer and the size (which counts the record) into the build just before
# its publishing rename (lxpu_admin/install/publish.py, `record`).
AFTER_RECORD = ("manifest.json", "share/lightning-xpu/previous-build", "share/lightning-xpu/size")


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def report_hashes(share: Path) -> dict[str, str]:
    """Each installed file's sha256 from pip's installation report (pip-report.json), by package."""
    hashes = {}
    report = share / "pip-report.json"
    for item in json.loads(report.read_text()).get("install", []) if report.exists() else []:
        archive = item.get("download_info", {}).get("archive_info", {})
        sha = archive.get("hashes", {}).get("sha256") or archive.get("hash", "").partition("sha256=")[2]
        if sha:
            hashes[norm(item["metadata"]["name"])] = sha
    return hashes


def lock_hashes(share: Path) -> dict[str, tuple[str, str]]:
    """Without pip's report (uv), a hash-checked lock says which file each pin came from, when it lists one hash:
    (version, sha256) by package."""
    hashes = {}
    text = (share / "requirements.txt").read_text().replace("\\\n", " ")  # continuation lines joined
    for line in text.splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)(.*)", line.strip())
        found = re.findall(r"--hash=sha256:([0-9a-f]{64})", match.group(3)) if match else []
        if match and len(found) == 1:
            hashes[norm(match.group(1))] = (match.group(2), found[0])
    return hashes


def packages(env: Path, share: Path, locked: bool) -> list[dict[str, str]]:
    """Every distribution this interpreter sees (the first on sys.path wins, as at import time), with where it
    lies (the environment or the base Python) and its sha256 where pip's report, the wheel built here or the
    lock says it."""
    reported = report_hashes(share)
    uv = not (share / "pip-report.json").exists()
    pinned = lock_hashes(share) if locked and uv and (share / "requirements.txt").is_file() else {}
    wheels = {norm(wheel.name.split("-")[0]): hashlib.sha256(wheel.read_bytes()).hexdigest()
              for wheel in (share / "wheels").glob("*.whl")}
    # Not the entries `python -m` and the engine add (the working directory, lib/ on PYTHONPATH): a checkout's
    # lightning_xpu.egg-info there is not what the environment holds.
    here = {os.getcwd(), str(paths.LIB)}
    path = [entry for entry in sys.path if entry and os.path.abspath(entry) not in here]
    found: dict[str, dict[str, str]] = {}
    root = env.resolve()
    for dist in md.distributions(path=path):
        name = dist.metadata["Name"]
        if not name or norm(name) in found:
            continue
        location = Path(str(dist.locate_file(""))).resolve()
        entry = {"name": name, "version": dist.version,
                 "from": "environment" if root in location.parents or location == root else "base-python"}
        version, locked_sha = pinned.get(norm(name), ("", ""))
        sha = reported.get(norm(name)) or wheels.get(norm(name)) or (locked_sha if version == dist.version else "")
        if sha:
            entry["sha256"] = sha
        found[norm(name)] = entry
    return sorted(found.values(), key=lambda p: p["name"].lower())


def steps(share: Path) -> list[dict[str, Any]]:
    rows = [line.split("\t") for line in (share / "steps.tsv").read_text().splitlines() if line.strip()]
    return [{"step": int(n), "name": name, "seconds": float(seconds)} for n, name, seconds in rows]


def file_record(env: Path) -> dict[str, Any]:
    """The build made its own (no inode shared with a cache, every file the installing account's), then its
    file-hash record written: what manifest.json says about it."""
    copied = filerecord.detach(str(env))
    if copied:
        print(f"note: {len(copied)} file(s) of the build shared their inode with another path or belonged to another "
              f"account (e.g. {copied[0]}): replaced by copies of their own")
    digest = filerecord.write(str(env), str(env / RECORD), AFTER_RECORD)
    return {"record": RECORD, "sha256": digest, "not_recorded": list(AFTER_RECORD), "copied": len(copied)}


def manifest(env: Path, args: argparse.Namespace, files: dict[str, Any]) -> dict[str, Any]:
    share = env / "share" / "lightning-xpu"
    pack = share / "pack" / "pack.json"
    return {
        "schema": SCHEMA,
        "status": "installed",
        "tag": args.tag,
        "recipe": {"torch": args.torch, "site": args.site, "variant": args.variant, "lightning": args.lightning,
                   "python": args.python, "hash": args.recipe_hash},
        "inputs_hash": args.inputs_hash,
        "repository": {"path": args.repository, "commit": args.commit},
        "build_id": args.build_id,
        "prefix": args.prefix,
        "env_path": str(env),
        "env_manager": args.env_manager,
        "python": {"executable": sys.executable, "version": sys.version.split()[0]},
        "base_python": {"path": args.base_python, "torch": args.base_torch} if args.base_python else None,
        "sources": {"mode": args.sources_mode, "pip_options": args.pip_option, "lock_file": args.lock_file or None,
                    "require_hashes": bool(args.lock_file)},
        "installer": {"name": args.installer, "version": args.installer_version, "why": args.installer_why},
        "shared_group": args.shared_group or None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "user": pwd.getpwuid(os.getuid()).pw_name,
        "scheduler_job": os.environ.get("SLURM_JOB_ID") or os.environ.get("PBS_JOBID"),
        "packages": packages(env, share, bool(args.lock_file)),
        "steps": steps(share),
        "bytecompile_failures": (share / "bytecompile-failures.txt").read_text().splitlines(),
        "smoke": json.loads((share / "smoke.json").read_text()),
        "pack": json.loads(pack.read_text()) if pack.exists() else None,
        "files": files,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lxpu_admin.envside.manifest", description=__doc__.split("\n\n")[0])
    p.add_argument("env", type=Path, help="the new build")
    for name in ("tag", "torch", "site", "variant", "lightning", "python", "recipe-hash", "inputs-hash",
                 "repository", "commit", "build-id", "prefix", "env-manager", "sources-mode", "installer",
                 "installer-version", "installer-why"):
        p.add_argument(f"--{name}", required=True)
    for name in ("base-python", "base-torch", "lock-file", "shared-group"):
        p.add_argument(f"--{name}", default="", help="empty: none")
    p.add_argument("--pip-option", action="append", default=[], help="one word of the pip options (repeatable)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    target = args.env / "manifest.json"
    tmp = target.with_name(target.name + ".tmp")
    files = file_record(args.env)
    tmp.write_text(json.dumps(manifest(args.env, args, files), indent=2) + "\n")
    os.replace(tmp, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
