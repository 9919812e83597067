import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.paging import Cursor, CursorError, Listing, cached, neighbourhood


def graph_of(*lines: dict) -> KnowledgeGraph:
    return KnowledgeGraph.parse("".join(json.dumps(line) + "\n" for line in lines))


def e(name: str, kind: str = "person", *observations: str) -> dict:
    return {"type": "entity", "name": name, "entityType": kind, "observations": list(observations)}


def r(source: str, target: str, kind: str = "knows") -> dict:
    return {"type": "relation", "from": source, "to": target, "relationType": kind}


def listing_of(graph: KnowledgeGraph) -> Listing:
    return Listing([("", x) for x in graph.entity_list()], [("", x) for x in graph.relations.values()])


def names(items) -> list[str]:
    return [x.name if isinstance(x, Entity) else f"{x.source}>{x.target}" for _, x in items]


def test_a_relation_comes_right_after_the_later_of_its_two_ends():
    graph = graph_of(e("a"), e("b"), e("c"), r("c", "a"), r("a", "b"), r("b", "b"), r("ghost", "c"), r("x", "y"))
    listing = listing_of(graph)
    assert names(listing.items) == ["a", "b", "a>b", "b>b", "c", "c>a", "ghost>c", "x>y"]
    assert (listing.entity_count, listing.relation_count) == (3, 5)
    assert [listing.entities_before(i) for i in range(len(listing) + 1)] == [0, 1, 2, 2, 2, 3, 3, 3, 3]


def test_page_ends_keep_an_entity_with_the_relations_placed_after_it():
    listing = listing_of(graph_of(e("a"), e("b"), e("c"), r("a", "b"), r("b", "c")))
    assert names(listing.items) == ["a", "b", "a>b", "c", "b>c"]
    assert listing.end(0, 2) == 3  # a, b and a>b
    assert listing.end(3, 1) == 5
    assert listing.end(1, None) == 5


@given(
    st.lists(st.sampled_from("abcdefgh"), unique=True),
    st.lists(st.tuples(st.sampled_from("abcdefghxy"), st.sampled_from("abcdefghxy")), unique=True),
    st.integers(1, 4),
)
def test_pages_of_any_size_give_every_entity_and_relation_exactly_once(entities, relations, page):
    graph = graph_of(*(e(n) for n in entities), *(r(s, t) for s, t in relations))
    listing = listing_of(graph)
    seen = []
    start = 0
    while start < len(listing):
        end = listing.end(start, page)
        seen += listing.items[start:end]
        start = end
    assert sorted(names(seen)) == sorted([*entities, *(f"{s}>{t}" for s, t in relations)])


def test_cursor_round_trip_and_refusals():
    listing = listing_of(graph_of(e("a"), e("b")))
    cursor = Cursor("read_graph", "args", listing.fingerprint, 1, {"detail": "names"})
    text = cursor.encode()
    assert text.isascii() and "=" not in text
    assert Cursor.decode(text, "read_graph") == cursor
    cursor.check("args", listing, "read_graph")

    with pytest.raises(CursorError, match="not one this server gave out"):
        Cursor.decode("garbage!", "read_graph")
    with pytest.raises(CursorError, match="continues read_graph, not open_nodes"):
        Cursor.decode(text, "open_nodes")
    with pytest.raises(CursorError, match="other arguments"):
        cursor.check("other", listing, "read_graph")
    with pytest.raises(CursorError, match="memory changed since this cursor was made.*without cursor"):
        cursor.check("args", listing_of(graph_of(e("a"), e("b"), e("c"))), "read_graph")


def encoded(data) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "tampered",
    [
        ["read_graph", "args", "fp", -1, {}],  # negative offset
        ["read_graph", "args", "fp", 2.5, {}],
        ["read_graph", "args", "fp", True, {}],
        ["read_graph", "args", "fp", "3", {}],
        ["read_graph", "args", "fp", 10**30, {}],
        ["read_graph", "args", "fp", 1, {"limit": 0}],  # a page of nothing: the same cursor again, forever
        ["read_graph", "args", "fp", 1, {"limit": -3}],
        ["read_graph", "args", "fp", 1, {"limit": "abc"}],
        ["read_graph", "args", "fp", 1, {"detail": "bogus"}],
        ["read_graph", "args", "fp", 1, {"entityType": 5}],
        ["read_graph", "args", "fp", 1, {"entityType": {"nested": [[[]]]}}],
        ["read_graph", "args", "fp", 1, {"unknown": 1}],
        ["read_graph", "args", "fp", 1, [1, 2]],
        ["read_graph", "args", "fp", 1, None],
        ["read_graph", ["args"], "fp", 1, {}],
        ["read_graph", "args", "fp", 1],
        ["x" * 500, "args", "fp", 1, {}],
        {"tool": "read_graph"},
        None,
        "[" * 100_000,
    ],
)
def test_any_cursor_this_server_did_not_make_gets_one_clear_error(tampered):
    with pytest.raises(CursorError, match="is not one this server gave out.*without cursor to start again"):
        Cursor.decode(encoded(tampered), "read_graph")


def test_garbage_and_huge_cursors_are_refused_without_being_read():
    for text in ("", "garbage!", "x" * 2_000_000, base64.urlsafe_b64encode(b"[" * 10_000 + b"]" * 10_000).decode()):
        with pytest.raises(CursorError, match="not one this server gave out"):
            Cursor.decode(text or "=", "read_graph")


def test_an_offset_past_the_end_of_the_same_listing_is_refused():
    listing = listing_of(graph_of(e("a"), e("b")))
    cursor = Cursor("read_graph", "args", listing.fingerprint, len(listing) + 1)
    with pytest.raises(CursorError, match="past the end"):
        Cursor.decode(cursor.encode(), "read_graph").check("args", listing, "read_graph")


def test_what_changed_is_said_as_the_tool_knows_it():
    listing = listing_of(graph_of(e("a"), e("b")))
    cursor = Cursor("search_nodes", "args", "old", 1)
    with pytest.raises(CursorError, match=r"changed since this cursor was made \(what matches"):
        cursor.check("args", listing, "search_nodes", "what matches the query changed")


def test_the_fingerprint_follows_names_and_order_not_observations():
    one = listing_of(graph_of(e("a", "t", "x"), e("b"), r("a", "b")))
    assert one.fingerprint == listing_of(graph_of(e("a", "t", "y", "z"), e("b"), r("a", "b"))).fingerprint
    assert one.fingerprint != listing_of(graph_of(e("b"), e("a"), r("a", "b"))).fingerprint
    assert one.fingerprint != listing_of(graph_of(e("a"), e("b"), r("a", "b", "likes"))).fingerprint


def test_neighbourhood_rings_in_file_order():
    graph = graph_of(e("a"), e("b"), e("c"), e("d"), e("e"), r("c", "a"), r("b", "d"), r("d", "e"), r("a", "ghost"))
    assert [x.name for x in neighbourhood(graph, ["c", "c", "nobody"], 0)] == ["c"]
    assert [x.name for x in neighbourhood(graph, ["c"], 1)] == ["c", "a"]
    assert [x.name for x in neighbourhood(graph, ["b", "a"], 1)] == ["a", "b", "c", "d"]
    assert [x.name for x in neighbourhood(graph, ["b", "a"], 2)] == ["a", "b", "c", "d", "e"]


def test_cached_values_last_until_an_entity_or_relation_is_added_or_removed():
    graph = graph_of(e("a"), e("b"))
    made = []

    def make() -> int:
        made.append(1)
        return len(made)

    assert cached(graph, "k", make) == 1
    graph.add_observations([("a", ["new"])])
    assert cached(graph, "k", make) == 1
    graph.create_entities([Entity("c", "t", [])])
    assert cached(graph, "k", make) == 2
    graph.delete_entities(["c"])
    assert cached(graph, "k", make) == 3
    graph.create_relations([Relation("a", "b", "knows")])
    graph.delete_relations([("a", "b", "knows")])
    assert cached(graph, "k", make) == 4
    assert cached(graph, "other", make) == 5
