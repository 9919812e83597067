"""The graph page: built by view.py, loaded from file:// in Debian's headless Chromium, driven with Playwright
(which drives the system's browser here; it downloads none of its own)."""

from __future__ import annotations

import json
import random
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import server_env
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, sync_playwright

from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.view import page_data, render_page, script_json

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags this machine's closed network refuses Chromium's many connections.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SETTLE_BOUND_MS = 180_000  # generous: a shared, busy 2-core machine; the page itself stops its layout by 20 s


def small_graph() -> KnowledgeGraph:
    graph = KnowledgeGraph()
    graph.create_entities(
        [
            Entity("Ann", "person", ["likes hiking", "pays rent on the 1st"]),
            Entity("Bob", "person", ["</script><script>window.pwned = 1</script>", "<!-- not a comment"]),
            Entity("Shop", "project", ["an online shop", "uses \u2028 line separators"]),
            Entity("Notes", "document", []),
        ]
    )
    graph.create_relations(
        [Relation("Ann", "Shop", "works on"), Relation("Bob", "Ann", "knows"), Relation("Shop", "Notes", "has")]
    )
    graph.create_relations([Relation("Ann", "Nobody", "misses")], require_ends=False)
    return graph


def big_graph(n: int, seed: int = 5) -> KnowledgeGraph:
    """`n` entities of 12 types, each joined to 1-3 earlier ones, preferring the well connected (as real
    memories are: a few hubs, many leaves)."""
    rng = random.Random(seed)
    graph = KnowledgeGraph()
    graph.create_entities(
        Entity(f"entity {i}", f"type {rng.randrange(12)}", [f"fact {j} about entity {i}" for j in range(3)])
        for i in range(n)
    )
    ends = [0]
    relations = []
    for i in range(1, n):
        for _ in range(rng.choice((1, 2, 3))):
            other = rng.choice(ends)
            relations.append(Relation(f"entity {i}", f"entity {other}", rng.choice(("knows", "uses", "part of"))))
            ends.append(other)
        ends.append(i)
    graph.create_relations(relations)
    return graph


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "Debian's chromium is needed (.ci/run installs it: apt-get install chromium)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        yield browser
        browser.close()


def open_page(browser: Browser, path: Path, **options: Any) -> tuple[Page, list[str]]:
    """A fresh context (its own profile) showing `path`; the list collects console errors and page errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, **options)
    page = context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            problems.append(f"console {message.type}: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("request", lambda request: request.url.startswith("file:") or problems.append(f"network: {request.url}"))
    page.goto(path.as_uri())
    return page, problems


def settle(page: Page) -> dict[str, Any]:
    page.wait_for_function("window.memoryView && window.memoryView.settled", timeout=SETTLE_BOUND_MS)
    return view_state(page)


def click_entity(page: Page, name: str) -> Locator:
    """Click the entity's node; the details panel it opens."""
    position = page.evaluate("name => window.memoryView.screenPosition(name)", name)
    page.mouse.click(position["x"], position["y"])
    details = page.locator("#details")
    details.wait_for(state="visible")
    return details


def view_state(page: Page) -> dict[str, Any]:
    return page.evaluate("() => { const {screenPosition, ...rest} = window.memoryView; return rest; }")


# ---- the page's content, without a browser -------------------------------------------------------------------


def test_the_data_cannot_end_its_script_element():
    text = script_json({"o": "</script><script>alert(1)</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"o": "</script><script>alert(1)</script><!-- & \u2028"}


def test_the_page_is_one_file_that_names_no_other(tmp_path):
    page = render_page(small_graph(), "work", tmp_path / "m.jsonl")
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=""", page, re.IGNORECASE)
    assert page.count("</script>") == 3  # the data, the library, our script: nothing inside them ends one early
    assert "Vasco Asturiano" in page or "force-graph" in page


def test_page_data_counts_what_it_draws(tmp_path):
    data = page_data(small_graph(), "work", tmp_path / "m.jsonl")
    assert [e[0] for e in data["entities"]] == ["Ann", "Bob", "Shop", "Notes"]
    assert data["types"][0] == "person"  # the most common type first: it gets the first colour
    assert len(data["relations"]) == 3 and data["missing"] == 1


# ---- in the browser --------------------------------------------------------------------------------------------


def test_small_graph_draws_every_node_and_edge_and_shows_observations_on_click(browser, tmp_path):
    path = tmp_path / "memory.html"
    path.write_text(render_page(small_graph(), "work", tmp_path / "m.jsonl"), encoding="utf-8")
    page, problems = open_page(browser, path)
    state = settle(page)
    assert (state["entities"], state["relations"], state["missing"]) == (4, 3, 1)
    assert (state["shownEntities"], state["shownRelations"]) == (4, 3)
    counts = page.locator("#counts")
    assert counts.get_attribute("data-entities") == "4" and counts.get_attribute("data-relations") == "3"
    assert page.evaluate("window.pwned") is None  # the observation's markup stayed text

    details = click_entity(page, "Bob")
    assert details.locator("h3").inner_text() == "Bob"
    assert details.locator("ul.observations li").all_inner_texts() == [
        "</script><script>window.pwned = 1</script>",
        "<!-- not a comment",
    ]
    assert "knows" in details.locator("ul.relations").inner_text()

    page.locator("#search").fill("hiking")
    page.wait_for_function("window.memoryView.matches !== null")
    assert view_state(page)["matches"] == ["Ann"]
    assert page.locator("#results li").first.inner_text().startswith("Ann")

    page.locator("#legend input[data-type='0']").uncheck()  # hide the people
    assert view_state(page)["visibleEntities"] == 2

    shot = tmp_path / "small.png"
    page.screenshot(path=str(shot))
    assert png_size(shot) == (1280, 800)
    assert problems == []
    page.context.close()


PLACEHOLDERS = ["{{title}}", "{{heading}}", "{{style}}", "{{data}}", "{{library}}", "{{app}}"]


def test_text_that_looks_like_a_placeholder_or_ends_a_script_stays_text(browser, tmp_path):
    graph = KnowledgeGraph()
    graph.create_entities(
        [
            Entity("Web app", "project", [f"index.html uses Handlebars: {p} is filled in" for p in PLACEHOLDERS]),
            Entity("{{app}}", "{{library}}", ["</script><script>window.pwned = 1</script>", "</SCRIPT >{{data}}"]),
            Entity("Other", "{{style}}", ["<img src=x onerror='window.pwned = 2'>"]),
        ]
    )
    graph.create_relations([Relation("Web app", "{{app}}", "{{heading}}"), Relation("{{app}}", "Other", "</script>")])
    folder = tmp_path / "{{app}}"  # the memory's path is on the page too
    folder.mkdir()
    path = tmp_path / "memory.html"
    path.write_text(render_page(graph, "work", folder / "m.jsonl"), encoding="utf-8")
    page, problems = open_page(browser, path)
    assert page.evaluate("typeof window.memoryView") == "object", problems  # our script ran
    state = settle(page)
    assert (state["entities"], state["relations"], state["shownEntities"], state["shownRelations"]) == (3, 2, 3, 2)
    assert page.evaluate("window.pwned") is None
    assert page.locator("h1").inner_text() == f"Memory: work {folder / 'm.jsonl'}"

    details = click_entity(page, "{{app}}")
    assert details.locator("h3").inner_text() == "{{app}}"
    assert details.locator("ul.observations li").all_inner_texts() == [
        "</script><script>window.pwned = 1</script>",
        "</SCRIPT >{{data}}",
    ]
    assert problems == []
    page.context.close()


def test_light_and_dark_themes_follow_the_system_and_the_toggle(browser, tmp_path):
    path = tmp_path / "memory.html"
    path.write_text(render_page(small_graph(), "work", tmp_path / "m.jsonl"), encoding="utf-8")
    background = "() => getComputedStyle(document.body).backgroundColor"
    page, problems = open_page(browser, path, color_scheme="dark")
    dark = page.evaluate(background)
    page.locator("#theme").click()
    light = page.evaluate(background)
    assert dark != light and view_state(page)["theme"] == "light"
    page.context.close()
    page, more_problems = open_page(browser, path, color_scheme="light")
    assert page.evaluate(background) == light
    assert problems == more_problems == []
    page.context.close()


def test_an_empty_memory_says_so(browser, tmp_path):
    path = tmp_path / "empty.html"
    path.write_text(render_page(KnowledgeGraph(), "new", tmp_path / "m.jsonl"), encoding="utf-8")
    page, problems = open_page(browser, path)
    state = settle(page)
    assert (state["entities"], state["shownEntities"]) == (0, 0)
    assert page.locator("#counts").inner_text() == "This memory is empty."
    assert problems == []
    page.context.close()


def test_five_thousand_entities_load_and_the_layout_stops(browser, tmp_path):
    path = tmp_path / "big.html"
    path.write_text(render_page(big_graph(5000), "big", tmp_path / "big.jsonl"), encoding="utf-8")
    page, problems = open_page(browser, path)
    state = settle(page)
    assert state["entities"] == 5000 and state["relations"] > 9000
    assert 0 < state["shownEntities"] < 5000  # the most connected first, the rest on demand
    ticks = state["ticks"]
    page.wait_for_timeout(1000)
    assert view_state(page)["ticks"] == ticks  # it stopped: no more layout work once settled

    page.locator("#search").fill("entity 4999")  # a leaf, not drawn yet
    page.wait_for_function("window.memoryView.matches !== null")
    page.keyboard.press("Enter")
    page.wait_for_function("window.memoryView.selected === 'entity 4999'")
    assert view_state(page)["shownEntities"] == state["shownEntities"] + 1
    settle(page)
    page.screenshot(path=str(tmp_path / "big.png"))
    assert problems == []
    page.context.close()


def test_view_command_writes_a_page_the_browser_opens(browser, tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(Path(__file__).with_name("fixtures").joinpath("official-memory.jsonl").read_text("utf-8"))
    out = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-m", "memory_server", "view", "--memory-path", str(memory), "--out", str(out)],
        capture_output=True,
        text=True,
        env=server_env(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    page, problems = open_page(browser, out)
    state = settle(page)
    assert (state["entities"], state["relations"]) == (4, 3)
    assert problems == []
    page.context.close()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])
