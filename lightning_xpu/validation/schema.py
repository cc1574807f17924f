"""The committed JSON schema of a report (`schema.json`) and a small validator for the keywords it uses.

No `jsonschema` dependency: the runtime installs into site environments with nothing extra. The validator
supports `type`, `enum`, `required`, `properties`, `additionalProperties`, `items`, `pattern`, `minLength` and
`minimum`, and refuses a schema that uses any other keyword, so the schema cannot silently outgrow it.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).with_name("schema.json")
_ANNOTATIONS = {"$schema", "$id", "title", "description"}
_KEYWORDS = {"type", "enum", "required", "properties", "additionalProperties", "items", "pattern", "minLength",
             "minimum"}
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "null": (type(None),),
    "integer": (int,), "number": (int, float),
}


class SchemaError(ValueError):
    """A report that does not match the schema; the message lists every violation with its JSON path."""


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    return dict(json.loads(SCHEMA_PATH.read_text()))


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[name])


def errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Every violation of `schema` by `value`, as "path: problem" lines (empty when it matches)."""
    unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise ValueError(f"schema at {path} uses unsupported keywords {sorted(unknown)}: extend schema.py first")
    found: list[str] = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, name) for name in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            found.append(f"{path}: shorter than {schema['minLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if "minimum" in schema and _is_type(value, "number") and value < schema["minimum"]:
        found.append(f"{path}: {value} is below {schema['minimum']}")
    if isinstance(value, dict):
        found += [f"{path}: missing {name!r}" for name in schema.get("required", []) if name not in value]
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                found += errors(item, properties[name], f"{path}.{name}")
            elif extra is False:
                found.append(f"{path}: unexpected key {name!r}")
            elif isinstance(extra, dict):
                found += errors(item, extra, f"{path}.{name}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += errors(item, schema["items"], f"{path}[{index}]")
    return found


def check_report(data: Any) -> None:
    """Raise `SchemaError` unless `data` is a valid report."""
    problems = errors(data, load_schema())
    if problems:
        raise SchemaError("report does not match lightning_xpu/validation/schema.json: " + "; ".join(problems))
