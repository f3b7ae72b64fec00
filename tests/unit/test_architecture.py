"""The house drawn from the imports has no circle: between gpuwatch's parts (its subpackages
and top-level modules) the imports form a graph without cycles. import-linter's contracts in
pyproject.toml say which part may import which; this says no part reaches back to itself."""

from __future__ import annotations

import grimp


def part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_parts() -> None:
    graph = grimp.build_graph("gpuwatch")
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if part(module) != part(imported) and imported.startswith("gpuwatch."):
                edges.setdefault(part(module), set()).add(part(imported))
    assert "gpuwatch.tui" in edges and "gpuwatch.sources" in edges.get("gpuwatch.snapshot", set())

    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
