"""No cycle between packages: the import graph of the library, the Celery app and the beat
wiring, collapsed to packages (``inner_plane.journal``, ``inner_plane.lane``, ..., ``workers``),
is acyclic. Every import counts, including those inside functions.

The same check by hand: ``python -m tests.unit.test_package_graph`` prints the package graph's
cycles (none) and its layers from the ground up.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from graphlib import CycleError, TopologicalSorter

import grimp

ROOTS = ("inner_plane", "workers", "beat_schedule")


def package_of(module: str) -> str:
    """``inner_plane.journal.signals.store`` -> ``inner_plane.journal``; top-level modules of the
    library (``inner_plane.publish``) are packages of their own; other roots stay whole."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "inner_plane" and len(parts) > 1 else parts[0]


def package_graph(roots: Iterable[str] = ROOTS) -> dict[str, set[str]]:
    """Each package and the packages it imports (the root ``inner_plane`` package, the public
    API face, is left out: nothing inside the library may import it)."""
    graph = grimp.build_graph(*roots, cache_dir=None)
    packages: dict[str, set[str]] = {}
    for module in graph.modules:
        source = package_of(module)
        if source == "inner_plane":
            continue
        targets = packages.setdefault(source, set())
        for imported in graph.find_modules_directly_imported_by(module):
            target = package_of(imported)
            if target != source and target != "inner_plane":
                targets.add(target)
    return packages


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a list of packages each importing the next, or None."""
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as error:
        return list(reversed(error.args[1]))  # graphlib lists each node before its importer
    return None


def test_the_package_graph_has_no_cycle() -> None:
    graph = package_graph()
    assert "inner_plane.journal" in graph and "workers" in graph
    found = cycle(graph)
    assert found is None, " -> ".join(found or [])


def test_nothing_in_the_library_imports_the_public_api_package() -> None:
    graph = grimp.build_graph(*ROOTS, cache_dir=None)
    importers = sorted(
        module
        for module in graph.find_modules_that_directly_import("inner_plane")
        if module.startswith("inner_plane.")
    )
    assert importers == []


def test_a_cycle_is_found_when_there_is_one() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


if __name__ == "__main__":
    graph = package_graph()
    found = cycle(graph)
    print("cycle: " + (" -> ".join(found) if found else "none"))
    if found is None:
        sorter = TopologicalSorter(graph)
        sorter.prepare()
        layer = 0
        while sorter.is_active():
            ready = sorted(sorter.get_ready())
            print(f"layer {layer}: {', '.join(ready)}")
            sorter.done(*ready)
            layer += 1
    sys.exit(1 if found else 0)
