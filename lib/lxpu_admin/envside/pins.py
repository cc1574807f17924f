"""The environment's pins as one constraints file, <env>/share/lightning-xpu/constraints.txt (issue 20).

Every later install into the environment or into a user layer over it (`lightning-xpu user-env`) is constrained
by this file: the module and the setup script export PIP_CONSTRAINT and UV_CONSTRAINT naming it (pip and uv both
read a constraints file from those variables), so one file binds both installers.

Which distributions are pinned is read from the environment itself (its installed metadata), never listed here:
  - torch;
  - every distribution that requires torch directly (torchvision, torchaudio, Lightning and its namespaces,
    the Intel extensions, lightning_xpu itself): they are built or tested against this torch;
  - every distribution a pinned one requires with an exact `==` (torch's bundled runtimes: the oneAPI wheels of
    an XPU build, triton, the CUDA libraries of a CUDA build; torchvision's torch==);
  - every distribution named like a top-level package a pinned one ships (pytorch-lightning ships lightning_fabric:
    `lightning-fabric` is pinned too, else `pip install lightning-fabric==2.6.5` would put another lightning_fabric
    under pytorch_lightning 2.6.6), unless another installed distribution has that name or shares that package.
Each at the version installed (the package's at its distribution's). Looser requirements (filelock, fsspec, ...)
stay free for users to upgrade.

The same command puts the guard (lightning_xpu/commands/pipguard.py, of the environment's own lightning_xpu) in
front of the environment's pip and of uv, and writes <env>/pip.conf naming the pins (for `python -m pip`): a
request the pins refuse is answered in one line, as in a user layer.

Run on the environment's own interpreter by the install (lxpu_admin/install/build.py) or imported:
    python -m lxpu_admin.envside.pins write ENV
Standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

RELATIVE = Path("share") / "lightning-xpu" / "constraints.txt"

# Printed by the environment's interpreter: every distribution it sees (first on sys.path wins, as at import).
_LIST = r"""
import importlib.metadata as md, json, sys
seen = {}
for dist in md.distributions():
    name = dist.metadata["Name"]
    key = name.lower().replace("_", "-").replace(".", "-") if name else None
    if key and key not in seen:
        tops = sorted({f.parts[0].split(".")[0] for f in dist.files or () if len(f.parts) > 0
                       and f.parts[0] not in ("..", "__pycache__") and not f.parts[0].endswith((".dist-info", ".data",
                       ".egg-info", ".pth"))})
        seen[key] = [name, dist.version, dist.requires or [], tops]
json.dump(seen, sys.stdout)
"""

_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;]*?)\)?\s*(?:;(.*))?$")


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


Dists = dict[str, tuple[str, str, list[str], list[str]]]


def installed(python: Path) -> Dists:
    """(name, version, Requires-Dist, top-level packages and modules) by normalised name, as `python` sees them."""
    done = subprocess.run([str(python), "-s", "-c", _LIST], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{python} could not list its distributions: {done.stderr.strip()[-300:]}")
    return {key: (value[0], value[1], value[2], value[3]) for key, value in json.loads(done.stdout).items()}


def requirements(requires: list[str]) -> list[tuple[str, str]]:
    """(normalised name, specifier) of each Requires-Dist that is not an extra's."""
    found = []
    for line in requires:
        match = _REQUIREMENT.match(line)
        if match and "extra" not in (match.group(3) or ""):
            found.append((norm(match.group(1)), match.group(2).strip()))
    return found


def pinned(dists: Dists) -> dict[str, str]:
    """The pinned distributions (module docstring) with their installed versions, by normalised name."""
    if "torch" not in dists:
        return {}
    keys = {"torch"} | {key for key, (_, _, requires, _) in dists.items()
                        if any(name == "torch" for name, _ in requirements(requires))}
    todo = sorted(keys)
    while todo:
        for name, spec in requirements(dists[todo.pop()][2]):
            if name in dists and name not in keys and spec.startswith("==") and "," not in spec:
                keys.add(name)
                todo.append(name)
    pins = {key: dists[key][1] for key in keys}
    return dict(sorted({**shipped_names(dists, keys), **pins}.items()))


def shipped_names(dists: Dists, keys: set[str]) -> dict[str, str]:
    """Distribution names of the top-level packages the pinned distributions `keys` ship under another name, each at
    its shipper's version: a package of that name installed later would replace (or shadow) the shipped one."""
    shippers: dict[str, list[str]] = {}
    for key, (_, _, _, tops) in dists.items():
        for top in tops:
            shippers.setdefault(norm(top), []).append(key)
    # A package two distributions share (a namespace: nvidia/) has no one version; an installed name is its own.
    return {top: dists[owners[0]][1] for top, owners in shippers.items()
            if len(owners) == 1 and owners[0] in keys and top != owners[0] and top not in dists}


def write_constraints(env: Path, python: Path) -> Path:
    """Write <env>/share/lightning-xpu/constraints.txt from what `python` (the environment's) has installed."""
    pins = pinned(installed(python))
    target = env / RELATIVE
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# The pins of this lightning-xpu environment: every pip and uv install into it or into a user layer",
             "# over it is constrained by this file (PIP_CONSTRAINT, UV_CONSTRAINT). Written by the install",
             "# (lxpu_admin/envside/pins.py) from the installed distributions; do not edit.",
             *(f"{name}=={version}" for name, version in pins.items())]
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(target)
    return target


# Printed by the environment's interpreter: where its lightning_xpu lives, whether it has pip, its X.Y.
_GUARD_FACTS = r"""
import importlib.util as u, json, sys
spec = u.find_spec("lightning_xpu")
json.dump([spec.origin if spec else None, u.find_spec("pip") is not None, "%d.%d" % sys.version_info[:2]], sys.stdout)
"""


def install_guards(env: Path, python: Path, uv: Path | None = None) -> list[Path]:
    """Write the guard's launchers into <env>/bin: pip, pip3, pipX.Y (where the environment has pip) and uv; with
    UV (the install's pinned, hash-checked uv), a copy of it where the guard's uv looks first (pipguard.PINNED_UV),
    so that `uv pip install` works in the environment and its user layers without a uv of the user's."""
    done = subprocess.run([str(python), "-s", "-c", _GUARD_FACTS], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{python} could not look for lightning_xpu: {done.stderr.strip()[-300:]}")
    origin, has_pip, version = json.loads(done.stdout)
    if origin is None:
        raise RuntimeError(f"{python} has no lightning_xpu: install it before the pins")
    # A documented by-path load (issue 28), as lightning_range.py's: the runtime's pip guard, read from the
    # environment's lightning_xpu without importing the runtime package (its import installs the Lightning hook).
    spec = importlib.util.spec_from_file_location("lxpu_pipguard", Path(origin).parent / "commands" / "pipguard.py")
    assert spec and spec.loader
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    pips = ("pip", "pip3", f"pip{version}") if has_pip else ()
    written: list[Path] = guard.install(env / "bin", (*pips, "uv"))
    if uv is not None:
        kept = env / guard.PINNED_UV
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(uv, kept)
        kept.chmod(0o755)
    return written


def read_constraints(path: Path) -> dict[str, str]:
    """The pins of a constraints file this module wrote, by normalised name."""
    pins = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith("#"):
            pins[norm(name.strip())] = version.strip()
    return pins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lxpu_admin.envside.pins", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="write ENV/share/lightning-xpu/constraints.txt, the guard in ENV/bin and"
                                         " ENV/pip.conf")
    write.add_argument("env", type=Path)
    write.add_argument("--python", type=Path, default=Path(sys.executable),
                       help="the environment's interpreter (default: this one)")
    write.add_argument("--uv", type=Path, help="the install's pinned uv, kept in ENV for the guard's uv")
    args = parser.parse_args(argv)
    try:
        path = write_constraints(args.env, args.python)
        guards = install_guards(args.env, args.python, args.uv)
    except (OSError, RuntimeError) as exc:
        print(f"lxpu_admin.envside.pins: error: {exc}", file=sys.stderr)
        return 1
    tools = " ".join(p.name for p in guards)
    kept = f", the pinned {args.uv.name}" if args.uv else ""
    print(f"wrote {path} ({len(read_constraints(path))} pins), the guard of {tools}{kept} and {args.env / 'pip.conf'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
