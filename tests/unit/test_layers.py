"""The package's shape: no import circle anywhere, deferred imports included (import-linter checks the layers)."""

from __future__ import annotations

import grimp


def _cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Every import circle among ``package``'s modules (one path per strongly connected set), by depth-first search."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i in modules) for m in modules}
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in edges[module]:
            if state.get(target) == 1:
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in modules:
        if module not in state:
            visit(module)
    return found


def test_no_import_circle_in_either_package() -> None:
    graph = grimp.build_graph("tierpool", "tierpool_operator")
    assert _cycles(graph, "tierpool") == []
    assert _cycles(graph, "tierpool_operator") == []


def test_the_cycle_finder_sees_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph, "pkg") == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_at_most_twelve_modules_at_the_top_of_tierpool() -> None:
    graph = grimp.build_graph("tierpool")
    top = [m for m in graph.modules if m.count(".") == 1 and not graph.find_children(m)]
    assert len(top) <= 12, sorted(top)
