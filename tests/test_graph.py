import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_server.errors import EntityNotFoundError
from memory_server.graph import Entity, KnowledgeGraph, Relation, decode_line, encode_entity, encode_relation

UPSTREAM_FILE = (
    '{"type":"entity","name":"Ann","entityType":"person","observations":["likes hiking","speaks français"]}\n'
    '{"type":"entity","name":"Shop","entityType":"project","observations":[]}\n'
    '{"type":"relation","from":"Ann","to":"Shop","relationType":"works on"}'
)


def dump(graph: KnowledgeGraph) -> str:
    return "".join(line + "\n" for line in graph.lines())


def test_upstream_file_loads_and_writes_back_unchanged():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    assert list(graph.entities) == ["Ann", "Shop"]
    assert graph.entities["Ann"].observations == ["likes hiking", "speaks français"]
    assert list(graph.relations) == [("Ann", "Shop", "works on")]
    assert dump(graph) == UPSTREAM_FILE + "\n"


def test_encoding_matches_json_stringify():
    # JSON.stringify: compact, keys in this order, non-ASCII as is, control characters escaped.
    line = encode_entity(Entity("Zoë", "person", ["tab\there", 'quote " and \\', "emoji 😀"]))
    assert line == (
        '{"type":"entity","name":"Zoë","entityType":"person",'
        '"observations":["tab\\there","quote \\" and \\\\","emoji 😀"]}'
    )
    assert (
        encode_relation(Relation("a", "b", "knows")) == '{"type":"relation","from":"a","to":"b","relationType":"knows"}'
    )


def test_lone_surrogates_are_escaped_like_javascript():
    line = encode_entity(Entity("x", "t", ["half \ud83d"]))
    assert "\\ud83d" in line
    line.encode("utf-8")  # no unencodable character left
    assert decode_line(line).observations == ["half \ud83d"]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "not valid JSON"),
        ('\ufeff{"type":"entity","name":"a","entityType":"t","observations":[]}', "byte-order mark"),
        ('{"type":"person","name":"a"}', "unknown type 'person'"),
        ('{"type":"entity","name":"a","observations":[]}', "'entityType' is missing"),
        ('{"type":"entity","name":"a","entityType":"t","observations":[1]}', "not a list of strings"),
        ('{"type":"relation","from":"a","to":2,"relationType":"r"}', "'to' is not a string"),
        ("[1, 2]", "not a JSON object"),
        ("null", "not a JSON object"),  # not a blank line: kept and reported like any other
        (" null ", "not a JSON object"),
        ("0", "not a JSON object"),
        ('"a string"', "not a JSON object"),
        ("false", "not a JSON object"),
        ('{"type":"entity","name":NaN}', "NaN is not allowed"),
    ],
)
def test_unusable_lines_are_reported_and_kept_in_place(line, reason):
    text = UPSTREAM_FILE.replace("\n", "\n" + line + "\n", 1)
    graph = KnowledgeGraph.parse(text)
    assert len(graph.entities) == 2
    [skipped] = graph.skipped_lines()
    assert skipped.line_number == 2
    assert reason in skipped.reason
    graph.create_entities([Entity("New", "t", [])])
    graph.delete_entities(["Shop"])
    lines = dump(graph).splitlines()
    assert lines[1] == line  # still the second line, byte for byte
    assert json.loads(lines[-1])["name"] == "New"


def test_unknown_fields_survive_a_rewrite():
    text = (
        '{"type":"entity","name":"a","entityType":"t","observations":["x"],"createdAt":"2026-01-01","meta":{"k":1}}\n'
        '{"type":"relation","from":"a","to":"a","relationType":"self","weight":0.5}\n'
    )
    graph = KnowledgeGraph.parse(text)
    graph.add_observations([("a", ["y"])])
    entity_line, relation_line = dump(graph).splitlines()
    assert json.loads(entity_line) == {
        "type": "entity",
        "name": "a",
        "entityType": "t",
        "observations": ["x", "y"],
        "createdAt": "2026-01-01",
        "meta": {"k": 1},
    }
    assert relation_line == text.splitlines()[1]


NUMBERS = '"inf":1e999,"precise":1.0000000000000000001,"big":' + "9" * 5000 + ',"nested":{"k": [1, 2.50, -0E+3]}'


def test_numbers_json_cannot_hold_as_floats_survive_a_change_of_their_entity():
    # 1e999 used to come back as Infinity, which is not JSON: the next reader skipped the line and the entity was gone.
    entity_line = '{"type":"entity","name":"a","entityType":"t","observations":["x"],' + NUMBERS + "}"
    relation_line = '{"type":"relation","from":"a","to":"a","relationType":"r",' + NUMBERS + "}"
    graph = KnowledgeGraph.parse(entity_line + "\n" + relation_line + "\n")
    assert graph.skipped_lines() == []
    graph.add_observations([("a", ["y"])])
    changed, kept = dump(graph).splitlines()
    assert kept == relation_line
    assert changed == '{"type":"entity","name":"a","entityType":"t","observations":["x","y"],' + NUMBERS + "}"
    assert "Infinity" not in changed
    again = KnowledgeGraph.parse(changed)
    assert again.skipped_lines() == [] and again.entities["a"].observations == ["x", "y"]


def test_duplicates_that_differ_are_kept_verbatim_and_reported():
    text = (
        '{"type":"entity","name":"a","entityType":"person","observations":["x"]}\n'
        '{"type":"entity","name":"a","entityType":"robot","observations":["y"],"note":"keep me"}\n'
        '{"type":"relation","from":"a","to":"a","relationType":"r"}\n'
        '{"type":"relation","from":"a","to":"a","relationType":"r","since":1}\n'
    )
    graph = KnowledgeGraph.parse(text)
    assert graph.entities["a"].entity_type == "person" and graph.entities["a"].observations == ["x"]
    assert [(s.line_number, s.reason) for s in graph.skipped_lines()] == [
        (2, "a second, different entity 'a'; kept as it is, not loaded (the one loaded is on line 1)"),
        (4, "a second, different relation; kept as it is, not loaded (the one loaded is on line 3)"),
    ]
    graph.add_observations([("a", ["z"])])
    lines = dump(graph).splitlines()
    assert lines[1] == text.splitlines()[1] and lines[3] == text.splitlines()[3]
    graph.delete_entities(["a"])  # its second versions go with it, or the next reader would load them
    assert dump(graph) == "" and graph.skipped_lines() == []


def test_duplicate_entities_from_older_writers_are_merged_without_loss():
    text = (
        '{"type":"entity","name":"a","entityType":"t","observations":["x"]}\n'
        '{"type":"entity","name":"a","entityType":"t","observations":["x","y"]}\n'
    )
    graph = KnowledgeGraph.parse(text)
    assert graph.entities["a"].observations == ["x", "y"]
    assert graph.skipped_lines() == []


def test_create_skips_existing_and_in_batch_duplicates():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    added = graph.create_entities([Entity("Ann", "x", []), Entity("Bo", "p", ["a", "a"]), Entity("Bo", "q", [])])
    assert [(e.name, e.entity_type, e.observations) for e in added] == [("Bo", "p", ["a"])]
    assert [e.name for e in graph.edits.appended] == ["Bo"]
    assert not graph.edits.rewrite


def test_relations_need_both_ends_and_reject_the_whole_batch():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    with pytest.raises(EntityNotFoundError, match="^Entity with name Ghost not found$"):
        graph.create_relations([Relation("Ann", "Shop", "likes"), Relation("Ann", "Ghost", "knows")])
    assert len(graph.relations) == 1 and not graph.edits
    added = graph.create_relations(
        [Relation("Ann", "Shop", "works on"), Relation("Shop", "Ann", "employs"), Relation("Shop", "Ann", "employs")]
    )
    assert [r.key for r in added] == [("Shop", "Ann", "employs")]


def test_add_observations_is_all_or_nothing():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    with pytest.raises(EntityNotFoundError, match="Entity with name Nobody not found"):
        graph.add_observations([("Ann", ["new"]), ("Nobody", ["x"])])
    assert graph.entities["Ann"].observations == ["likes hiking", "speaks français"]
    assert not graph.edits
    results = graph.add_observations([("Ann", ["likes hiking", "new", "new"]), ("Ann", ["new", "newer"])])
    assert results == [("Ann", ["new"]), ("Ann", ["newer"])]
    assert graph.edits.rewrite


def test_delete_entities_removes_their_relations_and_ignores_unknown_names():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    graph.delete_entities(["Shop", "Nobody"])
    assert list(graph.entities) == ["Ann"]
    assert graph.relations == {}
    assert graph.relations_touching(["Ann"]) == []
    assert "Shop" not in dump(graph)


def test_nothing_to_change_means_nothing_to_write():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    graph.create_entities([Entity("Ann", "person", [])])
    graph.create_relations([Relation("Ann", "Shop", "works on")])
    graph.add_observations([("Ann", ["likes hiking"])])
    graph.delete_entities(["Nobody"])
    graph.delete_observations([("Ann", ["never said"]), ("Nobody", ["x"])])
    graph.delete_relations([("Ann", "Shop", "owns")])
    assert not graph.edits


def test_open_nodes_returns_each_entity_once_in_file_order():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    entities, relations = graph.open_nodes(["Shop", "Ann", "Shop", "Ghost"])
    assert [e.name for e in entities] == ["Ann", "Shop"]
    assert len(relations) == 1


texts = st.text(max_size=30)
entities = st.builds(Entity, name=texts, entity_type=texts, observations=st.lists(texts, max_size=4))


@given(st.lists(entities, max_size=8), st.lists(st.text(max_size=40).filter(lambda t: "\n" not in t), max_size=3))
def test_round_trip(items, junk):
    graph = KnowledgeGraph()
    graph.create_entities(items)
    names = list(graph.entities)
    graph.create_relations(Relation(a, b, "r") for a, b in zip(names, names[1:]))
    text = dump(graph) + "".join(j + "\n" for j in junk)
    again = KnowledgeGraph.parse(text)
    assert dump(again) == text
    assert [e.to_dict() for e in again.entity_list()] == [e.to_dict() for e in graph.entity_list()]
    assert list(again.relations) == list(graph.relations)


def test_a_line_that_parses_only_together_with_its_neighbours_is_not_loaded():
    entity_line = '{"type":"entity","name":"e","entityType":"t","observations":["keep"]}'
    graph = KnowledgeGraph.parse("1,2\n" + entity_line + "\n[0\n0]\n")
    assert list(graph.entities) == ["e"] and graph.entities["e"].observations == ["keep"]
    assert [s.line_number for s in graph.skipped_lines()] == [1, 3, 4]
