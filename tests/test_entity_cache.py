"""What an index keeps of each entity is carried from one state of the memory to the next: after a change, values
are those computed from scratch, and only the entities the change touched are read again."""

import numpy as np

from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.search import GraphIndex

ASKED: list[list[int]] = []  # the entity numbers each compute was asked for


def observations(index: GraphIndex, numbers: np.ndarray) -> np.ndarray:
    ASKED.append(numbers.tolist())
    return index.documents.snapshot.counts[numbers].copy()


def ends(index: GraphIndex, numbers: np.ndarray) -> np.ndarray:
    names = [index.entities[n].name for n in numbers.tolist()]
    return np.asarray([len(index.graph.relations_touching([name])) for name in names], dtype=np.int64)


def hello(index: GraphIndex, number: int) -> int | None:
    said = sum("hello" in o for o in index.entities[number].observations)
    return said or None


def said_hello(index: GraphIndex) -> dict[int, int]:
    return {n: v for n in range(len(index.entities)) if (v := hello(index, n)) is not None}


def hellos(observations) -> int:
    return sum(o.count("hello") for o in observations)


def memory(count: int = 100) -> KnowledgeGraph:
    graph = KnowledgeGraph()
    graph.create_entities(Entity(f"e{n}", "thing", [f"note {n}"] + ["hello"] * (n % 3 == 0)) for n in range(count))
    return graph


def test_a_column_is_computed_again_only_for_the_entities_a_change_touched():
    graph = memory()
    index = GraphIndex(graph)
    ASKED.clear()
    index.entity_cache().column(index, "observations", observations)
    assert ASKED == [list(range(100))]
    graph.add_observations([("e5", ["one more"])])
    index.update(graph, {"e5"})
    graph.delete_entities(["e2"])
    graph.create_entities([Entity("new", "thing", ["a", "b", "c"])])
    index.update(graph)
    values = index.entity_cache().column(index, "observations", observations)
    assert ASKED[1:] == [[4, 99]]  # e5, now fifth, and the new entity, last
    assert values.tolist() == index.documents.snapshot.counts.tolist()


def test_sparse_values_and_totals_follow_their_entities():
    graph = memory()
    index = GraphIndex(graph)
    cache = index.entity_cache()
    cache.sparse("hello", None, hello, lambda: said_hello(index))
    cache.total("hellos", hellos, lambda: sum(hellos(e.observations) for e in graph.entities.values()))
    graph.delete_entities(["e0", "e1"])  # the numbers of all the others move
    graph.add_observations([("e4", ["hello again"]), ("e9", ["hello, hello"])])
    graph.delete_observations([("e99", ["hello"])])
    index.update(graph, {"e0", "e1", "e4", "e9", "e99"})
    cache = index.entity_cache()
    assert cache.sparse("hello", None, hello, dict) == said_hello(index)
    assert cache.total("hellos", hellos, int) == sum(hellos(e.observations) for e in graph.entities.values()) == 35


def test_a_relational_column_is_computed_again_when_the_relations_change():
    graph = memory(10)
    index = GraphIndex(graph)
    index.entity_cache().column(index, "ends", ends, relational=True)
    graph.create_relations([Relation("e1", "e2", "knows"), Relation("e1", "e3", "knows")])
    index.update(graph)
    assert index.entity_cache().column(index, "ends", ends, relational=True).tolist() == [0, 2, 1, 1, 0, 0, 0, 0, 0, 0]


def test_a_change_of_many_entities_starts_again():
    graph = memory(1000)
    index = GraphIndex(graph)
    index.entity_cache().column(index, "observations", observations)
    graph.add_observations([(f"e{n}", ["more"]) for n in range(0, 1000, 5)])
    index.update(graph)
    ASKED.clear()
    values = index.entity_cache().column(index, "observations", observations)
    assert ASKED == [list(range(1000))] and values.tolist() == index.documents.snapshot.counts.tolist()


def test_its_size_can_be_read_while_another_thread_fills_it():
    """A searcher weighs every index it keeps (Searcher._release) while the re-ranker's thread may be finding a
    user, and so adding values to the cache: the weighing must not trip over them."""
    graph = memory(10)
    index = GraphIndex(graph)
    cache = index.entity_cache()

    class Filling(np.ndarray):  # a column whose size is read just as another thread adds a column and a value
        @property
        def nbytes(self) -> int:
            cache.column(index, "observations", observations)
            cache.sparse("hello", None, hello, lambda: said_hello(index))
            return 0

    cache.column(index, "filling", lambda index, numbers: np.zeros(len(numbers)).view(Filling))
    assert index.nbytes > 0
