"""Keyword mode: the official server's search (a case-insensitive substring of a name, type or observation),
answered from one joined lower-cased string instead of lower-casing every text of the graph on every query."""

from __future__ import annotations

from collections.abc import Collection

from memory_server.documents import Snapshot
from memory_server.graph import Entity, KnowledgeGraph
from memory_server.hits import Hit
from memory_server.joined import JoinedText


class KeywordIndex:
    """The official server's search, fast: each entity's name, type and observations lower-cased into one string
    that `str.find` scans, instead of lower-casing every text of the graph on every query."""

    def __init__(self, graph: KnowledgeGraph) -> None:
        self.entities = graph.entity_list()
        self._snapshot = Snapshot(self.entities)
        self.joined = JoinedText(_keyword_text(e) for e in self.entities)
        self.updates = 0

    def update(self, graph: KnowledgeGraph, changed: Collection[str] | None = None) -> None:
        """Bring the index to `graph`, a later state of its graph: only the entities that changed (those named in
        `changed`, when the store can tell) are read again."""
        entities = graph.entity_list()
        snapshot = Snapshot(entities)
        kept = self._snapshot.match(snapshot, changed)[1]
        self.joined = self.joined.replaced(kept, lambda number: _keyword_text(entities[number]))
        self.entities, self._snapshot = entities, snapshot
        self.updates += 1

    @property
    def nbytes(self) -> int:
        return len(self.joined.text) + 100 * len(self.entities)

    def hits(self, query: str, limit: int | None) -> list[Hit]:
        """Entities in file order whose name, type or an observation contains the query, ignoring case; each
        hit names the first observation that matched (None when the name or type did)."""
        needle = query.lower()
        if not needle or JoinedText.GAP in needle:  # could match across two texts: test each entity instead
            found = [e for e in self.entities if _contains(e, needle)][:limit]
        else:
            found = [self.entities[n] for n in self.joined.holders(needle, limit)]
        return [Hit(e, _first_match(e, needle), 1.0) for e in found]


def _keyword_text(entity: Entity) -> str:
    return JoinedText.GAP.join([entity.name, entity.entity_type, *entity.observations])


def _contains(entity: Entity, needle: str) -> bool:
    return (
        needle in entity.name.lower()
        or needle in entity.entity_type.lower()
        or any(needle in o.lower() for o in entity.observations)
    )


def _first_match(entity: Entity, needle: str) -> str | None:
    if needle in entity.name.lower() or needle in entity.entity_type.lower():
        return None
    return next((o for o in entity.observations if needle in o.lower()), None)
