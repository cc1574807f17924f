"""The one state object the bash driver (engine.sh) and these modules share, and the engine's messages.

The driver passes its state in the environment, one `_lxpu_<name>` variable per field below (engine.sh
`_LXPU_STATE` lists them; notes one per line). A module changes a field with `State.set` or `State.note`, which
write a `name=value` line to file descriptor 3 at once: the driver applies the lines when the module returns,
and its exit trap applies them after a signal stopped both, so a kill right after the publishing rename still
finds `published=1`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field

# Fields the driver passes; the names are engine.sh's variables without `_lxpu_`.
FIELDS = (
    "prefix", "tag", "version", "pid", "dry_run", "env", "shared_group", "lock_timeout", "action", "keep",
    "older_than", "variant", "base_python", "log", "setup_file", "module", "noop", "force", "current", "published",
    "fail_reason", "result", "lease_file", "lock_fd", "lock_t0",
)  # fmt: skip


class Stop(Exception):
    """End this command with an exit status (the message, if any, was printed already)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@dataclass
class State:
    values: dict[str, str]
    notes: list[str] = field(default_factory=list)
    # Unset (None) until looked up once; then passed back to later commands (a lookup can take 10 s).
    cluster_name: str | None = None

    @classmethod
    def from_environment(cls) -> State:
        env = os.environ
        values = {name: env.get(f"_lxpu_{name}", "") for name in FIELDS}
        notes = [line for line in env.get("_lxpu_notes", "").split("\n") if line]
        return cls(values, notes, env.get("_lxpu_cluster_name"))

    def __getitem__(self, name: str) -> str:
        return self.values[name]

    def set(self, name: str, value: str) -> None:
        self.values[name] = value
        self._tell(name, value)

    def set_cluster(self, value: str) -> None:
        self.cluster_name = value
        self._tell("cluster_name", value)

    def note(self, text: str, quietly: bool = False) -> None:
        """A change besides building (a repair, a removal): the last line names it."""
        if self.dry:
            text = f"(dry run, not done) {text}"
        self.notes.append(text)
        self._tell("note", text)
        if not quietly:
            say(text)

    @property
    def dry(self) -> bool:
        return self.values["dry_run"] == "1"

    @property
    def prefix(self) -> str:
        return self.values["prefix"]

    @property
    def tag(self) -> str:
        return self.values["tag"]

    @property
    def envs(self) -> str:
        return f"{self.prefix}/.envs"

    @property
    def env_name(self) -> str:
        """The name of this run's build (<tag>.<build-id>)."""
        return os.path.basename(self.values["env"])

    def tmp(self, suffix: str) -> str:
        """A temporary path of this run (the next run removes those of killed runs)."""
        return f"{self.envs}/.tmp.{self.tag}.{self['pid']}.{suffix}"

    def _tell(self, name: str, value: str) -> None:
        line = f"{name}={value}".replace("\n", " ") + "\n"
        try:
            os.write(3, line.encode())
        except OSError:
            pass  # run by hand, without the driver: nothing to tell


# ---- messages ----


def say(text: str) -> None:
    print(text, flush=True)


def warn(text: str) -> None:
    say(f"WARNING: {text}")


def fail(state: State, reason: str) -> Stop:
    """A step failed: the driver's exit trap writes the last log line from the reason. Raise what it returns."""
    state.set("fail_reason", reason)
    say(f"ERROR: {reason}")
    return Stop(1)


def bad_input(state: State, reason: str) -> Stop:
    """Bad input: one line naming the fix, exit 2, before anything is written. Raise what it returns."""
    print(f"install_lightning_{state['version']}.sh: error: {reason}", file=sys.stderr, flush=True)
    state.set("fail_reason", f"bad input: {reason}")
    return Stop(2)


# What bash's `printf %q` escapes with a backslash (bash lib/sh/shquote.c, sh_backslash_quote).
_SPECIAL = set(" \t\n'\"\\|&;()<>!{}*[?]^$`,")
_ANSI = {"\a": "\\a", "\b": "\\b", "\x1b": "\\E", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
         "\v": "\\v", "\\": "\\\\", "'": "\\'"}  # fmt: skip


def quote_one(arg: str) -> str:
    """One word as bash's `printf %q` writes it, so that printed commands read as the shell engine's did."""
    if arg == "":
        return "''"
    if any(not ch.isprintable() for ch in arg):
        return "$'" + "".join(_ANSI.get(ch, ch if ch.isprintable() else f"\\{ord(ch):03o}") for ch in arg) + "'"
    out = []
    for i, ch in enumerate(arg):
        if ch in _SPECIAL or (ch == "~" and (i == 0 or arg[i - 1] in "=:")) or (ch == "#" and i == 0):
            out.append("\\")
        out.append(ch)
    return "".join(out)


def quote(*args: str) -> str:
    return " ".join(quote_one(arg) for arg in args)


def run(state: State, *argv: str) -> None:
    """Print a command, then run it (unless --dry-run); a failure stops the run with the command's status."""
    say(f"+ {quote(*argv)}")
    if state.dry:
        return
    status = subprocess.run(argv, check=False).returncode
    if status != 0:
        state.set("fail_reason", f"exit status {status} from: {quote(*argv)}")
        raise Stop(status)


def remove_quietly(*paths: str) -> None:
    """rm -rf without printing (leftovers of this run itself)."""
    if paths:
        subprocess.run(["rm", "-rf", "--", *paths], check=False)


def command_output(*argv: str) -> tuple[int, str]:
    """(exit status, stdout and stderr with trailing newlines dropped), as "$(cmd 2>&1)" gives them."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout + done.stderr).rstrip("\n")
