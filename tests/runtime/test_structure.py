"""The runtime package's modules import each other without a circle, lazily or not (one direction of layers)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "lightning_xpu"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every lightning_xpu module `path` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("lightning_xpu")}


def test_no_import_circle_in_the_runtime() -> None:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {name: {other for other in _imports(path) if other in modules and other != name}
             for name, path in modules.items()}
    # A package's __init__ importing its own submodules is how packages work; only circles elsewhere count.
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not (modules[name].name == "__init__.py" and t.startswith(name + "."))}

    def circle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in path:
                    stack.append((nxt, [*path, nxt]))
        return None

    core = ["lightning_xpu._namespaces", "lightning_xpu._patching", "lightning_xpu._apply", "lightning_xpu._autoload"]
    circles = {name: circle_from(name) for name in core}
    assert circles == dict.fromkeys(core), circles
