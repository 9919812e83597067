"""How the graph page of `view` behaves as memories grow, in Debian's headless Chromium (software rendering, no
GPU: the slow case). Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/view_speed.py                 # 1000, 5000 and 10000 entities
    .venv/bin/python bench/view_speed.py --sizes 5000

For each size it writes one page (entities joined to 1-3 earlier ones, preferring hubs, as real memories are),
opens it from file://, and prints: the page's size; the time to the first drawn frame; the time until the layout
has stopped (the page's own `settled` flag) with the layout ticks it took and how many entities are drawn (the
most connected first); the frames per second while the user zooms with the mouse wheel; then the same after
"Show more" has been pressed until every entity is drawn.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_view import FLAGS, big_graph  # noqa: E402  (the test's graph maker and browser flags)

from memory_server.view import render_page  # noqa: E402


def settle(page: Page) -> tuple[float, dict]:
    started = time.perf_counter()
    page.wait_for_function("window.memoryView.settled", timeout=600_000, polling=100)
    state = page.evaluate("() => { const {screenPosition, ...rest} = window.memoryView; return rest; }")
    return time.perf_counter() - started, state


def zoom_fps(page: Page) -> float:
    """Frames drawn per second while the wheel zooms in and out over the graph for two seconds."""
    box = page.locator("#graph").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.evaluate("window.__frames = 0; (function f() { window.__frames++; requestAnimationFrame(f); })()")
    started = time.perf_counter()
    for step in range(20):
        page.mouse.wheel(0, -120 if step % 2 else 120)
        page.wait_for_timeout(100)
    return page.evaluate("window.__frames") / (time.perf_counter() - started)


def measure(page: Page, path: Path, n: int) -> None:
    started = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_function("window.memoryView && window.memoryView.ticks > 0", timeout=600_000, polling=10)
    first_frame = time.perf_counter() - started
    waited, state = settle(page)
    print(
        f"| {n:,} | {path.stat().st_size / 1e6:.1f} MB | {first_frame * 1000:,.0f} ms | {state['shownEntities']:,} | "
        f"{(first_frame + waited):.1f} s ({state['ticks']} ticks) | {zoom_fps(page):.0f} |",
        flush=True,
    )
    if not page.locator("#more").is_visible():
        return
    started = time.perf_counter()
    while page.locator("#more").is_visible():
        page.locator("#more").click()
        _, state = settle(page)
    waited = time.perf_counter() - started
    print(
        f"| {n:,}, every one drawn | | | {state['shownEntities']:,} | {waited:.1f} s (the last page's layout: "
        f"{state['layoutMs'] / 1000:.1f} s) | {zoom_fps(page):.0f} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,10000")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    print("| entities | page | first frame | drawn | settled after | zoom fps |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        for n in sizes:
            path = Path(folder) / f"memory-{n}.html"
            path.write_text(render_page(big_graph(n), f"bench-{n}", Path(f"bench-{n}.jsonl")), encoding="utf-8")
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            measure(context.new_page(), path, n)
            context.close()
        browser.close()


if __name__ == "__main__":
    main()
