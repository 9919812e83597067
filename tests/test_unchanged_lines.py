"""Property: after any sequence of tool calls, every line of the memory file that the calls did not change is still
there, byte for byte and in its place, whatever its formatting, its unknown fields, its numbers (1e999,
1.0000000000000000001), its line end (in a file of CRLF lines, every line written ends so too) or whether it could
be read at all. One long-lived server over stdio; each example starts
it on a new file (put in place by rename, dated a minute back, as a file at rest). Entities a call did change keep
their unknown fields byte for byte too."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_input import RawServer

NAMES = ["Ann", "Bo", "Cy", "Dee", "Eve"]
NEW_NAMES = ["Fay", "Gus"]
EXTRAS = [
    "",
    ',"createdAt":"2026-01-01"',
    ',"w":1e999',
    ',"p":1.0000000000000000001,"n":-0E+3',
    ',"big":' + "9" * 400,
    ',"meta":{"k": [1, 2.50, null, true]}',
    ',"note":"caf\\u00e9 \\ud83d\\ude00"',
]
JUNK = ["not json", "[1, 2]", '{"type":"other"}', "", '{"type":"entity","name":1}', '{"type":"entity","name":NaN}']


@st.composite
def memory_files(draw: st.DrawFn) -> tuple[list[str], bool, str]:
    """Lines of a memory file (entities, relations, unusable lines; names unique), whether it ends in a newline, and
    its line ending (CRLF: saved by a Windows tool)."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=5))
    lines = []
    for name in names:
        observations = json.dumps(draw(st.lists(st.sampled_from(["o1", "o2", "o3", "é"]), unique=True, max_size=3)))
        extra = draw(st.sampled_from(EXTRAS))
        spaced = draw(st.booleans())
        if spaced:
            lines.append(f'{{"type": "entity", "name": "{name}", "entityType": "t", "observations": {observations}{extra}}}')
        else:
            lines.append(f'{{"name":"{name}","type":"entity","entityType":"t","observations":{observations}{extra}}}')
    pairs = [(a, b) for a in names for b in names]
    for source, target in draw(st.lists(st.sampled_from(pairs), unique=True, max_size=4)) if pairs else []:
        extra = draw(st.sampled_from(EXTRAS))
        lines.append(f'{{"type":"relation","from":"{source}","to":"{target}","relationType":"r"{extra}}}')
    for junk in draw(st.lists(st.sampled_from(JUNK), max_size=3)):
        lines.insert(draw(st.integers(0, len(lines))), junk)
    return draw(st.permutations(lines)), draw(st.booleans()), draw(st.sampled_from(["\n", "\r\n"]))


names = st.sampled_from(NAMES + NEW_NAMES)
calls = st.one_of(
    st.tuples(st.just("create_entities"), st.lists(names, min_size=1, max_size=2)),
    st.tuples(st.just("create_relations"), st.lists(st.tuples(names, names), min_size=1, max_size=2)),
    st.tuples(st.just("add_observations"), names),
    st.tuples(st.just("delete_observations"), names),
    st.tuples(st.just("delete_entities"), st.lists(names, min_size=1, max_size=2)),
    st.tuples(st.just("delete_relations"), st.lists(st.tuples(names, names), min_size=1, max_size=2)),
    st.tuples(st.just("read_graph"), st.none()),
)


def arguments(tool: str, arg: Any) -> dict[str, Any]:
    if tool == "create_entities":
        return {"entities": [{"name": n, "entityType": "t", "observations": ["new"]} for n in arg]}
    if tool in ("create_relations", "delete_relations"):
        return {"relations": [{"from": a, "to": b, "relationType": "r"} for a, b in arg]}
    if tool == "add_observations":
        return {"observations": [{"entityName": arg, "contents": ["added"]}]}
    if tool == "delete_observations":
        return {"deletions": [{"entityName": arg, "observations": ["o1", "é"]}]}
    if tool == "delete_entities":
        return {"entityNames": arg}
    return {}


def touched_by(sequence: list[tuple[str, Any]]) -> tuple[set[str], set[tuple[str, str]], set[str]]:
    """Entities whose line a call may change, relations it may remove, and entities deleted (with their relations)."""
    entities: set[str] = set()
    relations: set[tuple[str, str]] = set()
    deleted: set[str] = set()
    for tool, arg in sequence:
        if tool in ("add_observations", "delete_observations"):
            entities.add(arg)
        elif tool == "delete_entities":
            deleted.update(arg)
        elif tool == "delete_relations":
            relations.update(arg)
    return entities | deleted, relations, deleted


def unchanged(line: str, entities: set[str], relations: set[tuple[str, str]], deleted: set[str]) -> bool:
    try:
        data = json.loads(line)
    except ValueError:
        return True
    if not isinstance(data, dict) or not isinstance(data.get("name", data.get("from")), str):
        return True
    if data.get("type") == "entity":
        return data["name"] not in entities
    if data.get("type") == "relation":
        return (data["from"], data["to"]) not in relations and not {data["from"], data["to"]} & deleted
    return True


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawServer]:
    raw = RawServer(tmp_path_factory.mktemp("unchanged-lines"))
    yield raw
    raw.close()


def put_in_place(path: Path, content: bytes) -> None:
    temp = path.with_name("incoming.tmp")
    temp.write_bytes(content)
    a_minute_ago = time.time() - 60
    os.utime(temp, (a_minute_ago, a_minute_ago))
    os.replace(temp, path)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(file=memory_files(), sequence=st.lists(calls, min_size=1, max_size=6))
def test_lines_no_call_changed_stay_byte_for_byte(server, file, sequence):
    lines, final_newline, newline = file
    content = newline.join(lines) + (newline if final_newline and lines else "")
    put_in_place(server.memory, content.encode())
    for tool, arg in sequence:
        answer = server.call_tool(tool, arguments(tool, arg))
        assert "result" in answer, answer
    data = server.memory.read_bytes()
    if "\r\n" in content:  # every line, kept, rewritten or new, ends in CRLF like the file's own
        assert data.count(b"\n") == data.count(b"\r\n"), data
    after = data.decode("utf-8").replace("\r\n", "\n").split("\n")
    kept = [line for line in lines if unchanged(line, *touched_by(sequence)) and line.strip()]
    position = 0
    for line in kept:  # each unchanged line is there, byte for byte, in the same order
        assert line in after[position:], (line, after)
        position = after.index(line, position) + 1
    final = {data["name"]: line for line in after if line and (data := _entity(line))}
    deleted = touched_by(sequence)[2]
    for line in lines:  # a changed entity keeps its unknown fields as they were written (1e999 stays 1e999)
        data = _entity(line)
        extra = next((e for e in EXTRAS[1:] if data and e in line), None)
        if extra and data["name"] in final and data["name"] not in deleted:
            assert extra in final[data["name"]], (line, final[data["name"]])


def _entity(line: str) -> dict[str, Any] | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    ok = isinstance(data, dict) and data.get("type") == "entity" and isinstance(data.get("name"), str)
    return data if ok else None
