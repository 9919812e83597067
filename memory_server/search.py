"""Ranking memories for a query: keyword (the official server's substring match), lexical BM25, semantic cosine,
and their blend, within one graph or across every context.

A graph is indexed as documents: one per entity for its name and type, one per observation (with the entity's
name in front, which the embedding needs to know who an observation is about). Vectors are L2-normalised, so a
dot product is the cosine; scores are in [0, 1] whatever the mode, so they compare across contexts.

How a query is ranked (each step measured on bench/personal_memory.py and bench/locomo.py):
- relevance: the cosine blended with BM25 (Snowball-stemmed terms);
- a first-person question ("where do I live", "my boss") prefers the user's own observations, then those of the
  entities related to the user or naming them: memories are written about the user in the third person. The
  preference grows a score by a share of itself, so it reorders relevant hits and lifts no unrelated one;
- one cut-off for all the contexts searched: matches under an absolute floor, or under a share of the best match
  anywhere, are left out, so a question the memory cannot answer returns nothing;
- the current project's preference multiplies the scores of relevant hits only, so it settles near ties and never
  brings back a hit the cut-off left out.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from memory_server.embeddings import Embedder, EmbedderSlot
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.lazy import lazy_module
from memory_server.lexical import STOPWORDS, LexicalIndex, is_first_person, tokenize, words
from memory_server.store import GraphStore

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

if TYPE_CHECKING:
    from memory_server.contexts import Contexts, ResolvedContext

Mode = Literal["hybrid", "semantic", "keyword"]
IndexT = TypeVar("IndexT", "GraphIndex", "KeywordIndex")

SEMANTIC_WEIGHT = 0.75  # share of the cosine in a hybrid score, the rest BM25 (tuned on LoCoMo dev, bench/locomo.py)
USER_PRIOR = 0.1  # share added to the scores of the user's own observations for a first-person question
NEAR_USER_PRIOR = 0.05  # share added to those of the entities related to the user, or naming them
SEMANTIC_ALONE = 0.6  # cosine a document needs to count without sharing a word with the query (see _stands_out)
SEMANTIC_ALONE_SD = 1.5  # and at least this many standard deviations above the query's mean cosine
SEMANTIC_MARGIN = 1.0  # taken from sqrt(2 ln n), the z-score the best of n unrelated documents reaches
STANDS_OUT_FROM = 30  # documents a memory needs for that test; below, a cosine of SMALL_MEMORY_COSINE suffices
SMALL_MEMORY_COSINE = 0.7
RELATIVE_FLOOR = 0.45  # a match standing under this share of the best one's standing (in any context) is left out
NAME_MATCH_RANK = 10.0  # added to the sort key of name matches, so that no boost or blend can pass them
USER_TYPES = frozenset({"user", "self", "me", "myself", "owner"})
USER_NAMES = frozenset({"user", "default_user", "me", "myself", "i"})
PERSON_TYPES = ("person", "human", "individual", "user", "people")
USER_LEAD = 1.5  # how far ahead of the next person the user's entity must be


@dataclass(frozen=True)
class Hit:
    entity: Entity
    observation: str | None  # None when the entity's name or type matched
    score: float  # in [0, 1], reported
    rank: float = 0.0  # sorts hits: the score, plus NAME_MATCH_RANK for a name containing the query (twice if equal)
    relevance: float = 1.0  # what the cut-off compares: how far the score (without any preference for the user or
    # the project) stands above the query's usual score in its memory


class GraphIndex:
    """The search documents of one state of a graph, with their lexical index and (lazily) their vectors."""

    def __init__(self, graph: KnowledgeGraph) -> None:
        self.entities = graph.entity_list()
        owners: list[int] = []
        observations: list[str | None] = []
        texts: list[str] = []
        for number, entity in enumerate(self.entities):
            owners.append(number)
            observations.append(None)
            texts.append(f"{entity.name} ({entity.entity_type})")
            for observation in entity.observations:
                owners.append(number)
                observations.append(observation)
                texts.append(f"{entity.name}: {observation}")
        self.owner = np.asarray(owners, dtype=np.int64)
        self.observations = observations
        self.texts = texts
        self.name_doc = np.flatnonzero(np.fromiter((o is None for o in observations), dtype=bool, count=len(texts)))
        self.has_observations = np.fromiter((bool(e.observations) for e in self.entities), dtype=bool)
        self.names = _JoinedText(e.name for e in self.entities)
        self.lexical = LexicalIndex([tokenize(text) for text in texts])
        self.vectors: np.ndarray | None = None
        self.vectors_of: str | None = None
        self._links = [(r.source, r.target) for r in graph.relations.values()]
        self._user: int | None = -1  # -1: not looked for yet
        self._near_user: tuple[np.ndarray, np.ndarray] | None = None

    def embed(self, embedder: Embedder) -> np.ndarray:
        if self.vectors is None or self.vectors_of != embedder.name:
            self.vectors = embedder.encode(self.texts)
            self.vectors_of = embedder.name
        return self.vectors

    def rank(self, query: str, mode: Mode, embedder: Embedder | None, limit: int | None) -> list[Hit]:
        """Documents for `query`, best first, after the cut-off (as a search of this graph alone returns them)."""
        return relevant(self.candidates(query, mode, embedder, limit))

    def candidates(self, query: str, mode: Mode, embedder: Embedder | None, limit: int | None) -> list[Hit]:
        """The `limit` best documents for `query` (mode 'hybrid' or 'semantic'), before any cut-off; entities whose
        name contains the whole query come first."""
        if mode not in ("hybrid", "semantic"):
            raise ValueError(f"GraphIndex ranks in 'hybrid' or 'semantic' mode, not {mode!r} (see KeywordIndex)")
        first_person = is_first_person(query) and self.user is not None
        relevance, lexical, usual, spread = self.relevance(query, mode, embedder)
        order = relevance.copy()
        # What the cut-off compares: how far a score stands above this query's usual score in this memory (raw
        # scores all sit near the static model's baseline cosine, so a share of the best one would keep them all).
        standing = np.maximum((relevance - usual) / (spread or 1.0), 0.0) * (relevance > 0)
        if first_person:
            own, near = self.near_user()
            order[own] *= 1 + USER_PRIOR
            order[near] *= 1 + NEAR_USER_PRIOR
        # A name document is a hit only when the name or type really holds a word of the query, and the entity
        # says nothing more (its observations carry its name and rank on their own).
        order[self.name_doc] = np.where(lexical[self.name_doc] > 0, relevance[self.name_doc], 0.0)
        order[self.name_doc[self.has_observations]] = 0.0
        contains, equals = self._name_matches(query)
        order[contains] = 1.0 + NAME_MATCH_RANK
        order[equals] = 1.0 + 2 * NAME_MATCH_RANK
        standing[contains] = NAME_MATCH_RANK
        return [
            Hit(
                self.entities[self.owner[d]],
                self.observations[d],
                min(float(order[d]), 1.0),
                float(order[d]),
                float(standing[d]),
            )
            for d in _top(order, limit)
            if order[d] > 0
        ]

    def relevance(
        self, query: str, mode: Mode, embedder: Embedder | None
    ) -> tuple[np.ndarray, np.ndarray, float, float]:
        """How well each document answers `query`, in [0, 1] (0 for a document with no evidence: none of the query's
        terms, and a cosine that a static model also gives unrelated text), and its BM25 share."""
        lexical = self.lexical.scores(query)
        if embedder is None:
            return lexical.copy(), lexical, float(lexical.mean()) if len(lexical) else 0.0, float(lexical.std())
        scores = self.embed(embedder) @ embedder.encode_query(query)
        np.clip(scores, 0.0, 1.0, out=scores)
        unsupported = lexical == 0
        if any(embedder.knows(word) for word in words(query) if word not in STOPWORDS):
            unsupported &= ~_stands_out(scores)
        if mode == "hybrid":  # in place: at a million documents every temporary array costs milliseconds
            scores *= SEMANTIC_WEIGHT
            scores += (1 - SEMANTIC_WEIGHT) * lexical
        usual, spread = (float(scores.mean()), float(scores.std())) if len(scores) else (0.0, 0.0)
        scores[unsupported] = 0.0
        return scores, lexical, usual, spread

    @property
    def user(self) -> int | None:
        """The number of the user's entity (see find_user), looked for at the first question that needs it."""
        if self._user == -1:
            self._user = find_user(self.entities, self._links)
        return self._user

    def near_user(self) -> tuple[np.ndarray, np.ndarray]:
        """The user's own observation documents, and those of the entities related to the user or naming them."""
        if self._near_user is None:
            user = self.entities[self.user]
            related = {b for a, b in self._links if a == user.name} | {a for a, b in self._links if b == user.name}
            numbers = {e.name: n for n, e in enumerate(self.entities)}
            near = np.zeros(len(self.texts), dtype=bool)
            for name in related:
                if name in numbers:
                    near[self.owner == numbers[name]] = True
            first = user.name.split()[0].lower() if user.name.split() else ""
            if len(first) > 2:  # observations of other entities that name the user ("Hannah's manager")
                said = _JoinedText(o if o is not None else "" for o in self.observations)
                near[said.holders(first)] = True
            own = self.owner == self.user
            near &= ~own
            self._near_user = (np.flatnonzero(own), np.flatnonzero(near))
        return self._near_user

    def _name_matches(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """The name documents of the entities whose name contains the whole query, ignoring case, and of those
        whose name is the query."""
        needle = query.strip().lower()
        if not needle:
            return self.name_doc[:0], self.name_doc[:0]
        holders = self.names.holders(needle)
        exact = [n for n in holders if self.entities[n].name.strip().lower() == needle]
        return self.name_doc[holders], self.name_doc[exact]


def find_user(entities: Sequence[Entity], links: Iterable[tuple[str, str]]) -> int | None:
    """The number of the entity that stands for the memory's user, if one can be told: an entity typed or named as
    the user ("user", "default_user", as the official server's suggested prompt names it), else the person at the
    centre of the graph: the most relations, observations and mentions of their first name, well ahead of anyone
    else (a memory about two people equally, or about none, has no user)."""
    for number, entity in enumerate(entities):
        if entity.entity_type.strip().lower() in USER_TYPES or entity.name.strip().lower() in USER_NAMES:
            return number
    degree: dict[str, int] = {}
    for source, target in links:
        degree[source] = degree.get(source, 0) + 1
        degree[target] = degree.get(target, 0) + 1
    people = [
        (degree.get(entity.name, 0) + len(entity.observations), number)
        for number, entity in enumerate(entities)
        if any(kind in entity.entity_type.lower() for kind in PERSON_TYPES)
    ]
    if not people:
        return None
    said = "\n".join(o.lower() for e in entities for o in e.observations)
    weight = []
    for links, number in sorted(people, reverse=True)[:5]:  # the few best connected: counting is a text scan
        first = entities[number].name.split()[0].lower() if entities[number].name.split() else ""
        weight.append((links + (said.count(first) if len(first) > 2 else 0), number))
    weight.sort(reverse=True)
    best, number = weight[0]
    runner_up = weight[1][0] if len(weight) > 1 else 0
    return number if best >= USER_LEAD * max(runner_up, 3) else None


def _stands_out(cosines: np.ndarray) -> np.ndarray:
    """Which documents the cosine alone makes relevant. A static model gives unrelated text high cosines (0.6 to
    0.85, highest for some "hub" documents), so the cosine must stand out from this query's cosines with the other
    documents, by more than the best of as many unrelated ones would: sqrt(2 ln n) standard deviations, less a
    margin (1.5 at least)."""
    if len(cosines) < STANDS_OUT_FROM:  # too few documents for a spread: the cosine alone decides
        return cosines >= SMALL_MEMORY_COSINE
    bar = max(SEMANTIC_ALONE_SD, math.sqrt(2 * math.log(len(cosines))) - SEMANTIC_MARGIN)
    return (cosines >= SEMANTIC_ALONE) & (cosines >= cosines.mean() + bar * cosines.std())


def relevant(hits: Sequence[Hit]) -> list[Hit]:
    """The hits that pass the cut-off, in their order: one cut-off for all of them, whatever memory they come from."""
    best = max((h.relevance for h in hits if h.rank < NAME_MATCH_RANK), default=0.0)
    floor = RELATIVE_FLOOR * best
    return [h for h in hits if h.rank >= NAME_MATCH_RANK or (h.relevance > 0 and h.relevance >= floor)]


class _JoinedText:
    """Many texts lower-cased into one string, so finding which of them contain a needle is one `str.find` scan."""

    GAP = "\x00"

    def __init__(self, texts: Iterable[str]) -> None:
        pieces = [text.lower() + self.GAP for text in texts]
        self.starts = np.cumsum([0] + [len(p) for p in pieces[:-1]]).tolist() if pieces else []
        self.text = "".join(pieces)

    def holders(self, needle: str, limit: int | None = None) -> list[int]:
        """Numbers of the texts that contain `needle` (already lower-case), in order."""
        found: list[int] = []
        position = self.text.find(needle)
        while position != -1 and (limit is None or len(found) < limit):
            number = bisect.bisect_right(self.starts, position) - 1
            found.append(number)
            following = self.starts[number + 1] if number + 1 < len(self.starts) else len(self.text)
            position = self.text.find(needle, following)
        return found


class KeywordIndex:
    """The official server's search, fast: each entity's name, type and observations lower-cased into one string
    that `str.find` scans, instead of lower-casing every text of the graph on every query."""

    def __init__(self, graph: KnowledgeGraph) -> None:
        self.entities = graph.entity_list()
        self.joined = _JoinedText(_JoinedText.GAP.join([e.name, e.entity_type, *e.observations]) for e in self.entities)

    def hits(self, query: str, limit: int | None) -> list[Hit]:
        """Entities in file order whose name, type or an observation contains the query, ignoring case; each
        hit names the first observation that matched (None when the name or type did)."""
        needle = query.lower()
        if not needle or _JoinedText.GAP in needle:  # could match across two texts: test each entity instead
            found = [e for e in self.entities if _contains(e, needle)][:limit]
        else:
            found = [self.entities[n] for n in self.joined.holders(needle, limit)]
        return [Hit(e, _first_match(e, needle), 1.0) for e in found]


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


def ranked_entities(hits: Iterable[Hit]) -> list[Entity]:
    """Each entity once, in the order of its best hit."""
    return list({id(h.entity): h.entity for h in hits}.values())


def _top(scores: np.ndarray, limit: int | None) -> np.ndarray:
    if limit is None or limit >= len(scores):
        return np.argsort(-scores, kind="stable")
    candidates = np.argpartition(-scores, limit)[:limit]
    return candidates[np.argsort(-scores[candidates], kind="stable")]


def _preferred(hit: Hit, preference: float) -> Hit:
    """The hit with its memory's preference applied: scores of relevant hits grow by that share (the cut-off
    still judges the relevance alone, so a preference never brings back a hit it leaves out)."""
    if not preference or hit.rank >= NAME_MATCH_RANK:
        return hit
    factor = 1 + preference
    return Hit(hit.entity, hit.observation, min(hit.score * factor, 1.0), hit.rank * factor, hit.relevance)


def _nothing_found(memories: int, mode: Mode, min_score: float | None) -> str:
    if min_score is not None:
        return f"no match scored {min_score} or more; try a lower minScore"
    where = "any memory searched" if memories > 1 else "this memory"
    tries = ["other words"]
    if mode != "keyword":
        tries.append("mode 'keyword' for an exact word or phrase")
    if memories == 1:
        tries.append("another context, or context '*' for every memory")
    return f"nothing relevant found in {where}; try " + ", ".join(tries[:-1]) + f" or {tries[-1]}"


@dataclass(frozen=True)
class Target:
    """One memory to search: its label (the context name), its store, and a preference for its hits: the share by
    which their scores grow once they pass the cut-off (the current project's, in a search of every context)."""

    label: str
    store: GraphStore
    boost: float = 0.0


def every_target(contexts: Contexts, resolved: ResolvedContext, project_boost: float) -> Target:
    """One context of a search across every context: the current project's memory gets `project_boost`."""
    return Target(resolved.name, contexts.store(resolved), project_boost if resolved.project is not None else 0.0)


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


class Searcher:
    """Searches memories, keeping one index per memory file and rebuilding it only when the file changed."""

    def __init__(self, embeddings: EmbedderSlot) -> None:
        self.embeddings = embeddings
        self._indexes: dict[tuple[Path, type], tuple[int, GraphIndex | KeywordIndex]] = {}

    def search(
        self, targets: Sequence[Target], query: str, mode: Mode, limit: int | None, min_score: float | None
    ) -> Outcome:
        embedder, note = self.embeddings.get() if mode != "keyword" else (None, None)
        if mode == "semantic" and embedder is None:
            note = (f"{note}; " if note else "") + "semantic mode needs the embedding model, so keywords (BM25) ranked"
        hits: list[LabelledHit] = []
        for target in targets:
            with target.store.reading() as graph:
                if mode == "keyword":
                    found = self._index(KeywordIndex, target.store, graph).hits(query, limit)
                else:
                    found = self._index(GraphIndex, target.store, graph).candidates(query, mode, embedder, limit)
                touching: dict[str, tuple[Relation, ...]] = {}
                for hit in found:
                    if hit.entity.name not in touching:
                        touching[hit.entity.name] = tuple(graph.relations_touching([hit.entity.name]))
                    hits.append(LabelledHit(_preferred(hit, target.boost), target.label, touching[hit.entity.name]))
        if mode != "keyword":
            kept = {id(hit) for hit in relevant([labelled.hit for labelled in hits])}
            hits = sorted((h for h in hits if id(h.hit) in kept), key=lambda labelled: -labelled.hit.rank)
        if min_score is not None:
            hits = [h for h in hits if h.hit.score >= min_score]
        if embedder is not None:
            embedder.save_soon()
        if not hits:
            note = "; ".join(filter(None, [note, _nothing_found(len(targets), mode, min_score)]))
        return Outcome(
            hits[:limit] if limit is not None else hits, mode, embedder and embedder.name, bool(embedder), note
        )

    def warm(self, store: GraphStore) -> None:
        """Bring the indexes already made for `store` up to date now, so the next search does not wait."""
        kinds = [kind for (path, kind) in list(self._indexes) if path == store.path]
        embedder = self.embeddings.get(wait=0)[0] if GraphIndex in kinds else None
        with store.reading() as graph:
            for kind in kinds:
                index = self._index(kind, store, graph)
                if embedder is not None and isinstance(index, GraphIndex):
                    index.embed(embedder)

    def forget(self, path: Path) -> None:
        """Drop the indexes of the memory at `path` (its store released its graph to free memory)."""
        for key in [key for key in list(self._indexes) if key[0] == path]:
            self._indexes.pop(key, None)

    def _index(self, kind: type[IndexT], store: GraphStore, graph: KnowledgeGraph) -> IndexT:
        """The index of `kind` for the graph the store holds now (called while the store is held for reading)."""
        key = (store.path, kind)
        cached = self._indexes.get(key)
        if cached is None or cached[0] != store.version:
            cached = self._indexes[key] = (store.version, kind(graph))
        return cached[1]  # type: ignore[return-value]
