"""Following a memory file as it changes, without parsing it again: the part of `KnowledgeGraph` that makes the
graph of a file's next state from the graph of an earlier one.

- `patched`: from segments that say how the file changed (ranges of the old file kept, new bytes; delta.py records
  them for our writes), only the new lines are parsed;
- `_grown_into` and `_reusable`: what `KnowledgeGraph.reread` needs to parse only a file's added lines, or only the
  lines that are not, byte for byte, lines the earlier graph already holds (a hash of each line, layout.py).

Records whose line did not change are the same objects in both graphs; a record whose line changed is a new
object. Each result comes with the `Changes` between the two graphs. The earlier graph is left as it was.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memory_server.jsonl import BOM, Entity, Relation, UnusableLine, decode_record, identity, newline_of
from memory_server.layout import Layout

if TYPE_CHECKING:
    from memory_server.graph import KnowledgeGraph

Span = tuple[int, int]  # bytes [start, end) of a file
Segment = Span | int  # how a file became its next state: a range of the old file kept, or so many new bytes


@dataclass(frozen=True)
class Changes:
    """What differs between two states of a graph: the names of the entities and the keys of the relations that
    were added, changed or removed. It may name more than changed, never less."""

    entities: frozenset[str] = frozenset()
    relations: frozenset[tuple[str, str, str]] = frozenset()

    def __or__(self, other: Changes) -> Changes:
        return Changes(self.entities | other.entities, self.relations | other.relations)

    def __bool__(self) -> bool:
        return bool(self.entities or self.relations)


class Following:
    """Mixed into `KnowledgeGraph` (whose attributes these are)."""

    records: list[Entity | Relation | UnusableLine | None]
    entities: dict[str, Entity]
    relations: dict[tuple[str, str, str], Relation]
    _relations_of: dict[str, dict[tuple[str, str, str], Relation]]
    _shadowed: dict[tuple[Any, ...], list[int]]
    _unusable: int
    _layout: Layout
    _on_disk: int
    _dirty: set[int]
    _ends_with_newline: bool
    newline: bytes
    bom: int | None
    _private: set[str] | None
    _collided: bool
    built_by: str
    parsed_lines: int

    def patched(self, segments: Sequence[Segment], new: Sequence[bytes]) -> tuple[KnowledgeGraph, Changes] | None:
        """The graph of the state this graph's file went to, as `segments` tell it (ranges of this graph's file that
        were kept, in order, and counts of new bytes, which `new` holds in the same order). Only the new lines are
        parsed; kept records are the same objects. None when this graph cannot tell (new lines in the middle that
        do not take the place of gone ones, a name that would then be in the file twice...): read the whole file."""
        if not (self._clean() and self._ends_with_newline):
            return None
        mapped = self._mapped(segments, new)
        if mapped is None:
            return None
        removed, added = mapped
        graph = self._copy()
        refilled = {slot for slot, _ in added if slot < len(self.records)}
        for slot in removed:
            if slot not in refilled:
                graph._unplace(slot)
        for slot, line in added:
            record = decode_record(line)
            if slot == len(graph.records):
                graph._layout.append(len(line) + 1, hash(line))
                graph._place(record, line)
            elif not graph._replace(slot, record):
                return None  # another name in the place of a line: the order of names would change
            else:
                graph._layout.set(slot, len(line) + 1, hash(line))
        if graph._collided:
            return None  # two lines for one name: the full read works out which one is loaded
        graph._on_disk = len(graph.records)
        if not self._layout.offset(len(self.records)):  # an empty file had no line ending: its first lines tell it
            graph.newline = newline_of(b"".join(new))
        if self.bom in removed:  # its line was written again: the mark is on the first new line that starts with one
            graph.bom = next((slot for slot, line in added if line.startswith(BOM)), None)
        graph.built_by, graph.parsed_lines = "grown", len(added)
        touched = [self.records[slot] for slot in removed] + [graph.records[slot] for slot, _ in added]
        return graph, Changes(
            frozenset(r.name for r in touched if isinstance(r, Entity)),
            frozenset(r.key for r in touched if isinstance(r, Relation)),
        )

    def same_lines(self, other: KnowledgeGraph) -> bool:
        """Whether this graph's file and `other`'s hold the same lines, byte for byte (their hashes: `touch`, or a
        file saved again unchanged, read again)."""
        return self is other or self._layout.line_hashes() == other._layout.line_hashes()

    def _replace(self, slot: int, record: Entity | Relation | UnusableLine) -> bool:
        """Put `record` in the place of the record at `slot` if it is the same name (or both are unusable lines),
        keeping its place in the order of names; False otherwise."""
        old = self.records[slot]
        if isinstance(record, UnusableLine) and isinstance(old, UnusableLine):
            self._unusable += bool(record.reason) - bool(old.reason)
        elif isinstance(record, Entity) and isinstance(old, Entity) and record.name == old.name:
            self.entities[record.name] = record
        elif isinstance(record, Relation) and isinstance(old, Relation) and record.key == old.key:
            self.relations[record.key] = record
            for end in (record.source, record.target):
                self._relations_for(end)[record.key] = record
        else:
            return False
        if not isinstance(record, UnusableLine):
            record.slot = slot
        self.records[slot] = record
        return True

    def _unplace(self, slot: int) -> None:
        """Take the record at `slot` out, as if its line were gone from the file (for `patched`)."""
        record = self.records[slot]
        if isinstance(record, UnusableLine):
            self._unusable -= bool(record.reason)
        elif isinstance(record, Entity):
            del self.entities[record.name]
        elif isinstance(record, Relation):
            del self.relations[record.key]
            for end in (record.source, record.target):
                self._relations_for(end).pop(record.key, None)
        self.records[slot] = None
        self._layout.set(slot, 0, 0)

    def _mapped(
        self, segments: Sequence[Segment], new: Sequence[bytes]
    ) -> tuple[list[int], list[tuple[int, bytes]]] | None:
        """For `patched`: the slots whose line is gone, and each new line with the slot it takes (that of a gone line
        between the same kept ranges, or a new one at the end); None when the segments do not fit this file."""
        removed: list[int] = []
        added: list[tuple[int, bytes]] = []
        waiting: list[bytes] = []  # new lines without a slot yet
        at, chunks = 0, iter(new)  # `at`: the first slot not accounted for
        end_of_file = self._layout.offset(len(self.records))
        for segment in [*segments, (end_of_file, end_of_file)]:
            if isinstance(segment, int):
                chunk = next(chunks, None)
                if chunk is None or len(chunk) != segment or not chunk.endswith(b"\n"):
                    return None
                waiting += chunk[:-1].split(b"\n")
                continue
            start, end = self._layout.slot_at(segment[0]), self._layout.slot_at(segment[1])
            if start is None or end is None or start < at or segment[0] > segment[1]:
                return None
            gone = [slot for slot in range(at, start) if self.records[slot] is not None]
            removed += gone
            while waiting and gone:
                added.append((gone.pop(0), waiting.pop(0)))
            if waiting and segment[0] != end_of_file:
                return None  # more new lines than gone ones before a kept range: later slots would shift
            at = max(at, end)
        added += [(len(self.records) + number, line) for number, line in enumerate(waiting)]
        for slot in removed:
            record = self.records[slot]
            if isinstance(record, UnusableLine) and record.shadows is not None:
                return None
            if isinstance(record, (Entity, Relation)) and identity(record) in self._shadowed:
                return None
        return removed, added

    def _grown_into(self, data: bytes, hashes: array[int]) -> bool:
        """Whether `data` (whose lines hash to `hashes`) is this graph's file with bytes added at its end."""
        if not (self._clean() and self._ends_with_newline):
            return False
        kept = self._layout.line_hashes()
        size = self._layout.offset(len(self.records))
        return len(kept) <= len(hashes) and hashes[: len(kept)] == kept and data[size - 1 : size] in (b"\n", b"")

    def _reusable(self) -> dict[int, int]:
        """Hash of a line -> the slot of its record, for the records that are exactly their line in the file (not
        changed in memory since)."""
        return {
            digest: slot
            for slot, (record, digest) in enumerate(zip(self.records[: self._on_disk], self._layout.hashes))
            if isinstance(record, (Entity, Relation)) and slot not in self._dirty
        }

    def _copy(self) -> KnowledgeGraph:
        """A graph of the same records and file, whose changes leave this one as it is."""
        graph: KnowledgeGraph = type(self)()  # type: ignore[assignment]
        graph.records = list(self.records)
        graph.entities = dict(self.entities)
        graph.relations = dict(self.relations)
        graph._relations_of = dict(self._relations_of)
        graph._private = set()
        graph._shadowed = {key: list(slots) for key, slots in self._shadowed.items()}
        graph._unusable = self._unusable
        graph._layout = self._layout.copy()
        graph._on_disk = self._on_disk
        graph._ends_with_newline = self._ends_with_newline
        graph.newline = self.newline
        graph.bom = self.bom
        return graph

    def _changes_from(self, previous: KnowledgeGraph) -> Changes:
        entities = {name for name, e in self.entities.items() if previous.entities.get(name) is not e}
        entities |= previous.entities.keys() - self.entities.keys()
        relations = {key for key, r in self.relations.items() if previous.relations.get(key) is not r}
        relations |= previous.relations.keys() - self.relations.keys()
        return Changes(frozenset(entities), frozenset(relations))
