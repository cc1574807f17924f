"""The conda layer of an environment (issue 21): Python and pip from conda channels, with no conda executable.

py-rattler does the solving and linking, in a CHILD process (conda_worker.py, on an interpreter that has
py-rattler: its pinned wheel, sha256-checked against recipes/tools/conda-tools.txt before every use and unpacked
fresh for the run, as uv is: lxpu_admin/install/toolcache.py), never in the engine. Every file is copied (or reflinked)
from rattler's package cache, never hard-linked: a published build shares no inode with a cache (issue 27).
This module, standard library only:
  - reads the channels (site file, --channel / LIGHTNING_XPU_CONDA_CHANNELS, .condarc `channels:`),
  - takes the package list from the explicit lock (@EXPLICIT, url#sha256:HEX; no solve) or from the child's solve,
  - downloads every package itself and checks its sha256 (rattler.install does not check hashes),
  - has the child install into a temporary prefix next to the final one, with the final path patched into the
    files (rattler's alternative_target_prefix: a conda prefix is not relocatable), then renames it into place:
    a crash or kill leaves nothing at the final path.
With conda_exe (a site's own conda), `conda env create` builds the same layer (conda-meta/, bin/python) instead.
Both record the installed package list as <env>/conda-meta/lightning-xpu-explicit.txt (the lock's format).

CLI: python -m lxpu_admin.install.conda_layer create ENV --python X.Y [--lock FILE] [--channel C]... [--conda-exe PATH]
     [--pip-option OPT]...      and      lock OUT --python X.Y [--channel C]... (writes the explicit lock)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from lxpu_admin import paths
from lxpu_admin.install import toolcache
from lxpu_admin.install.space import disk_full_reason, free_bytes, is_disk_full

TOOLS_LOCK = paths.RECIPES / "tools" / "conda-tools.txt"
RECORD = Path("conda-meta") / "lightning-xpu-explicit.txt"
EXPLICIT = "@EXPLICIT"
# The fix a channel that cannot be reached gets: a mirror, or a local channel (lxpu_admin/install/conda_mirror.py).
OFFLINE_FIX = ("offline, pass a mirror or a local channel with --conda-channel URL (`lightning-xpu-admin "
               "conda-channel` writes one where the channels are reachable)")


class CondaLayerError(Exception):
    """A failure of the conda layer, as one line that names the fix."""


def specs(python_version: str) -> list[str]:
    return [f"python {python_version}.*", "pip"]


def channels_from(site: list[str], option: str | None = None, condarc: Path | None = None) -> list[str]:
    """The channels to use: the option (or LIGHTNING_XPU_CONDA_CHANNELS), else .condarc's, else the site's."""
    chosen = option if option is not None else os.environ.get("LIGHTNING_XPU_CONDA_CHANNELS")
    if chosen:
        return chosen.replace(",", " ").split()
    rc = condarc or Path(os.environ.get("CONDARC", Path.home() / ".condarc"))
    from_rc = _condarc_channels(rc) if rc.is_file() else []
    return usable(from_rc or site)


def usable(channels: list[str]) -> list[str]:
    """Without conda's markers: nodefaults means "not Anaconda's defaults channel", which py-rattler never uses."""
    return [channel for channel in channels if channel not in {"nodefaults", "defaults"}]


def _condarc_channels(rc: Path) -> list[str]:
    """`channels:` of a .condarc (a YAML list), with `channel_alias` applied to bare names. No YAML parser in the
    standard library: the two keys conda documents are read line by line."""
    alias, found, inside = "https://conda.anaconda.org", [], False
    for raw in rc.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if line.startswith("channel_alias:"):
            alias = line.split(":", 1)[1].strip().strip("'\"").rstrip("/")
        if line.startswith("channels:"):
            inside = True
        elif inside and line.lstrip().startswith("- "):
            found.append(line.lstrip()[2:].strip().strip("'\""))
        elif line and not line.startswith(" "):
            inside = False
    return [c if "://" in c else f"{alias}/{c}" for c in usable(found)]


def read_lock(lock: Path, python_version: str, channels: list[str] | None = None) -> list[tuple[str, str]]:
    """(url, sha256) of every package of an explicit lock; refuses a lock without hashes, or one written for
    another Python or other channels (stale: the recipe changed since it was locked)."""
    if not lock.is_file():
        raise CondaLayerError(f"conda lock {lock} is missing: write it with `python recipes/render.py lock`")
    entries, explicit = [], False
    for number, raw in enumerate(lock.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith("# python:") and line.split(":", 1)[1].strip() != python_version:
            raise CondaLayerError(
                f"conda lock {lock} is for Python {line.split(':', 1)[1].strip()}, not {python_version} (stale): "
                "lock again with `python recipes/render.py lock`"
            )
        if channels is not None and line.startswith("# channels:") and line.split(":", 1)[1].split() != channels:
            raise CondaLayerError(
                f"conda lock {lock} is for the channels {line.split(':', 1)[1].strip()}, not {' '.join(channels)} "
                "(stale): lock again with `python recipes/render.py lock`"
            )
        if line == EXPLICIT:
            explicit = True
        if not line or line.startswith(("#", "@")):
            continue
        url, _, digest = line.partition("#")
        if not digest.startswith("sha256:") or len(digest) != 7 + 64:
            raise CondaLayerError(
                f"{lock}:{number}: no sha256 for {url}: lock again with `python recipes/render.py lock`"
            )
        entries.append((url, digest[7:]))
    if not explicit or not entries:
        raise CondaLayerError(f"{lock} is not an @EXPLICIT conda lock: lock again with `python recipes/render.py lock`")
    return entries


def explicit_text(entries: list[tuple[str, str]], python_version: str, channels: list[str]) -> str:
    head = [f"# python: {python_version}", f"# channels: {' '.join(channels)}", EXPLICIT]
    return "\n".join(head + [f"{url}#sha256:{digest}" for url, digest in entries]) + "\n"


def fetch_verified(url: str, digest: str, cache: Path) -> Path:
    """The package at url, in cache, whose sha256 is digest; anything else is refused."""
    name = urllib.parse.unquote(url.rsplit("/", 1)[-1])
    if len(digest) != 64 or set(digest) == {"0"}:
        raise CondaLayerError(
            f"{name}: the channel gives no usable sha256 ({digest or 'none'}): fix or re-index the channel"
        )
    target = cache / f"{digest}-{name}"
    if not target.is_file() or _sha256(target) != digest:
        cache.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.{os.getpid()}")
        try:
            with urllib.request.urlopen(url) as source, open(part, "wb") as out:
                shutil.copyfileobj(source, out)
        except OSError as error:
            part.unlink(missing_ok=True)
            if is_disk_full(error):
                raise CondaLayerError(f"cannot keep {name}: {disk_full_reason(str(cache), error)}") from None
            raise CondaLayerError(f"cannot download {url} ({error}): check the conda channel; {OFFLINE_FIX}") from None
        actual = _sha256(part)
        if actual != digest:
            part.unlink(missing_ok=True)
            raise CondaLayerError(
                f"{name}: sha256 {actual} does not match {digest}: the package or the channel index is corrupt; "
                "fix the channel (or lock again)"
            )
        os.replace(part, target)
    return target


def _sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def rattler_python(home: Path, pip_options: list[str], log: Callable[[str], None], tool_cache: str = "") -> str:
    """An interpreter that imports the pinned py-rattler: LIGHTNING_XPU_RATTLER_PYTHON, or this one with a fresh copy
    of the pin unpacked into HOME (which must not exist; the caller removes it) from its wheel, whose sha256 is
    checked against the lock first: the wheel kept in TOOL_CACHE, the uv cache's tool cache, else fetched by pip
    (lxpu_admin/install/toolcache.py)."""
    given = os.environ.get("LIGHTNING_XPU_RATTLER_PYTHON")
    if given:
        return given
    version = toolcache.pinned_version(str(TOOLS_LOCK), "py-rattler")
    if version is None:
        raise CondaLayerError(f"{TOOLS_LOCK} pins no py-rattler==<version>: restore it from the repository")
    why = toolcache.provide("py-rattler", version, str(TOOLS_LOCK), tool_cache, str(home), sys.executable,
                            pip_options, lambda line: log(f"conda layer: {line}"))  # fmt: skip
    if why or not (home / "rattler").is_dir():
        shutil.rmtree(home, ignore_errors=True)
        raise CondaLayerError(
            f"py-rattler {version} could not be had ({why or 'its wheel has no rattler package'}): add it to the "
            "wheelhouse or pass --conda-exe"
        )
    os.environ["PYTHONPATH"] = str(home)
    return sys.executable


def run_worker(python: str, command: str, request: dict, scratch: Path) -> dict:
    """The child's result; a crash, a kill or a missing result is one line, whatever the child left behind."""
    request_path, result_path = scratch / f"{command}.request.json", scratch / f"{command}.result.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    # The worker is this package's module, run on PYTHON with lib/ after what PYTHONPATH holds (py-rattler's copy).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (os.environ.get("PYTHONPATH"), str(paths.LIB))))}
    done = subprocess.run(
        [python, "-s", "-B", "-m", "lxpu_admin.install.conda_worker", command, str(request_path), str(result_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    result = json.loads(result_path.read_text(encoding="utf-8")) if result_path.is_file() else None
    if done.returncode != 0 or result is None:
        how = f"was killed by signal {-done.returncode}" if done.returncode < 0 else f"exited with {done.returncode}"
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        raise CondaLayerError(
            f"the py-rattler child {how} during {command} ({tail}): nothing was installed; rerun the install"
        )
    if not result.get("ok"):
        if is_disk_full(result["error"] + "\n" + result.get("trace", "")):
            # Where it wrote: the new prefix (install) and rattler's package cache; the fuller one is named.
            places = [request[key] for key in ("target", "cache") if key in request] or [str(scratch)]
            where = min(places, key=lambda path: free_bytes(path)[0])
            raise CondaLayerError(f"py-rattler {command} failed: {disk_full_reason(where, result['error'])}")
        error = result["error"]
        raise CondaLayerError(f"py-rattler {command} failed: {error}: check the conda channels; {OFFLINE_FIX}")
    return result


def solve(python: str, channels: list[str], python_version: str, scratch: Path) -> list[tuple[str, str]]:
    result = run_worker(python, "solve", {"channels": channels, "specs": specs(python_version)}, scratch)
    return [(record["url"], record["sha256"]) for record in result["records"]]


def _channel_of(url: str) -> str:
    return url.rsplit("/", 2)[0]


def _create_with_rattler(
    prefix: Path,
    python_version: str,
    lock: Path | None,
    channels: list[str],
    pip_options: list[str],
    log: Callable[[str], None],
    tool_cache: str,
) -> list[tuple[str, str]]:
    tmp = prefix.with_name(f".tmp.{prefix.name}.{os.getpid()}")
    tools = prefix.with_name(f"{tmp.name}.py-rattler")  # this run's own copy, removed at its end
    shutil.rmtree(tools, ignore_errors=True)
    try:
        python = rattler_python(tools, pip_options, log, tool_cache)
        return _install_with_rattler(python, prefix, tmp, python_version, lock, channels, log)
    finally:
        shutil.rmtree(tools, ignore_errors=True)


def _install_with_rattler(
    python: str,
    prefix: Path,
    tmp: Path,
    python_version: str,
    lock: Path | None,
    channels: list[str],
    log: Callable[[str], None],
) -> list[tuple[str, str]]:
    root = prefix.parent.parent  # <install prefix>/.envs/<tag>.<build>
    with tempfile.TemporaryDirectory(prefix="lxpu-conda.") as scratch_dir:
        scratch = Path(scratch_dir)
        if lock is not None:
            entries = read_lock(lock, python_version, channels)
            log(f"conda layer: {len(entries)} packages from the lock {lock} (no solve)")
        else:
            entries = solve(python, channels, python_version, scratch)
            log(f"conda layer: solved {len(entries)} packages from {' '.join(channels)} (unlocked)")
        cache = root / ".cache" / "conda" / "pkgs"
        packages = []
        for url, digest in entries:
            path = fetch_verified(url, digest, cache)
            packages.append({"path": str(path), "local_url": path.as_uri(), "channel": _channel_of(url)})
        log(f"conda layer: every package's sha256 checked; installing into {prefix}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            run_worker(
                python,
                "install",
                {
                    "packages": packages,
                    "target": str(tmp),
                    "final": str(prefix),
                    "cache": str(root / ".cache" / "conda" / "rattler"),
                },
                scratch,
            )
            if not (tmp / "bin" / "python").exists():
                raise CondaLayerError(
                    f"the conda layer has no bin/python: the channels {' '.join(channels)} lack a python package"
                )
            tmp.rename(prefix)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entries


def _create_with_conda(
    prefix: Path, python_version: str, channels: list[str], conda_exe: str, log: Callable[[str], None]
) -> list[tuple[str, str]]:
    yml = prefix.with_name(f".tmp.{prefix.name}.{os.getpid()}.environment.yml")
    lines = [
        "channels:",
        *[f"  - {c}" for c in channels],
        "dependencies:",
        *[f"  - {s.replace(' ', '=')}" for s in specs(python_version)],
    ]
    yml.write_text("\n".join(lines) + "\n", encoding="utf-8")
    log(f"+ {conda_exe} env create --prefix {prefix} --file {yml}")
    try:
        done = subprocess.run([conda_exe, "env", "create", "--prefix", str(prefix), "--file", str(yml)], check=False)
    finally:
        yml.unlink(missing_ok=True)
    if done.returncode != 0:
        shutil.rmtree(prefix, ignore_errors=True)
        raise CondaLayerError(
            f"{conda_exe} env create failed ({done.returncode}): see its output above, or drop --conda-exe"
        )
    entries = []
    for meta in sorted((prefix / "conda-meta").glob("*.json")):
        record = json.loads(meta.read_text(encoding="utf-8"))
        entries.append((record.get("url", ""), record.get("sha256", "")))
    return entries


def create_environment(
    prefix: Path,
    *,
    python_version: str,
    lock: Path | None,
    channels: list[str],
    conda_exe: str | None,
    log: Callable[[str], None],
    pip_options: list[str] | None = None,
    tool_cache: str = "",
) -> None:
    """The conda layer at prefix (which must not exist), or CondaLayerError with nothing left at prefix."""
    if prefix.exists():
        raise CondaLayerError(f"{prefix} already exists: the conda layer is only built at a new build path")
    if not channels and lock is None:
        raise CondaLayerError("no conda channels: set conda channels in the site file or pass --conda-channel")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    if conda_exe:
        entries = _create_with_conda(prefix, python_version, channels, conda_exe, log)
    else:
        entries = _create_with_rattler(prefix, python_version, lock, channels, pip_options or [], log, tool_cache)
    (prefix / RECORD).parent.mkdir(exist_ok=True)
    (prefix / RECORD).write_text(explicit_text(entries, python_version, channels), encoding="utf-8")


def write_lock(
    out: Path, *, python_version: str, channels: list[str], pip_options: list[str], log: Callable[[str], None]
) -> None:
    """Solve against the channels and write the explicit lock (every package's sha256 checked first)."""
    tools = Path(os.environ.get("LIGHTNING_XPU_TOOLS_DIR", Path(tempfile.gettempdir()) / "lightning-xpu-tools"))
    tools.mkdir(mode=0o700, parents=True, exist_ok=True)
    # py-rattler is unpacked and imported from there: a directory another account made (in /tmp, say) is refused.
    refused = toolcache.refusal(str(tools), "the tools directory", "LIGHTNING_XPU_TOOLS_DIR")
    if refused:
        raise CondaLayerError(refused)
    with tempfile.TemporaryDirectory(prefix="lxpu-conda.") as scratch_dir, \
            tempfile.TemporaryDirectory(prefix=".py-rattler.", dir=tools) as home:  # fmt: skip
        python = rattler_python(Path(home) / "py-rattler", pip_options, log, tool_cache=str(tools))
        entries = solve(python, channels, python_version, Path(scratch_dir))
        for url, digest in entries:
            fetch_verified(url, digest, Path(scratch_dir) / "pkgs")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(explicit_text(entries, python_version, channels), encoding="utf-8")
    os.replace(tmp, out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lxpu_admin.install.conda_layer",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("create", "lock"):
        command = sub.add_parser(name)
        command.add_argument("path", type=Path)
        command.add_argument("--python", required=True)
        command.add_argument("--channel", action="append", default=[], help="the site's channels (in order)")
        command.add_argument("--conda-channel", default=None, help="replaces the site's channels (a mirror)")
        command.add_argument("--pip-option", action="append", default=[])
        if name == "create":
            command.add_argument("--lock", type=Path, default=None)
            command.add_argument("--tool-cache", default="", help="the uv cache (py-rattler is kept there)")
            command.add_argument("--conda-exe", default=os.environ.get("LIGHTNING_XPU_CONDA_EXE") or None)
    args = parser.parse_args(argv)
    channels = channels_from(args.channel, args.conda_channel)
    if args.command == "create" and args.lock is not None and channels != usable(args.channel):
        # The lock holds the site channels' URLs; a mirror or local channel chosen for this install replaces them.
        print(f"conda layer: channels {' '.join(channels)} chosen over the site's: not using the lock {args.lock}")
        args.lock = None

    def log(line: str) -> None:
        print(line, flush=True)

    try:
        if args.command == "create":
            create_environment(
                args.path,
                python_version=args.python,
                lock=args.lock,
                channels=channels,
                conda_exe=args.conda_exe,
                log=log,
                pip_options=args.pip_option,
                tool_cache=args.tool_cache,
            )
        else:
            write_lock(args.path, python_version=args.python, channels=channels, pip_options=args.pip_option, log=log)
    except CondaLayerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the scratch directory, the record: one line when it is a full disk
        if not is_disk_full(error):
            raise
        where = error.filename or str(args.path)
        print(f"error: the conda layer could not be written: {disk_full_reason(where, error)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
