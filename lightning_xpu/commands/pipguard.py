"""The `pip` and `uv` of a lightning-xpu environment and of a user layer over it: the real tools, with one-line
answers where theirs are a dozen lines.

`install()` copies this file into a bin/ directory as .lightning-xpu-guard.py and writes small launchers there
(bin/pip, pip3, pip3.X: `python .lightning-xpu-guard.py pip ARGS`; bin/uv: `... uv ARGS`). The install writes them
into the environment (`python -m lxpu_admin.envside.pins write ENV`), `lightning-xpu user-env` into the layer. The copy
runs as a script (no lightning_xpu import: it must start in milliseconds and work in any layer).

- A request the environment's pins cannot satisfy (pip's ResolutionImpossible, uv's "No solution found"): one line
  naming the package, what it asked for, the pin and the fix.
- The pins bind whatever the caller set: an install gets the environment's constraints file on the command line
  (`--constraint`), which pip adds to PIP_CONSTRAINT and its configuration files and keeps under `--isolated`
  (that ignores PIP_CONSTRAINT), and for uv, whose `--constraint` replaces UV_CONSTRAINT, next to each file
  UV_CONSTRAINT names.
- `python -m pip` does not pass through here: `install()` also writes <venv>/pip.conf naming the pins, which pip
  reads as the environment's own ("site") configuration, `--isolated` or not. What still escapes both
  (PIP_CONFIG_FILE=/dev/null with another PIP_CONSTRAINT, a uv run by its path without UV_CONSTRAINT) is caught
  at the next start: `lightning-xpu doctor` and the validation job list each installed version that differs from
  its pin (lightning_xpu/validation/pincheck.py).
- A package of the torch family (torchvision, torchaudio) asked for without this environment's build label
  (`+cpu`, `+xpu`) where torch has one: refused in one line naming the build to install and where it is (PyPI's
  unlabelled Linux builds are CUDA's and break a `+cpu` or `+xpu` torch: "operator torchvision::nms does not
  exist").
- `pip install --user X`: a venv has no user site ("User site-packages are not visible in this virtualenv"): says
  what to type instead. (A conda environment keeps --user: PYTHONUSERBASE sends it to ~/.local/lightning-xpu.)
- bin/uv runs the environment's pinned uv (the install's own, hash-checked, kept as libexec/lightning-xpu/uv:
  PINNED_UV), in the environment and in every user layer over it; an environment without one (installed with
  pip) runs the next `uv` on PATH (the user's own).
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
# Where the install writes the pins (lxpu_admin/envside/pins.py RELATIVE), under the environment.
CONSTRAINTS = Path("share") / "lightning-xpu" / "constraints.txt"
# Where the install keeps its pinned uv in the environment (lxpu_admin/envside/pins.py --uv).
PINNED_UV = Path("libexec") / "lightning-xpu" / "uv"
# The torch family: packages built against one torch build, labelled like it on PyTorch's indexes (recipes/matrix.toml
# [variants.xpu] labelled; the cpu variant omits them because PyPI only has CUDA's builds).
TORCH_FAMILY = ("torchvision", "torchaudio")
# pip reads <sys.prefix>/pip.conf as the environment's own configuration (pip's "site" configuration file).
PIP_CONF = "pip.conf"
_PIP_CONF_TEXT = """# {mark}: every pip install here is constrained by the pins (lightning_xpu/commands/pipguard.py).
[install]
constraint = {url}
"""
_LAUNCHER = """#!/bin/sh
# {mark}: {tool} of this environment, with one-line answers (lightning_xpu/commands/pipguard.py).
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
    """Copy the guard into `bin_dir`, write a launcher for each tool (pip, pip3, ..., uv) and the venv's pip.conf
    naming the pins of its environment (a user layer names its environment first: userenv.py)."""
    shutil.copyfile(__file__, bin_dir / GUARD)
    written = []
    for name in tools:
        tool = "uv" if name == "uv" else "pip"
        written.append(_write(bin_dir / name, _LAUNCHER.format(mark=_MARK, tool=tool, guard=GUARD), 0o755))
    root = Path(os.path.abspath(environment_of(bin_dir)[0]))
    _write(bin_dir.parent / PIP_CONF, _PIP_CONF_TEXT.format(mark=_MARK, url=file_url(root / CONSTRAINTS)), 0o644)
    return written


def _write(path: Path, text: str, mode: int) -> Path:
    """Replace `path` whole (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
    return path


def file_url(path: Path) -> str:
    """file://PATH, percent-encoded: pip and uv split constraint lists at white space (a prefix may have spaces)."""
    return "file://" + quote(str(path))


def pins(constraints: Path) -> dict[str, str]:
    """name==version lines of the constraints file, by normalised name."""
    try:
        lines = constraints.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.partition("==") for line in lines if "==" in line and not line.startswith("#"))
    return {norm(name): version.strip() for name, _, version in pairs}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def torch_label(pinned: dict[str, str]) -> str:
    """The local label of the pinned torch (`cpu` of 2.13.0+cpu), '' where it has none (PyPI's CUDA build)."""
    return pinned.get("torch", "").partition("+")[2]


# A requirement word of the torch family: its name, then a version specifier, extras or nothing.
_FAMILY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[=<>!~].*)?$")


def family_refusal(argv: list[str], constraints: Path, tool: str) -> str | None:
    """One line for a torch-family package asked for without the pinned torch's build label, None otherwise."""
    pinned = pins(constraints)
    label = torch_label(pinned)
    if not label:
        return None
    for word in argv:
        match = _FAMILY.match(word)
        if not match or norm(match["name"]) not in TORCH_FAMILY or norm(match["name"]) in pinned:
            continue
        if f"+{label}" in (match["spec"] or ""):
            continue
        name = norm(match["name"])
        install = "uv pip install" if tool == "uv" else "pip install"
        return (f"{_ME}: refused: {word} without the +{label} label is PyPI's Linux build, made for CUDA's torch, "
                f"and breaks this environment's torch {pinned['torch']}; install the {label} build of the {name} "
                f"release for torch {pinned['torch'].partition('+')[0]} from PyTorch's {label} index (or your site's "
                f"mirror or wheelhouse of it): {install} '{name}==<version>+{label}' --index-url "
                f"{_pytorch_index(label)}")
    return None


def _pytorch_index(label: str) -> str:
    """PyTorch's own index of a build label (recipes/matrix.toml [sources.pytorch-cpu], [sources.pytorch-xpu])."""
    return f"https://download.pytorch.org/whl/{label}"


def refusal(output: str, constraints: Path) -> str | None:
    """One line for a conflict with a pin, None for any other failure."""
    pinned = pins(constraints)
    if not pinned or not any(word in output for word in _FAILED):
        return None
    for match in _NEEDS.finditer(output):
        name = norm(match["name"])
        if name in pinned and match["spec"] != f"=={pinned[name]}":
            who = match["who"]
            package = re.split(r"[ =<>!~]", who)[0]
            return (f"{_ME}: refused: {who} needs {match['name']}{match['spec']}, but this environment pins "
                    f"{name}=={pinned[name]} ({constraints}); pick a version of {package} that accepts it")
    for match in _ASKS.finditer(output):
        name = norm(match["name"])
        if name in pinned and match["spec"] != f"=={pinned[name]}":
            return (f"{_ME}: refused: {match['name']}{match['spec']} would replace the pin {name}=={pinned[name]}"
                    f" ({constraints}); for another {name}, load another lightning-xpu module"
                    " (module avail lightning-xpu)")
    return None


def environment_of(bin_dir: Path) -> tuple[Path, bool]:
    """The environment whose pins apply, and whether `bin_dir` is a user layer's (which names its environment)."""
    named = bin_dir.parent / "lightning-xpu-environment"
    if named.is_file():
        return Path(named.read_text().strip()), True
    return bin_dir.parent, False


def pin_options(tool: str, constraints: Path) -> list[str]:
    """The command-line options that bind the pins: pip adds `--constraint` to PIP_CONSTRAINT and its configuration
    files (and keeps it under --isolated); uv's `--constraint` replaces UV_CONSTRAINT, so each file that names
    comes along."""
    if not constraints.is_file():
        return []
    listed = os.environ.get("UV_CONSTRAINT", "").split() if tool == "uv" else []
    files = [*listed, file_url(constraints)]
    return [word for file in dict.fromkeys(files) for word in ("--constraint", file)]


def real_uv(bin_dir: Path, root: Path) -> str | None:
    """The environment ROOT's pinned uv, else the next `uv` on PATH that is not a guard's launcher."""
    pinned = root / PINNED_UV
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
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
    root, is_layer = environment_of(bin_dir)
    constraints = root / CONSTRAINTS
    if tool == "uv":
        found = real_uv(bin_dir, root)
        if found is None:
            print(f"{_ME}: no uv here ({root} keeps none: it was installed with pip) and none on PATH: install uv, or "
                  "use pip", file=sys.stderr)
            return 127
        command = [found, *argv]
        installs = _words(argv) in (["pip", "install"], ["pip", "sync"])
    else:
        command = [sys.executable, "-m", "pip", *argv]
        installs = _words(argv)[:1] == ["install"]
        if installs and "--user" in argv and (bin_dir.parent / "pyvenv.cfg").is_file():
            where = (f"packages go to your user layer {bin_dir.parent}" if is_layer
                     else "`lightning-xpu user-env` makes your own layer over this environment, then")
            print(f"{_ME}: no --user here: {where}; type the same command without --user", file=sys.stderr)
            return 2
    if not installs:
        os.execv(command[0], command)
    family = family_refusal(argv, constraints, tool)
    if family:
        print(family, file=sys.stderr)
        return 2
    command += pin_options(tool, constraints)
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
