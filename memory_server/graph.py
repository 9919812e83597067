"""The knowledge graph of one memory file (its lines are read and written by jsonl.py).

A file is a list of lines. Each line is an entity, a relation, or a line we cannot use (bad JSON, an unknown
`type`, a missing field...). Unusable lines are kept verbatim in their place, so a rewrite never loses them, and
unchanged records are written back with their original text, so a rewrite only re-serialises what changed.

Mutations validate first and change the graph only once nothing can fail; they record what the store must do
to persist them (append lines, or rewrite the file) in `graph.edits`.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memory_server.errors import EntityNotFoundError, echo

# The records and their line codec live in jsonl.py; they are also imported from here.
from memory_server.jsonl import (  # noqa: F401
    Entity,
    Relation,
    decode_line,
    encode_entity,
    encode_relation,
    json_line,
    parse_or_problem,
    record_of,
)


@dataclass(eq=False)
class UnusableLine:
    """A line kept verbatim because it is not an entity or a relation. Blank lines have no reason."""

    text: str
    reason: str | None
    shadows: Entity | Relation | None = None  # the record this line is a differing second version of


@dataclass(frozen=True)
class SkippedLine:
    line_number: int
    reason: str


@dataclass
class Edits:
    """What the mutations since the last write changed: lines added at the end, lines changed or removed."""

    appended: list[Entity | Relation] = field(default_factory=list)
    rewrite: bool = False

    def __bool__(self) -> bool:
        return self.rewrite or bool(self.appended)


Record = Entity | Relation | UnusableLine | None  # None: a removed line (or a duplicate merged into another)
Span = tuple[int, int]  # bytes [start, end) of the file as it is on disk now
Plan = list[Span | bytes]  # the new file: ranges copied from the old one, and new bytes


class KnowledgeGraph:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.entities: dict[str, Entity] = {}
        self.relations: dict[tuple[str, str, str], Relation] = {}
        self._relations_of: dict[str, dict[tuple[str, str, str], Relation]] = {}
        self._shadowed: dict[tuple[Any, ...], list[int]] = {}  # second versions of a record, kept verbatim
        self._unusable = 0
        self.edits = Edits()
        # Where each record is in the file on disk: its size in bytes with its newline (0: not in the file).
        # Records at slots >= _on_disk are new; _dirty holds the slots whose line must change or go.
        self._sizes = array("q")
        self._on_disk = 0
        self._dirty: set[int] = set()
        self._ends_with_newline = True

    # ---- reading -------------------------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: bytes | str) -> KnowledgeGraph:
        """Read a file's content. Bytes that are not UTF-8 are kept (as surrogate escapes) and written back as is."""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        graph = cls()
        raw = data.split(b"\n")
        graph._ends_with_newline = raw[-1] == b""
        if graph._ends_with_newline:
            raw.pop()
        graph._sizes = array("q", [len(line) + 1 for line in raw])
        if raw and not graph._ends_with_newline:
            graph._sizes[-1] -= 1
        for line in raw:
            text = line.decode("utf-8", "surrogateescape")
            graph._load_line(text, parse_or_problem(text) if text.strip() else None)
        graph._on_disk = len(graph.records)
        return graph

    def skipped_lines(self) -> list[SkippedLine]:
        """Unusable lines with their 1-based numbers in the file on disk."""
        if not self._unusable:
            return []
        numbers = list(itertools.accumulate(int(size > 0) for size in self._sizes[: self._on_disk]))
        skipped = []
        for slot, record in enumerate(self.records[: self._on_disk]):
            if isinstance(record, UnusableLine) and record.reason:
                reason = record.reason
                if record.shadows is not None:
                    reason += f" (the one loaded is on line {numbers[record.shadows.slot]})"
                skipped.append(SkippedLine(numbers[slot], reason))
        return skipped

    def lines(self) -> Iterator[str]:
        """Every line of the file, in order, without newlines."""
        for record in self.records:
            if record is not None:
                yield _text_of(record)

    def entity_list(self) -> list[Entity]:
        return list(self.entities.values())

    def relations_touching(self, names: Iterable[str]) -> list[Relation]:
        """Relations with either end among `names`, each once, in file order."""
        found: dict[tuple[str, str, str], Relation] = {}
        for name in names:
            found.update(self._relations_of.get(name, {}))
        return sorted(found.values(), key=lambda relation: relation.slot)

    def open_nodes(self, names: Iterable[str]) -> tuple[list[Entity], list[Relation]]:
        entities = sorted({n: self.entities[n] for n in names if n in self.entities}.values(), key=_slot)
        return entities, self.relations_touching(e.name for e in entities)

    # ---- mutations -----------------------------------------------------------------------------------------

    def create_entities(self, entities: Iterable[Entity]) -> list[Entity]:
        added: list[Entity] = []
        for entity in entities:
            if entity.name not in self.entities:
                entity.observations = list(dict.fromkeys(entity.observations))
                self._append(entity)
                added.append(entity)
        return added

    def create_relations(self, relations: Iterable[Relation], require_ends: bool = True) -> list[Relation]:
        """Add the relations not there yet. `require_ends=False` is for imports of files that name an entity they
        lack (older official servers wrote such lines): kept as they were, like such lines when a file is read."""
        relations = list(relations)
        for relation in relations if require_ends else ():
            for end in (relation.source, relation.target):
                if end not in self.entities:
                    raise EntityNotFoundError(end)
        added: list[Relation] = []
        for relation in relations:
            if relation.key not in self.relations:
                self._append(relation)
                added.append(relation)
        return added

    def add_observations(self, additions: Iterable[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
        additions = list(additions)
        for name, _ in additions:
            if name not in self.entities:
                raise EntityNotFoundError(name)
        results = []
        for name, contents in additions:
            entity = self.entities[name]
            known = set(entity.observations)
            new = [c for c in dict.fromkeys(contents) if c not in known]
            if new:
                entity.observations.extend(new)
                self._changed(entity)
            results.append((name, new))
        return results

    def delete_entities(self, names: Iterable[str]) -> None:
        for name in dict.fromkeys(names):
            entity = self.entities.pop(name, None)
            if entity is None:
                continue
            self._remove_record(entity)
            for relation in list(self._relations_of.get(name, {}).values()):
                self._remove_relation(relation)

    def delete_observations(self, deletions: Iterable[tuple[str, list[str]]]) -> None:
        for name, observations in deletions:
            entity = self.entities.get(name)
            if entity is None:
                continue
            doomed = set(observations)
            kept = [o for o in entity.observations if o not in doomed]
            if len(kept) != len(entity.observations):
                entity.observations = kept
                self._changed(entity)

    def delete_relations(self, keys: Iterable[tuple[str, str, str]]) -> None:
        for key in keys:
            relation = self.relations.get(key)
            if relation is not None:
                self._remove_relation(relation)

    def plan(self) -> Plan:
        """The new content of the file, as ranges of the file on disk (unchanged lines, copied without being
        serialised again) and the bytes of new or changed lines. Call `written` once it is on disk."""
        offsets = np.zeros(self._on_disk + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(self._sizes, dtype=np.int64, count=self._on_disk), out=offsets[1:])
        plan: Plan = []
        copied_to = 0  # the slots before this one are planned
        for slot in sorted(self._dirty):
            if slot > copied_to:
                plan.append((int(offsets[copied_to]), int(offsets[slot])))
            record = self.records[slot]
            if record is not None:
                plan.append(_line_bytes(record))
            copied_to = slot + 1
        if copied_to < self._on_disk:
            plan.append((int(offsets[copied_to]), int(offsets[self._on_disk])))
            if not self._ends_with_newline:
                plan.append(b"\n")
        plan.extend(_line_bytes(record) for record in self.edits.appended)
        return plan

    def written(self) -> None:
        """The store has written the plan: the file on disk now holds every record as it is in memory."""
        for slot in self._dirty:
            record = self.records[slot]
            self._sizes[slot] = 0 if record is None else len(_line_bytes(record))
        if self._on_disk and not self._ends_with_newline and self._on_disk - 1 not in self._dirty:
            self._sizes[self._on_disk - 1] += 1
        for record in self.edits.appended:
            self._sizes[record.slot] = len(_line_bytes(record))
        self._on_disk = len(self.records)
        self._dirty.clear()
        self._ends_with_newline = True
        self.edits = Edits()

    # ---- internals -----------------------------------------------------------------------------------------

    def _load_line(self, line: str, parsed: Any) -> None:
        if parsed is None:
            self.records.append(UnusableLine(line, None))
            return
        try:
            if isinstance(parsed, ValueError):
                raise parsed
            record = record_of(parsed, line)
        except ValueError as problem:
            self.records.append(UnusableLine(line, str(problem)))
            self._unusable += 1
            return
        first = self.entities.get(record.name) if isinstance(record, Entity) else self.relations.get(record.key)
        if first is None:
            self._index(record, len(self.records))
            self.records.append(record)
        elif isinstance(record, Entity) and isinstance(first, Entity) and _mergeable(first, record):
            # The official server stores a name twice when one batch names it twice. Same type, same fields:
            # merging the observations loses nothing, and the name stays unique.
            known = set(first.observations)
            first.observations.extend(o for o in dict.fromkeys(record.observations) if o not in known)
            first.text = None
            self._dirty.update((first.slot, len(self.records)))  # both lines change at the next rewrite
            self.records.append(None)
        elif isinstance(record, Relation) and record.extra == first.extra:
            self._dirty.add(len(self.records))  # an exact copy: dropped at the next rewrite
            self.records.append(None)
        else:  # a second version that differs: keep it, untouched, and say so
            what = f"entity {echo(record.name)}" if isinstance(record, Entity) else "relation"
            reason = f"a second, different {what}; kept as it is, not loaded"
            self._shadowed.setdefault(_identity(record), []).append(len(self.records))
            self.records.append(UnusableLine(line, reason, first))
            self._unusable += 1

    def _index(self, record: Entity | Relation, slot: int) -> None:
        record.slot = slot
        if isinstance(record, Entity):
            self.entities[record.name] = record
        else:
            key = record.key
            self.relations[key] = record
            self._relations_of.setdefault(record.source, {})[key] = record
            self._relations_of.setdefault(record.target, {})[key] = record

    def _append(self, record: Entity | Relation) -> None:
        record.text = None
        self._index(record, len(self.records))
        self.records.append(record)
        self._sizes.append(0)
        self.edits.appended.append(record)

    def _changed(self, record: Entity | Relation) -> None:
        record.text = None
        if record.slot < self._on_disk:
            self._dirty.add(record.slot)
            self.edits.rewrite = True

    def _remove_record(self, record: Entity | Relation) -> None:
        # Its differing second versions go too: left in the file, the next reader would load one of them.
        for slot in self._shadowed.pop(_identity(record), []):
            self.records[slot] = None
            self._dirty.add(slot)
            self._unusable -= 1
        self.records[record.slot] = None
        if record.slot < self._on_disk:
            self._dirty.add(record.slot)
            self.edits.rewrite = True
        else:
            self.edits.appended.remove(record)

    def _remove_relation(self, relation: Relation) -> None:
        del self.relations[relation.key]
        for end in (relation.source, relation.target):
            self._relations_of.get(end, {}).pop(relation.key, None)
        self._remove_record(relation)


def _text_of(record: Entity | Relation | UnusableLine) -> str:
    if isinstance(record, UnusableLine):
        return record.text
    if record.text is None:
        record.text = encode_entity(record) if isinstance(record, Entity) else encode_relation(record)
    return record.text


def _identity(record: Entity | Relation) -> tuple[Any, ...]:
    return ("entity", record.name) if isinstance(record, Entity) else ("relation", *record.key)


def _mergeable(first: Entity, second: Entity) -> bool:
    return first.entity_type == second.entity_type and first.extra == second.extra


def _line_bytes(record: Entity | Relation | UnusableLine) -> bytes:
    return (_text_of(record) + "\n").encode("utf-8", "surrogateescape")


def _slot(record: Entity | Relation) -> int:
    return record.slot
