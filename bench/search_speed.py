"""Search speed and memory on synthetic graphs of 10k, 100k, 200k and 1M observations (5 per entity).

For each size it prints the time to build the index (tokenise + BM25 + embed every document with the bundled
model), the median and p95 latency of hybrid, semantic and keyword queries (limit 10), and the process's peak
resident memory so far. Targets (issue 4): hybrid <= 5 ms at 100k observations, <= 60 ms at 1M, on 2 cores.

A second table times a search right after a one-observation write (the index brought up to date by the change,
then the query), against a search with no write; issue 14's goal is at most 3x at 200k observations.

The user tables (--user-sizes) time finding the memory's user (memory_server.user) in `bench/vs_upstream.py`'s
graph (N/5 people, 5 observations and 1 relation each) with a persona of bench/personal_memory/ in it (--persona):
the lookup from scratch, and the lookup after a one-observation add_observations (the index updated by the change
first, untimed); then, through a Searcher on a real store (--user-search-sizes, which embeds the memory), a
first-person hybrid search right after such a write against another question right after one: after every edit
the first first-person question finds the user again.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_speed.py [--sizes 10000,100000,200000,1000000] [--queries 200]
    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_speed.py --sizes '' --user-sizes 200000,1000000
    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_speed.py --sizes '' --user-sizes 200000 --colleagues
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the server does (memory_server.cli), before numpy loads

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from memory_server.embeddings import EmbedderSlot, load_embedder
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.keyword import KeywordIndex
from memory_server.search import GraphIndex
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore
from memory_server.user import user_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from personal_memory import CONTEXTS, DATA, read_memory, write_store
from vs_upstream import person_name, write_graph

SUBJECTS = "Ann Bob Carla Dev Emma Farid Gita Hugo Ines Jonas Kemal Lena Mateo Nia Omar Priya".split()
VERBS = "likes visited bought fixed wrote planned cooked painted studied repaired ordered built cleaned".split()
THINGS = (
    "a red bicycle|the kitchen sink|a birthday cake|the quarterly report|a trip to Lisbon|the garden fence|"
    "a chess tournament|the new laptop|a pottery class|the team offsite|a sourdough loaf|the roof gutters|"
    "a violin lesson|the tax return|a hiking route|the database migration|a jazz concert|the school play"
).split("|")
WHEN = "on Monday|last weekend|in March|every morning|after work|during the holidays|yesterday|next year".split("|")
QUERIES = [
    "who went cycling",
    "what happened with the taxes",
    "music lessons",
    "Ann's trip",
    "baking bread at home",
    "fixing things in the house",
    "work presentations and reports",
    "when was the concert",
    "where do I live",  # first-person questions: the user's entity, the roles of the others
    "what does my sister do",
]


def synthetic_graph(observations: int, seed: int = 7) -> KnowledgeGraph:
    rng = np.random.default_rng(seed)
    graph = KnowledgeGraph()
    entities = []
    for number in range(observations // 5):
        facts = [
            f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(THINGS)} {rng.choice(WHEN)} "
            f"(note {rng.integers(1e6)})"
            for _ in range(5)
        ]
        entities.append(Entity(f"entity-{number}", str(rng.choice(["person", "project", "event", "place"])), facts))
    user = Entity("default_user", "person", ["Name: Priya", "Lives in Leeds", "Works as a nurse"])
    graph.create_entities([user, *entities])
    graph.create_relations(
        Relation("default_user", f"entity-{n}", kind) for n, kind in ((0, "sibling"), (1, "works at"), (2, "knows"))
    )
    return graph


def timed(fn, repeat: int) -> list[float]:
    times = []
    for i in range(repeat):
        started = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - started) * 1000)
    return times


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,200000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--writes", type=int, default=40, help="one-observation writes timed at each size")
    parser.add_argument("--user-sizes", default="200000,1000000", help="sizes of the user tables ('' for none)")
    parser.add_argument("--user-search-sizes", default="200000", help="sizes of the first-person search table")
    parser.add_argument("--persona", default="hannah", help="the user, from bench/personal_memory/")
    parser.add_argument("--user-writes", type=int, default=10, help="writes timed at each size of the user tables")
    parser.add_argument("--colleagues", action="store_true", help="every person's notes name the user too")
    options = parser.parse_args()
    if options.sizes:
        speed(options)
    if options.user_sizes or options.user_search_sizes:
        user_tables(options)


def speed(options: argparse.Namespace) -> None:
    after_write = []
    embedder, _ = load_embedder(None)
    print(f"model: {embedder.name}, {embedder.dim} dimensions")
    print(
        "| observations | build index s | embed s | hybrid p50 / p95 ms | semantic p50 ms | keyword p50 ms "
        "| peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in (int(s) for s in options.sizes.split(",")):
        graph = synthetic_graph(size)
        started = time.perf_counter()
        index = GraphIndex(graph)
        built = time.perf_counter() - started
        started = time.perf_counter()
        index.embed(embedder)
        embedded = time.perf_counter() - started
        keyword = KeywordIndex(graph)

        def query(i: int) -> str:
            return QUERIES[i % len(QUERIES)]

        hybrid = timed(lambda i: index.rank(query(i), "hybrid", embedder, 10), options.queries)
        semantic = timed(lambda i: index.rank(query(i), "semantic", embedder, 10), options.queries)
        words = timed(lambda i: keyword.hits(query(i).split()[-1], 10), options.queries)
        print(
            f"| {size:,} | {built:.2f} | {embedded:.2f} | {statistics.median(hybrid):.2f} / "
            f"{np.percentile(hybrid, 95):.2f} | {statistics.median(semantic):.2f} | {statistics.median(words):.3f} "
            f"| {peak_rss_mb():.0f} |",
            flush=True,
        )
        after_write.append(_after_write(graph, index, keyword, embedder, statistics.median(hybrid), options.writes))
    print("\nSearch right after a one-observation write (update + query), medians:\n")
    print("| observations | hybrid, no write ms | hybrid after a write ms | ratio | keyword after a write ms |")
    print("|---|---|---|---|---|")
    for row in after_write:
        print(row)


def _after_write(graph, index, keyword, embedder, no_write: float, writes: int) -> str:
    """Add one observation to a random entity, then search: the index (and the keyword index) update by the delta."""
    rng = np.random.default_rng(11)
    names = list(graph.entities)

    def write(i: int) -> None:
        graph.add_observations([(names[rng.integers(len(names))], [f"Nia repaired the garden fence (write {i})"])])

    def hybrid(i: int) -> None:
        write(i)
        index.update(graph)
        index.rank(QUERIES[i % len(QUERIES)], "hybrid", embedder, 10)

    def words(i: int) -> None:
        write(i)
        keyword.update(graph)
        keyword.hits("fence", 10)

    after = statistics.median(timed(hybrid, writes))
    keywords = statistics.median(timed(words, writes))
    size = sum(len(e.observations) for e in graph.entities.values())
    return f"| {size:,} | {no_write:.2f} | {after:.2f} | {after / no_write:.1f}x | {keywords:.2f} |"


FIRST_PERSON = ["where do I live", "who is my boss", "what does my mother do", "what do I drink"]
OTHER = ["who lives in Lisbon and drinks espresso", "someone learning the cello", "product managers at Globex"]
QUESTIONS = {"other": OTHER, "first-person": FIRST_PERSON}


def user_tables(options: argparse.Namespace) -> None:
    sizes = sorted({int(s) for s in f"{options.user_sizes},{options.user_search_sizes}".split(",") if s})
    lookups, searches = [], []
    for size in sizes:
        with tempfile.TemporaryDirectory() as scratch:
            store = persona_store(Path(scratch), size, options.persona, options.colleagues)
            if str(size) in options.user_sizes.split(","):
                lookups.append(lookup_row(store, size, options.user_writes))
            if str(size) in options.user_search_sizes.split(","):
                searches.append(search_row(store, size, options.user_writes))
    if lookups:
        print(f"\nFinding the user ({options.persona}) among vs_upstream's people, medians:\n")
        print("| observations | user found | lookup from scratch ms | lookup after a one-observation write ms |")
        print("|---|---|---|---|")
        print("\n".join(lookups))
    if searches:
        print("\nHybrid search through a Searcher right after a one-observation add_observations, medians:\n")
        print(
            "| observations | no write: other question ms | no write: first-person ms | after a write: other "
            "question ms | after a write: first-person ms | first-person / other, after a write |"
        )
        print("|---|---|---|---|---|---|")
        print("\n".join(searches), flush=True)


def persona_store(folder: Path, observations: int, persona: str, colleagues: bool = False) -> GraphStore:
    """vs_upstream's graph of observations/5 people, and a persona's three memories merged into it (with
    `colleagues`, each person's notes also say they are the user's colleague: "Hannah's colleague")."""
    write_graph(folder / "memory.jsonl", observations // 5)
    memories = [read_memory(DATA / persona / f"{context}.txt") for context in CONTEXTS]
    entities = [entity for found, _ in memories for entity in found]
    store = write_store(folder, "memory", entities, [relation for _, found in memories for relation in found])
    if colleagues:
        note = f"{entities[0].name.split()[0]}'s colleague"
        people = [(person_name(n), [note]) for n in range(observations // 5)]
        store.mutate(lambda graph: graph.add_observations(people))
    return store


def one_write(store: GraphStore, people: int, i: int) -> None:
    name = person_name((i * 7919 + 13) % people)
    store.mutate(lambda graph: graph.add_observations([(name, [f"Visited Porto in May (write {i})"])]))


def lookup_row(store: GraphStore, size: int, writes: int) -> str:
    with store.reading() as graph:
        index = GraphIndex(graph)

        def from_scratch(_: int) -> None:
            index._entity_cache = index._names = None  # as a new index has them: nothing read yet
            user_of(index)

        scratch = timed(from_scratch, 3)
        index._entity_cache = None
        user = index.user
        name = index.entities[user.number].name if user is not None else "none"
    after = []
    for i in range(writes):
        version = store.version
        one_write(store, size // 5, i)
        with store.reading() as graph:
            changes = store.changes_since(version)
            index.update(graph, changes.entities if changes is not None else None)
            after += timed(lambda _: index.user, 1)
    return f"| {size:,} | {name} | {statistics.median(scratch):.1f} | {statistics.median(after):.1f} |"


def search_row(store: GraphStore, size: int, writes: int) -> str:
    searcher = Searcher(EmbedderSlot())
    targets = [Target("memory", store)]

    def search(query: str) -> None:
        searcher.search(targets, query, "hybrid", 10, None)

    search(FIRST_PERSON[0])  # embeds the memory and finds the user
    still = {kind: timed(lambda i, q=questions: search(q[i % len(q)]), writes) for kind, questions in QUESTIONS.items()}
    after: dict[str, list[float]] = {kind: [] for kind in QUESTIONS}
    for i in range(writes):  # each question right after its own write
        for k, (kind, questions) in enumerate(QUESTIONS.items()):
            one_write(store, size // 5, 2 * i + k)
            started = time.perf_counter()
            search(questions[i % len(questions)])
            after[kind].append((time.perf_counter() - started) * 1000)
    cells = [f"{statistics.median(times[kind]):.1f}" for times in (still, after) for kind in QUESTIONS]
    ratio = statistics.median(after["first-person"]) / statistics.median(after["other"])
    return f"| {size:,} | " + " | ".join(cells) + f" | {ratio:.1f}x |"


if __name__ == "__main__":
    main()
