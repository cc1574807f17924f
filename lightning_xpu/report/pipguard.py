"""The `pip` and `uv` of a lightning-xpu environment and of a user layer over it: the real tools, with one-line
answers where theirs are a dozen lines.

`install()` copies this file into a bin/ directory as .lightning-xpu-guard.py and writes small launchers there
(bin/pip, pip3, pip3.X: `python .lightning-xpu-guard.py pip ARGS`; bin/uv: `... uv ARGS`). The install writes them
into the environment (`python -m lxpu_engine.pins write ENV`), `lightning-xpu user-env` into the layer. The copy
runs as a script (no lightning_xpu import: it must start in milliseconds and work in any layer).

- A request the environment's pins cannot satisfy (pip's ResolutionImpossible, uv's "No solution found"): one line
  naming the package, what it asked for, the pin and the fix.
- The pins bind even without the module: an install adds the environment's constraints file to PIP_CONSTRAINT /
  UV_CONSTRAINT where they do not name it already.
- `pip install --user X`: a venv has no user site ("User site-packages are not visible in this virtualenv"): says
  what to type instead. (A conda environment keeps --user: PYTHONUSERBASE sends it to ~/.local/lightning-xpu.)
- bin/uv runs the next `uv` on PATH (the user's own; uv is not part of the environment).
Everything else is the tool's own output, unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

_ME = "lightning-xpu"
GUARD = ".lightning-xpu-guard.py"
_MARK = "lightning-xpu guard"
# Where the install writes the pins (lxpu_engine/pins.py RELATIVE), under the environment.
CONSTRAINTS = Path("share") / "lightning-xpu" / "constraints.txt"
_LAUNCHER = """#!/bin/sh
# {mark}: {tool} of this environment, with one-line answers (lightning_xpu/report/pipguard.py).
bin="$(dirname -- "$(realpath -- "$0")")"
exec "$bin/python" "$bin/{guard}" {tool} "$@"
"""
# The request's own words in each tool's report of a conflict: (who) depends on NAME SPEC, or NAME SPEC asked
# directly. pip: "X 1.0 depends on torch>99", "The user requested torch==2.0.0"; uv: "Because all versions of X
# depend on torch>99 and torch==<pin>", "Because you require torch==2.0.0 and torch==<pin>".
_NAME = r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<spec>[=<>!~][^\s,;]*(?:,[=<>!~][^\s,;]*)*)"
_NEEDS = re.compile(r"(?:^\s*|Because (?:all versions of )?)(?P<who>[A-Za-z0-9][^\s]*(?: [0-9][^\s]*)?) "
                    r"depends? on " + _NAME, re.MULTILINE)
_ASKS = re.compile(r"(?:The user requested |Because you require )" + _NAME)
_FAILED = ("ResolutionImpossible", "No solution found")


def install(bin_dir: Path, tools: tuple[str, ...]) -> list[Path]:
    """Copy the guard into `bin_dir` and write a launcher for each tool (pip, pip3, ..., uv)."""
    shutil.copyfile(__file__, bin_dir / GUARD)
    written = []
    for name in tools:
        tool = "uv" if name == "uv" else "pip"
        path = bin_dir / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(_LAUNCHER.format(mark=_MARK, tool=tool, guard=GUARD))
        tmp.chmod(0o755)
        tmp.replace(path)
        written.append(path)
    return written


def pins(constraints: Path) -> dict[str, str]:
    """name==version lines of the constraints file, by normalised name."""
    try:
        lines = constraints.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.partition("==") for line in lines if "==" in line and not line.startswith("#"))
    return {_norm(name): version.strip() for name, _, version in pairs}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def refusal(output: str, constraints: Path) -> str | None:
    """One line for a conflict with a pin, None for any other failure."""
    pinned = pins(constraints)
    if not pinned or not any(word in output for word in _FAILED):
        return None
    for match in _NEEDS.finditer(output):
        name = _norm(match["name"])
        if name in pinned and match["spec"] != f"=={pinned[name]}":
            who = match["who"]
            package = re.split(r"[ =<>!~]", who)[0]
            return (f"{_ME}: refused: {who} needs {match['name']}{match['spec']}, but this environment pins "
                    f"{name}=={pinned[name]} ({constraints}); pick a version of {package} that accepts it")
    for match in _ASKS.finditer(output):
        name = _norm(match["name"])
        if name in pinned and match["spec"] != f"=={pinned[name]}":
            return (f"{_ME}: refused: {match['name']}{match['spec']} would replace the pin {name}=={pinned[name]}"
                    f" ({constraints}); for another {name}, load another lightning-xpu module"
                    " (module avail lightning-xpu)")
    return None


def _environment(bin_dir: Path) -> tuple[Path, bool]:
    """The environment whose pins apply, and whether `bin_dir` is a user layer's (which names its environment)."""
    named = bin_dir.parent / "lightning-xpu-environment"
    if named.is_file():
        return Path(named.read_text().strip()), True
    return bin_dir.parent, False


def _bind_pins(variable: str, constraints: Path) -> None:
    """Add the pins to the tool's constraint list (both read a space-separated list of files or URLs)."""
    url = "file://" + quote(str(constraints))
    listed = os.environ.get(variable, "").split()
    if constraints.is_file() and url not in listed and str(constraints) not in listed:
        os.environ[variable] = " ".join([*listed, url])


def real_uv(bin_dir: Path) -> str | None:
    """The next `uv` on PATH that is not a guard's launcher."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory or ".") / "uv"
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        try:
            with candidate.open("rb") as handle:
                if _MARK.encode() in handle.read(512):
                    continue
        except OSError:
            continue
        return str(candidate)
    return None


def _words(argv: list[str]) -> list[str]:
    return [word for word in argv if not word.startswith("-")][:2]


def main(argv: list[str]) -> int:
    bin_dir = Path(os.path.abspath(sys.argv[0])).parent
    tool, argv = (argv[0], argv[1:]) if argv[:1] in (["pip"], ["uv"]) else ("pip", argv)
    root, is_layer = _environment(bin_dir)
    constraints = root / CONSTRAINTS
    if tool == "uv":
        found = real_uv(bin_dir)
        if found is None:
            print(f"{_ME}: no uv on PATH ({bin_dir}/uv only passes commands on to one): install uv, or use pip",
                  file=sys.stderr)
            return 127
        command = [found, *argv]
        installs = _words(argv) in (["pip", "install"], ["pip", "sync"])
        variable = "UV_CONSTRAINT"
    else:
        command = [sys.executable, "-m", "pip", *argv]
        installs = _words(argv)[:1] == ["install"]
        variable = "PIP_CONSTRAINT"
        if installs and "--user" in argv and (bin_dir.parent / "pyvenv.cfg").is_file():
            where = (f"packages go to your user layer {bin_dir.parent}" if is_layer
                     else "`lightning-xpu user-env` makes your own layer over this environment, then")
            print(f"{_ME}: no --user here: {where}; type the same command without --user", file=sys.stderr)
            return 2
    if not installs:
        os.execv(command[0], command)
    _bind_pins(variable, constraints)
    # pip prints the conflict's lines to both streams: both are held until the tool ends (an install's progress
    # shows at its end), then passed on unless they are a refusal.
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    line = refusal(done.stdout + done.stderr, constraints) if done.returncode else None
    if line:
        print(line, file=sys.stderr)
    else:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
