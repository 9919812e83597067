"""Ranking memories for a query: keyword (the official server's substring match), lexical BM25, semantic cosine,
and their blend, within one graph or across every context.

A graph is indexed as documents: one per entity for its name and type, one per observation (with the entity's
name in front, which the embedding needs to know who an observation is about). Vectors are L2-normalised, so a
dot product is the cosine; scores are in [0, 1] whatever the mode, so they compare across contexts.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

import numpy as np

from memory_server.embeddings import Embedder, EmbedderSlot
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.store import GraphStore

if TYPE_CHECKING:
    from memory_server.contexts import Contexts, ResolvedContext

Mode = Literal["hybrid", "semantic", "keyword"]
IndexT = TypeVar("IndexT", "GraphIndex", "KeywordIndex")

SEMANTIC_WEIGHT = 0.75  # share of the cosine in a hybrid score, the rest BM25 (tuned on LoCoMo dev, bench/locomo.py)
RELATIVE_FLOOR = 0.5  # a match scoring under this share of the best one is left out
NAME_MATCH_RANK = 10.0  # added to the sort key of name matches, so that no boost or blend can pass them
_K1, _B = 1.2, 0.4  # a milder length normalisation than the textbook 0.75 suits short observations

_WORD = re.compile(r"\w+")
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off
    on once only or other our ours ourselves out over own same she should so some such than that the their theirs
    them themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves""".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased words without stop words, each reduced by a light English stemmer."""
    return [_stem(w) if w[-1] in "sgd" else w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


@functools.lru_cache(maxsize=200_000)  # words repeat: indexing a large graph stems each distinct word once
def _stem(word: str) -> str:
    # Enough to meet "hikes"/"hiking"/"hiked" and "stories"/"story" without a stemming library.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


@dataclass(frozen=True)
class Hit:
    entity: Entity
    observation: str | None  # None when the entity's name or type matched
    score: float  # in [0, 1], reported
    rank: float = 0.0  # sorts hits: the score, plus 1 for a name containing the query, 2 for a name equal to it


class LexicalIndex:
    """BM25 over token lists, stored as postings sorted by term, with each posting's weight precomputed."""

    def __init__(self, documents: Sequence[Sequence[str]]) -> None:
        self.size = len(documents)
        vocabulary: dict[str, int] = {}
        terms: list[int] = []
        docs: list[int] = []
        lengths = np.zeros(self.size, dtype=np.float32)
        for doc, tokens in enumerate(documents):
            lengths[doc] = len(tokens)
            for token in tokens:
                terms.append(vocabulary.setdefault(token, len(vocabulary)))
                docs.append(doc)
        self.vocabulary = vocabulary
        term_array = np.asarray(terms, dtype=np.int64)
        doc_array = np.asarray(docs, dtype=np.int64)
        # Count each (term, doc) pair once, with its frequency.
        pairs, frequency = np.unique(term_array * max(self.size, 1) + doc_array, return_counts=True)
        term_of, self.doc_of = np.divmod(pairs, max(self.size, 1))
        self.starts = np.searchsorted(term_of, np.arange(len(vocabulary) + 1))
        document_frequency = np.diff(self.starts)
        self.idf = np.log1p((self.size - document_frequency + 0.5) / (document_frequency + 0.5)).astype(np.float32)
        average = float(lengths.mean()) if self.size else 1.0
        norm = _K1 * (1 - _B + _B * lengths[self.doc_of] / max(average, 1e-9))
        self.weight = (frequency * (_K1 + 1) / (frequency + norm)).astype(np.float32)

    def scores(self, query: str) -> np.ndarray:
        """BM25 per document, divided by the best score the query could reach, so 1.0 means every word matched."""
        total = np.zeros(self.size, dtype=np.float32)
        best = 0.0
        for term in set(tokenize(query)):
            index = self.vocabulary.get(term)
            if index is None:
                continue
            start, end = self.starts[index], self.starts[index + 1]
            total[self.doc_of[start:end]] += self.idf[index] * self.weight[start:end]
            best += float(self.idf[index]) * (_K1 + 1)
        return total / best if best > 0 else total


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
        self.names = _JoinedText(e.name for e in self.entities)
        self.lexical = LexicalIndex([tokenize(text) for text in texts])
        self.vectors: np.ndarray | None = None
        self.vectors_of: str | None = None

    def embed(self, embedder: Embedder) -> np.ndarray:
        if self.vectors is None or self.vectors_of != embedder.name:
            self.vectors = embedder.encode(self.texts)
            self.vectors_of = embedder.name
        return self.vectors

    def rank(self, query: str, mode: Mode, embedder: Embedder | None, limit: int | None) -> list[Hit]:
        """Documents for `query`, best first (mode 'hybrid' or 'semantic'); entities whose name contains the
        whole query come first."""
        if mode not in ("hybrid", "semantic"):
            raise ValueError(f"GraphIndex ranks in 'hybrid' or 'semantic' mode, not {mode!r} (see KeywordIndex)")
        if embedder is None:
            scores = self.lexical.scores(query)
        else:
            scores = self.embed(embedder) @ embedder.encode_query(query)
            np.clip(scores, 0.0, 1.0, out=scores)
            if mode == "hybrid":  # in place: at a million documents every temporary array costs milliseconds
                lexical = self.lexical.scores(query)
                scores *= SEMANTIC_WEIGHT
                lexical *= 1 - SEMANTIC_WEIGHT
                scores += lexical
        relevance = scores.copy()
        if len(scores):
            # Leave out the tail that scores under half the best match: with a strong match in hand, those are
            # noise (a static model gives unrelated sentences cosines around 0.4).
            relevance[scores < RELATIVE_FLOOR * scores.max()] = 0.0
        contains, equals = self._name_matches(query)
        scores[contains] = 1.0  # a name match scores 1 and ranks above everything else
        relevance[contains] = 1.0 + NAME_MATCH_RANK
        relevance[equals] = 1.0 + 2 * NAME_MATCH_RANK
        order = _top(relevance, limit)
        return [
            Hit(self.entities[self.owner[d]], self.observations[d], min(float(scores[d]), 1.0), float(relevance[d]))
            for d in order
            if relevance[d] > 0
        ]

    def _name_matches(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """The name documents of the entities whose name contains the whole query, ignoring case, and of those
        whose name is the query."""
        needle = query.strip().lower()
        if not needle:
            return self.name_doc[:0], self.name_doc[:0]
        holders = self.names.holders(needle)
        exact = [n for n in holders if self.entities[n].name.strip().lower() == needle]
        return self.name_doc[holders], self.name_doc[exact]


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


@dataclass(frozen=True)
class Target:
    """One memory to search: its label (the context name), its store, and a boost added to its hits' scores."""

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
                    found = self._index(GraphIndex, target.store, graph).rank(query, mode, embedder, limit)
                for hit in found:
                    boost = target.boost if mode != "keyword" else 0.0
                    boosted = Hit(hit.entity, hit.observation, min(hit.score + boost, 1.0), hit.rank + boost)
                    if min_score is None or boosted.score >= min_score:
                        relations = tuple(graph.relations_touching([hit.entity.name]))
                        hits.append(LabelledHit(boosted, target.label, relations))
        if mode != "keyword":
            hits.sort(key=lambda labelled: -labelled.hit.rank)
        if embedder is not None:
            embedder.save_soon()
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

    def _index(self, kind: type[IndexT], store: GraphStore, graph: KnowledgeGraph) -> IndexT:
        """The index of `kind` for the graph the store holds now (called while the store is held for reading)."""
        key = (store.path, kind)
        cached = self._indexes.get(key)
        if cached is None or cached[0] != store.version:
            cached = self._indexes[key] = (store.version, kind(graph))
        return cached[1]  # type: ignore[return-value]
