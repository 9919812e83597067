"""Export formats and the import of other programs' files, on graphs and files made here."""

from __future__ import annotations

import json
import os
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.interchange import (
    GRAPHML,
    ImportFileError,
    apply_import,
    export,
    foreign_kind,
    plan_import,
    read_input,
    read_source,
)


def graph_of(*records: Entity | Relation) -> KnowledgeGraph:
    graph = KnowledgeGraph()
    graph.create_entities(r for r in records if isinstance(r, Entity))
    graph.create_relations((r for r in records if isinstance(r, Relation)), require_ends=False)
    return graph


def test_plan_merges_observations_keeps_types_and_counts_what_is_there():
    graph = graph_of(Entity("Ann", "person", ["a", "b"]), Entity("Bob", "person", []), Relation("Ann", "Bob", "knows"))
    plan = plan_import(
        graph,
        [
            Entity("Ann", "person", ["b", "c", "c"]),
            Entity("Ann", "human", ["d"]),
            Entity("Cy", "cat", ["e"]),
            Entity("Cy", "cat", ["e", "f"]),
            Relation("Ann", "Bob", "knows"),
            Relation("Cy", "Ann", "likes"),
            Relation("Cy", "Ghost", "fears"),
        ],
    )
    assert plan.new_observations == {"Ann": ["c", "d"]}
    assert plan.new_entities["Cy"].observations == ["e", "f"]
    assert list(plan.new_relations) == [("Cy", "Ann", "likes"), ("Cy", "Ghost", "fears")]
    assert plan.already_there == 1 and plan.dangling == 1
    assert plan.conflicts == ["'Ann': the file gives type 'human', the memory keeps 'person'"]
    assert graph.entities["Ann"].observations == ["a", "b"]  # planning touches nothing


def test_apply_keeps_every_record_and_a_second_import_adds_nothing():
    graph = graph_of(Entity("Ann", "person", ["a"]))
    records = [Entity("Ann", "person", ["b"]), Entity("Bo", "t", ["x"], {"source": "aim"}), Relation("Bo", "Zed", "r")]
    apply_import(graph, records)
    assert graph.entities["Ann"].observations == ["a", "b"]
    assert graph.entities["Bo"].extra == {"source": "aim"}
    assert ("Bo", "Zed", "r") in graph.relations
    assert not plan_import(graph, records).changes


def test_read_source_tells_the_three_shapes_apart(tmp_path: Path):
    official = tmp_path / "memory.json"
    official.write_text('{"type":"entity","name":"A","entityType":"t","observations":[]}\n', encoding="utf-8")
    aim = tmp_path / "memory-work.jsonl"
    aim.write_text('{"type":"_aim","source":"mcp-knowledge-graph"}\n{"type":"relation","from":"A","to":"B",'
                   '"relationType":"r"}', encoding="utf-8")  # fmt: skip
    document = tmp_path / "graph.json"
    document.write_text(json.dumps({"entities": [{"name": "A", "entityType": "t", "observations": ["o"]}]}, indent=1))
    assert read_source(official).kind == "official JSONL"
    assert read_source(aim).kind == "mcp-knowledge-graph store" and len(read_source(aim).records) == 1
    assert read_source(document).kind == "JSON document"
    assert read_source(document).records[0].observations == ["o"]
    with pytest.raises(ImportFileError, match="use --from aim"):
        read_source(aim, "official")
    with pytest.raises(ImportFileError, match="not an mcp-knowledge-graph store"):
        read_source(official, "aim")
    with pytest.raises(ImportFileError, match="Cannot read"):
        read_source(tmp_path / "missing.jsonl")


def test_read_source_reads_files_saved_on_windows_with_a_byte_order_mark_and_crlf(tmp_path: Path):
    """PowerShell 5 (`ConvertTo-Json | Set-Content -Encoding UTF8`) and Notepad before 2019 start a file with a
    byte-order mark and end its lines in CRLF: a JSON document, or a store whose first line is the marker, is still
    read as what it is (and `check` names it), like a memory file saved so."""
    document = tmp_path / "graph.json"
    text = json.dumps({"entities": [{"name": "A", "entityType": "t", "observations": ["o"]}], "relations": []}, indent=2)
    document.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    source = read_source(document)
    assert (source.kind, [e.name for e in source.records], source.problems) == ("JSON document", ["A"], [])
    aim = tmp_path / "memory-work.jsonl"
    aim.write_bytes(b'\xef\xbb\xbf{"type":"_aim","source":"mcp-knowledge-graph"}\r\n'
                    b'{"type":"entity","name":"B","entityType":"t","observations":[]}\r\n')  # fmt: skip
    source = read_source(aim, "aim")
    assert (source.kind, [e.name for e in source.records], source.problems) == ("mcp-knowledge-graph store", ["B"], [])
    assert foreign_kind(document.read_bytes().decode()) == "a JSON document of entities and relations"
    assert foreign_kind(aim.read_bytes().decode()) == "an mcp-knowledge-graph store"


def test_read_source_reports_bad_items_where_they_are(tmp_path: Path):
    lines = tmp_path / "bad.jsonl"
    lines.write_bytes(b'{"type":"entity","name":"A","entityType":"t","observations":[]}\n\n{oops\n{"type":"x"}\n')
    assert [(p.where, p.reason.split(" (")[0]) for p in read_source(lines).problems] == [
        ("line 3", "not valid JSON"),
        ("line 4", "unknown type 'x'"),
    ]
    document = tmp_path / "bad.json"
    document.write_text(json.dumps({"entities": [{"name": "A"}, 3], "relations": {}}))
    assert [p.where for p in read_source(document).problems] == ["entities[0]", "entities[1]", "relations"]


def test_read_source_refuses_a_named_pipe_without_waiting_for_a_writer(tmp_path: Path):
    pipe = tmp_path / "memory.jsonl"
    os.mkfifo(pipe)
    outcome: list[BaseException | object] = []

    def attempt() -> None:
        try:
            outcome.append(read_source(pipe))
        except BaseException as problem:  # noqa: BLE001 - handed to the test's thread
            outcome.append(problem)

    reader = threading.Thread(target=attempt, daemon=True)  # a hang fails the test instead of stopping it
    reader.start()
    reader.join(timeout=30)
    assert outcome, "read_source waited on a pipe no program writes to"
    assert isinstance(outcome[0], ImportFileError) and "is a named pipe (FIFO), not a file" in str(outcome[0])
    with pytest.raises(ImportFileError, match="is a folder; give the memory file to check"):
        read_input(tmp_path, "check")
    regular = tmp_path / "link.jsonl"
    regular.symlink_to(tmp_path / "target.jsonl")  # a link to a regular file is read through
    (tmp_path / "target.jsonl").write_bytes(b"{}\n")
    assert read_input(regular, "check") == b"{}\n"


def test_graphml_is_valid_even_for_text_xml_cannot_hold():
    graph = graph_of(
        Entity("A\x00<&>", "t\x07", ["line\nbreak", "bell \x07", "lone \ud800"]),
        Entity("B", "t", []),
        Relation("A\x00<&>", "B", "r\x1b"),
        Relation("B", "Nowhere", "r"),  # left out: an edge must join two nodes
    )
    text = export(graph, "graphml")
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == f"{{{GRAPHML}}}graphml"
    parsed = networkx.parse_graphml(text)
    assert set(parsed.nodes) == {"A\\u0000<&>", "B"}
    assert json.loads(parsed.nodes["A\\u0000<&>"]["observations"]) == ["line\nbreak", "bell \x07", "lone \ud800"]
    assert parsed.number_of_edges() == 1


def test_markdown_escapes_markup_and_indents_multi_line_observations():
    graph = graph_of(Entity("*Ann*", "person", ["first\nsecond", "# not a heading"]))
    text = export(graph, "markdown", "Memory: x")
    assert "### \\*Ann\\*" in text
    assert "- first\n  second" in text and "- \\# not a heading" in text


def test_foreign_kind_names_what_import_reads():
    assert foreign_kind('{"entities": []}') == "a JSON document of entities and relations"
    assert foreign_kind('{"type":"_aim","source":"mcp-knowledge-graph"}\n') == "an mcp-knowledge-graph store"
    assert foreign_kind('{"type":"entity"}\n{"type":"entity"}\n') is None


texts = st.text(max_size=20)  # lone surrogates included: JSON holds them, UTF-8 does not


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.lists(texts, max_size=3)), max_size=6, unique_by=lambda e: e[0]))
def test_every_export_to_json_or_jsonl_imports_back_to_the_same_graph(tmp_path_factory, entities):
    graph = graph_of(*(Entity(name, kind, obs) for name, kind, obs in entities))
    if len(entities) > 1:
        graph.create_relations([Relation(entities[0][0], entities[1][0], "r")])
    folder = tmp_path_factory.mktemp("round")
    for form in ("jsonl", "json"):
        path = folder / f"export.{form}"
        path.write_text(export(graph, form), encoding="utf-8")
        copy = KnowledgeGraph()
        apply_import(copy, read_source(path).records)
        assert [e.to_dict() for e in copy.entities.values()] == [
            {**e.to_dict(), "observations": list(dict.fromkeys(e.observations))} for e in graph.entities.values()
        ]
        assert list(copy.relations) == list(graph.relations)


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_exports_keep_numbers_json_cannot_hold_as_they_were_written(form):
    line = '{"type":"entity","name":"Ann","entityType":"person","observations":["x"],"weight":1e999,"id":1.0000000000000000001}'
    graph = KnowledgeGraph.parse(line + "\n")
    exported = export(graph, form)
    assert "1e999" in exported and "1.0000000000000000001" in exported and "Infinity" not in exported
