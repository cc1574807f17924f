"""Known environment variable names (recipes/known_env.toml): every name an artifact sets must be listed
exactly, so a misspelt name fails the render instead of being silently ignored at run time."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import RecipeError
from .tomldata import Table, load_toml

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# How the templates set variables: `export NAME=` (shell) and setenv/pushenv/prepend_path/... (Lmod Lua).
_SHELL_SET = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)
_LUA_SET = re.compile(r"\b(?:setenv|pushenv|prepend_path|append_path)\(\s*\"([^\"]+)\"")
# How the setup library's Python half (lxpu_admin/envside/setup_lib.py) sets them: exports["NAME"] = ...
_PYTHON_SET = re.compile(r"\bexports\[\"([A-Za-z_][A-Za-z0-9_]*)\"\]")


@dataclass(frozen=True)
class KnownNames:
    file: str
    names: frozenset[str]

    def check(self, name: str, where: str) -> None:
        if not _NAME.match(name):
            raise RecipeError(f"{where}: '{name}' is not a valid environment variable name")
        if name in self.names:
            return
        close = difflib.get_close_matches(name, sorted(self.names), n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise RecipeError(
            f"{where}: {name} is not a known environment variable{hint}; "
            f"if it is real, add it to {self.file} with its source"
        )


def load_known_names(path: Path, shown_as: str) -> KnownNames:
    root = Table(load_toml(path, shown_as), shown_as)
    root.only({"families"})
    names: set[str] = set()
    for _family, table in root.table("families").tables():
        table.only({"source", "names"})
        table.text("source")
        for name in table.texts("names"):
            if not _NAME.match(name):
                raise table.error("names", f"'{name}' is not a valid environment variable name")
            names.add(name)
    return KnownNames(shown_as, frozenset(names))


def names_set_in(text: str) -> list[str]:
    """Every variable a rendered shell or Lua artifact, or the setup library's Python half, sets."""
    return _SHELL_SET.findall(text) + _LUA_SET.findall(text) + _PYTHON_SET.findall(text)
