#!/usr/bin/env python3
"""Pass this machine's pip configuration on to uv, which does not read it.

    python -m lxpu_admin.envside.uv_sources from-pip-config        # `python -m pip config list` of this Python
    python -m lxpu_admin.envside.uv_sources from-pip-options ARG...  # the recipe's / the caller's pip options
    python -m lxpu_admin.envside.uv_sources check-constraints LOCK CONSTRAINT...

The first two print one JSON object (`as_uv`) for the install engine (lxpu_admin/install/installer.py), which
imports this module for the recipe's options and runs it on the build's Python for that Python's configuration:
    {"args": ["--find-links", "/opt/wheels", "--no-index"],   uv's options (with their values)
     "env": {"SSL_CERT_FILE": "/etc/ssl/..."},                 environment variables uv reads instead of options
     "constraints": ["/etc/xdg/pip/c.txt"]}                    constraint files (the engine decides how to honour them)
A key that uv cannot honour is a one-line error on stderr naming the fix, exit 2: an install that silently
ignored part of the machine's configuration could resolve other packages than pip would.

`check-constraints` honours constraint files for a hash-checked lock: uv treats constraints as requirements
under --require-hashes (and then refuses them as unpinned), so the engine checks the lock's exact pins
against them here instead, and refuses a pin pip would have refused.

Runs with the Python the environment is built from, which has pip but maybe nothing else: stdlib only, plus
pip's vendored `packaging` for check-constraints.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import Any

# pip key -> uv option. Values of the list-valued keys are split on white space, as pip does.
OPTION_KEYS = {"index-url": "--index-url", "i": "--index-url"}
LIST_OPTION_KEYS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "f": "--find-links",
    "trusted-host": "--allow-insecure-host",
}
FLAG_KEYS = {"no-index": "--no-index"}
# pip key -> environment variable uv reads (uv has no option for these).
ENV_KEYS = {
    "cert": "SSL_CERT_FILE",
    "timeout": "UV_HTTP_TIMEOUT",
    "default-timeout": "UV_HTTP_TIMEOUT",
    "retries": "UV_HTTP_RETRIES",
    "proxy": "HTTPS_PROXY",
}
CONSTRAINT_KEYS = {"constraint", "c"}
# Keys that change how pip talks or logs, never what it resolves: nothing to pass on.
NO_EFFECT_KEYS = {
    "disable-pip-version-check", "no-input", "progress-bar", "root-user-action", "no-color", "quiet", "verbose",
    "cache-dir", "no-cache-dir", "require-virtualenv", "break-system-packages", "no-warn-script-location",
    "no-python-version-warning", "log", "log-file", "exists-action", "user", "use-feature",
    "config-file",  # where the configuration came from, already read by `pip config list`
}
# pip's own order of precedence: environment variables over configuration files, a command's section over
# [global] (see pip's configuration docs); `pip config list` prints them all.
SCOPE_RANK = {":env:": 0, "install": 1, "global": 2}
FIX = "remove it from the pip configuration (pip config list shows where it is) or install with --installer pip"


class Unmappable(ValueError):
    """A pip setting with no uv equivalent."""


def parse_config_list(text: str) -> dict[str, tuple[str, str]]:
    """`pip config list` output -> {key: (scope, value)}, keeping the value pip itself would use."""
    chosen: dict[str, tuple[int, str, str]] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(:env:|[\w-]+)\.([\w-]+)=(.*)", line.strip())
        if not match:
            continue
        scope, key, raw = match.groups()
        if scope not in SCOPE_RANK:
            continue  # another command's section ([download], [wheel], ...): not what `pip install` reads
        try:
            value = str(ast.literal_eval(raw))
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        key = key.replace("_", "-")
        rank = SCOPE_RANK[scope]
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, scope, value)
    return {key: (scope, value) for key, (_rank, scope, value) in chosen.items()}


def _is_true(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def settings_from_config(config: dict[str, tuple[str, str]]) -> list[tuple[str, ...]]:
    """The uv settings for a parsed pip configuration; raises Unmappable for a key uv cannot honour."""
    out: list[tuple[str, ...]] = []
    for key, (scope, value) in sorted(config.items()):
        where = f"pip configuration key '{scope}.{key}'"
        if key in OPTION_KEYS:
            out.append(("arg", OPTION_KEYS[key], value))
        elif key in LIST_OPTION_KEYS:
            out.extend(("arg", LIST_OPTION_KEYS[key], item) for item in value.split())
        elif key in FLAG_KEYS:
            if _is_true(value):
                out.append(("arg", FLAG_KEYS[key]))
        elif key in ENV_KEYS:
            out.append(("env", ENV_KEYS[key], value))
            if key == "proxy":
                out.append(("env", "HTTP_PROXY", value))
        elif key in CONSTRAINT_KEYS:
            out.extend(("constraint", item) for item in value.split())
        elif key not in NO_EFFECT_KEYS:
            raise Unmappable(f"{where} has no uv equivalent: {FIX}")
    return out


def settings_from_options(words: Sequence[str]) -> list[tuple[str, ...]]:
    """pip source options (`--index-url URL`, `--extra-index-url URL`, `--find-links DIR`, `--no-index`)."""
    takes_value = {"--index-url": "--index-url", "--extra-index-url": "--extra-index-url",
                   "--find-links": "--find-links", "--trusted-host": "--allow-insecure-host"}
    out: list[tuple[str, ...]] = []
    items = list(words)
    while items:
        word = items.pop(0)
        name, eq, inline = word.partition("=")
        if name in takes_value:
            if not eq:
                if not items:
                    raise Unmappable(f"pip option {word} has no value: give it one")
                inline = items.pop(0)
            out.append(("arg", takes_value[name], inline))
        elif word == "--no-index":
            out.append(("arg", "--no-index"))
        elif name in {"--constraint", "-c"}:
            out.append(("constraint", inline if eq else items.pop(0)))
        else:
            raise Unmappable(f"pip source option '{word}' has no uv equivalent: "
                             "drop it or install with --installer pip")
    return out


def _lock_pins(lines: Iterable[str]) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lines:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if match:
            pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return pins


def constraint_violations(lock_text: str, constraint_texts: Iterable[str]) -> list[str]:
    """'name==pin violates spec' for each pin of the lock that a constraint line excludes."""
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement

    pins = _lock_pins(lock_text.splitlines())
    bad = []
    for text in constraint_texts:
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            pin = pins.get(re.sub(r"[-_.]+", "-", req.name).lower())
            if pin is not None and req.specifier and not req.specifier.contains(pin, prereleases=True):
                bad.append(f"{req.name}=={pin} violates the constraint {line}")
    return bad


def as_uv(settings: list[tuple[str, ...]]) -> dict[str, Any]:
    """The settings as the engine applies them: uv's options, the environment uv reads, the constraint files."""
    uv: dict[str, Any] = {"args": [], "env": {}, "constraints": []}
    for kind, *rest in settings:
        if kind == "arg":
            uv["args"] += rest
        elif kind == "env":
            uv["env"][rest[0]] = rest[1]
        else:
            uv["constraints"].append(rest[0])
    return uv


def _print(settings: list[tuple[str, ...]]) -> None:
    print(json.dumps(as_uv(settings)))


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv else 2
    command, args = argv[0], argv[1:]
    try:
        if command == "from-pip-config":
            listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                                    capture_output=True, text=True, check=False)
            if listed.returncode != 0:
                raise Unmappable(f"'{sys.executable} -m pip config list' failed: {listed.stderr.strip()[-200:]}")
            _print(settings_from_config(parse_config_list(listed.stdout)))
        elif command == "from-pip-options":
            _print(settings_from_options(args))
        elif command == "check-constraints":
            lock, *constraints = args
            with open(lock) as handle:
                lock_text = handle.read()
            texts = []
            for path in constraints:
                with open(path) as handle:
                    texts.append(handle.read())
            bad = constraint_violations(lock_text, texts)
            if bad:
                raise Unmappable(f"the lock {lock} breaks this machine's pip constraints ({'; '.join(bad)}): "
                                 "use a lock the constraints allow, or --installer pip to see pip's own error")
        else:
            raise Unmappable(f"unknown command '{command}': see --help")
    except Unmappable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
