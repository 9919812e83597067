"""Large graphs for the tests of the result budget: made by code, the same every run."""

from __future__ import annotations

import json
import random

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
