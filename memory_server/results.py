"""The graph tools' results, sized to the result budget: read_graph and open_nodes in pages, search results cut
and paged, write echoes kept short. No MCP in here: each function returns the structured content and the text.

A result that fits is exactly what the official server gives (and what this server gave before it had a budget);
only a result that does not fit changes shape: a page with `total` counts and `nextCursor`, and text lines that
say what was left out and what to call next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from memory_server import present
from memory_server.budget import (
    ECHO_SHARE,
    Budget,
    cut_item,
    item_tokens,
    json_tokens,
    largest_fitting,
    prefix_fitting,
)
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.paging import (
    Cursor,
    Labelled,
    Listing,
    arguments_digest,
    cached,
    degrees,
    neighbourhood,
    overview,
)
from memory_server.search import LabelledHit, Outcome, ranked_entities

Detail = Literal["full", "summary", "names"]
Shaped = tuple[dict[str, Any], str]
Render = Callable[[Sequence[Labelled], int, str | None], Shaped]

_SKELETON_RESERVE = 150  # tokens for what is added after a page is made: the header line, the context object


@dataclass(frozen=True)
class GraphQuery:
    """read_graph's arguments beyond the official server's (none given: the official call)."""

    detail: Detail | None = None
    entity_type: str | None = None
    limit: int | None = None
    cursor: str | None = None

    @property
    def plain(self) -> bool:
        return self.detail is None and self.entity_type is None and self.limit is None and self.cursor is None


def read_graph(graph: KnowledgeGraph, budget: Budget, query: GraphQuery, context: str) -> Shaped:
    if query.plain:
        whole = _whole(graph.entity_list(), list(graph.relations.values()), budget)
        if whole is not None:
            return whole
    cursor = Cursor.decode(query.cursor, "read_graph") if query.cursor else None
    carry = cursor.carry if cursor else {}
    detail: Detail = query.detail or carry.get("detail") or "full"
    entity_type = query.entity_type if query.entity_type is not None else carry.get("entityType")
    limit = query.limit if query.limit is not None else carry.get("limit")
    entities, relations, listing = cached(
        graph, ("read_graph", entity_type, detail), lambda: _select(graph, entity_type, detail)
    )
    digest = arguments_digest(context, detail, entity_type)
    if cursor is not None:
        cursor.check(digest, listing, "read_graph")
    start = cursor.offset if cursor else 0
    carried = {"detail": detail if detail != "full" else None, "entityType": entity_type, "limit": limit}
    carried = {k: v for k, v in carried.items() if v is not None}
    shape = _shaper(detail, graph)
    head, head_lines, narrow = _graph_head(graph, budget, query, entity_type, bool(entities))
    if detail != "full" and relations:
        head_lines.append(f"Relations are left out in detail={detail!r}; detail='full' gives them.")
    call = present.Call("read_graph")

    def render(items: Sequence[Labelled], end: int, note: str | None) -> Shaped:
        structured = dict(head)
        structured["entities"] = [shape(r) for _, r in items if isinstance(r, Entity)]
        structured["relations"] = [r.to_dict() for _, r in items if isinstance(r, Relation)]
        structured["total"] = {"entities": listing.entity_count, "relations": len(relations)}
        next_cursor = None
        if end < len(listing):
            next_cursor = Cursor("read_graph", digest, listing.fingerprint, end, carried).encode()
            structured["nextCursor"] = next_cursor
        lines = [
            *head_lines,
            present.range_line(listing, start, end),
            note,
            present.as_json({"entities": structured["entities"], "relations": structured["relations"]}),
            present.next_line(call, next_cursor, narrow),
        ]
        return structured, "\n".join(line for line in lines if line)

    return _page(listing, start, limit, budget, render, lambda pair: item_tokens(shape(pair[1])))


def open_nodes(
    graph: KnowledgeGraph, budget: Budget, names: list[str], depth: int, cursor_text: str | None, context: str
) -> Shaped:
    if depth == 0:
        entities, relations = graph.open_nodes(names)
    else:
        entities = neighbourhood(graph, names, depth)
        relations = graph.relations_touching(e.name for e in entities)
    if cursor_text is None:
        whole = _whole(entities, relations, budget)
        if whole is not None:
            return whole
    cursor = Cursor.decode(cursor_text, "open_nodes") if cursor_text else None
    listing = Listing([("", e) for e in entities], [("", r) for r in relations])
    digest = arguments_digest(context, sorted(set(names)), depth)
    if cursor is not None:
        cursor.check(digest, listing, "open_nodes")
    start = cursor.offset if cursor else 0
    call = present.Call("open_nodes", names="<the same names>", depth=depth or None)

    def render(items: Sequence[Labelled], end: int, note: str | None) -> Shaped:
        structured: dict[str, Any] = {
            "entities": [r.to_dict() for _, r in items if isinstance(r, Entity)],
            "relations": [r.to_dict() for _, r in items if isinstance(r, Relation)],
            "total": {"entities": listing.entity_count, "relations": listing.relation_count},
        }
        next_cursor = None
        if end < len(listing):
            next_cursor = structured["nextCursor"] = Cursor("open_nodes", digest, listing.fingerprint, end).encode()
        lines = [
            present.range_line(listing, start, end),
            note,
            present.as_json({"entities": structured["entities"], "relations": structured["relations"]}),
            present.next_line(call, next_cursor, ""),
        ]
        return structured, "\n".join(line for line in lines if line)

    return _page(listing, start, None, budget, render, lambda pair: item_tokens(pair[1].to_dict()))


@dataclass(frozen=True)
class SearchCall:
    """What a search was asked, to tie its cursors to it and to show the call for the next page."""

    query: str
    mode: str
    limit: int | None
    min_score: float | None
    context: str | None  # the context argument as given ("*" for every context)
    contexts: tuple[str, ...]  # the contexts searched


def search(outcome: Outcome, budget: Budget, cursor_text: str | None, asked: SearchCall) -> Shaped:
    """The search result as the present module shapes it, cut to the budget and paged when it does not fit."""
    entities = [(h.label, h.hit.entity) for h in _first_hits(outcome.hits)]
    relations: dict[tuple[str, tuple[str, str, str]], tuple[str, Relation]] = {}
    for labelled in outcome.hits:
        for relation in labelled.relations:
            relations.setdefault((labelled.label, relation.key), (labelled.label, relation))
    ordered = sorted(relations.values(), key=lambda pair: pair[1].slot)
    listing = Listing(entities, ordered)
    matches: dict[tuple[str, str], list[LabelledHit]] = {}
    for labelled in outcome.hits:
        matches.setdefault((labelled.label, labelled.hit.entity.name), []).append(labelled)

    def size(pair: Labelled) -> float:
        label, record = pair
        if isinstance(record, Relation):
            return item_tokens(record.to_dict())
        return item_tokens(record.to_dict()) + 30 * len(matches[(label, record.name)])

    if cursor_text is None and prefix_fitting(lambda i: size(listing.items[i]), len(listing), budget.fill) == len(
        listing
    ):
        whole = present.search_result(outcome)
        if budget.fits(*whole):
            return whole
    cursor = Cursor.decode(cursor_text, "search_nodes") if cursor_text else None
    digest = arguments_digest(asked.contexts, asked.query, asked.mode, asked.limit, asked.min_score)
    if cursor is not None:
        cursor.check(digest, listing, "search_nodes")
    start = cursor.offset if cursor else 0
    call = present.Call(
        "search_nodes",
        query=asked.query,
        mode=asked.mode if asked.mode != "hybrid" else None,
        limit=asked.limit,
        minScore=asked.min_score,
        context=asked.context,
    )
    narrow = "Or narrow it: a longer query" + (", a smaller limit" if asked.mode != "keyword" else "")
    if asked.mode == "keyword":
        narrow += ', limit=N for the first N only, or mode="hybrid" for the best matches first'

    def render(items: Sequence[Labelled], end: int, note: str | None) -> Shaped:
        shown = {(label, r.name): r for label, r in items if isinstance(r, Entity)}
        page_relations = [(label, r) for label, r in items if isinstance(r, Relation)]
        hits = [_with_entity(h, shown[key]) for h in outcome.hits if (key := (h.label, h.hit.entity.name)) in shown]
        page = replace(outcome, hits=_attach(hits, page_relations))
        structured, text = present.search_result(page)
        structured["relations"] = [r.to_dict() for _, r in page_relations]
        structured["total"] = {
            "entities": listing.entity_count,
            "relations": listing.relation_count,
            "matches": len(outcome.hits),
        }
        next_cursor = None
        if end < len(listing):
            next_cursor = structured["nextCursor"] = Cursor("search_nodes", digest, listing.fingerprint, end).encode()
        if not hits and page_relations:
            text = present.as_json({"entities": [], "relations": structured["relations"]})
        lines = [
            present.range_line(listing, start, end, what="matching entities"),
            note,
            text,
            present.next_line(call, next_cursor, narrow),
        ]
        return structured, "\n".join(line for line in lines if line)

    return _page(listing, start, None, budget, render, size)


def echo(items: list[dict[str, Any]], key: str, budget: Budget, done: str, counts: dict[str, int]) -> Shaped:
    """A write's echo of what it added, as the official server gives it, or its first items when that is too
    long: the caller has just sent them all."""
    budget = budget.share(ECHO_SHARE)
    whole: Shaped = ({key: items}, present.as_json(items))
    if budget.fits(*whole):
        return whole
    counted = ", ".join(f"{number} {what}" for what, number in counts.items())

    def build(n: int) -> Shaped:
        shown = items[:n]
        note = None
        if n == 1 and not budget.fits({key: shown}, present.as_json(shown)):
            first, note = cut_item(items[0], budget.fill - _SKELETON_RESERVE)
            shown = [first]
        lead = f"{done}: {counted}, all saved. To keep this result short it repeats only the first {n}:"
        text = "\n".join(filter(None, [lead, note and f"(in that one: {note})", present.as_json(shown)]))
        return {key: shown, "total": counts}, text

    guess = prefix_fitting(lambda i: item_tokens(items[i]), len(items), budget.fill - _SKELETON_RESERVE)
    return largest_fitting(budget, build, guess, len(items))[1:]


def graph_document(graph: KnowledgeGraph, budget: Budget, context: str, active: bool) -> str:
    """A graph resource's text: the whole graph as JSON when it fits, else the first page of read_graph (with
    its overview) and how to read on through the tool."""
    whole = _whole(graph.entity_list(), list(graph.relations.values()), budget)
    if whole is not None:
        return present.as_json(whole[0])
    structured, _ = read_graph(graph, budget, GraphQuery(), context)
    call = present.Call("read_graph", context=None if active else context)
    note = (
        "This memory is too large to read at once: here are an overview and the first page. Read on with the "
        f"{call(cursor='<nextCursor>')} tool, or narrow with its entityType and detail arguments, or with search_nodes."
    )
    return present.as_json({"note": note, **structured})


# ---- internals ---------------------------------------------------------------------------------------------


def _graph_head(
    graph: KnowledgeGraph, budget: Budget, query: GraphQuery, entity_type: str | None, found: bool
) -> tuple[dict[str, Any], list[str], str]:
    """What opens a read_graph page: for the official call on a graph too large for one result, the overview
    (structured and as text) and the ways to narrow; for a type nothing has, the types there are."""
    if query.plain:
        summary = _trimmed(overview(graph), budget.fill / 4)
        lines = present.overview_lines(summary, _graph_tokens(graph), budget.max_tokens)
        return {"overview": summary}, lines, present.narrowing(summary["entityTypes"])
    if entity_type is not None and not found:
        return {}, [present.no_such_type(entity_type, overview(graph)["entityTypes"])], ""
    return {}, [], ""


def _select(
    graph: KnowledgeGraph, entity_type: str | None, detail: Detail
) -> tuple[list[Entity], list[Relation], Listing]:
    """read_graph's entities (all, or those of one type, ignoring case) and relations (all, or those touching
    them), and their listing (without the relations when the detail leaves them out)."""
    if entity_type is None:
        entities, relations = graph.entity_list(), list(graph.relations.values())
    else:
        wanted = entity_type.strip().lower()
        entities = [e for e in graph.entity_list() if e.entity_type.strip().lower() == wanted]
        relations = graph.relations_touching(e.name for e in entities)
    listing = Listing([("", e) for e in entities], [("", r) for r in relations] if detail == "full" else [])
    return entities, relations, listing


def _whole(entities: list[Entity], relations: list[Relation], budget: Budget) -> Shaped | None:
    """The official result ({entities, relations}) if it fits the budget, else None (measuring only as far as
    needed to know)."""
    if not budget.unlimited:
        records: list[Entity | Relation] = [*entities, *relations]
        fitting = prefix_fitting(lambda i: item_tokens(records[i].to_dict()), len(records), budget.fill)
        if fitting < len(records):
            return None
    result = {"entities": [e.to_dict() for e in entities], "relations": [r.to_dict() for r in relations]}
    text = present.as_json(result)
    return (result, text) if budget.fits(result, text) else None


def _page(
    listing: Listing,
    start: int,
    limit: int | None,
    budget: Budget,
    render: Render,
    size: Callable[[Labelled], float],
) -> Shaped:
    """The page of `listing` that starts at `start`: as many items as `limit` and the budget allow, at least
    one (cut to fit when it is too big alone)."""
    end = listing.end(start, limit)
    room = budget.fill - budget.tokens(*render([], start, None)) - _SKELETON_RESERVE
    guess = prefix_fitting(lambda i: size(listing.items[start + i]), end - start, room)

    def build(n: int) -> Shaped:
        return render(listing.items[start : start + n], start + n, None)

    n, structured, text = largest_fitting(budget, build, guess, end - start)
    if n == 1 and not budget.fits(structured, text):
        label, record = listing.items[start]
        cut, note = _cut_record(record, room)
        structured, text = render([(label, cut)], start + 1, f"Cut to fit this result: {note}.")
    return structured, text


def _trimmed(summary: dict[str, Any], room: float) -> dict[str, Any]:
    """The overview with shorter lists of types and hubs until it takes at most `room` tokens."""
    while json_tokens(summary) > room and (summary["entityTypes"] or summary["mostConnected"]):
        types = list(summary["entityTypes"].items())
        kept = len(types) // 2
        summary = {
            **summary,
            "entityTypes": dict(types[:kept]),
            "mostConnected": summary["mostConnected"][: len(summary["mostConnected"]) // 2],
        }
        summary["otherTypes"] = summary.get("otherTypes", 0) + len(types) - kept
        if not summary["otherTypes"]:
            del summary["otherTypes"]
    return summary


def _cut_record(record: Entity | Relation, room: float) -> tuple[Entity | Relation, str]:
    item, note = cut_item(record.to_dict(), room)
    if isinstance(record, Entity):
        cut: Entity | Relation = Entity(item["name"], item["entityType"], item["observations"])
        return cut, f"{note} of {record.name!r}; search_nodes finds the others"
    return Relation(item["from"], item["to"], item["relationType"]), note or "relation clipped"


def _shaper(detail: Detail, graph: KnowledgeGraph) -> Callable[[Entity | Relation], dict[str, Any]]:
    if detail == "names":
        return lambda r: {"name": r.name, "entityType": r.entity_type} if isinstance(r, Entity) else r.to_dict()
    if detail == "summary":
        degree = degrees(graph)

        def summary(record: Entity | Relation) -> dict[str, Any]:
            if isinstance(record, Relation):
                return record.to_dict()
            return {
                "name": record.name,
                "entityType": record.entity_type,
                "observationCount": len(record.observations),
                "relationCount": degree[record.name],
            }

        return summary
    return lambda r: r.to_dict()


def _graph_tokens(graph: KnowledgeGraph) -> int:
    """About how many tokens the whole graph costs as one result (cheaply: lengths, not serialisations)."""
    chars = sum(
        len(e.name) + len(e.entity_type) + sum(len(o) + 3 for o in e.observations) + 50 for e in graph.entities.values()
    )
    chars += sum(len(r.source) + len(r.target) + len(r.relation_type) + 40 for r in graph.relations.values())
    return chars // 4


def _first_hits(hits: list[LabelledHit]) -> list[LabelledHit]:
    """Each entity's best hit, in rank order (entities come in the order of their best hit)."""
    order = {id(e): n for n, e in enumerate(ranked_entities(h.hit for h in hits))}
    first: dict[tuple[str, int], LabelledHit] = {}
    for labelled in hits:
        first.setdefault((labelled.label, id(labelled.hit.entity)), labelled)
    return sorted(first.values(), key=lambda h: order[id(h.hit.entity)])


def _with_entity(labelled: LabelledHit, entity: Entity) -> LabelledHit:
    if labelled.hit.entity is entity:
        return labelled
    return replace(labelled, hit=replace(labelled.hit, entity=entity))


def _attach(hits: list[LabelledHit], relations: list[tuple[str, Relation]]) -> list[LabelledHit]:
    """The page's hits, each carrying the page's relations that touch its entity (each relation once), so the
    present module shows exactly this page's relations."""
    given: dict[int, list[Relation]] = {}
    owner: dict[tuple[str, str], int] = {}
    for number, labelled in enumerate(hits):
        owner.setdefault((labelled.label, labelled.hit.entity.name), number)
    for label, relation in relations:
        ends = [n for n in (owner.get((label, relation.source)), owner.get((label, relation.target))) if n is not None]
        number = max(ends, default=0)
        given.setdefault(number, []).append(relation)
    return [replace(h, relations=tuple(given.get(n, ()))) for n, h in enumerate(hits)]
