"""The knowledge graph of one memory file (its lines are read and written by jsonl.py).

A file is a list of lines. Each line is an entity, a relation, or a line we cannot use (bad JSON, an unknown
`type`, a missing field...). Unusable lines are kept verbatim in their place, so a rewrite never loses them, and
unchanged records are written back with their original text, so a rewrite only re-serialises what changed.

Mutations validate first and change the graph only once nothing can fail; they record what the store must do
to persist them (append lines, or rewrite the file) in `graph.edits`, and which entities and relations they
touched.

A graph can follow its file without parsing it again (see `reread` and `patched`):
- records whose line is still in the file, byte for byte, are the same objects in the graph of the new state;
- an entity or relation whose line changed (or that a reload merged with a duplicate) is a new object;
- a mutation of this process changes its records in place, and names them in `edits.changes()`.
Each rebuild returns the `Changes` between the two graphs, which the store logs for `GraphStore.changes_since`.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from memory_server.errors import EntityNotFoundError, echo

# The records and their line codec live in jsonl.py; they are also imported from here.
from memory_server.follow import Changes, Following, Segment  # noqa: F401
from memory_server.joined import JoinedText, unaccented
from memory_server.jsonl import (  # noqa: F401
    BOM,
    Entity,
    Relation,
    UnusableLine,
    decode_line,
    decode_record,
    encode_entity,
    encode_relation,
    identity,
    json_line,
    newline_of,
    parse_or_problem,
    record_of,
)
from memory_server.layout import Layout


@dataclass(frozen=True)
class SkippedLine:
    line_number: int
    reason: str


@dataclass
class Edits:
    """What the mutations since the last write changed: lines added at the end, lines changed or removed, and
    the entities and relations they touched."""

    appended: list[Entity | Relation] = field(default_factory=list)
    rewrite: bool = False
    entities: set[str] = field(default_factory=set)
    relations: set[tuple[str, str, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.rewrite or bool(self.appended)

    def touch(self, record: Entity | Relation) -> None:
        if isinstance(record, Entity):
            self.entities.add(record.name)
        else:
            self.relations.add(record.key)

    def changes(self) -> Changes:
        return Changes(frozenset(self.entities), frozenset(self.relations))


Record = Entity | Relation | UnusableLine | None  # None: a removed line (or a duplicate merged into another)
Span = tuple[int, int]  # bytes [start, end) of the file as it is on disk now
Plan = list[Span | bytes]  # the new file: ranges copied from the old one, and new bytes


class KnowledgeGraph(Following):
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.entities: dict[str, Entity] = {}
        self.relations: dict[tuple[str, str, str], Relation] = {}
        self._relations_of: dict[str, dict[tuple[str, str, str], Relation]] = {}
        self._shadowed: dict[tuple[Any, ...], list[int]] = {}  # second versions of a record, kept verbatim
        self._unusable = 0
        self.edits = Edits()
        # Where each record's line is in the file on disk (layout.py). Records at slots >= _on_disk are new;
        # _dirty holds the slots whose line must change or go.
        self._layout = Layout()
        self._on_disk = 0
        self._dirty: set[int] = set()
        self._ends_with_newline = True
        self._end = b"\n"  # what a write adds to a last line without a newline (see `reread`)
        self._ended_hash = 0  # that line's hash once a write ends it (see `written`)
        self.newline = b"\n"  # the file's line ending (jsonl.newline_of), for the lines this graph writes
        self.bom: int | None = None  # the slot whose line starts with the file's byte-order mark (see `_move_bom`)
        self._private: set[str] | None = None  # see `_relations_for`
        self._collided = False  # a name was met twice while placing lines: see `patched`
        # How this graph was made from its file ("parsed", "reread", "grown", "followed": see store.Load).
        self.built_by = "parsed"
        self.parsed_lines = 0

    # ---- reading -------------------------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: bytes | str) -> KnowledgeGraph:
        """Read a file's content. Bytes that are not UTF-8 are kept (as surrogate escapes) and written back as is."""
        return cls.reread(data)[0]

    @classmethod
    def reread(cls, data: bytes | str, previous: KnowledgeGraph | None = None) -> tuple[KnowledgeGraph, Changes | None]:
        """Read a file's content, parsing only what `previous` (the graph of an earlier state of this file) does not
        hold: when the file only grew, `previous`'s records with the new lines after them; otherwise each line
        still written exactly as one of `previous`'s is that line's record. Also returns what changed since
        `previous` (None without one)."""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        raw = data.split(b"\n")
        ends_with_newline = raw[-1] == b""
        if ends_with_newline:
            raw.pop()
        hashes = array("q", map(hash, raw))
        if previous is not None and previous._grown_into(data, hashes):
            size = previous._layout.offset(len(previous.records))
            if len(data) == size:
                return previous, Changes()
            grown = previous.patched([(0, size), len(data) - size], [data[size:]])
            if grown is not None:
                grown[0].newline = newline_of(data)  # what another program added counts too
                return grown
        graph = cls()
        reusable = previous._reusable() if previous is not None else {}
        for line, digest in zip(raw, hashes):
            slot = reusable.pop(digest, None) if reusable else None
            graph._place(decode_record(line) if slot is None else previous.records[slot], line)  # type: ignore[union-attr, arg-type]
            graph.parsed_lines += slot is None
        graph.built_by = "parsed" if previous is None else "reread"
        sizes = array("q", [len(line) + 1 for line in raw])
        if raw and not ends_with_newline:
            sizes[-1] -= 1
        graph._layout = Layout(sizes, hashes)
        graph._ends_with_newline = ends_with_newline
        graph.newline = newline_of(data)
        graph.bom = 0 if data.startswith(BOM) else None
        if not ends_with_newline:  # a last line that kept its CR lacks only the LF of its CRLF
            graph._end = b"\n" if raw[-1].endswith(b"\r") else graph.newline
            graph._ended_hash = hash(raw[-1] + graph._end[:-1])
        graph._on_disk = len(graph.records)
        return graph, (graph._changes_from(previous) if previous is not None else None)

    def skipped_lines(self) -> list[SkippedLine]:
        """Unusable lines with their 1-based numbers in the file on disk."""
        if not self._unusable:
            return []
        numbers = list(itertools.accumulate(int(size > 0) for size in self._layout.sizes[: self._on_disk]))
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

    def names_like(self, missing: list[str], limit: int = 2) -> dict[str, list[str]]:
        """For each of `missing` (names the graph lacks), up to `limit` names it may mean: the same ignoring case
        and accents ("siobhan ni bhriain": "Siobhán Ní Bhriain"), then names containing it ignoring both. One pass
        over the graph's names, however many there are."""
        known = list(self.entities)
        folded = [_folded(name) for name in known]
        same: dict[str, list[str]] = {}
        for name, key in zip(known, folded, strict=True):
            same.setdefault(key, []).append(name)
        joined = JoinedText(folded)  # casefolded already, so its lower-casing changes nothing
        like: dict[str, list[str]] = {}
        for name in missing:
            needle = _folded(name)
            found = list(same.get(needle, ()))[:limit]
            if needle and JoinedText.GAP not in needle:
                containing = (known[n] for n in joined.holders(needle, limit + len(found)))
                found += [candidate for candidate in containing if candidate not in found][: limit - len(found)]
            like[name] = found
        return like

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
                    raise EntityNotFoundError(end, self.names_like([end])[end])
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
                raise EntityNotFoundError(name, self.names_like([name])[name])
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

    def delete_entities(self, names: Iterable[str]) -> list[str]:
        """Delete the named entities and their relations; returns the names the graph did not have."""
        missing = []
        for name in dict.fromkeys(names):
            entity = self.entities.pop(name, None)
            if entity is None:
                missing.append(name)
                continue
            self._remove_record(entity)
            for relation in list(self._relations_of.get(name, {}).values()):
                self._remove_relation(relation)
        return missing

    def delete_observations(self, deletions: Iterable[tuple[str, list[str]]]) -> list[tuple[str, list[str] | None]]:
        """Delete observations, matched exactly; returns what was not there: (name, the observations the entity
        does not have), or (name, None) for an entity the graph does not have."""
        missing: list[tuple[str, list[str] | None]] = []
        for name, observations in deletions:
            entity = self.entities.get(name)
            if entity is None:
                missing.append((name, None))
                continue
            doomed, had = set(observations), set(entity.observations)
            kept = [o for o in entity.observations if o not in doomed]
            absent = [o for o in dict.fromkeys(observations) if o not in had]
            if absent:
                missing.append((name, absent))
            if len(kept) != len(entity.observations):
                entity.observations = kept
                self._changed(entity)
        return missing

    def delete_relations(self, keys: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Delete relations by (from, to, relationType); returns the keys the graph did not have."""
        missing = []
        for key in dict.fromkeys(keys):
            relation = self.relations.get(key)
            if relation is None:
                missing.append(key)
            else:
                self._remove_relation(relation)
        return missing

    def plan(self) -> Plan:
        """The new content of the file, as ranges of the file on disk (unchanged lines, copied without being
        serialised again) and the bytes of new or changed lines. Call `written` once it is on disk."""
        self._move_bom()
        plan: Plan = []
        sizes = self._layout.sizes
        copied_to, at = 0, 0  # the slots before `copied_to` are planned; their lines end at byte `at`
        for slot in sorted(self._dirty):
            if slot > copied_to:
                end = at + sum(sizes[copied_to:slot]) if slot - copied_to < Layout.BLOCK else self._layout.offset(slot)
                plan.append((at, end))
                at = end
            record = self.records[slot]
            if record is not None:
                plan.append(self._bytes_at(slot))
            at += sizes[slot]
            copied_to = slot + 1
        if copied_to < self._on_disk:
            plan.append((at, self._layout.offset(self._on_disk)))
            if not self._ends_with_newline:
                plan.append(self._end)
        plan.extend(self._bytes_at(record.slot) for record in self.edits.appended)
        return plan

    def written(self) -> None:
        """The store has written the plan: the file on disk now holds every record as it is in memory."""
        for slot in self._dirty:
            record = self.records[slot]
            line = b"" if record is None else self._bytes_at(slot)
            self._layout.set(slot, len(line), hash(line[:-1]) if line else 0)
        last = self._on_disk - 1
        if self._on_disk and not self._ends_with_newline and last not in self._dirty:
            self._layout.set(last, self._layout.sizes[last] + len(self._end), self._ended_hash)
        for record in self.edits.appended:
            line = self._bytes_at(record.slot)
            self._layout.set(record.slot, len(line), hash(line[:-1]))
        self._on_disk = len(self.records)
        self._dirty.clear()
        self._ends_with_newline = True
        self.edits = Edits()

    # ---- internals -----------------------------------------------------------------------------------------

    def _move_bom(self) -> None:
        """When the line that starts with the file's byte-order mark changes or goes, the mark goes with the first
        line written in its place (written again, if unchanged): old Windows tools read a file without one as their
        ANSI code page, so the file keeps it as it was saved."""
        if self.bom is None or self.bom not in self._dirty:
            return
        self.bom = next((slot for slot in range(self.bom, len(self.records)) if self.records[slot] is not None), None)
        if self.bom is not None and self.bom < self._on_disk:
            self._dirty.add(self.bom)

    def _bytes_at(self, slot: int) -> bytes:
        line = _line_bytes(self.records[slot], self.newline)  # type: ignore[arg-type]
        return BOM + line if slot == self.bom else line

    def _place(self, record: Entity | Relation | UnusableLine, line: bytes, slot: int | None = None) -> None:
        """Put the record of `line`, a line of the file, at `slot` (default: a new slot at the end), as the file's
        rules say: the first line of a name wins, an identical second one is merged into it, a differing one is
        kept verbatim."""
        at = len(self.records) if slot is None else slot
        placed: Record = record
        if isinstance(record, UnusableLine):
            self._unusable += bool(record.reason)
        else:
            first = self.entities.get(record.name) if isinstance(record, Entity) else self.relations.get(record.key)
            if first is None:
                self._index(record, at)
            else:
                self._collided = True
                placed = self._second(record, first, at, line)
        if at == len(self.records):
            self.records.append(placed)
        else:
            self.records[at] = placed

    def _second(self, record: Entity | Relation, first: Entity | Relation, at: int, line: bytes) -> Record:
        """What becomes of a second line for a name already in the graph."""
        if isinstance(record, Entity) and isinstance(first, Entity) and _mergeable(first, record):
            # The official server stores a name twice when one batch names it twice. Same type, same fields:
            # merging the observations loses nothing, and the name stays unique. A new object, since the first
            # one may belong to the graph of the file's previous state too.
            known = set(first.observations)
            more = [o for o in dict.fromkeys(record.observations) if o not in known]
            merged = replace(first, observations=first.observations + more, text=None)
            self.entities[record.name] = merged
            self.records[first.slot] = merged
            self._dirty.update((first.slot, at))  # both lines change at the next rewrite
            return None
        if isinstance(record, Relation) and record.extra == first.extra:
            self._dirty.add(at)  # an exact copy: dropped at the next rewrite
            return None
        # A second version that differs: keep it, untouched, and say so.
        what = f"entity {echo(record.name)}" if isinstance(record, Entity) else "relation"
        self._shadowed.setdefault(identity(record), []).append(at)
        self._unusable += 1
        text = line.decode("utf-8", "surrogateescape")
        return UnusableLine(text, f"a second, different {what}; kept as it is, not loaded", first)

    def _clean(self) -> bool:
        """Whether this graph is exactly its file on disk: nothing changed in memory, nothing waiting to be merged."""
        return not self.edits and not self._dirty and self._on_disk == len(self.records)

    def _relations_for(self, name: str) -> dict[tuple[str, str, str], Relation]:
        """The relations touching `name`, in a dict this graph may change: a copy (`_copy`) shares these dicts with
        its original until it changes one (`_private` names those it made its own; None: all are its own)."""
        keys = self._relations_of.get(name)
        if keys is None:
            keys = self._relations_of[name] = {}
        elif self._private is not None and name not in self._private:
            keys = self._relations_of[name] = dict(keys)
        if self._private is not None:
            self._private.add(name)
        return keys

    def _index(self, record: Entity | Relation, slot: int) -> None:
        record.slot = slot
        if isinstance(record, Entity):
            self.entities[record.name] = record
        else:
            key = record.key
            self.relations[key] = record
            self._relations_for(record.source)[key] = record
            self._relations_for(record.target)[key] = record

    def _append(self, record: Entity | Relation) -> None:
        record.text = None
        self._index(record, len(self.records))
        self.records.append(record)
        self._layout.append(0, 0)
        self.edits.appended.append(record)
        self.edits.touch(record)

    def _changed(self, record: Entity | Relation) -> None:
        record.text = None
        self.edits.touch(record)
        if record.slot < self._on_disk:
            self._dirty.add(record.slot)
            self.edits.rewrite = True

    def _remove_record(self, record: Entity | Relation) -> None:
        # Its differing second versions go too: left in the file, the next reader would load one of them.
        for slot in self._shadowed.pop(identity(record), []):
            self.records[slot] = None
            self._dirty.add(slot)
            self._unusable -= 1
        self.records[record.slot] = None
        self.edits.touch(record)
        if record.slot < self._on_disk:
            self._dirty.add(record.slot)
            self.edits.rewrite = True
        else:
            self.edits.appended.remove(record)

    def _remove_relation(self, relation: Relation) -> None:
        del self.relations[relation.key]
        for end in (relation.source, relation.target):
            self._relations_for(end).pop(relation.key, None)
        self._remove_record(relation)


def _folded(name: str) -> str:
    """`name` casefolded and without its accents, as a person may type it."""
    return unaccented(name.casefold())


def _text_of(record: Entity | Relation | UnusableLine) -> str:
    if isinstance(record, UnusableLine):
        return record.text
    if record.text is None:
        record.text = encode_entity(record) if isinstance(record, Entity) else encode_relation(record)
    return record.text


def _mergeable(first: Entity, second: Entity) -> bool:
    return first.entity_type == second.entity_type and first.extra == second.extra


def _line_bytes(record: Entity | Relation | UnusableLine, newline: bytes) -> bytes:
    """A line as written: a record with the file's line ending, an unusable line verbatim (its text ends in the CR of
    a CRLF line)."""
    if isinstance(record, UnusableLine):
        return (record.text + "\n").encode("utf-8", "surrogateescape")
    return _text_of(record).encode("utf-8", "surrogateescape") + newline


def _slot(record: Entity | Relation) -> int:
    return record.slot
