"""lightning_xpu's import graph, read with `ast` from the source (nothing is imported): no cycle among its modules,
and the runtime never imports its tools. The runtime is every module outside the tools: what `import lightning_xpu`,
the autoload hook and Lightning's patched classes run, the way Lightning's accelerators never import its tooling.
The tools are `lightning_xpu/commands/` (the `lightning-xpu` command, the training jobs' launcher, the pip guard, the
user layer), `lightning_xpu/validation/` (validation and reports) and `lightning_xpu/__main__.py` (the command's
`python -m lightning_xpu`). Every import counts, also those inside functions (the runtime's lazy ones are the ones
that reach furthest) and `importlib.import_module`/`__import__` of a constant name. It replaces
tests/runtime/test_structure.py, which looked for circles from four core modules only and, by leaving out what a
package's __init__ imports, missed the one through `lightning_xpu.report()` that main had."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tomllib

from tests.ci.ci_helpers import REPO

PACKAGE = "lightning_xpu"
TOOLS = ("lightning_xpu.commands", "lightning_xpu.validation", "lightning_xpu.__main__")


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((REPO / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def is_tool(name: str) -> bool:
    return any(name == tool or name.startswith(tool + ".") for tool in TOOLS)


def imported_names(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The dotted names `module` imports, anywhere in its file; `from P import N` names P.N where that is a module,
    else P (the module that defines N)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.args[0].value


def owning_module(name: str, known: dict[str, Path]) -> str | None:
    """The package module that defines `name` (lightning_xpu.x.y for lightning_xpu.x.y.Attr)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        targets = (owning_module(name, known) for name in imported_names(module, path, known)
                   if name == PACKAGE or name.startswith(PACKAGE + "."))
        graph[module] = {target for target in targets if target and target != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a cycle or several."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    """The reader sees the imports it must judge (a reader that saw none would pass every check below)."""
    graph = import_graph()
    assert "lightning_xpu.connector" in graph and "lightning_xpu.diagnosis" in graph["lightning_xpu.connector"]
    assert "lightning_xpu.commands.cli" in graph["lightning_xpu.__main__"]


def test_no_import_cycle_among_the_modules() -> None:
    found = cycles(import_graph())
    assert not found, f"import cycles among lightning_xpu's modules (each list imports itself round): {found}"


def test_the_runtime_never_imports_its_tools() -> None:
    graph = import_graph()
    assert all(tool in graph for tool in TOOLS), f"not every tool of {TOOLS} is in the package"
    found = sorted(f"{module} -> {target}" for module, targets in graph.items() if not is_tool(module)
                   for target in targets if is_tool(target))  # fmt: skip
    assert not found, (f"the runtime imports its tools: {found}; move what the runtime needs into a runtime module "
                       "that imports no tool (as lightning_xpu/diagnosis.py and install_facts.py)")


def test_the_command_is_a_tool() -> None:
    """The `lightning-xpu` console script and `python -m lightning_xpu` start in the tools, where the runtime never
    reaches."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    targets = {name: target.partition(":")[0] for name, target in scripts.items()}
    assert targets and all(is_tool(target) for target in targets.values()), targets
    assert set(targets.values()) <= set(modules()), targets
