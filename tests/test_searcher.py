"""Searching memories (searcher.py): what a search that found nothing says to try next."""

import pytest

from memory_server.embeddings import EmbedderSlot
from memory_server.graph import Entity
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore


@pytest.fixture(scope="module")
def bundled():
    slot = EmbedderSlot()
    slot.start()
    return slot


def test_a_search_of_an_empty_memory_says_it_is_empty_not_to_try_other_words(tmp_path, bundled):
    """A new project's (or a new worktree's) memory holds nothing: "try other words" sent agents rephrasing the
    same question in vain. It says the memory is empty and where else to look."""
    empty = GraphStore(tmp_path / "new-project.jsonl")  # no file yet
    notes = GraphStore(tmp_path / "notes.jsonl")
    notes.mutate(lambda graph: graph.create_entities([Entity("Ann", "person", ["plays chess every evening"])]))
    searcher = Searcher(bundled)
    for mode in ("hybrid", "keyword"):
        outcome = searcher.search([Target("project", empty)], "what did we decide about the database", mode, 10, None)
        assert outcome.hits == []
        assert outcome.note == (
            "this memory is empty (nothing saved in it yet); try another context, or context '*' for every memory"
        )
    both_empty = [Target("project", empty), Target("other", GraphStore(tmp_path / "other.jsonl"))]
    outcome = searcher.search(both_empty, "database", "hybrid", 10, None)
    assert outcome.note == "every memory searched is empty (nothing saved in them yet)"
    outcome = searcher.search([Target("project", empty), Target("notes", notes)], "asdf qwerty", "hybrid", 10, None)
    assert outcome.note.startswith("nothing relevant found in any memory searched; try other words")
    outcome = searcher.search([Target("notes", notes)], "asdf qwerty", "hybrid", 10, None)
    assert outcome.note.startswith("nothing relevant found in this memory; try other words")
    assert not (tmp_path / "new-project.jsonl").exists()  # a search writes nothing


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_query_says_so_and_keyword_mode_keeps_the_official_substring_search(tmp_path, bundled, query):
    """An empty query in hybrid or semantic mode answered "nothing relevant found ... try other words": no words
    would have helped, since there were none. It says the query is empty and what to pass. Keyword mode stays the
    official server's `includes(query)`: "" is in every entity (all of them), "   " in none of these."""
    notes = GraphStore(tmp_path / "notes.jsonl")
    notes.mutate(lambda graph: graph.create_entities([Entity("Ann", "person", ["pays rent"]), Entity("Bo", "t", [])]))
    searcher = Searcher(bundled)
    for mode in ("hybrid", "semantic"):
        outcome = searcher.search([Target("notes", notes)], query, mode, 10, None)
        assert outcome.hits == []
        assert outcome.note == "the query is empty: pass the words to look for as query (read_graph lists everything)"
    keyword = searcher.search([Target("notes", notes)], query, "keyword", None, None)
    assert [h.hit.entity.name for h in keyword.hits] == (["Ann", "Bo"] if query == "" else [])
