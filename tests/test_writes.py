"""The write tools' echoes, in process: short however much was written."""

from __future__ import annotations

from sample_graphs import pasted, within

from memory_server import present, writes
from memory_server.budget import Budget, json_tokens


def test_write_echoes_stay_short():
    items = [{"name": f"n{i}", "entityType": "t", "observations": ["some words here"] * 5} for i in range(2000)]
    small = writes.echo(items[:3], "entities", Budget(), "Created", {"entities": 3})
    assert small == ({"entities": items[:3]}, present.as_json(items[:3]))
    structured, text = shaped = writes.echo(items, "entities", Budget(), "Created", {"entities": 2000})
    assert within(Budget(), shaped) and json_tokens(structured) < Budget().max_tokens / 2
    assert structured["total"] == {"entities": 2000} and structured["entities"] == items[: len(structured["entities"])]
    assert text.startswith("Created: 2000 entities, all saved.")
    one = [{"entityName": "log", "addedObservations": ["line " * 40] * 3000}]
    structured, text = shaped = writes.echo(one, "results", Budget(), "Added", {"entities": 1, "observations": 3000})
    assert within(Budget(), shaped) and "of 3000 addedObservations shown" in text


def test_an_echo_of_pasted_documents_shows_each_briefly():
    items = [{"name": f"Doc {i}", "entityType": "document", "observations": [pasted(i), "short"]} for i in range(3)]
    structured, text = writes.echo(items, "entities", Budget(), "Created", {"entities": 3})
    assert [e["name"] for e in structured["entities"]] == ["Doc 0", "Doc 1", "Doc 2"]
    assert all(e["observations"][1] == "short" and len(e["observations"][0]) < 400 for e in structured["entities"])
    assert text.startswith("Created: 3 entities, all saved. To keep this result short it repeats them, with long")
    assert len(text) < 2_000
