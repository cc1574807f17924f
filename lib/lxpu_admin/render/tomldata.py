"""Strict reading of the TOML recipe files: every missing, mistyped or unknown key is an error naming the
file and the key, so a typo in the data can never be silently ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

from .errors import RecipeError


def load_toml(path: Path, shown_as: str) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise RecipeError(f"{shown_as}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{shown_as}: invalid TOML: {exc}") from None


def _key_text(part: str) -> str:
    return part if part.replace("_", "").replace("-", "").isalnum() else f'"{part}"'


class Table:
    """A TOML table with the file and dotted key it came from, for error messages."""

    def __init__(self, data: dict[str, Any], file: str, path: tuple[str, ...] = ()) -> None:
        self.data = data
        self.file = file
        self.path = path

    def where(self, key: str | None = None) -> str:
        parts = self.path + ((key,) if key is not None else ())
        dotted = ".".join(_key_text(p) for p in parts)
        return f"{self.file}: {dotted}" if dotted else self.file

    def error(self, key: str | None, message: str) -> RecipeError:
        return RecipeError(f"{self.where(key)}: {message}")

    def has(self, key: str) -> bool:
        return key in self.data

    def keys(self) -> list[str]:
        return list(self.data)

    def only(self, allowed: set[str]) -> None:
        unknown = sorted(set(self.data) - allowed)
        if unknown:
            raise self.error(
                unknown[0], f"unknown key (allowed here: {', '.join(sorted(allowed))}); fix the spelling"
            )

    def _get(self, key: str, kind: type, kind_name: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.error(None, f"missing field '{key}'")
            return None
        value = self.data[key]
        if not isinstance(value, kind) or (kind is str and not value.strip()):
            raise self.error(key, f"must be {kind_name}, got {value!r}")
        return value

    def text(self, key: str) -> str:
        return self._get(key, str, "a non-empty string", True)

    def text_or(self, key: str, default: str) -> str:
        value = self._get(key, str, "a non-empty string", False)
        return default if value is None else value

    def any_text(self, key: str) -> str:
        """A string that may be empty."""
        if key not in self.data:
            raise self.error(None, f"missing field '{key}'")
        value = self.data[key]
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, bool, "true or false", False)
        return default if value is None else value

    def texts(self, key: str, default: list[str] | None = None) -> list[str]:
        value = self._get(key, list, "a list of strings", default is None)
        if value is None:
            return list(default or [])
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise self.error(key, f"must be a list of non-empty strings, has {item!r}")
        return list(value)

    def table(self, key: str) -> Table:
        value = self._get(key, dict, "a table", True)
        return Table(value, self.file, (*self.path, key))

    def table_or_empty(self, key: str) -> Table:
        value = self._get(key, dict, "a table", False)
        return Table(value or {}, self.file, (*self.path, key))

    def tables(self) -> list[tuple[str, Table]]:
        """Every entry of this table, each of which must itself be a table."""
        result = []
        for key, value in self.data.items():
            if not isinstance(value, dict):
                raise self.error(key, f"must be a table, got {value!r}")
            result.append((key, Table(value, self.file, (*self.path, key))))
        return result
