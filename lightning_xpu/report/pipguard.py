"""The user layer's `pip` (copied into the layer by `lightning-xpu user-env`, run as a script: no lightning_xpu
import): the environment's pip on the layer's interpreter, with two answers of one line each.

- `pip install --user X`: a venv has no user site ("User site-packages are not visible in this virtualenv"):
  says to type the same command without --user (it goes to the layer).
- A request the environment's pins (PIP_CONSTRAINT) cannot satisfy: pip's ResolutionImpossible is a dozen lines;
  this prints the package, what it asked for and the pin instead.
Everything else is pip's own output, unchanged.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

_ME = "lightning-xpu"


def refusal(stderr: str, constraints: str) -> str | None:
    """One line for a conflict with a pin, None for any other failure."""
    pinned = re.findall(r"The user requested \(constraint\) (\S+?)([=<>!~]=?\S+)", stderr)
    if "ResolutionImpossible" not in stderr or not pinned:
        return None
    names = {name.lower().replace("_", "-") for name, _ in pinned}
    for line in stderr.splitlines():
        match = re.match(r"\s*(.+?) depends on (\S+?)([=<>!~]=?\S+|$)", line)
        if match and match.group(2).lower().replace("_", "-") in names:
            pin = next(n + s for n, s in pinned if n.lower().replace("_", "-") == match.group(2).lower())
            return (f"{_ME}: refused: {match.group(1)} needs {match.group(2)}{match.group(3)}, but this environment"
                    f" pins {pin} ({constraints}); pick a version that accepts {pin}")
        match = re.match(r"\s*The user requested (\S+?)([=<>!~]=?\S+)\s*$", line)
        if match and match.group(1).lower().replace("_", "-") in names:
            pin = next(n + s for n, s in pinned if n.lower().replace("_", "-") == match.group(1).lower())
            return f"{_ME}: refused: {match.group(1)}{match.group(2)} would replace the pin {pin} ({constraints})"
    name, spec = pinned[0]
    return f"{_ME}: refused: the request conflicts with the pin {name}{spec} ({constraints})"


def main(argv: list[str]) -> int:
    layer = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0])))
    if "--user" in argv:
        print(f"{_ME}: no --user here: packages go to your user layer {layer}; type the same command without"
              " --user", file=sys.stderr)
        return 2
    if "install" not in argv:
        os.execv(sys.executable, [sys.executable, "-m", "pip", *argv])
    # pip prints the conflict's lines to both streams: both are held until pip ends (an install's progress shows
    # at its end), then passed on unless they are a refusal.
    done = subprocess.run([sys.executable, "-m", "pip", *argv], capture_output=True, text=True, check=False)
    line = refusal(done.stdout + done.stderr, os.environ.get("PIP_CONSTRAINT", "")) if done.returncode else None
    if line:
        print(line, file=sys.stderr)
    else:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
