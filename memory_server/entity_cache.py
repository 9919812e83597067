"""Values derived from each entity of a memory, carried from one state of the memory to the next, so that what a
change costs is what it touched, not a pass in Python over every entity (memory_server.user keeps who is who in a
memory this way: done from scratch, finding the user took 0.4 s at 200k observations after every write).

A search index tells its cache, change by change, which of its entities the change left as they were (documents.
Delta.kept); when the cache is next read, what it holds moves to the entities' new numbers and only the entities
that changed are read again. What depends on the relations is computed again when they changed; a change that
touched many entities drops what the cache holds, which is then computed again from scratch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np

    from memory_server.documents import Snapshot
    from memory_server.search import GraphIndex
else:
    np = lazy_module("numpy")  # imported at the first search, not at start-up

# How each kind of value is computed for some entities (numbers of the index's entities now). Module-level
# functions, not closures over the index: the cache is kept by the index.
Column = Callable[["GraphIndex", "np.ndarray"], "np.ndarray"]  # one value per entity, for those entities
One = Callable[["GraphIndex", int], Any]  # a value for one entity, None for most
Count = Callable[[Sequence[str]], int]  # a number from an entity's observations, summed over all entities
MANY = 8  # a change of more than 1/MANY of the entities (and more than FEW) starts the cache again
FEW = 64


class EntityCache:
    """Values derived from each entity of one state of a memory: columns (one value per entity), sparse values
    (for the few entities that have one), totals over every entity's observations, each entity's number by name,
    and how many entities have each type. `moved` follows each change of the index; `refresh` carries everything
    to the index's state now."""

    def __init__(self, snapshot: Snapshot, relations: Iterable[Hashable]) -> None:
        self._snapshot = snapshot
        self._relations = list(relations)  # the keys of the relations, to see whether they changed
        self._since: np.ndarray | None = None  # each entity's number in `_snapshot` if unchanged since, else -1
        self._columns: dict[str, tuple[Column, bool, np.ndarray]] = {}
        self._sparse: dict[str, tuple[Hashable, One, dict[int, Any]]] = {}
        self._totals: dict[Hashable, tuple[Count, int]] = {}
        self._numbers: dict[str, int] | None = None
        self._types: Counter[str] | None = None

    def moved(self, kept: np.ndarray) -> None:
        """The index changed: its entity i is the entity kept[i] was before the change, unchanged, or (-1) not."""
        if self._since is None:
            self._since = kept
            return
        since = np.full(len(kept), -1, dtype=np.int64)
        since[kept >= 0] = self._since[kept[kept >= 0]]
        self._since = since

    def refresh(self, index: GraphIndex) -> None:
        """Carry what the cache holds to the index's entities and relations now."""
        relations = list(index.graph.relations)
        relations_changed = relations != self._relations
        if self._since is None and not relations_changed:
            return
        before, now = self._snapshot, index.documents.snapshot
        since = self._since if self._since is not None else np.arange(len(now.names))
        changed = np.flatnonzero(since < 0)
        self._snapshot, self._relations, self._since = now, relations, None
        if before.names != now.names:
            self._numbers = None
        if before.types != now.types:
            self._types = None
        if len(changed) > max(FEW, len(since) // MANY):
            self._columns, self._sparse, self._totals = {}, {}, {}
            return
        for name, (compute, relational, values) in list(self._columns.items()):
            if relational and relations_changed:
                del self._columns[name]
            else:
                carried = np.empty(len(since), dtype=values.dtype)
                carried[since >= 0] = values[since[since >= 0]]
                carried[changed] = compute(index, changed)
                self._columns[name] = (compute, relational, carried)
        new_number = np.full(len(before.names), -1, dtype=np.int64)  # each entity's number now (-1: gone, changed)
        new_number[since[since >= 0]] = np.flatnonzero(since >= 0)
        self._carry_sparse(index, new_number, changed)
        self._carry_totals(before, new_number, changed)

    def column(self, index: GraphIndex, name: str, compute: Column, relational: bool = False) -> np.ndarray:
        """`compute`'s value for each of the index's entities (`relational`: it depends on the relations too)."""
        if name not in self._columns:
            everyone = np.arange(len(self._snapshot.names))
            self._columns[name] = (compute, relational, compute(index, everyone))
        return self._columns[name][2]

    def sparse(self, name: str, key: Hashable, one: One, scratch: Callable[[], dict[int, Any]]) -> dict[int, Any]:
        """Entity number -> `one`'s value, for the entities that have one (not None), for `key` (what `one` reads
        besides the entity: values for another key are dropped); `scratch` finds them all at once."""
        held = self._sparse.get(name)
        if held is None or held[0] != key:
            held = self._sparse[name] = (key, one, scratch())
        return held[2]

    def total(self, key: Hashable, count: Count, scratch: Callable[[], int]) -> int:
        """`count` summed over the observations of every entity; `scratch` counts them all at once."""
        if key not in self._totals:
            self._totals[key] = (count, scratch())
        return self._totals[key][1]

    def numbers(self) -> dict[str, int]:
        """Each entity's number, by name."""
        if self._numbers is None:
            self._numbers = dict(zip(self._snapshot.names, range(len(self._snapshot.names))))
        return self._numbers

    def types(self) -> Counter[str]:
        """How many entities have each type, ignoring case and spaces around it."""
        if self._types is None:
            self._types = Counter(map(str.lower, map(str.strip, self._snapshot.types)))
        return self._types

    @property
    def nbytes(self) -> int:
        # Read while the re-ranker's thread may add to the cache: the dicts are copied (one step under the GIL) first.
        columns = sum(values.nbytes for _, _, values in list(self._columns.values()))
        return columns + 100 * (len(self._numbers or ()) + sum(len(held[2]) for held in list(self._sparse.values())))

    def _carry_sparse(self, index: GraphIndex, new_number: np.ndarray, changed: np.ndarray) -> None:
        if not self._sparse:
            return
        kept = np.flatnonzero(new_number >= 0)
        in_place = np.array_equal(new_number[kept], kept)  # no entity before a kept one was removed
        gone = np.flatnonzero(new_number < 0).tolist()
        for name, (key, one, values) in self._sparse.items():
            if in_place:  # each value where it was (a value held by every entity is not copied at each change)
                for number in gone:
                    values.pop(number, None)
            else:
                values = {int(new_number[n]): value for n, value in values.items() if new_number[n] >= 0}
            for number in changed.tolist():
                value = one(index, number)
                if value is not None:
                    values[number] = value
            self._sparse[name] = (key, one, values)

    def _carry_totals(self, before: Snapshot, new_number: np.ndarray, changed: np.ndarray) -> None:
        if not self._totals:
            return
        gone = np.flatnonzero(new_number < 0).tolist()  # what they said is said no more (or differently)
        for key, (count, value) in self._totals.items():
            value -= sum(count(before.observations_of(n)) for n in gone)
            value += sum(count(self._snapshot.observations_of(n)) for n in changed.tolist())
            self._totals[key] = (count, value)
