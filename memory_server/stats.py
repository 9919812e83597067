"""What a graph holds, counted in one place for every result that reports it: the totals (list_contexts, the
`check` command), the overview of a graph too large for one result (read_graph), the `stats` command's figures.
No MCP in here.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

from memory_server.graph import KnowledgeGraph

TOP_TYPES = 20  # entity types in the overview
TOP_CONNECTED = 10  # entities in the overview's mostConnected
TOP = 10  # items in each "most common" list of the stats command


def totals(graph: KnowledgeGraph) -> dict[str, int]:
    return {
        "entities": len(graph.entities),
        "relations": len(graph.relations),
        "observations": sum(len(entity.observations) for entity in graph.entities.values()),
    }


def overview(graph: KnowledgeGraph) -> dict[str, Any]:
    """What a graph holds, in a few lines: counts, entity types by size, the entities with the most relations."""
    types = Counter(entity.entity_type for entity in graph.entities.values())
    degree = degrees(graph)
    connected = heapq.nsmallest(  # ties in file order
        TOP_CONNECTED, (e for e in graph.entities.values() if degree[e.name]), key=lambda e: -degree[e.name]
    )
    result: dict[str, Any] = {**totals(graph), "entityTypes": dict(types.most_common(TOP_TYPES))}
    if len(types) > TOP_TYPES:
        result["otherTypes"] = len(types) - TOP_TYPES
    result["mostConnected"] = [
        {"name": e.name, "entityType": e.entity_type, "relations": degree[e.name]} for e in connected
    ]
    return result


def figures(graph: KnowledgeGraph) -> dict[str, Any]:
    """The `stats` command's figures: the totals, the most common types, the largest and most connected
    entities, and what is loose (entities without relations, relations to a missing entity, unusable lines)."""
    entities = list(graph.entities.values())
    ends = degrees(graph)  # as the overview counts them; ties in the order the relations come
    largest = sorted(entities, key=lambda e: -len(e.observations))[:TOP]
    return {
        **totals(graph),
        "entityTypes": Counter(e.entity_type for e in entities).most_common(TOP),
        "relationTypes": Counter(r.relation_type for r in graph.relations.values()).most_common(TOP),
        "mostConnected": [(name, n) for name, n in ends.most_common(TOP) if name in graph.entities],
        "mostObservations": [(e.name, len(e.observations)) for e in largest if e.observations],
        "withoutRelations": sum(1 for e in entities if not ends[e.name]),
        "danglingRelations": dangling_relations(graph),
        "unusableLines": len(graph.skipped_lines()),
    }


def degrees(graph: KnowledgeGraph) -> Counter[str]:
    """How many relations touch each name (a relation from a name to itself counts once)."""
    degree: Counter[str] = Counter()
    for relation in graph.relations.values():
        degree[relation.source] += 1
        if relation.target != relation.source:
            degree[relation.target] += 1
    return degree


def dangling_relations(graph: KnowledgeGraph) -> int:
    """How many relations name an entity the graph does not have."""
    return sum(1 for r in graph.relations.values() if r.source not in graph.entities or r.target not in graph.entities)
