"""The contexts in pages: a thousand contexts, a registry full of mistakes, a description of half a megabyte, and
every list still fits the budget and gives each context once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_server import present
from memory_server.budget import Budget, json_tokens, text_tokens
from memory_server.context_list import contexts_document, contexts_page
from memory_server.contexts import ContextRegistry, Contexts, UnknownContextError
from memory_server.paging import CursorError


def contexts_with(folder: Path, entries: list[dict], **data) -> Contexts:
    folder.mkdir(parents=True, exist_ok=True)
    default = {"name": "default", "path": str(folder / "default.jsonl")}
    (folder / "contexts.json").write_text(json.dumps({"contexts": [default, *entries], **data}))
    return Contexts(ContextRegistry(folder, folder / "default.jsonl"))


def many(folder: Path, count: int = 1_000) -> list[dict]:
    return [
        {"name": f"c{i:04d}", "path": str(folder / f"c{i}.jsonl"), "description": f"Client project number {i}"}
        for i in range(count)
    ]


def within(budget: Budget, structured: dict, lines: list[str]) -> bool:
    return max(json_tokens(structured), text_tokens("\n".join(lines))) <= budget.max_tokens


def test_a_thousand_contexts_come_in_pages_each_once(tmp_path):
    contexts = contexts_with(tmp_path, many(tmp_path))
    budget = Budget()
    seen, cursor, pages = [], None, 0
    while True:
        page = contexts_page(contexts, budget, cursor_text=cursor)
        assert within(budget, page.structured, page.lines)
        seen += [c["name"] for c in page.structured["contexts"]]
        assert page.structured["total"] == {"contexts": 1_001}
        pages += 1
        cursor = page.structured.get("nextCursor")
        if cursor is None:
            break
        assert f'list_contexts(cursor="{cursor}")' in page.lines[-1]
    assert seen == [*(f"c{i:04d}" for i in range(1_000)), "default"] and pages > 1


def test_a_small_registry_lists_as_before(tmp_path):
    contexts = contexts_with(tmp_path, many(tmp_path, 3))
    page = contexts_page(contexts, Budget())
    assert page.structured == present.contexts_listing(contexts)
    assert page.lines == [present.context_line(c) for c in page.structured["contexts"]]


def test_a_huge_description_is_short_in_lists_and_whole_when_asked_for_by_name(tmp_path):
    contexts = contexts_with(tmp_path, [{"name": "big", "path": str(tmp_path / "b.jsonl"), "description": "d" * 5_000}])
    listed = {c["name"]: c for c in contexts_page(contexts, Budget()).structured["contexts"]}
    assert (
        len(listed["big"]["description"]) < 300
        and "list_contexts(name='big') shows all" in listed["big"]["description"]
    )
    one = contexts_page(contexts, Budget(), name="big")
    assert one.structured["contexts"][0]["description"] == "d" * 5_000 and "d" * 5_000 in one.lines[0]
    huge = contexts_with(
        tmp_path / "huge", [{"name": "big", "path": str(tmp_path / "b.jsonl"), "description": "d" * 500_000}]
    )
    one = contexts_page(huge, Budget(), name="big")
    assert within(Budget(), one.structured, one.lines) and "500,000 characters in all" in one.lines[0]
    assert "d" * 100 in present.instructions(huge) and len(present.instructions(huge)) < 1_000
    with pytest.raises(UnknownContextError):
        contexts_page(contexts, Budget(), name="nope")


def test_a_cursor_is_refused_once_contexts_were_added(tmp_path):
    contexts = contexts_with(tmp_path, many(tmp_path))
    first = contexts_page(contexts, Budget()).structured
    contexts.registry.add(contexts.registry.get("c0001").model_copy(update={"name": "zz-new"}))
    with pytest.raises(CursorError, match="contexts were added or removed"):
        contexts_page(contexts, Budget(), cursor_text=first["nextCursor"])


def test_the_contexts_resource_is_a_first_page_and_how_to_read_on(tmp_path):
    contexts = contexts_with(tmp_path, many(tmp_path))
    document = contexts_document(contexts, Budget())
    assert text_tokens(document) <= Budget().max_tokens
    data = json.loads(document)
    assert "list_contexts(cursor=" in data["note"] and data["total"] == {"contexts": 1_001}


def test_a_registry_full_of_mistakes_warns_with_the_first_few(tmp_path):
    contexts = contexts_with(tmp_path, [{"name": f"bad{i}", "path": 5} for i in range(2_000)])
    problems = contexts.problems()
    assert len(problems) == 4 and "And 1,997 more problems" in problems[-1]
    assert "mcp-memory-contexts contexts" in problems[-1]
    assert len(contexts.registry.problems()) == 2_000  # the command line lists them all
