"""A graph's search documents with their postings and vectors, kept up to date change by change.

An index is made once for a memory; each later state of its file updates it by what changed (documents.py finds
it): the lexical index removes and adds those documents' postings, vectors of unchanged text move to their new rows
and only text never seen is embedded. Rows of removed documents are dropped once they are many (compaction). The
scores are those of an index built from scratch for the same graph, bit for bit, in the same order: the statistics
always describe the documents present (lexical.py), a row's dot product does not depend on where it is
(vectors.py), and the documents are in the graph's order.

Vectors are made from this memory's own cache when it has them (vector_cache.py), else by the model a batch at a
time, and live in one place: the index.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from memory_server.documents import Delta, Documents, ObservationList
from memory_server.embeddings import BATCH, Embedder
from memory_server.graph import KnowledgeGraph
from memory_server.lazy import lazy_module
from memory_server.lexical import LexicalIndex, tokenize
from memory_server.vector_cache import VectorCache, text_keys
from memory_server.vectors import VectorRows

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

COMPACT_SHARE = 4  # an index drops its dead rows once they are a quarter of its documents
COMPACT_AFTER = 4096  # and more than this many


class DocumentIndex:
    """The search documents of one state of a graph, with their lexical index and (lazily) their vectors. `update`
    brings it to a later state of the graph at the cost of what changed; it then scores exactly as an index built
    from scratch for that state would."""

    def __init__(self, graph: KnowledgeGraph, caches: Callable[[Embedder], VectorCache | None] | None = None) -> None:
        self.documents = Documents(graph.entity_list())
        self.lexical = LexicalIndex()
        self.lexical.add(np.arange(self.documents.size), map(tokenize, self.documents.texts()))
        self._caches = caches  # the vector cache of this memory for a model, if it has one
        self._cache: VectorCache | None = None
        self._vectors: VectorRows | None = None
        self.vectors_of: str | None = None
        self._unembedded: dict[int, str] = {}  # rows made since the vectors were, with their texts
        self.updates = 0  # changes applied by `update`
        self._derive(graph)

    def _derive(self, graph: KnowledgeGraph, kept: np.ndarray | None = None) -> None:
        """What the scoring reads, for the graph the documents were just made from (`kept`: which entities the
        change left as they were, see Delta; None: made from scratch)."""
        self.entities = self.documents.entities
        self.owner = self.documents.owner  # the entity of each document
        self.observations = ObservationList(self.documents)  # the observation of each (None: a name document)
        self.name_doc = self.documents.starts  # each entity's name document
        self.has_observations = self.documents.counts > 1
        self.lexical.arrange(self.documents.rows)
        self.changed(graph, kept)

    def changed(self, graph: KnowledgeGraph, kept: np.ndarray | None) -> None:
        """Called with each graph the index is made for, and which of its entities the change left as they were
        (None: all are new): what a ranker derives from it (relations, the user...)."""

    @property
    def texts(self) -> list[str]:
        """The text of each document (made on demand: the index keeps none)."""
        return list(self.documents.texts())

    def update(self, graph: KnowledgeGraph, changed: Collection[str] | None = None) -> None:
        """Bring the index to `graph`, a later state of the graph it was made from: only the documents of entities
        that changed are tokenised, and only text never seen is embedded. `changed` names every entity that may
        differ, when the store can tell (the others are then not compared)."""
        delta = self.documents.change(graph.entity_list(), changed)
        self.lexical.remove(delta.removed, [tokenize(text) for text in delta.removed_texts])
        self.lexical.add(delta.added, map(tokenize, delta.added_texts))
        if self._vectors is not None:
            self._move_vectors(delta)
        self.updates += 1
        if self.documents.dead > max(COMPACT_AFTER, self.documents.size // COMPACT_SHARE):
            self._compact()
        self._derive(graph, delta.kept)

    def embed(self, embedder: Embedder) -> VectorRows:
        """The documents' vectors (by row), made now if needed: from this memory's vector cache, else the model."""
        if self._vectors is None or self.vectors_of != embedder.name:
            self._embed_all(embedder)
        elif self._unembedded:
            rows = np.fromiter(self._unembedded.keys(), np.int64, len(self._unembedded))
            texts = list(self._unembedded.values())
            vectors = embedder.encode(texts)
            self._vectors.put(rows, vectors)  # type: ignore[union-attr]
            if self._cache is not None:
                self._cache.append(text_keys(texts), vectors)
            self._unembedded = {}
            self._prune_cache()
        return self._vectors  # type: ignore[return-value]

    def cosines(self, embedder: Embedder, query: str) -> np.ndarray:
        """The cosine of each document with `query`, clipped to [0, 1] (a static model's are all but never below)."""
        dots = self.embed(embedder).dot(embedder.encode_query(query), self.documents.used)
        if self.documents.rows is not None:
            dots = dots[self.documents.rows]
        return np.clip(dots, 0.0, 1.0, out=dots)

    @property
    def nbytes(self) -> int:
        """Roughly what the index holds in memory (the graph's own strings aside)."""
        vectors = self._vectors.nbytes if self._vectors is not None else 0
        documents = 16 * self.documents.size + 200 * len(self.entities)
        return vectors + self.lexical.nbytes + documents

    def _embed_all(self, embedder: Embedder) -> None:
        """Every document's vector, from the cache when it has it, else from the model a batch at a time (so memory
        holds the vectors and one batch, whatever the size of the memory)."""
        self._cache = self._caches(embedder) if self._caches is not None else None
        documents = self.documents
        vectors = VectorRows(embedder.dim, documents.used)
        keys = text_keys(documents.texts())
        missing = np.ones(documents.size, dtype=bool)
        for found, chunk in self._cache.read(keys) if self._cache is not None else ():
            vectors.put(documents.row_of(found), chunk)
            missing[found] = False
        missing = np.flatnonzero(missing)
        texts = documents.texts() if len(missing) == documents.size else (documents.text(d) for d in missing)
        for start in range(0, len(missing), BATCH):
            batch = missing[start : start + BATCH]
            made = embedder.encode_batch([next(texts) for _ in batch])
            vectors.put(documents.row_of(batch), made)
            if self._cache is not None:
                self._cache.append(keys[batch], made)
            if embedder.on_progress is not None and len(missing) > BATCH:
                embedder.on_progress(start + len(batch), len(missing))
        self._vectors, self.vectors_of, self._unembedded = vectors, embedder.name, {}
        self._prune_cache(keys)

    def _move_vectors(self, delta: Delta) -> None:
        """After a change: vectors of unchanged text go to their new rows; the others wait for `embed`."""
        assert self._vectors is not None
        self._vectors.reserve(self.documents.used)
        waiting = dict(zip(delta.added.tolist(), delta.added_texts))
        old, new = delta.moved
        if len(old):
            ready = np.fromiter((row not in self._unembedded for row in old.tolist()), bool, len(old))
            self._vectors.put(new[ready], self._vectors.take(old[ready]))
            for row in new[ready].tolist():
                del waiting[row]
        if self._unembedded:
            for row in delta.removed.tolist():
                self._unembedded.pop(row, None)
        self._unembedded.update(waiting)

    def _compact(self) -> None:
        """Drop the rows of documents no longer there, storing the others in their order (so no row needs
        mapping until the next change)."""
        new_row = self.documents.compact()
        self.lexical.renumber(new_row)
        if self._vectors is not None:
            old_rows = np.flatnonzero(new_row >= 0)
            vectors = VectorRows(self._vectors.dim, self.documents.used)
            for start in range(0, len(old_rows), BATCH):
                part = old_rows[start : start + BATCH]
                vectors.put(new_row[part], self._vectors.take(part))
            self._vectors = vectors
            self._unembedded = {int(new_row[r]): text for r, text in self._unembedded.items() if new_row[r] >= 0}

    def _prune_cache(self, keys: np.ndarray | None = None) -> None:
        """Rewrite the cache with this memory's vectors alone when it holds many more (of text gone since)."""
        if self._cache is None or self._vectors is None or not self._cache.should_prune(self.documents.size):
            return
        if keys is None:
            keys = text_keys(self.documents.texts())
        rows = self.documents.row_of(np.arange(self.documents.size))
        vectors = self._vectors
        self._cache.rewrite(keys, (vectors.take(rows[s : s + BATCH]) for s in range(0, len(rows), BATCH)))
