"""What a person is told about unusable lines (unusable.py): the list, and the fixes for causes we know."""

from __future__ import annotations

from pathlib import Path

from memory_server.graph import Entity, SkippedLine
from memory_server.jsonl import BYTE_ORDER_MARK, CONFLICT_MARKER
from memory_server.store import GraphStore
from memory_server.unusable import describe_skipped, fixes

ANN = '{"type":"entity","name":"Ann","entityType":"person","observations":["likes tea"]}'
BO = '{"type":"entity","name":"Bo","entityType":"dog","observations":[]}'


def test_a_byte_order_mark_on_line_1_is_named_with_how_to_save_the_file_again():
    warning = describe_skipped(Path("m.jsonl"), [SkippedLine(1, BYTE_ORDER_MARK)])
    assert "line 1: starts with a byte-order mark" in warning
    assert 'save the file again as "UTF-8"' in warning and "not the line" in warning  # deleting it loses a record


def test_byte_order_marks_inside_the_file_are_numbered_with_what_to_delete():
    [fix] = fixes([(4, BYTE_ORDER_MARK), (9, BYTE_ORDER_MARK), (5, "not valid JSON")])
    assert fix.startswith("Lines 4, 9 start with a byte-order mark") and "delete just that character" in fix


def test_lines_of_no_known_cause_get_only_the_generic_advice():
    assert fixes([(1, "not valid JSON (Expecting value at column 1)")]) == []
    assert "unfinished git merge" in fixes([(3, CONFLICT_MARKER)])[0]


def test_a_file_saved_with_a_byte_order_mark_is_advised_and_its_first_line_survives_writes(tmp_path):
    """Notepad's "UTF-8 with BOM": line 1 cannot be used as it is, and the server never rewrites it unasked."""
    path = tmp_path / "m.jsonl"
    first = b"\xef\xbb\xbf" + ANN.encode() + b"\r\n"
    path.write_bytes(first + BO.encode() + b"\r\n")
    store = GraphStore(path)
    with store.reading() as graph:
        assert list(graph.entities) == ["Bo"]
    warning = store.take_warning()
    assert warning is not None and "line 1: starts with a byte-order mark" in warning and "UTF-8" in warning
    store.mutate(lambda graph: graph.add_observations([("Bo", ["barks"])]))
    store.mutate(lambda graph: graph.create_entities([Entity("Cy", "person", [])]))
    data = path.read_bytes()
    assert data.startswith(first) and b"barks" in data and b'"Cy"' in data

