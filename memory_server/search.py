"""Ranking one memory for a query: lexical BM25, semantic cosine, and their blend (keyword mode, the official
server's substring match, is keyword.py's).

A graph is indexed as documents: one per entity for its name and type, one per observation (with the entity's
name in front, which the embedding needs to know who an observation is about). Vectors are L2-normalised, so a
dot product is the cosine; scores are in [0, 1] whatever the mode, so they compare across contexts.

How a query is ranked (each step measured on bench/personal_memory.py and bench/locomo.py):
- relevance: the cosine blended with BM25 (Snowball-stemmed terms, and at a share of their weight the memory's
  words that the model's vocabulary puts nearest to the query's: lexical.related_terms);
- evidence: a document counts when it shares a word with the query, or a related word and a cosine above the
  query's usual one, or a cosine that stands out on its own (a static model finds "something" for any text);
- each document then gains a share of its entity's best standing, so the facts of the entity a question is about
  rise together;
- a first-person question ("where do I live", "who is my boss") prefers the user's own observations, and raises
  the facts of the entity whose role for the user fits the question (memory_server.user): memories are written
  about the user in the third person;
- the cut-off (hits.py, one for all the memories a search reads: searcher.py) leaves out matches under a share of
  the best match anywhere, so a question the memory cannot answer returns nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from memory_server.answers import Shape, asked_shape, has_shape
from memory_server.embeddings import Embedder
from memory_server.entity_cache import EntityCache
from memory_server.graph import KnowledgeGraph
from memory_server.hits import (  # noqa: F401 (Hit, LabelledHit, ranked_entities and Target are imported from here too)
    NAME_MATCH_RANK,
    Hit,
    LabelledHit,
    Mode,
    Outcome,
    Target,
    preferred,
    ranked_entities,
    relevant,
)
from memory_server.index import DocumentIndex
from memory_server.joined import JoinedText
from memory_server.lazy import lazy_module
from memory_server.lexical import STOPWORDS, is_first_person, related_terms, spelled_out, stems, words
from memory_server.marks import answering, named_answers
from memory_server.store import GraphStore
from memory_server.user import User, in_first_person, may_call, role_documents, through_named, user_of
from memory_server.vector_cache import VectorCache

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

if TYPE_CHECKING:
    from memory_server.rerank import Reader

SEMANTIC_WEIGHT = 0.75  # share of the cosine in a hybrid score, the rest BM25 (tuned on LoCoMo dev, bench/locomo.py)
USER_PRIOR = 0.1  # share added to the scores of the user's own observations for a first-person question
SEMANTIC_ALONE = 0.6  # cosine a document needs to count without sharing a word with the query (see _standing_out)
SEMANTIC_ALONE_SD = 1.5  # and at least this many standard deviations above the query's mean cosine
SEMANTIC_MARGIN = 1.0  # taken from sqrt(2 ln n), the z-score the best of n unrelated documents reaches
STANDS_OUT_FROM = 30  # documents a memory needs for that test; below, a cosine of SMALL_MEMORY_COSINE suffices
SMALL_MEMORY_COSINE = 0.7
RELATED_SD = 1.5  # a document sharing only a related word (lexical.related_terms) with the query counts when its
# cosine is this many standard deviations above the query's mean cosine
ENTITY_POOL = 0.3  # share of the standing of an entity's best document that its other documents gain
ROLE_SHARE = 0.5  # standing, as a share of the best one, given to the documents of the entity a question asks about
# through its role for the user ("my husband")
IDENTITY_SHARE = 0.5  # and this share more to those of its documents that say what it is to the user
ANSWER_SHARE = 0.3  # standing, as a share of the best one, given to the documents of the entity a first-person


# question is about that have the shape of answer it asks for ("when": a date; see memory_server.answers)
class GraphIndex(DocumentIndex):
    """The search documents of one state of a graph (kept up to date change by change, see index.py), ranked."""

    def __init__(self, graph: KnowledgeGraph, caches: Callable[[Embedder], VectorCache | None] | None = None) -> None:
        # The re-ranker's thread reads the user too: an update and a reading of the user take turns, so the entity
        # cache is never read (and kept wrong) halfway through an update.
        self._turn = threading.Lock()
        super().__init__(graph, caches)

    def update(self, graph: KnowledgeGraph, changed: Collection[str] | None = None) -> None:
        with self._turn:
            super().update(graph, changed)

    def changed(self, graph: KnowledgeGraph, kept: np.ndarray | None) -> None:
        if getattr(self, "_names_of", None) != self.documents.snapshot.names:  # names kept: the text is too
            self._names: JoinedText | None = None
        self._types: dict[tuple[str, ...], set[str]] | None = None
        self._named: tuple[np.ndarray, np.ndarray] | None = None
        # The user is read only when a first-person question needs it (memory_server.user), from what the entity
        # cache keeps. The graph is the store's, read while the store is held for reading (the index is up to date).
        self.graph = graph
        if kept is None or getattr(self, "_entity_cache", None) is None:
            self._entity_cache: EntityCache | None = None
        else:
            self._entity_cache.moved(kept)
        self._user: User | None | Literal[False] = False
        # the user's names when last found, kept across writes (see as_asked)
        self._called: tuple[str, ...] | None = getattr(self, "_called", None)

    def entity_cache(self) -> EntityCache:
        """What the user lookup keeps of each entity, brought to the graph now (memory_server.entity_cache)."""
        if self._entity_cache is None:
            self._entity_cache = EntityCache(self.documents.snapshot, self.graph.relations)
        else:
            self._entity_cache.refresh(self)
        return self._entity_cache

    @property
    def nbytes(self) -> int:
        return super().nbytes + (self._entity_cache.nbytes if self._entity_cache is not None else 0)

    def _name_documents(self) -> tuple[np.ndarray, np.ndarray]:
        """The name documents of the entities with no observations, and of the others (made once a state: two
        selections of every entity at each query cost ~0.1 ms per 20,000 entities)."""
        if self._named is None:
            self._named = self.name_doc[~self.has_observations], self.name_doc[self.has_observations]
        return self._named

    @property
    def names(self) -> JoinedText:
        if self._names is None:
            self._names_of = self.documents.snapshot.names
            self._names = JoinedText(self._names_of)
        return self._names

    def rank(self, query: str, mode: Mode, embedder: Embedder | None, limit: int | None) -> list[Hit]:
        """Documents for `query`, best first, after the cut-off (as a search of this graph alone returns them)."""
        return relevant(self.candidates(query, mode, embedder, limit))

    def candidates(self, query: str, mode: Mode, embedder: Embedder | None, limit: int | None) -> list[Hit]:
        """The `limit` best documents for `query` (mode 'hybrid' or 'semantic'), before any cut-off; entities whose
        name contains the whole query come first."""
        if mode not in ("hybrid", "semantic"):
            raise ValueError(f"GraphIndex ranks in 'hybrid' or 'semantic' mode, not {mode!r} (see KeywordIndex)")
        typed, query = query, self.as_asked(query)
        relevance, lexical, usual, spread = self.relevance(query, mode, embedder)
        order = relevance.copy()
        user = self.user if is_first_person(query) else None
        if user is not None:
            order[user.own] *= 1 + USER_PRIOR
        # A name document is a hit only when the name or type really holds a word of the query, and the entity
        # says nothing more (its observations carry its name and rank on their own).
        bare, told = self._name_documents()
        order[told] = 0.0
        order[bare] = np.where(lexical[bare] > 0, relevance[bare], 0.0)
        contains, equals = self._name_matches(typed)  # the name typed: "Sione" asked as "me" is not in "Mele"
        order[contains] = 1.0 + NAME_MATCH_RANK
        order[equals] = 1.0 + 2 * NAME_MATCH_RANK
        named = set(contains.tolist())
        hits = []
        scored = np.flatnonzero(order > 0)  # a few: ranking them alone spares sorting a million zeros
        for d in scored[_top(order[scored], limit)].tolist():
            # What the cut-off compares: how far the score stands above this query's usual score in this memory
            # (raw scores all sit near the static model's baseline cosine: a share of the best would keep them all).
            standing = NAME_MATCH_RANK if d in named else max((relevance[d] - usual) / (spread or 1.0), 0.0)
            score = float(order[d])
            hits.append(
                Hit(self.entities[self.owner[d]], self.observations[d], min(score, 1.0), score, float(standing), int(d))
            )
        return hits

    def read_again(
        self, reader: Reader, store: GraphStore, query: str, hits: list[Hit], embedder: Embedder
    ) -> list[Hit]:
        """`hits` and the rest of the transformer's pool (rerank.py), each with its cosine for `query`; the user's
        own observations are marked for a first-person question that says something (not "what is my asdf"), and
        those with the shape of answer it asks for (a date, a time, a number; answers.py)."""
        query = self.as_asked(query)
        given = {h.document: h for h in hits}
        personal = is_first_person(query)
        named = [d for d in named_answers(self, query, list(given), self.user) if d not in given]
        pool, cosines = reader.cosines(self, store, query, [*given, *named], personal)
        user = self.user if personal and _says_something(query, embedder.knows_form) else None
        own = set(user.own.tolist()) if user is not None else set()
        shaped = answering(self, query, embedder, pool, user)
        shape = asked_shape(query)
        if shape is Shape.PLACE:  # a proper name, which most notes hold, says too little of a place
            shape = None
        out = []
        for d, cosine in zip(pool.tolist(), cosines.tolist()):
            hit = given.get(d) or Hit(self.entities[self.owner[d]], self.observations[d], 0.0, 0.0, 0.0, d)
            fits = shape is not None and has_shape(self.observations[d] or "", shape)
            out.append(replace(hit, cosine=cosine, own=d in own, shaped=d in shaped, fits=fits))
        return out

    def relevance(
        self, query: str, mode: Mode, embedder: Embedder | None
    ) -> tuple[np.ndarray, np.ndarray, float, float]:
        """How well each document answers `query`, in [0, 1] (0 for a document with no evidence: none of the query's
        words or of their related words, and a cosine that a static model also gives unrelated text), its BM25 share
        for the query's own words, and the query's usual score and spread in this memory."""
        if embedder is None:
            exact = self.lexical.scores(query)
            usual, spread = (float(exact.mean()), float(exact.std())) if len(exact) else (0.0, 0.0)
            return exact.copy(), exact, usual, spread
        alternatives = related_terms(query, embedder.related_words, self.lexical.vocabulary)
        lexical, exact = self.lexical.matches(query, alternatives)
        cosines = self.cosines(embedder, query)
        scores = _Scores(cosines, lexical, mode)
        matched = np.flatnonzero(lexical > 0)  # a BM25 share is never negative; a mask finds them 7x as fast
        supported = exact > 0
        wide = cosines.astype(np.float64)
        total, squares = float(wide.sum()), float(wide @ wide)
        n = len(cosines)
        if n and _says_something(query, embedder.knows):
            mean = total / n
            deviation = math.sqrt(max(squares / n - mean * mean, 0.0))
            supported[cosines >= _standing_out(n, mean, deviation)] = True
            if lexical is not exact:  # a related word alone is weak evidence: it counts when the cosine agrees
                supported[matched[cosines[matched] >= mean + RELATED_SD * deviation]] = True
        usual, spread = scores.usual(total, squares, matched)
        kept = np.flatnonzero(supported)
        scores.fill(kept)
        if spread > 0:
            kept = self._pool(query, embedder, scores, kept, usual, spread)
        relevance = np.zeros(n, dtype=np.float32)
        relevance[kept] = scores.values[kept]
        return relevance, exact, usual, spread

    def _pool(
        self, query: str, embedder: Embedder, scores: _Scores, kept: np.ndarray, usual: float, spread: float
    ) -> np.ndarray:
        """Add to the score of each supported document (`kept`) what its entity says: ENTITY_POOL times the
        standing of the entity's best document (a standing: how many `spread`s a score stands above the query's
        `usual` one), so "Renate: Retired pharmacist" answers "what did my mother do" better because "Renate:
        Hannah's mother" does. For a first-person question, the documents of the entity asked about through its
        role for the user (for any question through someone named, "Léa's mom", their role for them) gain
        ROLE_SHARE of the best standing (and IDENTITY_SHARE more for those that say what it is to the user), and
        count as supported. Supported scores under the usual one are raised to it. `scores`
        change in place; the documents supported now are returned."""
        values = scores.values
        pooled = np.maximum(values[kept], usual)  # the kept documents' scores, worked on together: read once
        evident = pooled > usual
        owners = self.owner[kept[evident]]
        best = np.zeros(len(self.entities), dtype=values.dtype)
        np.maximum.at(best, owners, (pooled[evident] - usual) / spread)
        pooled[evident] += spread * ENTITY_POOL * best[owners]
        values[kept] = pooled
        user = self.user if is_first_person(query) else None
        leading = float(pooled.max()) if len(kept) else usual  # the best match's score
        top = spread * max((leading - usual) / spread, 1.0)
        focus = kept[:0]
        theirs = through_named(self, query, embedder)  # "Léa's mom": not the user's, whoever asks
        if theirs is not None or user is not None:
            reached, identity = theirs or role_documents(self, user, query, embedder, kept)
            supported = np.zeros(len(values), dtype=bool)
            supported[kept] = True
            scores.fill(reached)
            values[reached] = np.maximum(values[reached], usual)
            newly = reached[~supported[reached] | (values[reached] <= usual)]
            values[newly] += spread * ENTITY_POOL * best[self.owner[newly]]
            values[reached] += ROLE_SHARE * top
            values[identity] += IDENTITY_SHARE * top
            supported[reached] = True
            kept = np.flatnonzero(supported)
            focus = reached if len(reached) or user is None else user.own
        shape = asked_shape(query) if len(focus) else None
        if shape is not None:
            kept = self._shaped(shape, scores, kept, focus, usual, ANSWER_SHARE * top)
        return kept

    def _shaped(
        self, shape: Shape, scores: _Scores, kept: np.ndarray, focus: np.ndarray, usual: float, gain: float
    ) -> np.ndarray:
        """Raise by `gain` the documents of the `focus` (those of the entity a first-person question is about: the
        user's, or the ones it names by role) that hold an answer of the shape the question asks for (memory_server.
        answers); they then count as supported: "how old is my son" is answered by "b. 12 Feb 2017". Only the
        focus: across a whole memory, dates and names are everywhere (LoCoMo's "when" questions lose by it).
        Returns the supported documents."""
        fitting = np.asarray(
            [d for d in focus if self.observations[d] is not None and has_shape(self.observations[d], shape)],
            dtype=np.int64,
        )
        scores.fill(fitting)
        scores.values[fitting] = np.maximum(scores.values[fitting], usual) + gain
        joined = np.zeros(len(scores.values), dtype=bool)  # a mask: np.union1d hashes, 10x as slow on many
        joined[kept] = True
        joined[fitting] = True
        return np.flatnonzero(joined)

    def as_asked(self, query: str) -> str:
        """`query` with chat shorthand spelled out, and in the first person when it calls the memory's user by name
        (memory_server.user.in_first_person)."""
        query = spelled_out(query)
        # Finding the user again after a write costs ~30 ms at 200k observations: only for a question that may need
        # them (a write rarely renames the user, so the names they had tell)
        if self._user is False and self._called is not None and not may_call(query, self._called):
            return query
        user = self.user
        return in_first_person(query, user) if user is not None else query

    @property
    def user(self) -> User | None:
        """The memory's user (see memory_server.user), looked for at the first question that needs it."""
        with self._turn:
            if self._user is False:
                self._user = user_of(self)
                self._called = self._user.called if self._user is not None else ()
            return self._user

    def _name_matches(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """The name documents of the entities whose name contains the whole query, ignoring case, or whose type is
        the query (`_typed`), and of those whose name is the query."""
        needle = query.strip().lower()
        if not needle:
            return self.name_doc[:0], self.name_doc[:0]
        holders = self.names.holders(needle)
        exact = [n for n in holders if self.entities[n].name.strip().lower() == needle]
        return self.name_doc[np.union1d(holders, self._typed(query)).astype(np.int64)], self.name_doc[exact]

    def _typed(self, query: str) -> list[int]:
        """The entities whose type is the query, word for word, stemmed ("people" is no type; "projects" finds
        the type "project"): a person asking for a kind of thing names its type, as the keyword search finds it."""
        types = self.documents.snapshot.types
        if self._types is None:  # a few distinct types, however many entities
            self._types = {}
            for kind in set(types):
                self._types.setdefault(stems(kind), set()).add(kind)
        wanted = self._types.get(stems(query) or ("",))  # a query of no words is no type
        return [n for n, kind in enumerate(types) if kind in wanted] if wanted else []


def _says_something(query: str, knows: Callable[[str], bool]) -> bool:
    """Whether the query holds a word besides stop words that the model `knows` (Embedder.knows, .knows_form)."""
    return any(knows(word) for word in words(query) if word not in STOPWORDS)


def _standing_out(documents: int, mean: float, deviation: float) -> float:
    """The cosine that makes a document relevant on its own. A static model gives unrelated text high cosines (0.6
    to 0.85, highest for some "hub" documents), so the cosine must stand out from this query's cosines with the
    other documents, by more than the best of as many unrelated ones would: sqrt(2 ln n) standard deviations, less
    a margin (1.5 at least)."""
    if documents < STANDS_OUT_FROM:  # too few documents for a spread: the cosine alone decides
        return SMALL_MEMORY_COSINE
    bar = max(SEMANTIC_ALONE_SD, math.sqrt(2 * math.log(documents)) - SEMANTIC_MARGIN)
    return max(SEMANTIC_ALONE, mean + bar * deviation)


class _Scores:
    """A query's scores for the documents, computed where the ranking reads them: the cosine (`semantic`), or
    the cosine blended with the BM25 share (`hybrid`)."""

    def __init__(self, cosines: np.ndarray, lexical: np.ndarray, mode: Mode) -> None:
        self.cosines, self.lexical, self.mode = cosines, lexical, mode
        self.values = np.zeros(len(cosines), dtype=np.float32)
        self._filled = np.zeros(len(cosines), dtype=bool)

    def fill(self, documents: np.ndarray) -> None:
        """Compute the scores of `documents` not computed yet (the others may have changed since: kept as they are)."""
        documents = documents[~self._filled[documents]]
        values = self.cosines[documents]
        if self.mode == "hybrid":
            values = SEMANTIC_WEIGHT * values + (1 - SEMANTIC_WEIGHT) * self.lexical[documents]
        self.values[documents] = values
        self._filled[documents] = True

    def usual(self, total: float, squares: float, matched: np.ndarray) -> tuple[float, float]:
        """The mean and standard deviation of the scores of all the documents, from the sum of the cosines and of
        their squares, and the documents with a BM25 share (`matched`)."""
        n = len(self.cosines)
        if not n:
            return 0.0, 0.0
        if self.mode == "hybrid":
            weight, shares = SEMANTIC_WEIGHT, self.lexical[matched].astype(np.float64)
            cross = float(self.cosines[matched].astype(np.float64) @ shares)
            total = weight * total + (1 - weight) * float(shares.sum())
            squares = weight**2 * squares + 2 * weight * (1 - weight) * cross + (1 - weight) ** 2 * (shares @ shares)
        mean = total / n
        return mean, math.sqrt(max(squares / n - mean * mean, 0.0))


def _top(scores: np.ndarray, limit: int | None) -> np.ndarray:
    """The numbers of the `limit` best scores, best first, ties in number order: a smaller limit gives a prefix."""
    if limit is None or limit >= len(scores):
        return np.argsort(-scores, kind="stable")
    least = scores[np.argpartition(-scores, limit - 1)[limit - 1]]  # a partial sort picks among ties: keep them all
    candidates = np.flatnonzero(scores >= least)
    return candidates[np.argsort(-scores[candidates], kind="stable")][:limit]
