"""A query's cosines as the ranking reads them: a large index reads its moments, scans, and reads whole only the
documents asked for; what it returns is what computing every cosine gives."""

import numpy as np
import pytest
from test_index import people

from memory_server import cosines as cosines_module
from memory_server.embeddings import EmbedderSlot
from memory_server.search import GraphIndex


@pytest.fixture(scope="module")
def embedder():
    slot = EmbedderSlot()
    slot.start()
    return slot.get()[0]


@pytest.mark.parametrize("moved", [False, True])
def test_a_scanned_index_answers_as_one_that_computes_every_cosine(embedder, monkeypatch, moved):
    graph = people(300)
    index = GraphIndex(graph)
    index.embed(embedder)
    if moved:  # documents in other rows than their order, and dead rows among them
        graph.add_observations([("entity 5", ["plays the violin in a red truck"])])
        graph.delete_entities(["entity 9"])
        index.update(graph)
    for query in ("violin", "who lives in Lisbon", "a red truck for the trip"):
        monkeypatch.setattr(cosines_module, "SCAN_FROM", 10**9)
        every = index.cosines(embedder, query)
        monkeypatch.setattr(cosines_module, "SCAN_FROM", 0)
        scanned = index.cosines(embedder, query)
        assert scanned.scanned and not every.scanned
        documents = np.arange(index.documents.size)
        assert scanned.at(documents[::7]).tobytes() == every.at(documents[::7]).tobytes()
        total, squares = every.sums()
        assert scanned.sums() == pytest.approx((total, squares), rel=1e-6)
        values = every.at(documents)
        for floor in np.quantile(values, [0.5, 0.9, 0.99]).tolist():
            assert np.array_equal(scanned.reaching(floor), np.flatnonzero(values >= floor)), floor
