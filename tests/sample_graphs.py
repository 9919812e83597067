"""Large graphs and texts for the tests of the result budget: made by code, the same every run."""

from __future__ import annotations

import json
import random

from memory_server.budget import Budget, json_tokens, text_tokens

TYPES = ["person", "person", "project", "city", "Person", "tool"]
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "hiking",
    "chess",
    "Lisbon",
    "café",
    "東京",
    "naïve",
    "coffee",
    "weekend",
    "roadmap",
]


def big_graph_text(n: int, seed: int = 7) -> str:
    """`n` entities with 0-6 observations of varied length (some non-ASCII), about 1.5 relations each, some
    relations to entities that do not exist."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        observations = [" ".join(rng.choices(WORDS, k=rng.randint(2, 30))) for _ in range(rng.randint(0, 6))]
        lines.append({"type": "entity", "name": f"E{i}", "entityType": rng.choice(TYPES), "observations": observations})
    for i in range(n * 3 // 2):
        source, target = f"E{rng.randrange(n)}", f"E{rng.randrange(n)}"
        if i % 97 == 0:
            target = f"missing {i}"
        lines.append({"type": "relation", "from": source, "to": target, "relationType": rng.choice(["knows", "uses"])})
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


def pasted(seed: int, words: int = 40_000) -> str:
    vocabulary = ["the", "budget", "report", "quarterly", "revenue", "forecast", "meeting", "notes", "deadline"]
    return " ".join(vocabulary[(i * 7 + seed) % len(vocabulary)] for i in range(words))  # ~300,000 characters


def within(budget: Budget, shaped: tuple[dict, str]) -> bool:
    structured, text = shaped
    return budget.unlimited or max(text_tokens(text), json_tokens(structured)) <= budget.max_tokens
