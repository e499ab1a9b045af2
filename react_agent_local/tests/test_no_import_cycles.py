"""No import cycles among the package's modules: every module can be read, imported and replaced
with only what lies below it (docs/ARCHITECTURE.md, the rooms).

An import counts wherever it is written -- at the top of a module or inside a function: a lazy
import that only dodges a cycle at import time is still a cycle here. Imports under
``if TYPE_CHECKING:`` do not count: they are type hints, never run.
"""

from __future__ import annotations

import grimp

#: (importer, imported) direct imports allowed to close a cycle, each with the reason it is kept.
#: Empty: the package has none; a new entry needs a reason and the list stays at most two long.
ALLOWED_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()


def _graph() -> grimp.ImportGraph:
    # No cache on disk: graphs built with and without type-checking imports share one, and after an
    # edit a build of one kind was seen to answer from entries the other kind left stale.
    graph = grimp.build_graph("agent", exclude_type_checking_imports=True, cache_dir=None)
    for importer, imported in ALLOWED_CYCLE_EDGES:
        graph.remove_import(importer=importer, imported=imported)
    return graph


def _cycle_edges(graph: grimp.ImportGraph) -> list[str]:
    """Every direct import ``a -> b`` where ``b`` leads back to ``a``, with the way back."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                found.append(f"{importer} -> {imported}   (back: {' -> '.join(back)})")
    return found


def test_the_package_has_no_import_cycles():
    graph = _graph()
    assert "agent.runtime" in graph.modules and "agent.backends.llama_cpp" in graph.modules  # the whole package
    cycles = _cycle_edges(graph)
    assert not cycles, f"{len(cycles)} imports close a cycle:\n" + "\n".join(cycles)


def test_the_allowlist_is_short_and_names_real_imports():
    assert len(ALLOWED_CYCLE_EDGES) <= 2
    graph = grimp.build_graph("agent", exclude_type_checking_imports=True, cache_dir=None)
    for importer, imported in ALLOWED_CYCLE_EDGES:
        assert graph.direct_import_exists(importer=importer, imported=imported), (importer, imported)
