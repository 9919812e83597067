"""What a search returns, whatever ranked it: hits, labelled with their memory, and the one cut-off for all the
memories searched."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from memory_server.graph import Entity, Relation
from memory_server.store import GraphStore

Mode = Literal["hybrid", "semantic", "keyword"]

RELATIVE_FLOOR = 0.5  # a match standing under this share of the best one's standing (in any context) is left out
NAME_MATCH_RANK = 10.0  # added to the sort key of name matches, so that no boost or blend can pass them


@dataclass(frozen=True)
class Hit:
    entity: Entity
    observation: str | None  # None when the entity's name or type matched
    score: float  # in [0, 1], reported
    rank: float = 0.0  # sorts hits: the score, plus NAME_MATCH_RANK for a name containing the query (twice if equal)
    relevance: float = 1.0  # what the cut-off compares: how far the score (without any preference for the user or
    # the project) stands above the query's usual score in its memory
    document: int = -1  # in its index
    cosine: float = math.nan  # the transformer's, with the query, when it read the document (see rerank.py)
    own: bool = False  # one of the user's own observations, read for a first-person question (see rerank.py)
    nearest: bool = False  # shown only as one of the user's notes nearest a question nothing matched (rerank.py)
    shaped: bool = False  # of the entity a first-person question is about, with the shape of answer it asks for
    # ("what does my husband do": "Midwife, Rotunda Hospital"; marks.answering), read by rerank.py
    fits: bool = False  # has the shape of answer the question asks for, whoever's it is (rerank.SHAPE_BONUS)


@dataclass(frozen=True)
class LabelledHit:
    hit: Hit
    label: str
    relations: tuple[Relation, ...]  # of the hit's entity, in its own graph


@dataclass
class Outcome:
    hits: list[LabelledHit]
    mode: Mode
    model: str | None
    semantic: bool
    note: str | None
    memories: int = 1  # how many were searched: with more than one, every entity, relation and hit names its own


@dataclass(frozen=True)
class Target:
    """One memory to search: its label (the context name), its store, and a preference for its hits: the share by
    which their scores grow once they pass the cut-off (the current project's, in a search of every context)."""

    label: str
    store: GraphStore
    boost: float = 0.0


def relevant(hits: Sequence[Hit]) -> list[Hit]:
    """The hits that pass the cut-off, in their order: one cut-off for all of them, whatever memory they come from."""
    best = max((h.relevance for h in hits if h.rank < NAME_MATCH_RANK), default=0.0)
    floor = RELATIVE_FLOOR * best
    return [h for h in hits if h.rank >= NAME_MATCH_RANK or (h.relevance > 0 and h.relevance >= floor)]


def preferred(hit: Hit, preference: float) -> Hit:
    """The hit with its memory's preference applied: scores of relevant hits grow by that share (the cut-off
    still judges the relevance alone, so a preference never brings back a hit it leaves out)."""
    if not preference or hit.rank >= NAME_MATCH_RANK:
        return hit
    factor = 1 + preference
    return replace(hit, score=min(hit.score * factor, 1.0), rank=hit.rank * factor)


def by_entity(hits: Sequence[LabelledHit]) -> dict[tuple[str, str], list[int]]:
    """The places of each entity's hits in `hits`, by memory and name (two memories may each hold an entity of one
    name)."""
    entities: dict[tuple[str, str], list[int]] = {}
    for n, labelled in enumerate(hits):
        entities.setdefault((labelled.label, labelled.hit.entity.name), []).append(n)
    return entities


def ranked_entities(hits: Iterable[Hit]) -> list[Entity]:
    """Each entity once, in the order of its best hit."""
    return list({id(h.entity): h.entity for h in hits}.values())
