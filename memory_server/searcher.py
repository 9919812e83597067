"""Searching memories: an index per memory file, kept up to date by each change of the file (at the cost of what
changed) and released when memory runs short; one search across several memories with one cut-off; the outcomes of
the last searches, kept for their next pages. How a query is ranked within a memory is search.py's."""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from memory_server.currency import current_first
from memory_server.embeddings import Embedder, EmbedderSlot
from memory_server.graph import KnowledgeGraph, Relation
from memory_server.hits import (  # noqa: F401 (Target is imported from here too)
    LabelledHit,
    Mode,
    Outcome,
    Target,
    preferred,
    relevant,
)
from memory_server.keyword import KeywordIndex
from memory_server.rerank import RERANK_POOL, model_name, reordered
from memory_server.search import GraphIndex
from memory_server.store import GraphStore
from memory_server.vector_cache import VectorCache

if TYPE_CHECKING:
    from memory_server.contexts import Contexts, ResolvedContext

logger = logging.getLogger(__name__)

IndexT = TypeVar("IndexT", "GraphIndex", "KeywordIndex")

NEAREST_OWN = "nothing matched closely; shown: the user's own notes nearest the question (weak evidence)"
RECENT_SEARCHES = 16  # outcomes kept for a cursor's next page
RECENT_HITS = 100_000  # and hits in them all, about 30 MB (the newest outcome is kept whatever its size)
INDEX_BUDGET = 512 * 2**20  # bytes of indexes a searcher keeps; the least recently used go first (never the last)


def _memory_state(target: Target) -> tuple:
    """What a search's outcome depends on in a target: its label, preference, file and the state of its graph."""
    with target.store.reading():  # brings the graph to the file's state
        return target.label, target.boost, target.store.path, target.store.version


@dataclass(frozen=True)
class Wording:
    """How a front end names what a search's note suggests: by default the tools' arguments, as the model calls
    them (the commands for people give their own options instead, see commands.py)."""

    keyword: str = "mode 'keyword'"
    other_context: str = "another context"
    every_context: str = "context '*'"
    lower_score: str = "a lower minScore"
    empty_query: str = "pass the words to look for as query (read_graph lists everything)"


def _nothing_found(
    memories: int, mode: Mode, min_score: float | None, empty: bool = False, words: Wording = Wording()
) -> str:
    """The note of a search that found nothing: what to try. `empty`: every memory searched holds no entity (a
    new project's or worktree's memory), where other words would find nothing either."""
    if empty and memories > 1:
        return "every memory searched is empty (nothing saved in them yet)"
    every = f"{words.other_context}, or {words.every_context} for every memory"
    if empty:
        return f"this memory is empty (nothing saved in it yet); try {every}"
    if min_score is not None:
        return f"no match scored {min_score} or more; try {words.lower_score}"
    where = "any memory searched" if memories > 1 else "this memory"
    tries = ["other words"]
    if mode != "keyword":
        tries.append(f"{words.keyword} for an exact word or phrase")
    if memories == 1:
        tries.append(every)
    return f"nothing relevant found in {where}; try " + ", ".join(tries[:-1]) + f" or {tries[-1]}"


def every_target(contexts: Contexts, resolved: ResolvedContext, project_boost: float) -> Target:
    """One context of a search across every context: the current project's memory gets `project_boost`."""
    return Target(resolved.name, contexts.store(resolved), project_boost if resolved.project is not None else 0.0)


class Searcher:
    """Searches memories, keeping an index per memory file that each change of the file updates (at the cost of
    what changed); the indexes used least lately are released once all of them hold more than `budget` bytes."""

    def __init__(self, embeddings: EmbedderSlot, budget: int = INDEX_BUDGET, words: Wording = Wording()) -> None:
        self.embeddings = embeddings
        self.budget = budget
        self.words = words  # how its notes name what to try
        self._indexes: OrderedDict[tuple[Path, type], _Kept] = OrderedDict()  # least recently used first
        self._mutex = threading.Lock()
        self._recent: OrderedDict[tuple, Outcome] = OrderedDict()  # the last searches, for their next pages
        self.built = 0  # indexes made from scratch
        self.released = 0

    def search(
        self,
        targets: Sequence[Target],
        query: str,
        mode: Mode,
        limit: int | None,
        min_score: float | None,
        again: bool = False,
    ) -> Outcome:
        """The matches for `query` in `targets`. `again`: the same search is asked for once more (for its next page):
        while no memory changed, the outcome given before, though the re-ranker may have read more since (a page
        must follow the ranking of the page before it)."""
        asked = (query, mode, limit, min_score, *(_memory_state(t) for t in targets))
        if again:
            with self._mutex:  # looked up and read at once: another thread's search may drop it in between
                cached = self._recent.get(asked)
            if cached is not None:
                return cached
        outcome = self._search(targets, query, mode, limit, min_score)
        with self._mutex:
            self._recent[asked] = outcome
            self._trim_recent()
        return outcome

    def _trim_recent(self) -> None:
        """Drop the oldest outcomes beyond RECENT_SEARCHES or RECENT_HITS hits (a keyword search of a large memory
        holds every match, ~300 bytes each: 16 of 1M hits would hold 5 GB); the newest stays, for its next page."""
        held = sum(len(outcome.hits) for outcome in self._recent.values())
        while len(self._recent) > 1 and (len(self._recent) > RECENT_SEARCHES or held > RECENT_HITS):
            held -= len(self._recent.popitem(last=False)[1].hits)

    def _search(
        self, targets: Sequence[Target], query: str, mode: Mode, limit: int | None, min_score: float | None
    ) -> Outcome:
        embedder, note = self.embeddings.get() if mode != "keyword" else (None, None)
        if mode == "semantic" and embedder is None:
            note = (f"{note}; " if note else "") + "semantic mode needs the embedding model, so keywords (BM25) ranked"
        slot = self.embeddings.reranker
        reader = slot.get() if slot is not None and embedder is not None else None
        # The static ranking reads candidates past the limit too, only for a note that replaced one it returns
        # (currency.py): limit 1 then answers as limit 10 does.
        pool = None if limit is None else max(limit, RERANK_POOL)
        if mode != "keyword" and not query.strip():  # keyword mode keeps the official `includes("")`: everything
            note = "; ".join(filter(None, [note, f"the query is empty: {self.words.empty_query}"]))
            return Outcome([], mode, model_name(embedder, reader), bool(embedder), note, len(targets))
        hits: list[LabelledHit] = []
        standby: list[LabelledHit] = []  # the static ranking's candidates past the limit
        empty = True
        for target in targets:
            with target.store.reading() as graph:
                empty = empty and not graph.entities
                if mode == "keyword":
                    with self._using(KeywordIndex, target.store, graph) as keywords:
                        found = keywords.hits(query, limit)
                else:
                    with self._using(GraphIndex, target.store, graph) as index:
                        found = index.candidates(query, mode, embedder, pool)
                        if reader is not None:
                            found = index.read_again(reader, target.store, query, found, embedder)
                past = limit if reader is None and limit is not None else len(found)  # keyword: never past it
                touching: dict[str, tuple[Relation, ...]] = {}
                for n, hit in enumerate(found):
                    if hit.entity.name not in touching:
                        touching[hit.entity.name] = tuple(graph.relations_touching([hit.entity.name]))
                    labelled = LabelledHit(preferred(hit, target.boost), target.label, touching[hit.entity.name])
                    (hits if n < past else standby).append(labelled)
        if reader is not None:
            hits = reordered(hits)
        elif mode != "keyword":
            kept = {id(hit) for hit in relevant([labelled.hit for labelled in hits])}
            hits = sorted((h for h in hits if id(h.hit) in kept), key=lambda labelled: -labelled.hit.rank)
        if mode != "keyword":  # keyword mode keeps the official server's order
            standby.sort(key=lambda labelled: -labelled.hit.rank)
            hits = current_first(query, hits + standby, len(hits))[: len(hits)]
        if min_score is not None:
            hits = [h for h in hits if h.hit.score >= min_score]
        if hits and all(h.hit.nearest for h in hits):  # rerank._nearest_own's (not a match the transformer found)
            note = "; ".join(filter(None, [note, NEAREST_OWN]))
        if not hits:
            note = "; ".join(filter(None, [note, _nothing_found(len(targets), mode, min_score, empty, self.words)]))
        self._release({(t.store.path, KeywordIndex if mode == "keyword" else GraphIndex) for t in targets})
        kept = hits[:limit] if limit is not None else hits
        return Outcome(kept, mode, model_name(embedder, reader), bool(embedder), note, len(targets))

    def warm(self, store: GraphStore) -> None:
        """Bring the indexes already made for `store` up to date now, so the next search does not wait."""
        with self._mutex:
            kinds = [kind for (path, kind) in self._indexes if path == store.path]
        embedder = self.embeddings.get(wait=0)[0] if GraphIndex in kinds else None
        with store.reading() as graph:
            for kind in kinds:
                with self._using(kind, store, graph) as index:
                    if embedder is not None and isinstance(index, GraphIndex):
                        index.embed(embedder)

    def forget(self, path: Path) -> None:
        """Drop the indexes of the memory at `path` (its store released its graph to free memory)."""
        with self._mutex:
            for key in [key for key in self._indexes if key[0] == path]:
                del self._indexes[key]
                self.released += 1

    def holds(self, store: GraphStore, kind: type = GraphIndex) -> GraphIndex | KeywordIndex | None:
        """The index of `kind` kept for `store`'s file, if any (as it was last used)."""
        with self._mutex:
            kept = self._indexes.get((store.path, kind))
        return kept.index if kept is not None else None

    @contextlib.contextmanager
    def _using(self, kind: type[IndexT], store: GraphStore, graph: KnowledgeGraph) -> Iterator[IndexT]:
        """The index of `kind` for the graph the store holds now (called while the store is held for reading),
        for this thread alone while it is used."""
        key = (store.path, kind)
        with self._mutex:
            kept = self._indexes.get(key)
            if kept is None:
                kept = self._indexes[key] = _Kept()
            self._indexes.move_to_end(key)
        with kept.lock:
            if kept.index is None:
                kept.index = GraphIndex(graph, self._caches(store)) if kind is GraphIndex else kind(graph)
                self.built += 1
            elif kept.store() is not store or kept.version != store.version:
                # What changed, from the store's log when this store made the index's graph (another store object
                # for the file, or a state too old for the log, is compared entity by entity).
                changes = store.changes_since(kept.version) if kept.store() is store else None
                kept.index.update(graph, changes.entities if changes is not None else None)
            kept.store, kept.version = weakref.ref(store), store.version
            yield kept.index  # type: ignore[misc]

    def _caches(self, store: GraphStore) -> Callable[[Embedder], VectorCache | None] | None:
        folder = self.embeddings.cache_dir
        if folder is None:
            return None
        return lambda embedder: VectorCache(folder / embedder.fingerprint, store.path, embedder.name, embedder.dim)

    def _release(self, keep: set[tuple[Path, type]]) -> None:
        """Release the indexes used least lately until those left fit the budget (never those in `keep`)."""
        with self._mutex:
            sizes = {key: kept.index.nbytes if kept.index is not None else 0 for key, kept in self._indexes.items()}
            total = sum(sizes.values())
            for key in list(self._indexes):
                if total <= self.budget:
                    break
                if key not in keep:
                    del self._indexes[key]
                    total -= sizes[key]
                    self.released += 1
                    logger.debug("Released the search index of %s (%d bytes)", key[0], sizes[key])


class _Kept:
    """An index kept for a file, with the store object and version it was made for."""

    def __init__(self) -> None:
        self.index: GraphIndex | KeywordIndex | None = None
        self.store: Callable[[], GraphStore | None] = lambda: None
        self.version = -1
        self.lock = threading.Lock()
