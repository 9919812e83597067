"""Memory in other programs' shapes: export as JSONL, JSON, GraphML or Markdown; import the files of the official
memory server and of mcp-knowledge-graph, merging them into a graph without losing anything.

Files we read:
- the official server's JSONL (`memory.jsonl`, and the same lines under its old name `memory.json`): one
  `{"type":"entity",...}` or `{"type":"relation",...}` object per line;
- a JSON document `{"entities": [...], "relations": [...]}`: a saved `read_graph` result, or our `export --format json`;
- an mcp-knowledge-graph store (`.aim/memory.jsonl`, `.aim/memory-<name>.jsonl`): the same lines after a first
  line `{"type":"_aim","source":"mcp-knowledge-graph"}`, without a final newline.
"""

from __future__ import annotations

import json
import os
import re
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_server.errors import MemoryServerError
from memory_server.files import kind_of
from memory_server.graph import Entity, KnowledgeGraph, Relation, decode_line, encode_entity, encode_relation
from memory_server.jsonl import encode_item
from memory_server.present import totals_text
from memory_server.stats import totals

FORMATS = ("jsonl", "json", "graphml", "markdown")
SOURCES = ("official", "aim")
AIM_MARKER = {"type": "_aim", "source": "mcp-knowledge-graph"}
GRAPHML = "http://graphml.graphdrawing.org/xmlns"
XSI = "http://www.w3.org/2001/XMLSchema-instance"


class ImportFileError(MemoryServerError, ValueError):
    """A file to import that is not what it was said to be, or not a file at all. Nothing was written."""


# ---- export ----------------------------------------------------------------------------------------------------


def export(graph: KnowledgeGraph, form: str, title: str = "Memory") -> str:
    """The graph's entities and relations in `form` (one of FORMATS). Unusable lines of the file are not exported."""
    if form == "jsonl":
        lines = [encode_entity(e) for e in graph.entities.values()]
        lines += [encode_relation(r) for r in graph.relations.values()]
        return "".join(line + "\n" for line in lines)
    if form == "json":
        return _escape_surrogates(as_document(graph)) + "\n"
    if form == "graphml":
        return graphml(graph)
    if form == "markdown":
        return markdown(graph, title)
    raise ValueError(f"unknown export format {form!r}; use one of {', '.join(FORMATS)}")


def as_document(graph: KnowledgeGraph) -> str:
    """`{"entities": [...], "relations": [...]}` as read_graph returns it (plus any extra fields), one item a line."""
    entities = [encode_item(e) for e in graph.entities.values()]
    relations = [encode_item(r) for r in graph.relations.values()]
    return '{"entities": [\n' + ",\n".join(entities) + '\n],\n"relations": [\n' + ",\n".join(relations) + "\n]}"


def graphml(graph: KnowledgeGraph) -> str:
    """GraphML that Gephi, yEd, Cytoscape and networkx read: nodes keyed by entity name, with the type and the
    observations (a JSON array, so none is merged with another); directed edges carry the relation type. A relation
    to a missing entity is left out (GraphML edges must join declared nodes)."""
    ET.register_namespace("", GRAPHML)
    ET.register_namespace("xsi", XSI)
    root = ET.Element(f"{{{GRAPHML}}}graphml", {f"{{{XSI}}}schemaLocation": f"{GRAPHML} {GRAPHML}/1.0/graphml.xsd"})
    keys = [("name", "node"), ("entityType", "node"), ("observations", "node"), ("relationType", "edge")]
    for key, owner in keys:
        ET.SubElement(root, f"{{{GRAPHML}}}key", id=key, attrib={"for": owner, "attr.name": key, "attr.type": "string"})
    body = ET.SubElement(root, f"{{{GRAPHML}}}graph", id="memory", edgedefault="directed")
    for entity in graph.entities.values():
        node = ET.SubElement(body, f"{{{GRAPHML}}}node", id=_xml_text(entity.name))
        _data(node, "name", entity.name)
        _data(node, "entityType", entity.entity_type)
        _data(node, "observations", json.dumps(entity.observations, ensure_ascii=False))
    for number, relation in enumerate(r for r in graph.relations.values() if _joined(graph, r)):
        edge = ET.SubElement(
            body,
            f"{{{GRAPHML}}}edge",
            id=f"e{number}",
            source=_xml_text(relation.source),
            target=_xml_text(relation.target),
        )
        _data(edge, "relationType", relation.relation_type)
    ET.indent(root, space=" ")
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def markdown(graph: KnowledgeGraph, title: str) -> str:
    """A document a person reads: one section per entity type (the most common first), entities by name, each
    with its observations and its relations both ways."""
    entities = list(graph.entities.values())
    lines = [f"# {_md(title)}", "", f"{totals_text(totals(graph))}."]
    by_type: dict[str, list[Entity]] = {}
    for entity in entities:
        by_type.setdefault(entity.entity_type, []).append(entity)
    for entity_type, members in sorted(by_type.items(), key=lambda item: (-len(item[1]), item[0])):
        lines += ["", f"## {_md(entity_type) or '(no type)'} ({len(members)})"]
        for entity in sorted(members, key=lambda e: e.name.lower()):
            lines += ["", f"### {_md(entity.name)}", ""]
            lines += [f"- {_md(o)}".replace("\n", "\n  ") for o in entity.observations] or ["*(no observations)*"]
            related = graph.relations_touching([entity.name])
            if related:
                lines += ["", "Relations:", ""]
                lines += [_relation_line(r, entity.name) for r in related]
    return "\n".join(lines) + "\n"


# ---- import ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    where: str  # "line 3", or "entities[2]" in a JSON document
    reason: str


@dataclass
class Source:
    """What a file to import holds: its records in order, and what could not be read."""

    path: Path
    kind: str  # how it was read, for people: "official JSONL", "JSON document", "mcp-knowledge-graph store"
    records: list[Entity | Relation] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def read_source(path: Path, declared: str | None = None) -> Source:
    """Read a file to import; `declared` ('official' or 'aim', None to tell from the first line) must match it."""
    if path.is_dir():
        raise ImportFileError(_folder_advice(path))
    text = _without_bom(read_input(path, "import").decode("utf-8", "surrogateescape"))
    document = _json_document(text)
    if document is not None:
        if declared == "aim":
            raise ImportFileError(f"{path} is a JSON document, not an mcp-knowledge-graph store; use --from official.")
        return _from_document(path, document)
    lines = text.split("\n")
    first = next((number for number, line in enumerate(lines) if line.strip()), None)
    aim = first is not None and _is_aim_marker(lines[first])
    if declared == "aim" and not aim:
        raise ImportFileError(
            f"{path} does not start with the line {json.dumps(AIM_MARKER)}, so it is not an mcp-knowledge-graph "
            "store; use --from official for a file of the official memory server."
        )
    if declared == "official" and aim:
        raise ImportFileError(
            f"{path} starts with the mcp-knowledge-graph marker line; use --from aim (or leave --from out)."
        )
    source = Source(path, "mcp-knowledge-graph store" if aim else "official JSONL")
    marker = first + 1 if aim and first is not None else 0  # its line number, 0 for none
    for number, line in enumerate(lines, start=1):
        if number == marker or not line.strip():
            continue
        try:
            source.records.append(decode_line(line))
        except ValueError as problem:
            source.problems.append(Problem(f"line {number}", str(problem)))
    return source


def read_input(path: Path, command: str) -> bytes:
    """The content of the regular file `path`. A named pipe, a device or a socket is refused before any read: a
    pipe with no writer would wait forever, /dev/zero would never end."""
    try:  # O_NONBLOCK: opening a named pipe must not wait for a writer; it changes nothing for a file
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as problem:
        raise ImportFileError(f"Cannot read {path}: {problem.strerror or problem}. Nothing was {command}ed.") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ImportFileError(f"{path} is a folder; give the memory file to {command}.")
        if not stat.S_ISREG(mode):
            raise ImportFileError(
                f"{path} is {kind_of(mode)}, not a file: {command} reads regular files only. "
                f"Save its content to a file first, then {command} that file."
            )
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read()
    except OSError as problem:
        raise ImportFileError(f"Cannot read {path}: {problem.strerror or problem}.") from None
    finally:
        os.close(fd)


@dataclass
class ImportPlan:
    """What merging a file into a graph changes. Entities already there keep their type; a file that gives
    another one is reported in `conflicts` and its observations are still merged."""

    new_entities: dict[str, Entity] = field(default_factory=dict)
    new_observations: dict[str, list[str]] = field(default_factory=dict)  # for entities already in the graph
    new_relations: dict[tuple[str, str, str], Relation] = field(default_factory=dict)
    already_there: int = 0  # records of the file that add nothing
    conflicts: list[str] = field(default_factory=list)
    dangling: int = 0  # new relations naming an entity that neither the graph nor the file has

    @property
    def changes(self) -> bool:
        return bool(self.new_entities or self.new_observations or self.new_relations)

    def summary(self) -> dict[str, Any]:
        return {
            "entitiesAdded": len(self.new_entities),
            "observationsOfNewEntities": sum(len(e.observations) for e in self.new_entities.values()),
            "observationsAdded": sum(len(o) for o in self.new_observations.values()),
            "entitiesExtended": len(self.new_observations),
            "relationsAdded": len(self.new_relations),
            "alreadyThere": self.already_there,
            "conflicts": self.conflicts,
            "danglingRelations": self.dangling,
        }


def plan_import(graph: KnowledgeGraph, records: Iterable[Entity | Relation]) -> ImportPlan:
    """What merging `records` into `graph` would change; the graph is not touched."""
    plan = ImportPlan()
    seen: dict[str, set[str]] = {}  # observations each entity has, or will have, by name
    for record in records:
        if isinstance(record, Relation):
            key = record.key
            if key in graph.relations or key in plan.new_relations:
                plan.already_there += 1
            else:
                plan.new_relations[key] = Relation(*key, dict(record.extra))
            continue
        name = record.name
        existing = graph.entities.get(name) or plan.new_entities.get(name)
        if existing is None:
            new = Entity(name, record.entity_type, list(dict.fromkeys(record.observations)), dict(record.extra))
            plan.new_entities[name] = new
            seen[name] = set(new.observations)
            continue
        known = seen.setdefault(name, set(existing.observations))
        fresh = [o for o in dict.fromkeys(record.observations) if o not in known]
        known.update(fresh)
        if name in plan.new_entities:
            existing.observations.extend(fresh)
        elif fresh:
            plan.new_observations.setdefault(name, []).extend(fresh)
        if existing.entity_type != record.entity_type or (record.extra and record.extra != existing.extra):
            what = "type" if existing.entity_type != record.entity_type else "extra fields"
            plan.conflicts.append(
                f"{name!r}: the file gives {what} {_shown(record, what)}, the memory keeps {_shown(existing, what)}"
            )
        elif not fresh:
            plan.already_there += 1
    names = graph.entities.keys() | plan.new_entities.keys()
    plan.dangling = sum(1 for r in plan.new_relations.values() if r.source not in names or r.target not in names)
    return plan


def apply_import(graph: KnowledgeGraph, records: list[Entity | Relation]) -> ImportPlan:
    """Merge `records` into `graph` (inside GraphStore.mutate, so under the lock and on the file as it is now)."""
    plan = plan_import(graph, records)
    graph.create_entities(plan.new_entities.values())
    graph.add_observations(plan.new_observations.items())
    # Relations naming an entity that is nowhere are kept, as the file had them: nothing is lost.
    graph.create_relations(plan.new_relations.values(), require_ends=False)
    return plan


# ---- internals ---------------------------------------------------------------------------------------------------


def foreign_kind(text: str) -> str | None:
    """What a file that is not a memory file is, when `import` can read it: for `check` to say so."""
    text = _without_bom(text)
    if _json_document(text) is not None:
        return "a JSON document of entities and relations"
    first = next((line for line in text.split("\n", 5) if line.strip()), "")
    return "an mcp-knowledge-graph store" if _is_aim_marker(first) else None


def _json_document(text: str) -> dict[str, Any] | None:
    """The content as a `{"entities": [...], "relations": [...]}` document, or None when it is something else."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:  # JSONL stops at the end of its first line, cheaply
        return None
    if isinstance(data, dict) and ("entities" in data or "relations" in data) and "type" not in data:
        return data
    return None


def _from_document(path: Path, document: dict[str, Any]) -> Source:
    source = Source(path, "JSON document")
    for key, kind in (("entities", "entity"), ("relations", "relation")):
        items = document.get(key, [])
        if not isinstance(items, list):
            source.problems.append(Problem(key, "is not a list"))
            continue
        for number, item in enumerate(items):
            try:
                if not isinstance(item, dict):
                    raise ValueError("not a JSON object")
                source.records.append(decode_line(json.dumps({**item, "type": kind})))
            except ValueError as problem:
                source.problems.append(Problem(f"{key}[{number}]", str(problem)))
    return source


def _without_bom(text: str) -> str:
    # Windows tools (PowerShell 5's `Set-Content -Encoding UTF8`, Notepad before 2019) start a file with a
    # byte-order mark, which json.loads refuses: a JSON document or a store's marker line would not be recognised.
    return text.removeprefix("\ufeff")


def _is_aim_marker(line: str) -> bool:
    try:
        data = json.loads(line)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("type") == AIM_MARKER["type"]


def _folder_advice(path: Path) -> str:
    stores = sorted(p.name for p in path.glob("memory*.jsonl"))
    if not stores:
        return f"{path} is a folder; give the memory file to import."
    example = stores[0]
    context = example.removeprefix("memory-").removesuffix(".jsonl") if example != "memory.jsonl" else "NAME"
    return (
        f"{path} is a folder holding {', '.join(stores)}. Import them one at a time, each into the context you "
        f"choose, e.g. `import {path / example} --context {context}`."
    )


def _joined(graph: KnowledgeGraph, relation: Relation) -> bool:
    return relation.source in graph.entities and relation.target in graph.entities


def _data(parent: ET.Element, key: str, value: str) -> None:
    ET.SubElement(parent, f"{{{GRAPHML}}}data", key=key).text = _xml_text(value)


# XML 1.0 cannot hold these characters at all (not even as references): control characters, lone surrogates...
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _escape_surrogates(text: str) -> str:
    # Lone surrogates (JSON allows them, UTF-8 does not) only occur inside JSON strings, where \\uXXXX means them.
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if not text.isascii() else text


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|])")


def _md(text: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", text)


def _relation_line(relation: Relation, name: str) -> str:
    if relation.source == name:
        return f"- → *{_md(relation.relation_type)}* → {_md(relation.target)}"
    return f"- ← *{_md(relation.relation_type)}* ← {_md(relation.source)}"


def _shown(record: Entity, what: str) -> str:
    return repr(record.entity_type) if what == "type" else json.dumps(record.extra, ensure_ascii=False)
