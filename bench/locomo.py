"""Retrieval quality of our search on LoCoMo (../shared/bench/locomo/locomo_dev.json), through our own code.

Two setups, each conversation in its own memory file written by our store:
- turns: every dialog turn is an entity (name: its dialog id, one observation "Speaker: text");
- facts: the dataset's extracted facts are observations of one entity per speaker.
For each question (categories 1-4 with evidence) it ranks the conversation's documents as a search returns them
(after the cut-off) and prints R@5, R@10, MRR, R@5 per category (multi-hop, temporal, open-domain, single-hop) and
the median query latency for the keyword, semantic and hybrid modes. `--set NAME=VALUE` overrides a constant of
memory_server.search, to measure an idea before making it the default.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/locomo.py [--data PATH] [--model FOLDER_OR_ID]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from personal_memory import override

from memory_server.embeddings import EmbedderSlot, load_embedder
from memory_server.graph import Entity
from memory_server.keyword import KeywordIndex
from memory_server.rerank import RerankerSlot
from memory_server.search import GraphIndex
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore

# The shared folder sits beside the checkout (main) or a few levels up (a worktree).
SHARED = next(
    (p / "shared" / "bench" / "locomo" for p in Path(__file__).resolve().parents if (p / "shared" / "bench").is_dir()),
    Path("shared/bench/locomo"),
)
MODES = ("keyword", "semantic", "hybrid", "reranked")  # reranked: hybrid read again by the transformer (rerank.py)
RERANKED = Searcher(EmbedderSlot(reranker=RerankerSlot()))


def shared_loader():
    """The shared evaluation script's loader, so questions and evidence are exactly those of the reference runs."""
    spec = importlib.util.spec_from_file_location("locomo_eval", SHARED / "locomo_retrieval_eval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["locomo_eval"] = module
    spec.loader.exec_module(module)
    return module.load_locomo


def build_graph(conversation, setup: str, folder: Path):
    """Write the conversation as a memory file with our store; return its two indexes and a map from a hit
    (entity name, observation) to the numbers of the documents it stands for."""
    store = GraphStore(folder / f"{conversation.sample_id}-{setup}.jsonl")
    documents: dict[tuple[str, str | None], list[int]] = {}
    entities: dict[str, Entity] = {}
    for number, text in enumerate(conversation.docs):
        speaker, _, said = text.partition(": ")
        if setup == "turns":
            name = conversation.doc_dia_ids[number][0] if conversation.doc_dia_ids[number] else f"turn {number}"
            name = name if name not in entities else f"{name}#{number}"
            entities[name] = Entity(name, "dialog turn", [text])
            documents.setdefault((name, text), []).append(number)
        else:
            entities.setdefault(speaker, Entity(speaker, "person", [])).observations.append(said)
            documents.setdefault((speaker, said), []).append(number)
    store.mutate(lambda graph: graph.create_entities(entities.values()))
    with store.reading() as graph:
        return GraphIndex(graph), KeywordIndex(graph), documents, store


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def evaluate(conversations, setup: str, mode: str, embedder, folder: Path) -> dict[str, float]:
    recall5, recall10, reciprocal, latency, category = [], [], [], [], []
    for conversation in conversations:
        index, keywords, documents, store = build_graph(conversation, setup, folder)
        if mode == "reranked":
            RERANKED.search([Target("m", store)], "warm up", "hybrid", 10, None)
            RERANKED.embeddings.reranker.get().wait(RERANKED.holds(store))  # read whole, as a server would have

        def rank(query: str, limit: int | None):
            if mode == "reranked":
                return [h.hit for h in RERANKED.search([Target("m", store)], query, "hybrid", limit, None).hits]
            return keywords.hits(query, limit) if mode == "keyword" else index.rank(query, mode, embedder, limit)

        for question in conversation.questions:
            started = time.perf_counter()
            rank(question.text, 10)
            latency.append(time.perf_counter() - started)
            hits = rank(question.text, None)
            rank_of = np.full(len(conversation.docs), np.iinfo(np.int64).max)
            for position, hit in enumerate(hits):
                for number in documents.get((hit.entity.name, hit.observation), []):
                    rank_of[number] = min(rank_of[number], position)
            best = np.array([rank_of[e].min() for e in question.evidence])
            category.append(question.category)
            recall5.append(float(np.mean(best < 5)))
            recall10.append(float(np.mean(best < 10)))
            reciprocal.append(0.0 if best.min() == np.iinfo(np.int64).max else 1.0 / (best.min() + 1))
    return {
        "R@5": statistics.fmean(recall5),
        "R@10": statistics.fmean(recall10),
        "MRR": statistics.fmean(reciprocal),
        "ms": statistics.median(latency) * 1000,
        "n": len(recall5),
        **{
            f"R@5 {name}": statistics.fmean(r for r, c in zip(recall5, category) if c == number)
            for number, name in CATEGORIES.items()
            if number in category
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED / "locomo_dev.json")
    parser.add_argument("--model", default=None, help="model2vec folder or hub id (default: the bundled model)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--setups", default="turns,facts")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a search constant")
    options = parser.parse_args(argv)
    override(options.set)
    embedder, note = load_embedder(options.model)
    print(f"model: {embedder.name if embedder else None}{f' ({note})' if note else ''}")
    load = shared_loader()
    names = " | ".join(f"R@5 {n}" for n in CATEGORIES.values())
    print(f"| setup | mode | questions | R@5 | R@10 | MRR | {names} | median query ms |")
    print("|---|---|---|---|---|---|" + "---|" * len(CATEGORIES) + "---|")
    with tempfile.TemporaryDirectory() as folder:
        for setup, source in (("turns", "turns"), ("facts", "observations")):
            if setup not in options.setups.split(","):
                continue
            conversations, _ = load(str(options.data), {1, 2, 3, 4}, source=source)
            for mode in options.modes.split(","):
                m = evaluate(conversations, setup, mode, embedder, Path(folder))
                by_category = " | ".join(f"{m.get(f'R@5 {n}', float('nan')):.3f}" for n in CATEGORIES.values())
                print(
                    f"| {setup} | {mode} | {m['n']} | {m['R@5']:.3f} | {m['R@10']:.3f} | {m['MRR']:.3f} "
                    f"| {by_category} | {m['ms']:.2f} |"
                )


if __name__ == "__main__":
    main()
