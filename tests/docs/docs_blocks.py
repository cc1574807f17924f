"""Runnable blocks of the documentation: how they are marked, found and run.

The docs mark what the docs test executes with HTML comments, which GitHub does not render:

    <!-- runnable -->               the fenced ```bash block on the next line runs in the docs test
    <!-- runnable: needs=install,lmod expect="HydraEnvironment" -->
    <!-- file: train.py -->         the fenced block on the next line is a file that runnable blocks use

Options of `runnable` (shell words, `key=value`):
  needs=A,B        what the block needs: `install` (the README's install, made once per test session, in
                   "$HOME/lightning-xpu"), `lmod` (the `module` command), `slurm` (a running cluster),
                   `mpi` (MPICH's `mpiexec` first on PATH)
  files=A,B        file blocks of the same document, written into a fresh work directory, the block's cwd
  cwd=work         a fresh, empty work directory as the cwd (default: the repository root; work with files=)
  expect=TEXT      the block's output must contain TEXT (repeatable)
  role=install     the README's install command: run once per session, by the install fixture
  role=test-suite  the README's test command: `.ci/run` must run exactly it (the docs test never runs it: it
                   would run the docs test itself)

A block runs as `bash -euo pipefail` with a temporary HOME, the test's Python first on PATH and, for
needs=lmod, Lmod's bash init sourced first (a login shell on a cluster has `module` already).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

NEEDS = ("install", "lmod", "slurm", "mpi")
ROLES = ("install", "test-suite")
OPTION_KEYS = ("needs", "files", "cwd", "expect", "role")
SHELL_LANGUAGES = ("bash", "sh", "shell")
# docs/*.md that are not user guides (every user guide must have a runnable block), and why.
NOT_GUIDES = {
    "architecture.md": "contracts between the pieces, for developers",
    "multinode.md": "the developers' two-host test harness, run by tests/multinode",
    "performance.md": "measured results, not instructions",
    "compatibility.md": "generated from docs/reports (lightning_xpu/validation/compat.py), not instructions",
}
LMOD_INIT_DEFAULT = "/usr/share/lmod/lmod/init/bash"

_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>runnable|file)\s*(?::\s*(?P<options>.*?))?\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")


@dataclass(frozen=True)
class Block:
    """A fenced block marked `runnable` or `file`."""

    doc: str  # path relative to the repository
    line: int  # line of the mark, 1-based
    kind: str  # "runnable" or "file"
    language: str
    text: str
    needs: frozenset[str] = frozenset()
    files: tuple[str, ...] = ()
    expect: tuple[str, ...] = ()
    role: str | None = None
    cwd: str = "repo"  # "repo" or "work"
    name: str | None = None  # file blocks only

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class Document:
    path: str
    blocks: list[Block] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def runnable(self) -> list[Block]:
        return [block for block in self.blocks if block.kind == "runnable"]

    def file_blocks(self) -> dict[str, Block]:
        return {block.name: block for block in self.blocks if block.kind == "file" and block.name}


def _fences(lines: list[str]) -> Iterable[tuple[int, int, str, str]]:
    """(opening line, closing line, indent, info) of each fenced block, 0-based.

    An unclosed fence runs to the end of the file, as on GitHub.
    """
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        close = index + 1
        while close < len(lines) and not closing.match(lines[close]):
            close += 1
        yield index, close, opening["indent"], opening["info"]
        index = close + 1


def _inside_fences(lines: list[str]) -> set[int]:
    return {index for first, close, _, _ in _fences(lines) for index in range(first, close + 1)}


def outside_fences(path: Path) -> list[str]:
    """The lines of a markdown file that are not part of a fenced block (fence lines included)."""
    lines = path.read_text().splitlines()
    inside = _inside_fences(lines)
    return [line for index, line in enumerate(lines) if index not in inside]


def _dedent(lines: list[str], indent: str) -> str:
    return "".join(line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines)


def _parse_options(
    where: str, kind: str, options: str | None, errors: list[str]
) -> dict[str, list[str]] | None:
    try:
        words = shlex.split(options or "")
    except ValueError as error:
        errors.append(f"{where}: cannot read the {kind} options ({error}): quote values with double quotes")
        return None
    if kind == "file":
        if len(words) != 1 or "=" in words[0]:
            errors.append(f"{where}: write a file mark as <!-- file: NAME -->, not {options!r}")
            return None
        return {"name": words}
    parsed: dict[str, list[str]] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if key not in OPTION_KEYS or not sep or not value:
            errors.append(f"{where}: runnable option {word!r} is not one of {', '.join(OPTION_KEYS)}=VALUE")
            continue
        parsed.setdefault(key, []).append(value)
    return parsed


def _split(values: list[str]) -> tuple[str, ...]:
    return tuple(item for value in values for item in value.split(",") if item)


def _runnable_block(
    where: tuple[str, int], options: dict[str, list[str]], language: str, text: str, errors: list[str]
) -> Block | None:
    doc, line = where
    at = f"{doc}:{line}"
    if language not in SHELL_LANGUAGES:
        errors.append(f"{at}: a runnable block must be a ```bash fence, not {language or 'an untyped one'!r}")
        return None
    needs = frozenset(_split(options.get("needs", [])))
    unknown = sorted(needs - set(NEEDS))
    if unknown:
        errors.append(f"{at}: unknown needs {', '.join(unknown)} (known: {', '.join(NEEDS)})")
    files = _split(options.get("files", []))
    roles = options.get("role", [])
    if len(roles) > 1 or any(role not in ROLES for role in roles):
        errors.append(f"{at}: role must be one of {', '.join(ROLES)}, not {', '.join(roles)}")
    cwds = options.get("cwd", ["work" if files else "repo"])
    if cwds not in (["repo"], ["work"]) or (files and cwds != ["work"]):
        errors.append(f"{at}: cwd must be repo or work (work with files=), not {', '.join(cwds)}")
    return Block(
        doc,
        line,
        "runnable",
        language,
        text,
        needs=needs,
        files=files,
        expect=tuple(options.get("expect", [])),
        role=roles[0] if roles else None,
        cwd=cwds[0],
    )


def parse_document(path: Path, root: Path = REPO) -> Document:
    """Every marked block of one markdown file, and every mistake in the marks (one line each)."""
    document = Document(path.relative_to(root).as_posix())
    lines = path.read_text().splitlines(keepends=True)
    inside = _inside_fences(lines)
    fence_at = {first: (close, indent, info) for first, close, indent, info in _fences(lines)}
    for index, text in enumerate(lines):
        marker = _MARKER.match(text)
        if index in inside or not marker:
            continue
        kind, where = marker["kind"], f"{document.path}:{index + 1}"
        options = _parse_options(where, kind, marker["options"], document.errors)
        if index + 1 not in fence_at:
            document.errors.append(f"{where}: a {kind} mark must be on the line right before a ``` fence")
            continue
        close, indent, info = fence_at[index + 1]
        body = _dedent(lines[index + 2 : close], indent)
        if options is None:
            continue
        if kind == "file":
            document.blocks.append(Block(document.path, index + 1, kind, info, body, name=options["name"][0]))
            continue
        block = _runnable_block((document.path, index + 1), options, info, body, document.errors)
        if block is not None:
            document.blocks.append(block)
    _check_files(document)
    return document


def _check_files(document: Document) -> None:
    names = [block.name for block in document.blocks if block.kind == "file"]
    for name in sorted({name for name in names if name and names.count(name) > 1}):
        document.errors.append(f"{document.path}: file block {name!r} is defined more than once")
    used = {name for block in document.runnable() for name in block.files}
    for block in document.runnable():
        for name in sorted(set(block.files) - set(names)):
            document.errors.append(f"{block.where}: files={name} names no <!-- file: {name} --> block here")
    for block in document.blocks:
        if block.kind == "file" and block.name not in used:
            document.errors.append(f"{block.where}: file {block.name!r} is used by no runnable block")


def documents(root: Path = REPO) -> list[Document]:
    """README.md and docs/*.md, parsed."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [parse_document(path, root) for path in paths if path.is_file()]


def user_guides(root: Path = REPO) -> list[Path]:
    return [path for path in sorted((root / "docs").glob("*.md")) if path.name not in NOT_GUIDES]


# ---- running ----------------------------------------------------------------------------------------------

# What of the test's own environment must not reach a block: shell start-up files, Python overrides and a
# loaded Lmod state (exported shell functions included).
_DROPPED = ("BASH_ENV", "ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "LOADEDMODULES")
_DROPPED_PREFIXES = ("_ModuleTable", "__LMOD_REF_COUNT", "BASH_FUNC_", "_LMFILES_")


def block_env(
    home: Path, first_on_path: Iterable[Path] = (), base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A block's environment: a temporary HOME; FIRST_ON_PATH, then the test's Python, first on PATH."""
    source = os.environ if base is None else base
    env = {
        name: value
        for name, value in source.items()
        if name not in _DROPPED and not name.startswith(_DROPPED_PREFIXES)
    }
    # pip's download cache stays where it was, so that a fresh HOME does not download every wheel again.
    env.setdefault("PIP_CACHE_DIR", str(Path(source.get("HOME", "/")) / ".cache" / "pip"))
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join(
        [*map(str, first_on_path), str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def lmod_init() -> Path:
    return Path(os.environ.get("LXPU_LMOD_INIT", LMOD_INIT_DEFAULT))


def block_script(block: Block) -> str:
    prelude = [f"source {shlex.quote(str(lmod_init()))}"] if "lmod" in block.needs else []
    return "\n".join([*prelude, block.text])


def write_files(block: Block, document: Document, work: Path) -> None:
    defined = document.file_blocks()
    for name in block.files:
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(defined[name].text)


def run_block(
    block: Block, *, cwd: Path, env: Mapping[str, str], script: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run the block from SCRIPT, a file outside both the repository and the work directory.

    The block runs in its own process group; on timeout the whole group is killed (a block may start DDP
    ranks) and the result has exit status 124, as with timeout(1).
    """
    script.write_text(block_script(block) + "\n")
    args = ["bash", "-euo", "pipefail", str(script)]
    with subprocess.Popen(
        args,
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            return subprocess.CompletedProcess(args, 124, stdout, f"{stderr}\n(killed after {timeout:.0f} s)")
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def transcript(block: Block, result: subprocess.CompletedProcess[str]) -> str:
    """What a failure shows: the block, its exit status and the end of its output."""
    output = (result.stdout + result.stderr)[-6000:]
    return f"{block.where} exited {result.returncode}\n--- block:\n{block.text}--- output (end):\n{output}"


def git_status(root: Path = REPO) -> str | None:
    """`git status --porcelain` of the repository, or None where it is not a git checkout."""
    result = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout if result.returncode == 0 else None
