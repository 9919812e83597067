"""One line of a memory file: the entity and relation records, and the JSONL codec, compatible line for line with
the official memory server (JavaScript's JSON.stringify on the way out).

Fields we do not know are kept with the record, and numbers keep the text they were written with, so a record
that changes is written back with everything it had (1e999 stays 1e999, not Infinity).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

BOM = "\ufeff".encode()  # the byte-order mark Windows tools start a UTF-8 file with
ENTITY_KEYS = ("type", "name", "entityType", "observations")
RELATION_KEYS = ("type", "from", "to", "relationType")


@dataclass(eq=False, slots=True)
class Entity:
    name: str
    entity_type: str
    observations: list[str]
    extra: dict[str, Any] = field(default_factory=dict)  # fields we do not know, parsed (numbers keep their text)
    text: str | None = None  # the line this was read from; None when new or changed since
    slot: int = -1  # position in KnowledgeGraph.records
    read_extra: dict[str, tuple[Any, str]] = field(default_factory=dict)  # extra value as read -> its JSON text

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "entityType": self.entity_type, "observations": list(self.observations)}


@dataclass(eq=False, slots=True)
class Relation:
    source: str
    target: str
    relation_type: str
    extra: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    slot: int = -1
    read_extra: dict[str, tuple[Any, str]] = field(default_factory=dict)

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


def decode_record(line: bytes) -> Entity | Relation | UnusableLine:
    """The record a line of the file holds, or the line kept verbatim with the reason it cannot be used."""
    text = line.decode("utf-8", "surrogateescape")
    body = _without_bom(text)
    if not body.strip():  # a BOM alone too: Notepad saves an empty file so
        return UnusableLine(text, None)
    parsed = parse_or_problem(body)
    try:
        if isinstance(parsed, ValueError):
            raise parsed
        return record_of(parsed, body)
    except ValueError as problem:
        return UnusableLine(text, str(problem))


def identity(record: Entity | Relation) -> tuple[Any, ...]:
    return ("entity", record.name) if isinstance(record, Entity) else ("relation", *record.key)


def decode_line(line: str) -> Entity | Relation:
    """Parse one line; raise ValueError with a short reason if it is not an entity or a relation."""
    line = _without_bom(line)
    return record_of(_parse_json(line), line)


def parse_or_problem(line: str) -> Any:
    """The JSON object on a line that is not blank, or a ValueError saying why there is none (a line holding
    `null`, a number, a string or an array is kept as an unusable line, never taken for a blank one)."""
    try:
        value = _parse_json(line)
    except ValueError as problem:
        return problem
    return value if isinstance(value, dict) else ValueError("not a JSON object")


def newline_of(data: bytes) -> bytes:
    """The line ending a file holding `data` is written with: CRLF when most of its lines end so (a file saved by a
    Windows tool), else LF, as the official server writes (an empty file too)."""
    # Most lines, not the first: a file earlier versions of ours left mixed keeps its ending whatever line they rewrote.
    return b"\r\n" if 2 * data.count(b"\r\n") > data.count(b"\n") else b"\n"


def _without_bom(line: str) -> str:
    # Windows tools (Notepad before 2019, PowerShell 5's `Set-Content -Encoding UTF8`) start a file they save with
    # a byte-order mark, which no editor shows: the first record was skipped and "fix the line" could not be done.
    # The record is read; its bytes stay in the file as they are until a tool changes it.
    return line[1:] if line.startswith("\ufeff") else line


def _parse_json(line: str) -> Any:
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
        if _CONFLICT_MARKER.match(body):
            raise ValueError(CONFLICT_MARKER) from None
        raise ValueError(f"not valid JSON ({problem.msg} at column {problem.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def record_of(data: Any, line: str) -> Entity | Relation:
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
        if len(data) == 4:
            return Entity(name, entity_type, observations)
        extra = {k: v for k, v in data.items() if k not in ENTITY_KEYS}
        return Entity(name, entity_type, observations, extra, read_extra=_value_texts(line, data, ENTITY_KEYS))
    if kind == "relation":
        source, target, relation_type = data.get("from"), data.get("to"), data.get("relationType")
        if not (isinstance(source, str) and isinstance(target, str) and isinstance(relation_type, str)):
            _require_str(data, "from", "to", "relationType")
        if len(data) == 4:
            return Relation(source, target, relation_type)
        extra = {k: v for k, v in data.items() if k not in RELATION_KEYS}
        return Relation(source, target, relation_type, extra, read_extra=_value_texts(line, data, RELATION_KEYS))
    raise ValueError(f"unknown type {kind!r} (expected 'entity' or 'relation')")


def encode_entity(entity: Entity) -> str:
    known = {
        "type": "entity",
        "name": entity.name,
        "entityType": entity.entity_type,
        "observations": entity.observations,
    }
    return _with_extra(json_line(known), entity)


def encode_relation(relation: Relation) -> str:
    known = {"type": "relation", "from": relation.source, "to": relation.target, "relationType": relation.relation_type}
    return _with_extra(json_line(known), relation)


def encode_item(record: Entity | Relation) -> str:
    """The record as read_graph lists it (no "type"), with its unknown fields as they were written."""
    return _with_extra(json_line(record.to_dict()), record)


def _with_extra(text: str, record: Entity | Relation) -> str:
    """The fields we do not know go back as they were written: a value still the one read keeps its text, and any
    other keeps its numbers' text (re-encoding 1e999 would give Infinity, which is not JSON)."""
    if not record.extra:
        return text
    members = []
    for key, value in record.extra.items():
        read = record.read_extra.get(key)
        members.append(f",{json_line(key)}:{read[1] if read is not None and read[0] is value else _json(value)}")
    return text[:-1] + "".join(members) + "}"


def _json(value: Any) -> str:
    if isinstance(value, (_Written, _BigInt)):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json_line(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_json(v) for v in value) + "]"
    return json_line(value)


def _value_texts(line: str, data: dict[str, Any], known: tuple[str, ...]) -> dict[str, tuple[Any, str]]:
    """For each member of the JSON object on `line` (already parsed into `data`, so valid) whose key is not
    `known`: its parsed value and the text it was written with."""
    index = _WHITESPACE.match(line, 0).end() + 1  # past "{"
    texts: dict[str, tuple[Any, str]] = {}
    while True:
        index = _WHITESPACE.match(line, index).end()
        if line[index] == "}":
            return texts
        key, index = scanstring(line, index + 1)
        start = _WHITESPACE.match(line, _WHITESPACE.match(line, index).end() + 1).end()  # past ":"
        _, index = _DECODER.scan_once(line, start)
        if key not in known:
            texts[key] = (data[key], line[start:index])
        index = _WHITESPACE.match(line, index).end()
        index += line[index] == ","


_WHITESPACE = re.compile(r"[ \t\n\r]*")


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
CONFLICT_MARKER = "a git conflict marker"  # the reason given for a line git's line merge left in the file
_CONFLICT_MARKER = re.compile(r"(<{7}|={7}|>{7}|\|{7})( |$)")


def json_line(data: Any) -> str:
    # Like JavaScript's JSON.stringify: compact, non-ASCII as is, lone surrogates escaped (UTF-8 cannot hold them).
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if not text.isascii():
        text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def _require_str(data: dict[str, Any], *keys: str) -> None:
    for key in keys:
        if not isinstance(data.get(key), str):
            problem = "is missing" if key not in data else "is not a string"
            raise ValueError(f"{data['type']} field '{key}' {problem}")


def _reject_constant(name: str) -> None:
    raise ValueError(f"not valid JSON ({name} is not allowed)")


# Numbers keep the text they were written with, so a rewrite gives back 1e999 (not Infinity), 1.0000000000000000001
# (not 1.0) and a 5,000-digit integer (which int() refuses). They still compare as the numbers they are.


class _Written:
    """A number with the text it was written with: mixed into float and int below."""

    text: str

    def __new__(cls, text: str) -> Self:
        number = super().__new__(cls, text)  # type: ignore[call-arg]  # float's or int's
        number.text = text
        return number


class _Float(_Written, float):
    pass


class _Int(_Written, int):
    pass


class _BigInt:
    """An integer too long for int(): kept as its text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BigInt) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _parse_int(text: str) -> _Int | _BigInt:
    try:
        return _Int(text)
    except ValueError:
        return _BigInt(text)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_Float, parse_int=_parse_int)
