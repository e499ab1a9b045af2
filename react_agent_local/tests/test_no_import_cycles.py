"""No import cycles among the package's modules: every module can be read, imported and replaced
with only what lies below it (docs/ARCHITECTURE.md, the rooms).

An import counts wherever it is written -- at the top of a module or inside a function: a lazy
import that only dodges a cycle at import time is still a cycle here, and so is an import under
``if TYPE_CHECKING:``: a type hint that needs a module above it is a circle in the design.
"""

from __future__ import annotations

import grimp

#: (importer, imported) direct imports allowed to close a cycle, each with the reason it is kept.
#: Empty: the package has none; a new entry needs a reason and the list stays at most two long.
ALLOWED_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()


def _graph() -> grimp.ImportGraph:
    # No cache on disk: after an edit a cached build was seen to answer from stale entries.
    graph = grimp.build_graph("agent", exclude_type_checking_imports=False, cache_dir=None)
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
    assert "agent.core.runtime" in graph.modules and "agent.models.backends.llama_cpp" in graph.modules  # the whole package
    cycles = _cycle_edges(graph)
    assert not cycles, f"{len(cycles)} imports close a cycle:\n" + "\n".join(cycles)


def test_the_allowlist_is_short_and_names_real_imports():
    assert len(ALLOWED_CYCLE_EDGES) <= 2
    graph = grimp.build_graph("agent", exclude_type_checking_imports=False, cache_dir=None)
    for importer, imported in ALLOWED_CYCLE_EDGES:
        assert graph.direct_import_exists(importer=importer, imported=imported), (importer, imported)
