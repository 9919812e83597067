import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_server.errors import EntityNotFoundError
from memory_server.graph import (
    Entity,
    KnowledgeGraph,
    Relation,
    decode_line,
    encode_entity,
    encode_relation,
    newline_of,
)

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


def test_a_byte_order_mark_before_a_record_is_read_past():
    """Notepad and PowerShell 5 start the files they save with a BOM, which no editor shows: the record after it
    is read (it was skipped as unusable, with a fix the user could not see to make)."""
    text = "\ufeff" + UPSTREAM_FILE
    graph = KnowledgeGraph.parse(text.encode("utf-8"))
    assert list(graph.entities) == ["Ann", "Shop"] and not graph.skipped_lines()
    assert decode_line('\ufeff{"type":"entity","name":"a","entityType":"t","observations":[],"k":1}').extra == {"k": 1}


WRITES = {
    "add_observations": lambda g: g.add_observations([("Shop", ["opened"])]),
    "delete_observations": lambda g: g.delete_observations([("Ann", ["likes hiking"])]),
    "create_entities": lambda g: g.create_entities([Entity("New", "t", ["x"])]),
    "create_relations": lambda g: g.create_relations([Relation("Shop", "Ann", "employs")]),
    "delete_entities": lambda g: g.delete_entities(["Shop"]),
    "delete_relations": lambda g: g.delete_relations([("Ann", "Shop", "works on")]),
}


@pytest.mark.parametrize("final_newline", [True, False], ids=["final newline", "none"])
@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_file_saved_on_windows_keeps_its_crlf_line_ends(write, final_newline):
    """Every line a write makes (rewritten, appended, the end a last line lacked) ends in CRLF like the file's own,
    so Windows editors and git see no mixed line ends; unusable lines stay verbatim; the graph accounts for the lines
    it wrote (sizes, hashes) as a fresh read of the file does."""
    old = ("\ufeff" + UPSTREAM_FILE + "\nnot json" + "\n" * final_newline).replace("\n", "\r\n").encode()
    graph = KnowledgeGraph.parse(old)
    write(graph)
    new = _apply(graph.plan(), old)
    graph.written()
    assert new.count(b"\n") == new.count(b"\r\n") == len(new.splitlines()) and b"\nnot json\r\n" in new
    _same_layout(graph, KnowledgeGraph.parse(new))


def test_a_file_holding_a_byte_order_mark_alone_is_empty_and_keeps_it():
    """Notepad saves an empty file as UTF-8 with a BOM: that is an empty memory, not an unusable line 1; the first
    record written comes after the BOM."""
    for old in (b"\xef\xbb\xbf", b"\xef\xbb\xbf\r\n"):
        graph = KnowledgeGraph.parse(old)
        assert not graph.skipped_lines() and not graph.entities
        graph.create_entities([Entity("New", "t", [])])
        new = _apply(graph.plan(), old)
        graph.written()
        assert new.startswith(old) and list(KnowledgeGraph.parse(new).entities) == ["New"], new
        _same_layout(graph, KnowledgeGraph.parse(new))


FIRST_LINE_WRITES = {
    "add_observations": lambda g: g.add_observations([("Ann", ["opened"])]),
    "delete_observations": lambda g: g.delete_observations([("Ann", ["likes hiking"])]),
    "delete_entities": lambda g: g.delete_entities(["Ann"]),  # its relation too: the BOM goes to line 2
    "delete everything": lambda g: (g.delete_entities(["Ann", "Shop"]), g.create_entities([Entity("New", "t", [])])),
}


@pytest.mark.parametrize("crlf", [False, True], ids=["LF", "CRLF"])
@pytest.mark.parametrize("write", FIRST_LINE_WRITES.values(), ids=FIRST_LINE_WRITES.keys())
def test_a_byte_order_mark_stays_when_the_first_line_is_rewritten_or_removed(write, crlf):
    """A file saved with a BOM (Notepad, PowerShell 5) keeps it at its start whatever a write does to its first line:
    old Windows tools read a file without one as the ANSI code page. A file without one gets none."""
    text = UPSTREAM_FILE + "\nnot json\n"
    if crlf:
        text = text.replace("\n", "\r\n")
    for bom in ("\ufeff", ""):
        old = (bom + text).encode()
        graph = KnowledgeGraph.parse(old)
        write(graph)
        new = _apply(graph.plan(), old)
        graph.written()
        assert new.startswith(b"\xef\xbb\xbf") == bool(bom) and new.count(b"\xef\xbb\xbf") == bool(bom), new
        assert b"not json" + b"\r" * crlf + b"\n" in new  # kept, the BOM before it when it is the first line
        fresh = KnowledgeGraph.parse(new)
        _same_layout(graph, fresh)
        _same_graph(graph, fresh)


@pytest.mark.parametrize("write", [WRITES["create_entities"], WRITES["add_observations"]], ids=["append", "rewrite"])
def test_a_last_line_cut_between_its_cr_and_lf_is_ended_by_the_lf_alone(write):
    """A CRLF file whose last line lost its LF (a save cut short, a tool that wrote the CR and the LF apart) still
    ends in its CR: a write ends it with LF alone, as CRLF, never with a second CR (`\r\r\n`, which Windows
    editors show as an extra line break and git as a change)."""
    old = UPSTREAM_FILE.replace("\n", "\r\n").encode() + b"\r"
    graph = KnowledgeGraph.parse(old)
    write(graph)
    new = _apply(graph.plan(), old)
    graph.written()
    assert b"\r\r" not in new and new.count(b"\n") == new.count(b"\r\n") == len(new.splitlines())
    _same_layout(graph, KnowledgeGraph.parse(new))


def test_a_file_with_lf_line_ends_gets_no_cr():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    for write in WRITES.values():
        write(graph)
    assert b"\r" not in _apply(graph.plan(), UPSTREAM_FILE.encode())


@pytest.mark.parametrize(
    ("data", "newline"),
    [(b"", b"\n"), (b"a\r\nb\r\nc\n", b"\r\n"), (b"a\r\nb\nc\n", b"\n"), (b"a\r\nb\n", b"\n"), (b"a\r\nb", b"\r\n")],
)
def test_the_line_ending_written_is_that_of_most_lines_and_lf_for_a_new_file(data, newline):
    assert newline_of(data) == newline
    assert KnowledgeGraph.parse(data).newline == newline


def test_a_file_that_was_empty_takes_the_line_ending_of_its_first_lines():
    crlf = b'{"type":"entity","name":"Ann","entityType":"person","observations":[]}\r\n'
    followed, _ = KnowledgeGraph.parse(b"").patched([len(crlf)], [crlf])
    grown, _ = KnowledgeGraph.reread(crlf, KnowledgeGraph.parse(b""))
    assert followed.newline == grown.newline == b"\r\n" and grown.built_by == "grown"


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


def test_deletions_return_what_was_not_there_to_delete():
    graph = KnowledgeGraph.parse(UPSTREAM_FILE)
    assert graph.delete_relations([("Ann", "Shop", "owns"), ("Ann", "Shop", "works on")]) == [("Ann", "Shop", "owns")]
    missing = graph.delete_observations([("Ann", ["likes hiking", "likes hikes", "likes hikes"]), ("Nobody", ["x"])])
    assert missing == [("Ann", ["likes hikes"]), ("Nobody", None)]
    assert graph.entities["Ann"].observations == ["speaks français"]
    assert graph.delete_observations([("Ann", ["speaks français"])]) == []
    assert graph.delete_entities(["Shop", "Nobody", "Nobody", "ann"]) == ["Nobody", "ann"]
    assert list(graph.entities) == ["Ann"]


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


# ---- following a file without parsing it again (issue 14) -------------------------------------------------------

FOLLOWED = (
    '{"type":"entity","name":"Ann","entityType":"person","observations":["likes hiking"]}\n'
    '{"type":"entity","name":"Bo","entityType":"dog","observations":["chases the postman"]}\n'
    '{"type":"relation","from":"Ann","to":"Bo","relationType":"walks"}\n'
)


def test_a_reread_keeps_the_records_of_unchanged_lines_and_parses_only_the_others():
    old = KnowledgeGraph.parse(FOLLOWED)
    ann, bo, walks = old.entities["Ann"], old.entities["Bo"], old.relations[("Ann", "Bo", "walks")]
    changed = FOLLOWED.replace("chases the postman", "chases the cat")
    new, changes = KnowledgeGraph.reread(changed, old)
    assert (new.built_by, new.parsed_lines) == ("reread", 1)
    assert new.entities["Ann"] is ann and new.relations[("Ann", "Bo", "walks")] is walks
    assert new.entities["Bo"] is not bo and new.entities["Bo"].observations == ["chases the cat"]
    assert changes.entities == {"Bo"} and not changes.relations
    assert list(new.entities) == ["Ann", "Bo"]


def test_a_file_that_only_grew_is_followed_by_parsing_its_new_lines():
    old = KnowledgeGraph.parse(FOLLOWED)
    more = '{"type":"entity","name":"Cy","entityType":"cat","observations":[]}\nnot json\n'
    new, changes = KnowledgeGraph.reread(FOLLOWED + more, old)
    assert (new.built_by, new.parsed_lines) == ("grown", 2)
    assert new.entities["Ann"] is old.entities["Ann"] and list(new.entities) == ["Ann", "Bo", "Cy"]
    assert changes.entities == {"Cy"}
    assert [(s.line_number, s.reason[:14]) for s in new.skipped_lines()] == [(5, "not valid JSON")]
    assert "Cy" not in old.entities  # the old graph is left as it was


def test_a_write_recorded_by_another_writer_is_followed_from_its_new_bytes_alone():
    from memory_server import delta

    writer, reader = KnowledgeGraph.parse(FOLLOWED), KnowledgeGraph.parse(FOLLOWED)
    writer.add_observations([("Ann", ["swims"])])
    plan = writer.plan()
    new = _apply(plan, FOLLOWED.encode())
    segments = delta.of_plan(plan)
    chunks = [new[a:b] for a, b in delta.new_ranges(segments)]
    assert chunks == [b'{"type":"entity","name":"Ann","entityType":"person","observations":["likes hiking","swims"]}\n']
    graph, changes = reader.patched(segments, chunks)
    assert graph.parsed_lines == 1 and changes.entities == {"Ann"}
    assert graph.entities["Bo"] is reader.entities["Bo"] and graph.entities["Ann"] is not reader.entities["Ann"]
    assert list(graph.entities) == ["Ann", "Bo"] and graph.entities["Ann"].observations == ["likes hiking", "swims"]
    assert reader.entities["Ann"].observations == ["likes hiking"]  # the graph it came from is left as it was


def _apply(plan, old: bytes) -> bytes:
    return b"".join(old[step[0] : step[1]] if isinstance(step, tuple) else step for step in plan)


def _same_layout(graph: KnowledgeGraph, fresh: KnowledgeGraph) -> None:
    """The graph accounts for the lines of its file (their sizes, CRs included, and hashes) as a fresh read does."""
    assert [size for size in graph._layout.sizes if size] == list(fresh._layout.sizes)
    assert graph._layout.line_hashes() == fresh._layout.line_hashes()


def _same_graph(graph: KnowledgeGraph, expected: KnowledgeGraph) -> None:
    assert [e.to_dict() for e in graph.entity_list()] == [e.to_dict() for e in expected.entity_list()]
    assert list(graph.relations) == list(expected.relations)
    assert [(s.line_number, s.reason) for s in graph.skipped_lines()] == [
        (s.line_number, s.reason) for s in expected.skipped_lines()
    ]


NAMES = ["a", "b", "c", "d", "e", "f"]
graph_lines = st.one_of(
    st.builds(
        lambda n, o: json.dumps({"type": "entity", "name": n, "entityType": "t", "observations": o}),
        st.sampled_from(NAMES),
        st.lists(st.sampled_from(["x", "y", "z"]), max_size=3),
    ),
    st.builds(
        lambda a, b: json.dumps({"type": "relation", "from": a, "to": b, "relationType": "r"}),
        st.sampled_from(NAMES),
        st.sampled_from(NAMES),
    ),
    st.sampled_from(["not json", "", '{"type":"other"}']),
)
edits = st.lists(
    st.tuples(
        st.sampled_from(["create", "observe", "forget", "unobserve", "relate", "unrelate"]),
        st.sampled_from(NAMES + ["g"]),
        st.sampled_from(NAMES),
    ),
    min_size=1,
    max_size=4,
)


def _edit(graph: KnowledgeGraph, kind: str, name: str, other: str) -> None:
    if kind == "create":
        graph.create_entities([Entity(name, "t", ["new"])])
    elif kind == "observe" and name in graph.entities:
        graph.add_observations([(name, [f"seen {len(graph.records)}"])])
    elif kind == "forget":
        graph.delete_entities([name])
    elif kind == "unobserve":
        graph.delete_observations([(name, ["x", "y"])])
    elif kind == "relate" and name in graph.entities and other in graph.entities:
        graph.create_relations([Relation(name, other, "q")])
    elif kind == "unrelate":
        graph.delete_relations([(name, other, "r")])


@given(st.lists(graph_lines, max_size=10), st.booleans(), st.sampled_from(["\n", "\r\n"]), edits, edits)
def test_a_graph_follows_another_writers_changes_exactly(lines, final_newline, newline, first, second):
    """Whatever another writer did (its plan, recorded as segments), following it, or reading the file again
    with the old graph at hand, gives the graph a fresh parse gives; the records of unchanged lines are the same
    objects; what changed is named; and a write on top of the followed graph writes the right file. A file with
    CRLF line ends has only CRLF line ends after both writes."""
    from memory_server import delta

    old = (newline.join(lines) + (newline if final_newline and lines else "")).encode()
    crlf = b"\r\n" in old
    writer = KnowledgeGraph.parse(old)
    for step in first:
        _edit(writer, *step)
    plan = writer.plan()
    new = _apply(plan, old)
    writer.written()
    fresh = KnowledgeGraph.parse(new)
    _same_graph(writer, fresh)
    _same_layout(writer, fresh)
    assert not crlf or new.count(b"\n") == new.count(b"\r\n")
    before = KnowledgeGraph.parse(old)
    segments = delta.of_plan(plan)
    followed = before.patched(segments, [new[a:b] for a, b in delta.new_ranges(segments)])
    for graph, changes in [followed] if followed else []:
        _same_graph(graph, fresh)
        assert graph.parsed_lines <= sum(1 for step in plan if isinstance(step, bytes)) + new.count(b"\n")
        for step in second:
            _edit(graph, *step)
        later = graph.plan()
        graph.written()
        newer = _apply(later, new)
        _same_graph(graph, KnowledgeGraph.parse(newer))
        _same_layout(graph, KnowledgeGraph.parse(newer))
        assert not crlf or newer.count(b"\n") == newer.count(b"\r\n")
    before = KnowledgeGraph.parse(old)
    again, changes = KnowledgeGraph.reread(new, before)
    _same_graph(again, fresh)
    for name, entity in again.entities.items():
        if before.entities.get(name) is entity:
            assert entity.to_dict() == fresh.entities[name].to_dict()
    differ = {
        n
        for n in before.entities.keys() | fresh.entities.keys()
        if getattr(before.entities.get(n), "to_dict", dict)() != getattr(fresh.entities.get(n), "to_dict", dict)()
    }
    assert differ <= changes.entities


def test_names_like_offers_the_same_name_ignoring_case_then_names_containing_it():
    graph = KnowledgeGraph()
    names = ["Maya Okafor", "Luna", "LUNA", "Straße 5", "Maya's flat", "Mayan art", "Zoë"]
    graph.create_entities(Entity(name, "t", []) for name in names)
    like = graph.names_like(["luna", "maya", "STRASSE 5", "zoë", "Ghost", ""])
    assert like == {
        "luna": ["Luna", "LUNA"],
        "maya": ["Maya Okafor", "Maya's flat"],  # the first two, in the file's order
        "STRASSE 5": ["Straße 5"],  # casefold, not lower: ß is ss
        "zoë": ["Zoë"],
        "Ghost": [],
        "": [],
    }
    assert graph.names_like(["maya"], limit=3)["maya"] == ["Maya Okafor", "Maya's flat", "Mayan art"]


def test_names_like_ignores_accents_as_people_type_names():
    graph = KnowledgeGraph()
    graph.create_entities(Entity(name, "t", []) for name in ["Siobhán Ní Bhriain", "Bríd", "Zoë Müller", "Ann"])
    like = graph.names_like(["siobhan ni bhriain", "Siobhan", "BRID", "Zoe Muller", "muller", "Ånn"])
    assert like == {
        "siobhan ni bhriain": ["Siobhán Ní Bhriain"],
        "Siobhan": ["Siobhán Ní Bhriain"],
        "BRID": ["Bríd"],
        "Zoe Muller": ["Zoë Müller"],
        "muller": ["Zoë Müller"],
        "Ånn": ["Ann"],
    }
