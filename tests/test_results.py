"""Results cut to the budget, in process: pages, cursors, details, neighbours, search pages (write echoes: test_writes.py)."""

from __future__ import annotations

import json
import re

import pytest
from sample_graphs import big_graph_text, pasted, within

from memory_server import present, results
from memory_server.budget import Budget, text_tokens
from memory_server.embeddings import EmbedderSlot
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.hits import Hit, LabelledHit, Outcome
from memory_server.paging import CursorError, Listing
from memory_server.results import GraphQuery, SearchCall
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore


@pytest.fixture(scope="module")
def graph_2000() -> KnowledgeGraph:
    return KnowledgeGraph.parse(big_graph_text(2000))


def page_through(graph, budget, query: GraphQuery) -> tuple[list[dict], list[dict], int]:
    entities, relations, pages = [], [], 0
    shaped = results.read_graph(graph, budget, query, "default")
    while True:
        pages += 1
        assert within(budget, shaped)
        structured, _ = shaped
        entities += structured["entities"]
        relations += structured["relations"]
        cursor = structured.get("nextCursor")
        if cursor is None:
            return entities, relations, pages
        shaped = results.read_graph(graph, budget, GraphQuery(cursor=cursor), "default")


def official(graph: KnowledgeGraph) -> dict:
    return {
        "entities": [e.to_dict() for e in graph.entity_list()],
        "relations": [r.to_dict() for r in graph.relations.values()],
    }


def test_a_graph_that_fits_reads_exactly_as_before():
    graph = KnowledgeGraph.parse(big_graph_text(30))
    for budget in (Budget(), Budget(0)):
        structured, text = results.read_graph(graph, budget, GraphQuery(), "default")
        assert structured == official(graph)
        assert text == present.as_json(official(graph))


def test_budget_zero_gives_the_whole_graph_however_large(graph_2000):
    structured, text = results.read_graph(graph_2000, Budget(0), GraphQuery(), "default")
    assert structured == official(graph_2000)
    assert json.loads(text) == structured


@pytest.mark.parametrize(
    ("budget", "query"),
    [
        (Budget(), GraphQuery()),
        (Budget(3000), GraphQuery()),
        (Budget(1000), GraphQuery(limit=7)),
        (Budget(0), GraphQuery(limit=500)),
        (Budget(), GraphQuery(detail="full", limit=100)),
    ],
)
def test_paging_gives_every_entity_and_relation_once_in_file_order(graph_2000, budget, query):
    entities, relations, pages = page_through(graph_2000, budget, query)
    assert entities == official(graph_2000)["entities"]
    key = lambda r: (r["from"], r["to"], r["relationType"])
    assert sorted(map(key, relations)) == sorted(map(key, official(graph_2000)["relations"]))
    assert len(relations) == len(graph_2000.relations)
    assert pages > 1


def test_paging_20000_entities_within_the_default_budget():
    graph = KnowledgeGraph.parse(big_graph_text(20_000))
    entities, relations, pages = page_through(graph, Budget(), GraphQuery())
    assert [e["name"] for e in entities] == list(graph.entities)
    assert len(relations) == len(set(map(str, relations))) == len(graph.relations)
    assert pages > 50


def test_the_first_page_of_a_large_graph_starts_with_an_overview_and_says_what_next(graph_2000):
    structured, text = results.read_graph(graph_2000, Budget(), GraphQuery(), "default")
    overview = structured["overview"]
    assert overview["entities"] == 2000 and sum(overview["entityTypes"].values()) == 2000
    assert overview["mostConnected"][0]["relations"] >= overview["mostConnected"][-1]["relations"]
    assert structured["total"] == {"entities": 2000, "relations": len(graph_2000.relations)}
    assert text.startswith("This memory holds 2000 entities")
    last = text.splitlines()[-1]
    assert f'read_graph(cursor="{structured["nextCursor"]}")' in last
    assert "entityType=" in last and "search_nodes" in last and "open_nodes" in last
    # The overview shrinks with a small budget rather than crowd the page out.
    small = results.read_graph(graph_2000, Budget(600), GraphQuery(), "default")
    assert within(Budget(600), small) and small[0]["entities"]


def test_details_and_types(graph_2000):
    names, _, _ = page_through(graph_2000, Budget(), GraphQuery(detail="names"))
    assert names == [{"name": e.name, "entityType": e.entity_type} for e in graph_2000.entity_list()]
    structured, text = results.read_graph(graph_2000, Budget(), GraphQuery(detail="summary", limit=3), "default")
    first = graph_2000.entity_list()[0]
    touching = len(graph_2000.relations_touching([first.name]))
    assert structured["entities"][0] == {
        "name": first.name,
        "entityType": first.entity_type,
        "observationCount": len(first.observations),
        "relationCount": touching,
    }
    assert structured["relations"] == [] and "left out" in text

    people, relations, _ = page_through(graph_2000, Budget(), GraphQuery(entity_type="PERSON"))
    wanted = [e.name for e in graph_2000.entity_list() if e.entity_type.lower() == "person"]
    assert [e["name"] for e in people] == wanted and {e["entityType"] for e in people} == {"person", "Person"}
    assert all(r["from"] in wanted or r["to"] in wanted for r in relations)
    assert len(relations) == len(graph_2000.relations_touching(wanted))

    structured, text = results.read_graph(graph_2000, Budget(), GraphQuery(entity_type="robot"), "default")
    assert structured["entities"] == [] and 'No entity has the type "robot"' in text and '"city"' in text


def test_a_cursor_continues_with_the_arguments_it_was_made_with(graph_2000):
    first, _ = results.read_graph(
        graph_2000, Budget(), GraphQuery(detail="names", entity_type="city", limit=5), "default"
    )
    second, _ = results.read_graph(graph_2000, Budget(), GraphQuery(cursor=first["nextCursor"]), "default")
    assert set(second["entities"][0]) == {"name", "entityType"} and second["entities"][0]["entityType"] == "city"
    with pytest.raises(CursorError, match="other arguments"):
        results.read_graph(graph_2000, Budget(), GraphQuery(detail="full", cursor=first["nextCursor"]), "default")
    with pytest.raises(CursorError, match="other arguments"):
        results.read_graph(graph_2000, Budget(), GraphQuery(cursor=first["nextCursor"]), "work")


def test_a_cursor_survives_new_observations_and_is_refused_after_new_entities():
    graph = KnowledgeGraph.parse(big_graph_text(400))
    first, _ = results.read_graph(graph, Budget(2000), GraphQuery(), "default")
    graph.add_observations([("E399", ["one more thing"])])
    second, _ = results.read_graph(graph, Budget(2000), GraphQuery(cursor=first["nextCursor"]), "default")
    assert second["entities"][0]["name"] not in {e["name"] for e in first["entities"]}
    graph.create_entities([Entity("newcomer", "person", [])])
    with pytest.raises(CursorError, match="changed since this cursor was made"):
        results.read_graph(graph, Budget(2000), GraphQuery(cursor=second["nextCursor"]), "default")


def test_an_entity_larger_than_the_budget_is_cut_and_says_so():
    huge = Entity("Diary", "log", [f"day {i}: " + "x" * 200 for i in range(2000)])
    graph = KnowledgeGraph()
    graph.create_entities([huge, Entity("Other", "log", ["small"])])
    budget = Budget(5000)
    shaped = results.read_graph(graph, budget, GraphQuery(), "default")
    assert within(budget, shaped)
    structured, text = shaped
    [diary] = structured["entities"]
    assert 0 < len(diary["observations"]) < 2000 and "of 2000 observations shown" in text
    second, _ = results.read_graph(graph, budget, GraphQuery(cursor=structured["nextCursor"]), "default")
    assert [e["name"] for e in second["entities"]] == ["Other"]
    opened = results.open_nodes(graph, budget, ["Diary"], 0, None, "default")
    assert within(budget, opened) and "search_nodes finds the others" in opened[1]
    one_long = KnowledgeGraph()
    one_long.create_entities([Entity("Pasted", "doc", ["y" * 200_000])])
    assert within(budget, results.read_graph(one_long, budget, GraphQuery(), "default"))


def test_open_nodes_depth_and_pages(graph_2000):
    plain = results.open_nodes(graph_2000, Budget(), ["E5", "E1", "nobody"], 0, None, "default")
    entities, relations = graph_2000.open_nodes(["E5", "E1"])
    assert plain == (
        {"entities": [e.to_dict() for e in entities], "relations": [r.to_dict() for r in relations]},
        "Not found: 'nobody'.\n"  # then the official answer
        + present.as_json({"entities": [e.to_dict() for e in entities], "relations": [r.to_dict() for r in relations]}),
    )
    around, _ = results.open_nodes(graph_2000, Budget(), ["E5"], 1, None, "default")
    neighbours = {x for r in graph_2000.relations_touching(["E5"]) for x in (r.source, r.target)} - {"E5"}
    assert around["entities"][0]["name"] == "E5"
    assert {e["name"] for e in around["entities"][1:]} == neighbours & set(graph_2000.entities)

    budget = Budget(1500)
    every = [e.name for e in graph_2000.entity_list()[:300]]
    seen, cursor = [], None
    while True:
        structured, _ = shaped = results.open_nodes(graph_2000, budget, every, 0, cursor, "default")
        assert within(budget, shaped)
        seen += [e["name"] for e in structured["entities"]]
        cursor = structured.get("nextCursor")
        if cursor is None:
            break
    assert seen == every
    with pytest.raises(CursorError, match="other arguments"):
        results.open_nodes(graph_2000, budget, every[:5], 0, structured_cursor(graph_2000, budget, every), "default")


def test_open_nodes_with_depth_shows_no_relation_to_an_entity_it_does_not_show():
    """A neighbourhood is a subgraph: with depth, the relations shown are those between shown entities, and every
    relation of a named entity (what depth 0, the official answer, gives; a relation to an entity the file lacks
    included). A relation from the outer ring to an entity further out would read as an edge to nothing."""
    graph = KnowledgeGraph()
    graph.create_entities(Entity(name, "t", []) for name in ["A", "B", "C", "D", "E"])
    chain = [Relation("A", "B", "r"), Relation("C", "B", "r"), Relation("C", "D", "r"), Relation("D", "E", "r")]
    graph.create_relations([*chain, Relation("B", "D", "r"), Relation("A", "Gone", "r")], require_ends=False)

    def opened(depth: int) -> tuple[list[str], list[tuple[str, str]]]:
        structured, _ = results.open_nodes(graph, Budget(), ["A"], depth, None, "default")
        return [e["name"] for e in structured["entities"]], [(r["from"], r["to"]) for r in structured["relations"]]

    assert opened(0) == (["A"], [("A", "B"), ("A", "Gone")])  # the official answer
    assert opened(1) == (["A", "B"], [("A", "B"), ("A", "Gone")])
    assert opened(2) == (["A", "B", "C", "D"], [("A", "B"), ("C", "B"), ("C", "D"), ("B", "D"), ("A", "Gone")])


def structured_cursor(graph, budget, names) -> str:
    return results.open_nodes(graph, budget, names, 0, None, "default")[0]["nextCursor"]


@pytest.fixture(scope="module")
def keyword_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("search") / "memory.jsonl"
    path.write_text(big_graph_text(2000), encoding="utf-8")
    return GraphStore(path)


def test_a_keyword_search_beyond_the_budget_is_cut_and_pages(keyword_store):
    searcher = Searcher(EmbedderSlot("none"))
    outcome = searcher.search([Target("default", keyword_store)], "coffee", "keyword", None, None)
    asked = SearchCall("coffee", "keyword", None, None, None, ("default",))
    budget = Budget(8000)
    structured, text = shaped = results.search(outcome, budget, None, asked)
    assert within(budget, shaped)
    matched = len(outcome.hits)
    assert structured["total"]["entities"] == matched > len(structured["entities"])
    assert f"of {matched} ({matched - len(structured['entities'])} more on the next pages)" in text.splitlines()[0]
    assert 'search_nodes(query="coffee", mode="keyword", cursor=' in text.splitlines()[-1]
    names, relations = [], []
    while True:
        names += [e["name"] for e in structured["entities"]]
        relations += [(r["from"], r["to"], r["relationType"]) for r in structured["relations"]]
        assert {m["entityName"] for m in structured["matches"]} <= {e["name"] for e in structured["entities"]}
        if "nextCursor" not in structured:
            break
        structured, _ = shaped = results.search(outcome, budget, structured["nextCursor"], asked)
        assert within(budget, shaped)
    assert names == [h.hit.entity.name for h in outcome.hits]
    whole, _ = results.search(outcome, Budget(0), None, asked)
    assert len(relations) == len(set(relations)) == len(whole["relations"])
    other = SearchCall("coffee", "hybrid", 10, None, None, ("default",))
    with pytest.raises(CursorError, match="other arguments"):
        results.search(outcome, budget, results.search(outcome, budget, None, asked)[0]["nextCursor"], other)


def test_the_pages_of_a_ranked_search_count_and_number_the_matches_of_the_whole_search(keyword_store):
    """A second page said "174 matches" and numbered them from 1 again: an agent read the 177th match as the best."""
    searcher = Searcher(EmbedderSlot("none"))
    outcome = searcher.search([Target("default", keyword_store)], "coffee", "hybrid", 300, None)
    asked = SearchCall("coffee", "hybrid", 300, None, None, ("default",))
    budget, cursor, numbers = Budget(8000), None, []
    while True:
        structured, text = results.search(outcome, budget, cursor, asked)
        lines = text.splitlines()
        shown = [int(number) for number in re.findall(r"^(\d+)\. ", text, re.MULTILINE)]
        assert lines[1].startswith(f"{len(shown)} of the {len(outcome.hits)} matches (hybrid search")
        assert shown == sorted(shown) and (shown[0] == 1) == (cursor is None)
        numbers += shown
        cursor = structured.get("nextCursor")
        if cursor is None:
            break
    assert sorted(numbers) == list(range(1, len(outcome.hits) + 1)) and len(outcome.hits) == 300
    whole = results.search(outcome, Budget(0), None, asked)[1]
    assert whole.startswith("300 matches (hybrid search")


def test_the_graph_resource_is_an_overview_and_a_page_when_large(graph_2000):
    small = KnowledgeGraph.parse(big_graph_text(10))
    assert json.loads(results.graph_document(small, Budget(), "default", True)) == official(small)
    document = results.graph_document(graph_2000, Budget(), "work", False)
    assert text_tokens(document) <= Budget().max_tokens
    data = json.loads(document)
    assert data["overview"]["entities"] == 2000 and data["entities"] and data["nextCursor"]
    assert 'read_graph(context="work", cursor=<nextCursor>)' in data["note"]
    assert json.loads(results.graph_document(graph_2000, Budget(0), "work", False)) == official(graph_2000)


# ---- search results cut to the budget: the match first, nothing unbounded --------------------------------------


def search_of(tmp_path, entities: list[Entity], query: str, mode: str = "keyword", limit: int | None = None):
    path = tmp_path / "memory.jsonl"
    path.write_text("".join(json.dumps({"type": "entity", **e.to_dict()}) + "\n" for e in entities), encoding="utf-8")
    outcome = Searcher(EmbedderSlot("none")).search([Target("default", GraphStore(path))], query, mode, limit, None)
    return outcome, SearchCall(query, mode, limit, None, None, ("default",))


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_match_in_a_pasted_document_is_shown_first_and_short(tmp_path, mode):
    docs = [Entity(f"Doc {i}", "document", [pasted(i), f"short note {i} about espresso"]) for i in range(3)]
    diary = Entity("Diary", "log", [pasted(9), "tea on Sunday", "espresso in Lisbon with Ann"])  # match is third
    outcome, asked = search_of(tmp_path, [*docs, diary], "espresso", mode, limit=None if mode == "keyword" else 10)
    budget = Budget()
    seen, cursor = {}, None
    while True:
        structured, _ = shaped = results.search(outcome, budget, cursor, asked)
        assert within(budget, shaped)
        for entity in structured["entities"]:
            seen[entity["name"]] = entity
        for match in structured["matches"]:
            assert len(match["observation"]) < 5_000
            assert match["observation"] in seen[match["entityName"]]["observations"]
        cursor = structured.get("nextCursor")
        if cursor is None:
            break
    assert set(seen) == {"Doc 0", "Doc 1", "Doc 2", "Diary"}
    shown = seen["Diary"]["observations"]
    assert shown[0] == "espresso in Lisbon with Ann"  # the matching observation first, whole
    assert "tea on Sunday" in shown  # the short ones beside the pasted text are kept
    assert any(o.endswith("characters in all]") for o in shown)  # the pasted text shortened, with its length
    assert seen["Doc 0"]["observations"][0] == "short note 0 about espresso"


def test_an_entity_with_thousands_of_matches_keeps_its_matches_within_the_budget(tmp_path):
    diary = Entity("Diary", "log", [f"day {i}: espresso at the café, then a walk by the river" for i in range(5_000)])
    outcome, asked = search_of(tmp_path, [diary], "espresso", "hybrid", limit=5_000)
    assert len(outcome.hits) == 5_000
    budget = Budget()
    structured, text = shaped = results.search(outcome, budget, None, asked)
    assert within(budget, shaped)
    shown = structured["entities"][0]["observations"]
    assert 0 < len(structured["matches"]) == len(shown) < 5_000
    assert {m["observation"] for m in structured["matches"]} == set(shown)
    assert f"{len(shown)} of 5000 observations" in text and "matches are in observations left out" in text


def test_a_search_cursor_after_the_matches_changed_says_what_happened(tmp_path):
    path = tmp_path / "memory.jsonl"
    path.write_text(big_graph_text(2000), encoding="utf-8")
    store = GraphStore(path)
    searcher = Searcher(EmbedderSlot("none"))
    asked = SearchCall("coffee", "keyword", None, None, None, ("default",))
    outcome = searcher.search([Target("default", store)], "coffee", "keyword", None, None)
    first, _ = results.search(outcome, Budget(3000), None, asked)
    matched = {h.hit.entity.name for h in outcome.hits}
    with store.reading() as graph:
        other = next(name for name in graph.entities if name not in matched)
    store.mutate(lambda graph: graph.add_observations([(other, ["coffee again"])]))  # one more entity matches
    again = searcher.search([Target("default", store)], "coffee", "keyword", None, None)
    with pytest.raises(CursorError) as refused:
        results.search(again, Budget(3000), first["nextCursor"], asked)
    assert "what matches the query is not the same as for the first page" in str(refused.value)
    assert "entities or relations were added or removed" not in str(refused.value)
    assert "Call search_nodes again without cursor" in str(refused.value)


def test_a_long_entity_type_is_repeated_by_the_caller_not_carried_in_the_cursor():
    kind = "T" * 20_000
    graph = KnowledgeGraph()
    graph.create_entities([Entity(f"E{i}", kind, ["x" * 300]) for i in range(300)])
    structured, text = results.read_graph(graph, Budget(5000), GraphQuery(entity_type=kind), "default")
    assert len(structured["nextCursor"]) < 200 and "entityType=<the same entityType>" in text
    query = GraphQuery(entity_type=kind, cursor=structured["nextCursor"])
    second, _ = results.read_graph(graph, Budget(5000), query, "default")
    assert second["entities"][0]["name"] not in {e["name"] for e in structured["entities"]}
    with pytest.raises(CursorError, match="other arguments"):
        results.read_graph(graph, Budget(5000), GraphQuery(cursor=structured["nextCursor"]), "default")


def test_an_unknown_type_is_quoted_short_with_the_types_there_are():
    graph = KnowledgeGraph()
    graph.create_entities([Entity(f"E{i}", f"T{i % 20}-" + "x" * 20_000, ["o"]) for i in range(40)])
    structured, text = results.read_graph(graph, Budget(), GraphQuery(entity_type="y" * 1_000_000), "default")
    assert structured["entities"] == [] and len(text) < 2_000
    assert "1,000,000 characters" in text and "and 10 more" in text


def test_the_text_of_every_page_carries_its_cursor(keyword_store, graph_2000):
    """A model that reads only the text must be able to ask for the next page: the cursor is ours, never shortened
    to a placeholder as a long value of the caller's is (search cursors are longer than an echoed value)."""
    searcher = Searcher(EmbedderSlot("none"))
    outcome = searcher.search([Target("default", keyword_store)], "coffee", "keyword", None, None)
    asked = SearchCall("coffee", "keyword", None, None, None, ("default",))
    pages = [results.search(outcome, Budget(8000), None, asked)]
    pages.append(results.read_graph(graph_2000, Budget(5000), GraphQuery(entity_type="person"), "default"))
    pages.append(results.read_graph(graph_2000, Budget(5000), GraphQuery(detail="summary"), "default"))
    for structured, text in pages:
        assert f'cursor="{structured["nextCursor"]}"' in text.splitlines()[-1]


def test_counts_read_as_a_person_writes_them():
    ada = Entity("Ada", "person", ["drinks tea"])
    one = Outcome([LabelledHit(Hit(ada, "drinks tea", 0.8), "default", ())], "hybrid", None, False, None)
    assert present.matches_text(one).startswith("1 match (hybrid search")
    relations_only = Listing([], [("default", Relation("Ada", "Bob", "knows"))])
    line = present.range_line(relations_only, 0, len(relations_only))
    assert line.startswith("Entities none; relations 1–1 of 1") and "of 0" not in line
