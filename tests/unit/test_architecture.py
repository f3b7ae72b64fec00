"""The house drawn from the imports has no circle: between gpuwatch's parts (its subpackages
and top-level modules), and between its modules, the imports form a graph without cycles.
import-linter's contracts in pyproject.toml say which part may import which (and who may use
Textual, rich, plotext, aiohttp); this says no part or module reaches back to itself, and what
import-linter cannot say (it sees aiohttp, not aiohttp.web): only the servers use aiohttp.web."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parent.parent.parent / "gpuwatch"


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The circles in a graph, one per back edge found by a depth-first walk."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_cycle_between_parts() -> None:
    graph = grimp.build_graph("gpuwatch")
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if part(module) != part(imported) and imported.startswith("gpuwatch."):
                edges.setdefault(part(module), set()).add(part(imported))
    assert "gpuwatch.tui" in edges and "gpuwatch.sources" in edges.get("gpuwatch.snapshot", set())
    found = cycles(edges)
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_import_cycle_between_modules() -> None:
    """Imports inside functions and under TYPE_CHECKING count: a circle dodged by either is
    still a circle (cli/dashboard.py <-> cli/record.py was one; cli/sources.py ended it)."""
    graph = grimp.build_graph("gpuwatch")
    edges = {
        module: {m for m in graph.find_modules_directly_imported_by(module) if m != module}
        for module in graph.modules
    }
    assert "gpuwatch.cli.sources" in edges["gpuwatch.cli.record"]
    found = cycles(edges)
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def aiohttp_web_uses(tree: ast.AST) -> list[int]:
    """Lines that import aiohttp.web (or a web_* module) or reach it as aiohttp.web."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names = [f"{node.value.id}.{node.attr}"]
        else:
            continue
        if any(name.startswith("aiohttp.web") for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_servers_use_aiohttp_web() -> None:
    servers = ("gate/", "sim/", "aioserve.py")
    users = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        lines = aiohttp_web_uses(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            users[rel] = lines
    assert "aioserve.py" in users and "gate/proxy.py" in users  # the walk sees the servers
    strays = {rel: lines for rel, lines in users.items() if not rel.startswith(servers)}
    assert not strays, f"aiohttp.web outside the servers: {strays}"
