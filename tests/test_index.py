"""Search indexes kept up to date change by change: they score exactly as an index built from scratch, a small
change costs no rebuild, vectors come from the memory's own cache (pruned), and released indexes come back right."""

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_server import index as index_module
from memory_server.contexts import ContextConfig, ContextRegistry, Contexts
from memory_server.embeddings import EmbedderSlot
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.keyword import KeywordIndex
from memory_server.resources import LiveUpdates
from memory_server.search import GraphIndex
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore
from memory_server.vector_cache import caches_of

QUERIES = ["who plays chess", "violin", "Ann", "trip to Lisbon", "entity 3", "where do I live", "red"]
WORDS = "Ann Bob chess violin plays red truck Lisbon trip lives hiking nurse the a of".split()


@pytest.fixture(scope="module")
def slot():
    slot = EmbedderSlot()
    slot.start()
    return slot


@pytest.fixture(scope="module")
def embedder(slot):
    return slot.get()[0]


def ranked(index: GraphIndex, embedder, query: str, mode: str = "hybrid"):
    return [
        (h.entity.name, h.observation, h.score, h.rank, h.relevance)
        for h in index.candidates(query, mode, embedder, 12)
    ]


def assert_same_as_scratch(index: GraphIndex, graph: KnowledgeGraph, embedder) -> None:
    fresh = GraphIndex(graph)
    assert [e.name for e in index.entities] == [e.name for e in fresh.entities]
    assert np.array_equal(index.owner, fresh.owner) and list(index.observations) == list(fresh.observations)
    assert index.lexical.vocabulary.keys() == fresh.lexical.vocabulary.keys()
    for query in QUERIES:
        assert index.lexical.scores(query).tobytes() == fresh.lexical.scores(query).tobytes(), query
        if embedder is not None:
            assert index.cosines(embedder, query).tobytes() == fresh.cosines(embedder, query).tobytes(), query
        for mode in ("hybrid", "semantic"):
            assert ranked(index, embedder, query, mode) == ranked(fresh, embedder, query, mode), (query, mode)


def people(count: int = 40) -> KnowledgeGraph:
    graph = KnowledgeGraph()
    graph.create_entities(
        Entity(
            f"entity {n}", "person" if n % 3 else "place", [f"{WORDS[n % 9]} {WORDS[(n * 7) % 15]} note {n}"] * (n % 4)
        )
        for n in range(count)
    )
    graph.create_entities([Entity("Ann", "person", ["plays chess on Mondays", "lives in Lisbon"])])
    graph.create_relations([Relation("Ann", "entity 1", "knows")])
    return graph


changes = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 60), st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)),
        st.tuples(st.just("forget"), st.integers(0, 60), st.integers(0, 3)),
        st.tuples(st.just("delete"), st.integers(0, 60)),
        st.tuples(st.just("create"), st.integers(0, 90), st.lists(st.sampled_from(WORDS), max_size=4)),
        st.tuples(st.just("retype"), st.integers(0, 60)),
    ),
    min_size=1,
    max_size=6,
)


def apply(graph: KnowledgeGraph, change) -> None:
    names = list(graph.entities)
    kind, number, *rest = change
    name = names[number % len(names)] if names else None
    if kind == "add" and name:
        graph.add_observations([(name, [" ".join(rest[0])])])
    elif kind == "forget" and name and graph.entities[name].observations:
        observations = graph.entities[name].observations
        graph.delete_observations([(name, [observations[rest[0] % len(observations)]])])
    elif kind == "delete" and name:
        graph.delete_entities([name])
    elif kind == "create":
        graph.create_entities([Entity(f"new {number}", "thing", [" ".join(rest[0])] if rest[0] else [])])
    elif kind == "retype" and name:
        entity = graph.entities[name]  # a type change rewrites the entity as a new one of the same name
        graph.delete_entities([name])
        graph.create_entities([Entity(name, entity.entity_type + "x", list(entity.observations))])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(changes, min_size=1, max_size=5), compact=st.booleans())
def test_an_index_updated_change_by_change_ranks_as_one_built_from_scratch(embedder, monkeypatch, steps, compact):
    monkeypatch.setattr(index_module, "COMPACT_AFTER", 0 if compact else 10**9)
    graph = people()
    index = GraphIndex(graph)
    index.embed(embedder)
    for batch in steps:
        for change in batch:
            apply(graph, change)
        index.update(graph)
        assert_same_as_scratch(index, graph, embedder)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(changes, st.booleans()), min_size=1, max_size=4))
def test_an_index_updated_from_the_stores_change_log_ranks_as_one_built_from_scratch(tmp_path_factory, slot, steps):
    # The searcher asks the store what changed (store.changes_since) and compares only those entities: after writes
    # by this store and by another one on the same file (which this store follows), it ranks as a fresh index.
    folder = tmp_path_factory.mktemp("log")
    store = GraphStore(folder / "memory.jsonl")
    store.mutate(lambda g: g.create_entities(people().entity_list()))
    store.mutate(lambda g: g.create_relations(people().relations.values()))
    searcher = Searcher(slot)
    searcher.search([Target("m", store)], "violin", "hybrid", 5, None)
    index = searcher.holds(store)
    for batch, by_another in steps:
        writer = GraphStore(store.path) if by_another else store
        writer.mutate(lambda g: [apply(g, change) for change in batch])
        searcher.search([Target("m", store)], "violin", "hybrid", 5, None)
        assert searcher.holds(store) is index and searcher.built == 1
        with store.reading() as graph:
            assert_same_as_scratch(index, graph, slot.get()[0])


def test_a_graph_read_again_from_the_file_updates_nothing_that_did_not_change(embedder):
    graph = people()
    index = GraphIndex(graph)
    index.embed(embedder)
    copy = KnowledgeGraph.parse("\n".join(graph.lines()))  # the same content, all new objects
    copy.add_observations([("entity 5", ["now plays the violin"])])
    before = embedder.encoded
    index.update(copy)
    assert embedder.encoded == before  # nothing embedded yet: vectors are made when a search needs them
    index.embed(embedder)
    assert embedder.encoded - before == 1  # the new observation alone; its entity's other texts kept their vectors
    assert index.documents.dead == 1 + 1  # entity 5's old name and observation documents
    assert_same_as_scratch(index, copy, embedder)


def test_the_updated_index_is_right_before_its_vectors_are_made_too(embedder):
    graph = people()
    index = GraphIndex(graph)
    graph.add_observations([("Ann", ["owns a red truck"])])
    index.update(graph)
    graph.delete_observations([("Ann", ["lives in Lisbon"])])
    index.update(graph)
    assert_same_as_scratch(index, graph, embedder)


def test_without_a_model_the_keyword_scores_follow_the_changes():
    graph = people()
    index = GraphIndex(graph)
    graph.delete_entities(["entity 2", "entity 3"])
    graph.add_observations([("Ann", ["violin lessons on Fridays"])])
    index.update(graph)
    assert_same_as_scratch(index, graph, None)


def test_the_keyword_index_follows_changes(tmp_path):
    graph = people()
    index = KeywordIndex(graph)
    graph.add_observations([("entity 4", ["bought a Violin"])])
    graph.delete_entities(["entity 1"])
    graph.create_entities([Entity("Zoe", "person", ["violinist"])])
    index.update(graph)
    fresh = KeywordIndex(graph)
    for needle in ("violin", "entity 1", "note", "", "ann\x00x"):
        assert [(h.entity.name, h.observation) for h in index.hits(needle, None)] == [
            (h.entity.name, h.observation) for h in fresh.hits(needle, None)
        ]


def store_with(tmp_path, name: str, entities) -> GraphStore:
    store = GraphStore(tmp_path / f"{name}.jsonl")
    store.mutate(lambda g: g.create_entities(Entity(e.name, e.entity_type, list(e.observations)) for e in entities))
    return store


def notes(count: int, topic: str = "note") -> list[Entity]:
    return [
        Entity(f"{topic} {n}", "note", [f"{topic} {n} about {WORDS[n % len(WORDS)]}", f"written on day {n}"])
        for n in range(count)
    ]


def test_a_one_line_change_updates_the_index_without_a_rebuild(tmp_path, slot, embedder):
    store = store_with(tmp_path, "memory", notes(200))
    searcher = Searcher(slot)
    before = searcher.search([Target("m", store)], "saxophone", "hybrid", 5, None).hits
    assert not any("saxophone" in (h.hit.observation or "") for h in before)  # related words may find the violin
    index = searcher.holds(store)
    assert searcher.built == 1 and index.updates == 0
    GraphStore(store.path).mutate(lambda g: g.add_observations([("note 7", ["plays the saxophone on Sundays"])]))
    before = embedder.encoded
    after = searcher.search([Target("m", store)], "saxophone", "hybrid", 5, None)
    assert searcher.built == 1 and searcher.holds(store) is index and index.updates == 1
    assert embedder.encoded - before == 1  # the new observation, nothing else
    assert (after.hits[0].hit.entity.name, after.hits[0].hit.observation) == (
        "note 7",
        "plays the saxophone on Sundays",
    )
    keyword = searcher.search([Target("m", store)], "sundays", "keyword", 5, None)
    GraphStore(store.path).mutate(lambda g: g.delete_entities(["note 7"]))
    assert searcher.search([Target("m", store)], "sundays", "keyword", 5, None).hits == []
    assert keyword.hits and searcher.built == 2 and searcher.holds(store, KeywordIndex).updates == 1


def test_caches_are_per_memory_and_hold_only_their_own_vectors(tmp_path, embedder):
    slot = EmbedderSlot(cache_dir=tmp_path / "vectors")
    work, home = store_with(tmp_path, "work", notes(30, "client")), store_with(tmp_path, "home", notes(5, "garden"))
    searcher = Searcher(slot)
    searcher.search([Target("work", work)], "client", "hybrid", 5, None)
    searcher.search([Target("home", home)], "garden", "hybrid", 5, None)
    [work_cache] = caches_of(tmp_path / "vectors", work.path)
    [home_cache] = caches_of(tmp_path / "vectors", home.path)
    assert work_cache.path != home_cache.path
    assert (work_cache.records, home_cache.records) == (30 * 3, 5 * 3)


def test_a_restarted_server_reads_its_vectors_bit_for_bit_from_the_cache(tmp_path, embedder):
    slot = EmbedderSlot(cache_dir=tmp_path / "vectors")
    store = store_with(tmp_path, "memory", notes(50))
    Searcher(slot).search([Target("m", store)], "violin", "hybrid", 5, None)
    before = embedder.encoded
    restarted = Searcher(slot)
    outcome = restarted.search([Target("m", GraphStore(store.path))], "violin", "hybrid", 5, None)
    assert embedder.encoded == before  # nothing embedded again
    from_model = GraphIndex(KnowledgeGraph.parse(store.path.read_bytes()))
    with store.reading():
        cached = restarted._indexes[(store.path, GraphIndex)].index
    for query in QUERIES:
        assert cached.cosines(embedder, query).tobytes() == from_model.cosines(embedder, query).tobytes()
    assert outcome.hits


def test_the_cache_is_pruned_of_vectors_no_longer_used(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr("memory_server.vector_cache.PRUNE_SLACK", 10)
    slot = EmbedderSlot(cache_dir=tmp_path / "vectors")
    store = store_with(tmp_path, "memory", notes(60))
    searcher = Searcher(slot)
    searcher.search([Target("m", store)], "violin", "hybrid", 5, None)
    assert caches_of(tmp_path / "vectors", store.path)[0].records == 180
    store.mutate(lambda g: g.delete_entities([f"note {n}" for n in range(10, 60)]))
    store.mutate(lambda g: g.add_observations([("note 1", ["a new fact"])]))
    searcher.search([Target("m", store)], "violin", "hybrid", 5, None)
    assert caches_of(tmp_path / "vectors", store.path)[0].records == 10 * 3 + 1
    before = embedder.encoded
    Searcher(slot).search([Target("m", GraphStore(store.path))], "violin", "hybrid", 5, None)
    assert embedder.encoded == before  # what was kept is all a restarted server needs


def test_released_indexes_are_rebuilt_right(tmp_path, slot):
    first, second = store_with(tmp_path, "one", notes(40, "alpha")), store_with(tmp_path, "two", notes(40, "beta"))
    searcher = Searcher(slot, budget=0)  # keeps only the index in use
    before = searcher.search([Target("one", first)], "alpha about violin", "hybrid", 5, None)
    searcher.search([Target("two", second)], "beta", "hybrid", 5, None)
    assert searcher.released == 1 and searcher.holds(first) is None and searcher.holds(second) is not None
    first.mutate(lambda g: g.add_observations([("alpha 3", ["plays the violin"])]))
    again = searcher.search([Target("one", first)], "alpha about violin", "hybrid", 5, None)
    assert searcher.built == 3
    with first.reading() as graph:
        expected = GraphIndex(graph).rank("alpha about violin", "hybrid", slot.get()[0], 5)
    assert [(h.hit.entity.name, h.hit.observation, h.hit.score) for h in again.hits] == [
        (h.entity.name, h.observation, h.score) for h in expected
    ]
    assert before.hits[0].hit.entity.name.startswith("alpha")


def test_the_keyword_index_of_a_graph_emptied_and_filled_again():
    graph = people(3)
    index = KeywordIndex(graph)
    graph.delete_entities(list(graph.entities))
    index.update(graph)
    assert index.hits("ann", None) == []
    graph.create_entities([Entity("Ann", "person", ["likes tea"])])
    index.update(graph)
    assert [h.entity.name for h in index.hits("tea", None)] == ["Ann"]


def test_an_index_emptied_and_filled_again_ranks_as_a_new_one(embedder):
    graph = people(3)
    index = GraphIndex(graph)
    index.embed(embedder)
    graph.delete_entities(list(graph.entities))
    index.update(graph)
    assert index.candidates("ann", "hybrid", embedder, 5) == []
    graph.create_entities([Entity("Ann", "person", ["plays the violin"]), Entity("Bob", "person", [])])
    index.update(graph)
    assert_same_as_scratch(index, graph, embedder)


def test_a_memory_released_while_idle_is_searched_again_from_its_file_and_its_cache(tmp_path, embedder, monkeypatch):
    # What a server does with memories not used lately (resources.LiveUpdates.trim): their parsed graphs and search
    # indexes go. The next search reads the file again (with another process's change made meanwhile), takes the
    # vectors of unchanged text from the memory's own cache, and ranks as an index made from scratch.

    registry = ContextRegistry(tmp_path / "cfg", tmp_path / "default.jsonl")
    work_path = tmp_path / "work.jsonl"
    store_with(tmp_path, "work", notes(60, "client"))
    contexts = Contexts(registry)
    registry.add(ContextConfig(name="work", path=str(work_path)))
    searcher = Searcher(EmbedderSlot(cache_dir=tmp_path / "vectors"))
    work = contexts.store(contexts.resolve("work"))
    query = "client about violin"
    searcher.search([Target("work", work)], query, "hybrid", 5, None)
    home = contexts.store(contexts.resolve())
    searcher.search([Target("default", home)], "anything", "hybrid", 5, None)  # used last: it stays
    monkeypatch.setattr(contexts, "trim", functools.partial(contexts.trim, limit=0))
    LiveUpdates(contexts, searcher, bus=None).trim()
    assert work.resident_bytes == 0 and searcher.holds(work) is None and searcher.holds(home) is not None
    GraphStore(work_path).mutate(lambda g: g.add_observations([("client 3", ["plays the violin on Fridays"])]))
    encoded = searcher.embeddings.get()[0].encoded
    again = searcher.search([Target("work", work)], query, "hybrid", 5, None)
    assert work.last_load.how == "parsed"  # the whole file, once: nothing was held
    assert searcher.embeddings.get()[0].encoded - encoded == 1  # the new observation; the rest from the cache
    with work.reading() as graph:
        expected = GraphIndex(graph).rank(query, "hybrid", embedder, 5)
    assert [(h.hit.entity.name, h.hit.observation, h.hit.score) for h in again.hits] == [
        (h.entity.name, h.observation, h.score) for h in expected
    ]
    assert ("client 3", "plays the violin on Fridays") in [(h.hit.entity.name, h.hit.observation) for h in again.hits]
