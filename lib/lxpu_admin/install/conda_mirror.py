"""`lightning-xpu-admin conda-channel --site NAME --version X.Y DIR`: a local conda channel for a site without
access to conda-forge, holding what the conda layer installs (Python X.Y and pip, lxpu_admin/install/conda_layer.py).

The packages are those of the recipe's explicit lock (recipes/locks/conda/python-X.Y.txt, no solve) where it was
written for these channels, else of a solve by the pinned py-rattler against the recipe's channels (or
--conda-channel / LIGHTNING_XPU_CONDA_CHANNELS / .condarc, as the install picks them). Every package is downloaded
and its sha256 checked (conda_layer.fetch_verified), placed under DIR/<subdir>/, and the channel is indexed by
py-rattler (repodata.json per subdir). Run it where the channels are reachable, copy DIR to the site, then install
with `--env-manager conda --conda-channel file://DIR`. Standard library only (py-rattler runs in a child).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from lxpu_admin.install import conda_layer, toolcache
from lxpu_admin.install.jobdata import JobDataError, load

PROG = "lightning-xpu-admin conda-channel"


def recipe_lock(source: Path, python_version: str) -> Path:
    """Where the renderer writes the conda layer's explicit lock (the install reads the same file)."""
    return source / "recipes" / "locks" / "conda" / f"python-{python_version}.txt"


def packages(python: str, channels: list[str], python_version: str, lock: Path | None, scratch: Path,
             log: Callable[[str], None]) -> list[tuple[str, str]]:  # fmt: skip
    """(url, sha256) of every package: the lock's where it holds these channels, else a solve."""
    if lock is not None and lock.is_file():
        try:
            entries = conda_layer.read_lock(lock, python_version, channels)
            log(f"conda-channel: the packages of {lock} (no solve)")
            return entries
        except conda_layer.CondaLayerError as stale:
            log(f"conda-channel: not using the lock: {stale}")
    return conda_layer.solve(python, channels, python_version, scratch)


def write_channel(out: Path, entries: list[tuple[str, str]], python: str, scratch: Path) -> None:
    """Each package, sha256-checked, at OUT/<subdir>/<file>; then py-rattler's index of OUT."""
    for url, digest in entries:
        kept = conda_layer.fetch_verified(url, digest, scratch / "pkgs")
        subdir = urllib.parse.unquote(url.rsplit("/", 2)[1])
        target = out / subdir / urllib.parse.unquote(url.rsplit("/", 1)[1])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept, target)
        target.chmod(0o644)
    (out / "noarch").mkdir(exist_ok=True)  # a channel has a noarch subdir, even an empty one
    conda_layer.run_worker(python, "index", {"channel": str(out)}, scratch)


def build_channel(out: Path, python_version: str, channels: list[str], lock: Path | None,
                  pip_options: list[str]) -> str:  # fmt: skip
    """The channel at OUT (new or empty); its file:// URL."""
    if out.exists() and any(out.iterdir()):
        raise conda_layer.CondaLayerError(f"{out} is not empty: pick a new directory for the channel")
    tools = Path(os.environ.get("LIGHTNING_XPU_TOOLS_DIR", Path(tempfile.gettempdir()) / "lightning-xpu-tools"))
    tools.mkdir(mode=0o700, parents=True, exist_ok=True)
    refused = toolcache.refusal(str(tools), "the tools directory", "LIGHTNING_XPU_TOOLS_DIR")
    if refused:
        raise conda_layer.CondaLayerError(refused)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lxpu-conda-channel.") as scratch_dir, \
            tempfile.TemporaryDirectory(prefix=".py-rattler.", dir=tools) as home:  # fmt: skip
        scratch = Path(scratch_dir)
        python = conda_layer.rattler_python(Path(home) / "py-rattler", pip_options, print, tool_cache=str(tools))
        entries = packages(python, channels, python_version, lock, scratch, print)
        write_channel(out, entries, python, scratch)
    return out.resolve().as_uri()


def main(source: Path, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the channel directory to write (new or empty)")
    parser.add_argument("--site", required=True)
    parser.add_argument("--version", required=True, help="the PyTorch version X.Y (its recipe names the Python)")
    parser.add_argument("--variant", default=None, help="whose Python (default: the site's default variant)")
    parser.add_argument("--conda-channel", default=None, help="solve against these channels instead (a mirror)")
    parser.add_argument("--pip-option", action="append", default=[], help="for fetching py-rattler's wheel")
    args = parser.parse_args(argv)
    try:
        data = load(source, args.site, args.version)
    except JobDataError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    variant = args.variant or data["default_variant"]
    if variant not in data["variants"]:
        print(f"{PROG}: error: PyTorch {args.version} has no '{variant}' variant: pass --variant one of: "
              f"{' '.join(data['variants'])}", file=sys.stderr)  # fmt: skip
        return 2
    python_version = data["variants"][variant]["python"]
    channels = conda_layer.channels_from(data["conda_channels"], args.conda_channel)
    try:
        url = build_channel(args.out, python_version, channels, recipe_lock(source, python_version), args.pip_option)
    except conda_layer.CondaLayerError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    print(f"conda channel for Python {python_version}: {url}; install with --env-manager conda --conda-channel {url}")
    return 0
