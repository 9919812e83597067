"""The knowledge graph and its JSONL file format, compatible line for line with the official memory server.

A file is a list of lines. Each line is an entity, a relation, or a line we cannot use (bad JSON, an unknown
`type`, a missing field...). Unusable lines are kept verbatim in their place, so a rewrite never loses them, and
unchanged records are written back with their original text, so a rewrite only re-serialises what changed.

Mutations validate first and change the graph only once nothing can fail; they record what the store must do
to persist them (append lines, or rewrite the file) in `graph.edits`.
"""

from __future__ import annotations

import itertools
import json
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from json.decoder import scanstring
from typing import Any

import numpy as np

from memory_server.errors import EntityNotFoundError

ENTITY_KEYS = ("type", "name", "entityType", "observations")
RELATION_KEYS = ("type", "from", "to", "relationType")


@dataclass(eq=False, slots=True)
class Entity:
    name: str
    entity_type: str
    observations: list[str]
    extra: dict[str, str] = field(default_factory=dict)  # fields we do not know: name -> the value's JSON text
    text: str | None = None  # the line this was read from; None when new or changed since
    slot: int = -1  # position in KnowledgeGraph.records

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "entityType": self.entity_type, "observations": list(self.observations)}


@dataclass(eq=False, slots=True)
class Relation:
    source: str
    target: str
    relation_type: str
    extra: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    slot: int = -1

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.source, self.target, self.relation_type)

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "relationType": self.relation_type}


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
            graph._load_line(text, _parse_or_problem(text) if text.strip() else None)
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

    def create_relations(self, relations: Iterable[Relation]) -> list[Relation]:
        relations = list(relations)
        for relation in relations:
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
            record = _record(parsed, line)
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
            what = f"entity {record.name!r}" if isinstance(record, Entity) else "relation"
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


# ---- the line codec ----------------------------------------------------------------------------------------


def decode_line(line: str) -> Entity | Relation:
    """Parse one line; raise ValueError with a short reason if it is not an entity or a relation."""
    return _record(_parse_json(line), line)


def _parse_or_problem(line: str) -> Any:
    try:
        return _parse_json(line)
    except ValueError as problem:
        return problem


def _parse_json(line: str) -> Any:
    if line.startswith("\ufeff"):
        raise ValueError("starts with a byte-order mark")
    if not line.isascii() and _LONE_SURROGATE.search(line):
        raise ValueError("not valid UTF-8")  # the file's bytes, decoded with surrogateescape
    body = line.strip(" \t\r\n")
    try:
        value, end = _DECODER.scan_once(body, 0)  # the C scanner, without decode()'s regex passes
        if end == len(body):
            return value
    except (StopIteration, ValueError):
        pass  # decode() below says what is wrong
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    try:
        return _DECODER.decode(line)
    except json.JSONDecodeError as problem:
        raise ValueError(f"not valid JSON ({problem.msg} at column {problem.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _record(data: Any, line: str) -> Entity | Relation:
    """The entity or relation a parsed line holds; ValueError with a short reason if it holds neither."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    kind = data.get("type")
    if kind == "entity":
        name, entity_type, observations = data.get("name"), data.get("entityType"), data.get("observations")
        if not (isinstance(name, str) and isinstance(entity_type, str)):
            _require_str(data, "name", "entityType")
        if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
            problem = "is missing" if "observations" not in data else "is not a list of strings"
            raise ValueError(f"entity field 'observations' {problem}")
        extra = _raw_members(line, ENTITY_KEYS) if len(data) > 4 else {}
        return Entity(name, entity_type, observations, extra)
    if kind == "relation":
        source, target, relation_type = data.get("from"), data.get("to"), data.get("relationType")
        if not (isinstance(source, str) and isinstance(target, str) and isinstance(relation_type, str)):
            _require_str(data, "from", "to", "relationType")
        extra = _raw_members(line, RELATION_KEYS) if len(data) > 4 else {}
        return Relation(source, target, relation_type, extra)
    raise ValueError(f"unknown type {kind!r} (expected 'entity' or 'relation')")


def encode_entity(entity: Entity) -> str:
    known = {"type": "entity", "name": entity.name, "entityType": entity.entity_type, "observations": entity.observations}
    return _with_extra(json_line(known), entity.extra)


def encode_relation(relation: Relation) -> str:
    known = {"type": "relation", "from": relation.source, "to": relation.target, "relationType": relation.relation_type}
    return _with_extra(json_line(known), relation.extra)


def _with_extra(text: str, extra: dict[str, str]) -> str:
    """The fields we do not know go back as they were written: re-encoding their values would turn 1e999 into
    Infinity (not JSON) and round 1.0000000000000000001."""
    if not extra:
        return text
    return text[:-1] + "".join(f",{json_line(key)}:{raw}" for key, raw in extra.items()) + "}"


def _raw_members(line: str, known: tuple[str, ...]) -> dict[str, str]:
    """The members of the JSON object on `line` (already parsed, so valid) whose keys are not `known`, each mapped
    to its value's original text."""
    index = _WHITESPACE.match(line, 0).end() + 1  # past "{"
    members: dict[str, str] = {}
    while True:
        index = _WHITESPACE.match(line, index).end()
        if line[index] == "}":
            return members
        key, index = scanstring(line, index + 1)
        start = _WHITESPACE.match(line, _WHITESPACE.match(line, index).end() + 1).end()  # past ":"
        _, index = _DECODER.scan_once(line, start)
        if key not in known:
            members[key] = line[start:index]
        index = _WHITESPACE.match(line, index).end()
        index += line[index] == ","


_WHITESPACE = re.compile(r"[ \t\n\r]*")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def json_line(data: Any) -> str:
    # Like JavaScript's JSON.stringify: compact, non-ASCII as is, lone surrogates escaped (UTF-8 cannot hold them).
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if not text.isascii():
        text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


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


def _require_str(data: dict[str, Any], *keys: str) -> None:
    for key in keys:
        if not isinstance(data.get(key), str):
            problem = "is missing" if key not in data else "is not a string"
            raise ValueError(f"{data['type']} field '{key}' {problem}")


def _reject_constant(name: str) -> None:
    raise ValueError(f"not valid JSON ({name} is not allowed)")


class _Number:
    """A number in a line: never converted, so 1e999 or a 5,000-digit integer cannot fail or change (the line's
    known fields hold no numbers; the unknown ones are kept as text)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_Number, parse_int=_Number)


def _slot(record: Entity | Relation) -> int:
    return record.slot
