"""The six write tools' work on one memory: the change, made under its lock (GraphStore.mutate), and the result.
No MCP in here: each function returns the structured content and the text.

A creation's result echoes what it added, as the official server's does; an echo too long for the budget
repeats only the first items, long texts shortened (the caller has just sent them all). A deletion's result is
the official server's message, after a line naming what was not there to delete.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memory_server import present
from memory_server.budget import (
    ECHO_SHARE,
    SKELETON_RESERVE,
    Budget,
    clip_long,
    cut_item,
    item_tokens,
    largest_fitting,
    prefix_fitting,
)
from memory_server.contexts import ResolvedContext
from memory_server.errors import echo as quoted
from memory_server.errors import listed, shortened
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.results import Shaped
from memory_server.store import GraphStore


def create_entities(resolved: ResolvedContext, store: GraphStore, new: list[Entity], budget: Budget) -> Shaped:
    resolved.require_writable()
    created = store.mutate(lambda graph: graph.create_entities(new))
    added = [e.to_dict() for e in created]
    structured, text = echo(added, "entities", budget, "Created", {"entities": len(added)})
    # The official answer leaves out a name already there (or twice in the call) and drops what was sent with it;
    # a model reading only that answer believes it saved those observations.
    kept = {id(e) for e in created}
    names = list(dict.fromkeys(e.name for e in new if id(e) not in kept))
    if not names:
        return structured, text
    note = (
        f"Already in memory, so not created (nothing sent for them was saved): {listed(names)}. "
        "add_observations adds facts to an entity."
    )
    return structured, f"{note}\n{text}"


def create_relations(resolved: ResolvedContext, store: GraphStore, new: list[Relation], budget: Budget) -> Shaped:
    resolved.require_writable()
    added = [r.to_dict() for r in store.mutate(lambda graph: graph.create_relations(new))]
    return echo(added, "relations", budget, "Created", {"relations": len(added)})


def add_observations(
    resolved: ResolvedContext, store: GraphStore, additions: list[tuple[str, list[str]]], budget: Budget
) -> Shaped:
    resolved.require_writable()
    done = store.mutate(lambda graph: graph.add_observations(additions))
    added = [{"entityName": name, "addedObservations": new} for name, new in done]
    counts = {"entities": len(added), "observations": sum(len(new) for _, new in done)}
    return echo(added, "results", budget, "Added", counts)


def delete_entities(resolved: ResolvedContext, store: GraphStore, names: list[str]) -> Shaped:
    def change(graph: KnowledgeGraph) -> str:
        missing = graph.delete_entities(names)
        return present.names_missing(graph, missing, "so not deleted") if missing else ""

    return _deleted(resolved, store, change, "Entities")


def delete_observations(resolved: ResolvedContext, store: GraphStore, pairs: list[tuple[str, list[str]]]) -> Shaped:
    def change(graph: KnowledgeGraph) -> str:
        missing = graph.delete_observations(pairs)
        names = [name for name, absent in missing if absent is None]
        notes = [present.names_missing(graph, names, "so nothing was deleted from them")] if names else []
        absent = [(name, observations) for name, observations in missing if observations is not None]
        for name, observations in absent[:_MISSES_SHOWN]:
            notes.append(f"Not among the observations of {quoted(name)}, so not deleted: {_quoted(observations)}.")
        if len(absent) > _MISSES_SHOWN:
            notes.append(f"And observations not found on {len(absent) - _MISSES_SHOWN:,} more entities.")
        if absent:
            shown = [shortened(name) for name, _ in absent[:_MISSES_SHOWN]]
            notes.append(
                "Observations match exactly, character for character: "
                f"open_nodes(names={json.dumps(shown, ensure_ascii=False)}) shows them as saved."
            )
        return " ".join(notes)

    return _deleted(resolved, store, change, "Observations")


def delete_relations(resolved: ResolvedContext, store: GraphStore, keys: list[tuple[str, str, str]]) -> Shaped:
    def change(graph: KnowledgeGraph) -> str:
        missing = graph.delete_relations(keys)
        if not missing:
            return ""
        shown = [f"{source} -{kind}-> {target}" for source, target, kind in missing]
        return (
            f"Not found, so not deleted: {listed(shown, 3)}. Relations match from, to and relationType exactly: "
            "open_nodes on either end shows its relations."
        )

    return _deleted(resolved, store, change, "Relations")


def _deleted(resolved: ResolvedContext, store: GraphStore, change: Callable[[KnowledgeGraph], str], what: str) -> Shaped:
    """A deletion (`what`: entities, observations or relations) as `change` makes it: the official server's
    answer, which says "deleted successfully" even when nothing matched; the text adds what `change` did not find
    (a model that misquotes an observation would otherwise believe the old fact gone)."""
    resolved.require_writable()
    missed = store.mutate(change)
    message = f"{what} deleted successfully"
    return {"success": True, "message": message}, f"{missed}\n{message}" if missed else message


def _quoted(values: list[str], limit: int = 3) -> str:
    """Values for a note, each quoted (an observation may hold commas) and shortened: `'a', 'b' and 3 more`."""
    shown = ", ".join(quoted(value) for value in values[:limit])
    return shown + (f" and {len(values) - limit:,} more" if len(values) > limit else "")


_MISSES_SHOWN = 3  # entities whose observations to delete were not found that a deletion's note names

def echo(items: list[dict[str, Any]], key: str, budget: Budget, done: str, counts: dict[str, int]) -> Shaped:
    """A write's echo of what it added, as the official server gives it, or, when that is too long, with long
    texts shortened and only the first items: the caller has just sent them all."""
    budget = budget.share(ECHO_SHARE)
    whole: Shaped = ({key: items}, present.as_json(items))
    if budget.fits(*whole):
        return whole
    counted = ", ".join(f"{number} {what}" for what, number in counts.items())
    clipped = [clip_long(item, _ECHO_TEXT_TOKENS) for item in items]
    shortened = any(a is not b for a, b in zip(clipped, items, strict=True))

    def build(n: int) -> Shaped:
        shown = clipped[:n]
        note = None
        if n == 1 and not budget.fits({key: shown}, present.as_json(shown)):
            first, note = cut_item(clipped[0], budget.fill - SKELETON_RESERVE)
            shown = [first]
        which = f"only the first {n}" if n < len(items) else "them"
        lead = f"{done}: {counted}, all saved. To keep this result short it repeats {which}" + (
            ", with long texts shortened:" if shortened else ":"
        )
        text = "\n".join(filter(None, [lead, note and f"(in that one: {note})", present.as_json(shown)]))
        return {key: shown, "total": counts}, text

    guess = prefix_fitting(lambda i: item_tokens(clipped[i]), len(items), budget.fill - SKELETON_RESERVE)
    return largest_fitting(budget, build, guess, len(items))[1:]


_ECHO_TEXT_TOKENS = 50  # a text repeated in a write's echo, when the echo is too long whole: about 200 characters
