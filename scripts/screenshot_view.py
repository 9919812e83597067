"""Make docs/view.png, the README's picture of the graph page: a small made-up memory drawn by `view`, one entity
clicked, in headless Chromium (Debian's, at /usr/bin/chromium). Run from the repository root:

    .venv/bin/python scripts/screenshot_view.py [--dark]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.view import render_page

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip

PEOPLE = ["Ann Lee", "Bob Stone", "Chen Wei", "Dara Okafor", "Eli Novak", "Fatima Zahra", "Gus Berg", "Hana Sato"]
PROJECTS = ["Shop", "Billing API", "Mobile app", "Data warehouse", "Design system"]
TOOLS = ["Python", "PostgreSQL", "React", "Kubernetes", "Redis", "Stripe"]
PLACES = ["Berlin office", "Lisbon office"]


def sample() -> KnowledgeGraph:
    rng = random.Random(3)
    graph = KnowledgeGraph()
    graph.create_entities(
        [Entity(p, "person", [f"{p.split()[0]} joined in {2018 + i % 6}", "prefers async reviews"])
         for i, p in enumerate(PEOPLE)]
        + [Entity(p, "project", [f"{p} ships every two weeks", "owned by the platform team"]) for p in PROJECTS]
        + [Entity(t, "technology", [f"{t} is used in production"]) for t in TOOLS]
        + [Entity(p, "place", ["hybrid office, three days a week"]) for p in PLACES]
    )  # fmt: skip
    graph.entities["Ann Lee"].observations[:] = [
        "pays rent on the first of the month",
        "leads the Shop project since 2023",
        "likes hiking in the Alps",
        "prefers async code reviews",
    ]
    relations = []
    for person in PEOPLE:
        relations.append(Relation(person, rng.choice(PROJECTS), "works on"))
        relations.append(Relation(person, rng.choice(PLACES), "based in"))
        relations.append(Relation(person, rng.choice(PEOPLE), "knows"))
    for project in PROJECTS:
        for tool in rng.sample(TOOLS, 2):
            relations.append(Relation(project, tool, "uses"))
    relations.append(Relation("Ann Lee", "Shop", "leads"))
    graph.create_relations(r for r in relations if r.source != r.target)
    return graph


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dark", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "view.png")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        page_file = Path(folder) / "memory.html"
        page_file.write_text(render_page(sample(), "work", Path("~/.ai-memory/work.jsonl")), encoding="utf-8")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            context = browser.new_context(
                viewport={"width": 1100, "height": 640}, color_scheme="dark" if options.dark else "light"
            )
            page = context.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_function("window.memoryView.settled", timeout=120_000)
            position = page.evaluate("window.memoryView.screenPosition('Ann Lee')")
            page.mouse.click(position["x"], position["y"])
            page.mouse.move(5, 300)  # no tooltip in the picture
            page.wait_for_timeout(500)
            options.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(options.out))
            browser.close()
    print(f"Wrote {options.out} ({options.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
