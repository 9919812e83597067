import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_server.embeddings import EmbedderSlot
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.search import KeywordIndex, LexicalIndex, Searcher, Target, tokenize
from memory_server.store import GraphStore

PEOPLE = [
    Entity("Ann", "person", ["likes hiking in the mountains on weekends", "works as a nurse at the city hospital"]),
    Entity("Bob", "person", ["plays chess every evening", "drives a red pickup truck"]),
    Entity("Carla", "person", ["is allergic to peanuts", "moved to Lisbon in 2021"]),
    Entity("Annex building", "place", ["the storage room is on the second floor"]),
]


@pytest.fixture(scope="module")
def bundled():
    slot = EmbedderSlot()
    slot.start()
    return slot


def store_with(tmp_path, name: str, entities, relations=()) -> GraphStore:
    store = GraphStore(tmp_path / f"{name}.jsonl")
    store.mutate(
        lambda g: (
            g.create_entities(Entity(e.name, e.entity_type, list(e.observations)) for e in entities),
            g.create_relations(relations),
        )
    )
    return store


def first(outcome):
    hit = outcome.hits[0].hit
    return hit.entity.name, hit.observation


def test_a_question_phrased_differently_finds_the_observation(tmp_path, bundled):
    searcher = Searcher(bundled)
    store = store_with(tmp_path, "people", PEOPLE)
    assert first(searcher.search([Target("m", store)], "who goes walking outdoors?", "hybrid", 10, None)) == (
        "Ann",
        "likes hiking in the mountains on weekends",
    )
    assert first(searcher.search([Target("m", store)], "who lives in Portugal", "semantic", 10, None)) == (
        "Carla",
        "moved to Lisbon in 2021",
    )
    assert first(searcher.search([Target("m", store)], "who has a medical job", "semantic", 10, None))[0] == "Ann"
    assert first(searcher.search([Target("m", store)], "what vehicle does Bob own", "hybrid", 10, None)) == (
        "Bob",
        "drives a red pickup truck",
    )


def test_an_exact_name_match_ranks_first(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(bundled).search([Target("m", store)], "anne", "hybrid", 10, None)
    assert [h.hit.entity.name for h in outcome.hits[:1]] == ["Annex building"]
    outcome = Searcher(bundled).search([Target("m", store)], "Ann", "hybrid", 3, None)
    assert {h.hit.entity.name for h in outcome.hits[:2]} == {"Ann", "Annex building"}
    assert all(h.hit.observation is None for h in outcome.hits[:2])


def test_limit_min_score_and_the_search_description(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(bundled).search([Target("m", store)], "hospital job", "hybrid", 2, None)
    assert len(outcome.hits) == 2 and outcome.semantic and outcome.model.startswith("bundled:")
    scores = [h.hit.score for h in outcome.hits]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
    strict = Searcher(bundled).search([Target("m", store)], "hospital job", "hybrid", 10, 0.5)
    assert strict.hits and all(h.hit.score >= 0.5 for h in strict.hits)


def test_cross_context_hits_are_labelled_and_the_project_is_boosted(tmp_path, bundled):
    work = store_with(tmp_path, "work", [Entity("Deploy", "process", ["deploys go out on Tuesdays"])])
    project = store_with(tmp_path, "project", [Entity("Release", "process", ["we release the app on Fridays"])])
    targets = [Target("work", work), Target("project", project)]
    plain = Searcher(bundled).search(targets, "when do we ship new versions", "hybrid", 10, None)
    boosted = Searcher(bundled).search(
        [targets[0], Target("project", project, boost=0.15)], "when do we ship new versions", "hybrid", 10, None
    )
    assert {h.label for h in plain.hits} == {"work", "project"}
    project_score = {h.label: h.hit.score for h in plain.hits if h.hit.observation}["project"]
    assert {h.label: h.hit.score for h in boosted.hits if h.hit.observation}["project"] == pytest.approx(
        project_score + 0.15
    )
    assert boosted.hits[0].label == "project"


def test_without_a_model_hybrid_and_semantic_rank_by_keywords_and_say_so(tmp_path):
    slot = EmbedderSlot("none")
    slot.start()
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(slot).search([Target("m", store)], "chess evenings", "semantic", 10, None)
    assert not outcome.semantic and outcome.model is None
    assert "keywords" in outcome.note and "off" in outcome.note
    assert first(outcome) == ("Bob", "plays chess every evening")


def test_the_index_follows_changes_to_the_file(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    searcher = Searcher(bundled)
    assert searcher.search([Target("m", store)], "violin", "keyword", None, None).hits == []
    other = GraphStore(store.path)  # another process, as far as `store` can tell
    other.mutate(lambda g: g.add_observations([("Bob", ["plays the violin"])]))
    assert first(searcher.search([Target("m", store)], "violin", "keyword", None, None)) == ("Bob", "plays the violin")
    assert first(searcher.search([Target("m", store)], "violin music", "hybrid", 10, None)) == (
        "Bob",
        "plays the violin",
    )


def test_relations_of_the_hits_come_along(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE, [Relation("Ann", "Bob", "knows"), Relation("Carla", "Bob", "knows")])
    outcome = Searcher(bundled).search([Target("m", store)], "nurse", "keyword", None, None)
    assert [h.hit.entity.name for h in outcome.hits] == ["Ann"]
    assert [r.key for r in outcome.hits[0].relations] == [("Ann", "Bob", "knows")]


def test_bm25_prefers_rarer_words_and_normalises_to_one():
    index = LexicalIndex([tokenize("the cat sat"), tokenize("the dog sat"), tokenize("a cat and a dog")])
    scores = index.scores("cat")
    assert scores[1] == 0 and scores[0] > 0 and scores[2] > 0
    assert index.scores("zebra").max() == 0
    assert tokenize("Hiking hikes hiked stories") == ["hik", "hik", "hik", "story"]


def upstream_search(graph: KnowledgeGraph, query: str) -> list[Entity]:
    """The official server's searchNodes, written out plainly as the reference for keyword mode."""
    needle = query.lower()
    return [
        e
        for e in graph.entity_list()
        if needle in e.name.lower()
        or needle in e.entity_type.lower()
        or any(needle in o.lower() for o in e.observations)
    ]


def test_keyword_search_is_case_insensitive_substring_with_touching_relations(tmp_path):
    graph = KnowledgeGraph.parse(
        '{"type":"entity","name":"Ann","entityType":"person","observations":["likes hiking"]}\n'
        '{"type":"entity","name":"Shop","entityType":"project","observations":[]}\n'
        '{"type":"entity","name":"Bo","entityType":"dog","observations":[]}\n'
        '{"type":"relation","from":"Ann","to":"Shop","relationType":"works on"}\n'
    )
    assert [(h.entity.name, h.observation) for h in KeywordIndex(graph).hits("HIKING", None)] == [
        ("Ann", "likes hiking")
    ]
    assert [r.key for r in graph.relations_touching(["Ann"])] == [("Ann", "Shop", "works on")]
    assert [(h.entity.name, h.observation) for h in KeywordIndex(graph).hits("PROJ", None)] == [("Shop", None)]
    assert KeywordIndex(graph).hits("cat", None) == []


texts = st.text(alphabet=st.sampled_from("aAbBcC xé\x00İ"), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.lists(texts, max_size=3)), max_size=6), texts)
def test_keyword_mode_is_exactly_the_official_search(items, query):
    graph = KnowledgeGraph()
    graph.create_entities(Entity(n, t, list(o)) for n, t, o in items)
    expected = upstream_search(graph, query)
    assert [h.entity for h in KeywordIndex(graph).hits(query, None)] == expected
    assert [h.entity for h in KeywordIndex(graph).hits(query, 2)] == expected[:2]


def test_an_exact_name_beats_a_longer_name_and_any_boost(tmp_path, bundled):
    first = store_with(tmp_path, "first", [Entity("Annex", "place", ["a storage building"])])
    second = store_with(tmp_path, "second", [Entity("Ann", "person", ["a nurse"])])
    project = store_with(tmp_path, "project", [Entity("Notes", "note", ["Ann Ann Ann"])])
    targets = [Target("first", first), Target("second", second), Target("project", project, boost=0.15)]
    outcome = Searcher(bundled).search(targets, "ann", "hybrid", 10, None)
    assert [(h.label, h.hit.entity.name, h.hit.observation) for h in outcome.hits[:2]] == [
        ("second", "Ann", None),
        ("first", "Annex", None),
    ]
    assert all(0 <= h.hit.score <= 1 for h in outcome.hits)


def test_a_strong_match_leaves_out_the_unrelated_tail(tmp_path, bundled):
    store = store_with(tmp_path, "people", PEOPLE)
    outcome = Searcher(bundled).search([Target("m", store)], "chess", "hybrid", 10, None)
    assert [(h.hit.entity.name, h.hit.observation) for h in outcome.hits] == [("Bob", "plays chess every evening")]
