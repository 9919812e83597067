"""The search documents of a graph, and what a change of the graph does to them.

A graph is searched as documents: one per entity (its name and type) and one per observation (with the entity's
name in front, which the embedding needs to know who an observation is about), entity after entity in the graph's
order. That order is part of the ranking (ties, sums over all documents), so it is always the order an index built
from scratch would have.

Where a document's data lives (its row among the vectors and the postings) is another matter: rows are only ever
added, so a change moves nothing that did not change. An entity's documents hold consecutive rows (its run); an
entity that changed gets a new run after the last one, and its old rows are dead until the index is compacted.
`rows` maps each document, in order, to its row.

What changed is found by comparing each entity with the one of the same name the documents were made from: its
type and observations (C-level compares of the same string objects, by identity first), far cheaper than
tokenising and embedding again.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memory_server.graph import Entity
from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up


def entity_texts(name: str, entity_type: str, observations: Sequence[str]) -> list[str]:
    """The texts of an entity's documents: its name and type, then each observation."""
    return [f"{name} ({entity_type})", *(f"{name}: {observation}" for observation in observations)]


@dataclass
class Delta:
    """What a change did to the rows: documents in new rows (those of `moved` among them, whose text did not
    change: they came from other rows), and documents whose rows are no longer used."""

    added: np.ndarray
    added_texts: list[str]
    moved: tuple[np.ndarray, np.ndarray]  # (old row, new row)
    removed: np.ndarray
    removed_texts: list[str]
    kept: np.ndarray  # for each entity now, its number before the change if it did not change, else -1

    def __bool__(self) -> bool:
        return bool(len(self.added) or len(self.removed))


_FEW = 64  # changed entities found by name one at a time; more are looked up while going through all of them


class Snapshot:
    """What an index was made from: each entity's name and type, and every observation in one flat tuple (the
    graph's own strings, no object per entity: a snapshot of 40,000 entities takes milliseconds)."""

    def __init__(self, entities: Sequence[Entity]) -> None:
        observations = list(map(_OBSERVATIONS, entities))
        self.names: list[str] = list(map(_NAME, entities))
        self.types: list[str] = list(map(_TYPE, entities))
        self.counts = np.fromiter(map(len, observations), np.int64, len(observations))
        self.flat: tuple[str, ...] = tuple(itertools.chain.from_iterable(observations))  # a copy: lists change
        self.starts = _starts(self.counts)  # where each entity's observations start in `flat`

    def number_of(self, name: str) -> int | None:
        """The number of the entity named `name` (None: none is). A scan in C, for the few names of a change."""
        try:
            return self.names.index(name)
        except ValueError:
            return None

    def observations_of(self, number: int) -> tuple[str, ...]:
        start = int(self.starts[number])
        return self.flat[start : start + int(self.counts[number])]

    def texts_of(self, number: int) -> list[str]:
        return entity_texts(self.names[number], self.types[number], self.observations_of(number))

    def match(self, new: Snapshot, changed: Collection[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """For each entity of `new`: the number of the entity of the same name here (or -1), and that number
        again if the entity is unchanged (same type and observations), else -1. `changed`, when the store can
        tell, names every entity that may differ (store.changes_since): the others are not compared."""
        same_name = self._same_names(new.names)
        found = np.flatnonzero(same_name >= 0)
        old = same_name[found]
        unchanged = self.counts[old] == new.counts[found]
        if changed is not None and len(changed) <= _FEW:
            named = [f for f in map(new.number_of, changed) if f is not None and same_name[f] >= 0]
            unchanged[np.searchsorted(found, np.asarray(named, dtype=np.int64))] = False
        elif changed is not None:
            unchanged &= np.fromiter((new.names[f] not in changed for f in found.tolist()), bool, len(found))
        if changed is not None:
            kept = same_name.copy()
            kept[found[~unchanged]] = -1
            return same_name, kept
        if len(old) == len(self.names) and np.array_equal(old, found):  # in place (new entities after them)
            unchanged &= np.fromiter(map(operator.eq, self.types, new.types), bool, len(old))
        else:
            unchanged &= np.fromiter((self.types[o] == new.types[f] for o, f in zip(old.tolist(), found)), bool)
        candidates = np.flatnonzero(unchanged)
        unchanged[candidates[~self._same_observations(new, old[candidates], found[candidates])]] = False
        kept = same_name.copy()
        kept[found[~unchanged]] = -1
        return same_name, kept

    def _same_observations(self, new: Snapshot, old: np.ndarray, found: np.ndarray) -> np.ndarray:
        """Whether entity old[i] here has the observations of entity found[i] of `new` (their counts are equal).
        Compared a stretch at a time: the entities between two changes sit at one shift from each other in both
        flat tuples, so each stretch is one C-level compare."""
        if not len(old):
            return np.zeros(0, dtype=bool)
        counts = self.counts[old]
        ours, theirs = self.starts[old], new.starts[found]
        breaks = np.flatnonzero((np.diff(old) != 1) | (np.diff(found) != 1) | (np.diff(theirs - ours) != 0)) + 1
        same = []
        for first, last in zip([0, *breaks.tolist()], [*breaks.tolist(), len(old)]):
            if first == last:
                continue
            start, end = int(ours[first]), int(ours[last - 1] + counts[last - 1])
            shift = int(theirs[first] - ours[first])
            pairs = map(operator.eq, self.flat[start:end], new.flat[start + shift : end + shift])
            same.append(np.fromiter(pairs, bool, end - start))
        differing = np.concatenate([~part for part in same] + [np.zeros(1, dtype=bool)])
        positions = np.zeros(len(old), dtype=np.int64)
        np.cumsum(counts[:-1], out=positions[1:])
        mismatches = np.add.reduceat(differing.astype(np.int64), np.minimum(positions, len(differing) - 1))
        return (counts == 0) | (mismatches == 0)

    def _same_names(self, names: list[str]) -> np.ndarray:
        before = len(self.names)
        if names[:before] == self.names:  # the usual case: entities changed in place, new ones at the end
            same = np.arange(len(names), dtype=np.int64)
            same[before:] = -1
            return same
        numbers = {name: number for number, name in enumerate(self.names)}
        return np.fromiter((numbers.get(name, -1) for name in names), np.int64, len(names))


_NAME, _TYPE, _OBSERVATIONS = (operator.attrgetter(a) for a in ("name", "entity_type", "observations"))


class Documents:
    """The documents of one state of a graph: which entity owns each, and the row each is stored in."""

    def __init__(self, entities: list[Entity]) -> None:
        self.entities = entities
        self.snapshot = Snapshot(entities)
        self.counts = self.snapshot.counts + 1
        self.starts = _starts(self.counts)  # the first document of each entity: its name document
        self.size = int(self.counts.sum())
        self.runs = self.starts.copy()  # the first row of each entity's documents
        self.rows: np.ndarray | None = None  # the row of each document; None: document d is in row d
        self.used = self.size  # rows used, dead ones included
        self.dead = 0

    @property
    def owner(self) -> np.ndarray:
        """The number of the entity each document belongs to."""
        return np.repeat(np.arange(len(self.entities)), self.counts)

    def entity_of(self, document: int) -> tuple[int, int]:
        """The entity a document belongs to, and its place among the entity's documents (0: the name document)."""
        entity = int(np.searchsorted(self.starts, document, side="right")) - 1
        return entity, document - int(self.starts[entity])

    def text(self, document: int) -> str:
        entity, offset = self.entity_of(document)
        name = self.snapshot.names[entity]
        return (
            f"{name}: {self.snapshot.flat[document - entity - 1]}"
            if offset
            else f"{name} ({self.snapshot.types[entity]})"
        )

    def texts(self) -> Iterator[str]:
        for number in range(len(self.entities)):
            yield from self.snapshot.texts_of(number)

    def row_of(self, documents: np.ndarray) -> np.ndarray:
        return documents if self.rows is None else self.rows[documents]

    def change(self, entities: list[Entity], changed: Collection[str] | None = None) -> Delta:
        """Make these the documents of `entities`, the graph's entities now (those not named in `changed`, when it
        is given, are as before); return what happened to the rows."""
        before, after = self.snapshot, Snapshot(entities)
        same_name, kept = before.match(after, changed)
        counts = after.counts + 1
        runs = np.zeros(len(entities), dtype=np.int64)
        runs[kept >= 0] = self.runs[kept[kept >= 0]]
        added, added_texts, moved_from, moved_to = [], [], [], []
        for number in np.flatnonzero(kept < 0).tolist():
            texts = after.texts_of(number)
            runs[number] = self.used
            added.append(np.arange(self.used, self.used + len(texts)))
            added_texts.extend(texts)
            old = int(same_name[number])
            if old >= 0:  # the same entity, changed: documents whose text is the same keep their vectors
                rows = {text: row for row, text in enumerate(before.texts_of(old), int(self.runs[old]))}
                for row, text in enumerate(texts, self.used):
                    if text in rows:
                        moved_from.append(rows[text])
                        moved_to.append(row)
            self.used += len(texts)
        still = np.zeros(len(before.names), dtype=bool)
        still[kept[kept >= 0]] = True
        gone = np.flatnonzero(~still)
        removed = _ranges(self.runs[gone], self.counts[gone])
        removed_texts = [text for old in gone.tolist() for text in before.texts_of(old)]

        self.entities, self.snapshot, self.counts, self.runs = entities, after, counts, runs
        self.starts = _starts(counts)
        self.size = int(counts.sum())
        self.dead += len(removed)
        in_place = self.used == self.size and np.array_equal(self.runs, self.starts)
        self.rows = None if in_place else _ranges(self.runs, self.counts)
        return Delta(
            np.concatenate(added) if added else np.zeros(0, dtype=np.int64),
            added_texts,
            (np.asarray(moved_from, dtype=np.int64), np.asarray(moved_to, dtype=np.int64)),
            removed,
            removed_texts,
            kept,
        )

    def compact(self) -> np.ndarray:
        """Store the documents in rows 0, 1, 2... in their order; return the new row of each old one (-1: dead)."""
        new_row = np.full(self.used, -1, dtype=np.int64)
        new_row[self.row_of(np.arange(self.size))] = np.arange(self.size)
        self.runs = self.starts.copy()
        self.used, self.dead = self.size, 0
        self.rows = None
        return new_row


class ObservationList(Sequence):
    """The observation of each document (None for a name document), read from the documents without a list of
    its own: a large memory's index changes often, and most searches read only a few of them."""

    def __init__(self, documents: Documents) -> None:
        self._snapshot, self._starts, self._size = documents.snapshot, documents.starts, documents.size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, document):  # type: ignore[override]
        if isinstance(document, slice):
            return list(self)[document]
        document = int(document) + (self._size if document < 0 else 0)
        if not 0 <= document < self._size:
            raise IndexError(document)
        entity = int(np.searchsorted(self._starts, document, side="right")) - 1
        return self._snapshot.flat[document - entity - 1] if document != self._starts[entity] else None

    def __iter__(self) -> Iterator[str | None]:
        for number in range(len(self._snapshot.names)):
            yield None
            yield from self._snapshot.observations_of(number)


def _starts(counts: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return starts


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """start, start + 1, ..., start + count - 1 for each pair, one after the other."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    return np.repeat(starts - _starts(counts), counts) + np.arange(total)
