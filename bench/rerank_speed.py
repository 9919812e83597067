"""What the transformer re-ranker (memory_server/rerank.py) costs per search, beside the static ranking alone.

On the synthetic memories of bench/search_speed.py (5 observations per entity), through `Searcher.search` as the
server calls it (limit 10, hybrid): the median and p95 of the static search, of the re-ranked search the first time
each query is asked (its pool read on the spot, at most rerank.READ_AT_ONCE documents), and once those documents
are read (the steady state: a document is read once, then kept in the memory's vector cache; the query is
read every time).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/rerank_speed.py [--sizes 10000,100000] [--queries 40]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the server does (memory_server.cli), before numpy loads

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from search_speed import QUERIES, synthetic_graph

from memory_server import rerank
from memory_server.embeddings import EmbedderSlot
from memory_server.rerank import RerankerSlot
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore


def timed(searcher: Searcher, target: Target, queries: list[str]) -> list[float]:
    times = []
    for query in queries:
        start = time.perf_counter()
        searcher.search([target], query, "hybrid", 10, None)
        times.append((time.perf_counter() - start) * 1000)
    return times


def row(label: str, times: list[float]) -> str:
    p95 = sorted(times)[int(0.95 * (len(times) - 1))]
    return f"| {label} | {statistics.median(times):.1f} | {p95:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=40)
    options = parser.parse_args()
    queries = (QUERIES * (options.queries // len(QUERIES) + 1))[: options.queries]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        static = Searcher(EmbedderSlot(cache_dir=folder / "vectors"))
        reranked = Searcher(EmbedderSlot(cache_dir=folder / "vectors", reranker=RerankerSlot(None, folder / "v")))
        print(f"re-ranker: {reranked.embeddings.reranker.get() and reranked.embeddings.reranker.reader.name}")
        print("| observations, search | median ms | p95 ms |")
        print("|---|---|---|")
        for size in (int(s) for s in options.sizes.split(",")):
            store = GraphStore(folder / f"m{size}.jsonl")
            graph = synthetic_graph(size)
            entities, relations = graph.entity_list(), list(graph.relations.values())
            store.mutate(lambda g: (g.create_entities(entities), g.create_relations(relations)))
            target = Target("m", store)
            static.search([target], "warm up", "hybrid", 10, None)
            reranked.search([target], "warm up", "hybrid", 10, None)
            if size <= 5000:
                reranked.embeddings.reranker.reader.wait(reranked.holds(store))
            print(row(f"{size:,}, static", timed(static, target, queries)))
            print(row(f"{size:,}, re-ranked, first time", timed(reranked, target, list(dict.fromkeys(queries)))))
            rerank.QUERIES_KEPT = 0  # each query read again, as a new question would be
            print(row(f"{size:,}, re-ranked, pool read", timed(reranked, target, queries)))
            rerank.QUERIES_KEPT = 256


if __name__ == "__main__":
    main()
