"""docs/architecture.md's tree of the repository against the repository itself (issue 28): every path it names
exists, and every folder that holds tracked files (down to the packages' sub-packages) and every Python module of the
two packages is named, so a newcomer finds each piece there and a move shows up here first."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "architecture.md"
BEGIN, END = "<!-- tree: checked by tests/ci/test_architecture_tree.py -->", "<!-- end tree -->"
# The packages whose every module the tree names, and how deep folders must be named elsewhere.
PACKAGES = ("lightning_xpu", "lib/lxpu_admin")
FOLDER_DEPTH = 2


def tree_lines(text: str) -> list[str]:
    """The lines of the fenced block between the markers."""
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("```")]


def sites() -> list[str]:
    """The sites, from the data (recipes/sites/<site>.toml): the tree says `<site>/`, never a list that goes stale."""
    return sorted(path.stem for path in (REPO / "recipes" / "sites").glob("*.toml"))


def named_paths(lines: list[str]) -> set[str]:
    """Every path the tree names, relative to the repository: `names  # what`, two spaces of indent a level, a name
    ending in / a folder whose more indented lines are inside it; `<site>` stands for each site."""
    parents: list[tuple[int, str]] = []
    named: set[str] = set()
    for line in lines:
        names, sep, _ = line.partition("  # ")
        assert sep, f"no '  # ' description on tree line: {line!r}"
        indent = len(names) - len(names.lstrip(" "))
        assert indent % 2 == 0, f"odd indent on tree line: {line!r}"
        while parents and parents[-1][0] >= indent:
            parents.pop()
        base = parents[-1][1] if parents else ""
        words = names.split()
        for word in words:
            for site in sites() if "<site>" in word else [None]:
                named.add(base + (word.replace("<site>", site) if site else word).rstrip("/"))
        if len(words) == 1 and words[0].endswith("/"):
            parents.append((indent, base + words[0]))
    return named


def tracked() -> list[str]:
    listing = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [path for path in listing.splitlines() if (REPO / path).exists()]


def required_paths(files: list[str]) -> set[str]:
    """The folders holding tracked files down to FOLDER_DEPTH (the packages: all their folders), and the packages'
    Python modules other than __init__.py."""
    required: set[str] = set()
    for path in files:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            in_package = any(folder == p or folder.startswith(p + "/") for p in PACKAGES)
            if depth <= FOLDER_DEPTH or in_package:
                required.add(folder)
        in_package = any(path.startswith(p + "/") for p in PACKAGES)
        if in_package and path.endswith(".py") and not path.endswith("/__init__.py"):
            required.add(path)
    return required


def test_the_tree_names_only_what_exists() -> None:
    named = named_paths(tree_lines(PAGE.read_text()))
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert not missing, f"docs/architecture.md's tree names paths that do not exist: {missing}"


def test_the_tree_names_every_folder_and_package_module() -> None:
    named = named_paths(tree_lines(PAGE.read_text()))
    unnamed = sorted(required_paths(tracked()) - named)
    assert not unnamed, f"add these to docs/architecture.md's tree (one line per folder or module group): {unnamed}"


def test_the_reader_finds_nesting_and_missing_entries() -> None:
    """The checks above see a module left out and a folder's children under it (a reader that named nothing would
    pass them vacuously)."""
    lines = ["lib/  # a", "  pkg/  # b", "    one.py two.py  # c", "docs/  # d", "  <site>/  # e"]
    assert named_paths(lines) == {"lib", "lib/pkg", "lib/pkg/one.py", "lib/pkg/two.py", "docs",
                                  *(f"docs/{site}" for site in sites())}  # fmt: skip
    files = ["lightning_xpu/__init__.py", "lightning_xpu/a.py", "lightning_xpu/sub/b.py", "docs/x/y/z.md"]
    assert required_paths(files) == {"lightning_xpu", "lightning_xpu/a.py", "lightning_xpu/sub",
                                     "lightning_xpu/sub/b.py", "docs", "docs/x"}  # fmt: skip
