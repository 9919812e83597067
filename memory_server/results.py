"""The graph tools' results, sized to the result budget: read_graph and open_nodes in pages, search results cut
and paged (write echoes: writes.py). No MCP in here: each function returns the structured content and the text.

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
    SKELETON_RESERVE,
    Budget,
    clip,
    cut_item,
    fit_texts,
    item_tokens,
    json_tokens,
    largest_fitting,
    prefix_fitting,
    text_tokens,
)
from memory_server.errors import echo as quoted
from memory_server.graph import Entity, KnowledgeGraph, Relation
from memory_server.paging import (
    CARRY_LIMIT,
    Cursor,
    CursorError,
    Labelled,
    Listing,
    arguments_digest,
    cached,
    neighbourhood,
    neighbourhood_relations,
)
from memory_server.search import LabelledHit, Outcome, ranked_entities
from memory_server.stats import degrees, overview

Detail = Literal["full", "summary", "names"]
Shaped = tuple[dict[str, Any], str]
Render = Callable[[Sequence[Labelled], int, str | None], Shaped]
Cut = Callable[[Labelled, float], tuple[Labelled, str]]


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
    long_type = entity_type is not None and len(entity_type) > CARRY_LIMIT  # repeated by the caller, not carried
    carried = {"detail": detail if detail != "full" else None, "entityType": None if long_type else entity_type}
    carried = {k: v for k, v in {**carried, "limit": limit}.items() if v is not None}
    shape = _shaper(detail, graph)
    head, head_lines, narrow = _graph_head(graph, budget, query, entity_type, bool(entities))
    if detail != "full" and relations:
        head_lines.append(f"Relations are left out in detail={detail!r}; detail='full' gives them.")
    call = present.Call("read_graph", entityType="<the same entityType>" if long_type else None)

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
    """The official answer; its first page's text says first which names were not found and what they may mean
    (an agent that asks for "luna" or "Maya" gets nothing back otherwise, and concludes memory has nothing)."""
    note = present.not_found(graph, names) if cursor_text is None else ""
    structured, text = _opened(graph, budget.less(text_tokens(note)), names, depth, cursor_text, context)
    return structured, f"{note}\n{text}" if note else text


def _opened(
    graph: KnowledgeGraph, budget: Budget, names: list[str], depth: int, cursor_text: str | None, context: str
) -> Shaped:
    if depth == 0:
        entities, relations = graph.open_nodes(names)
    else:
        entities = neighbourhood(graph, names, depth)
        relations = neighbourhood_relations(graph, names, entities)
    if cursor_text is None:
        whole = _whole(entities, relations, budget)
        if whole is not None:
            return whole
    cursor = Cursor.decode(cursor_text, "open_nodes") if cursor_text else None
    listing = Listing([("", e) for e in entities], [("", r) for r in relations])
    digest = arguments_digest(context, sorted(set(names)), depth)
    if cursor is not None:
        cursor.check(
            digest, listing, "open_nodes", "an entity it names, or a relation around them, was added or removed"
        )
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
    """The search result as the present module shapes it, cut to the budget and paged when it does not fit.
    An entity too large for a page alone is cut with its matching observations first, and its matches are
    those of the observations shown (each as shown)."""
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
        each = item_tokens(record.name) + _MATCH_TOKENS
        return item_tokens(record.to_dict()) + sum(
            item_tokens(h.hit.observation or "") + each for h in matches[(label, record.name)]
        )

    if cursor_text is None and prefix_fitting(lambda i: size(listing.items[i]), len(listing), budget.fill) == len(
        listing
    ):
        whole = present.search_result(outcome)
        if budget.fits(*whole):
            return whole
    cursor = Cursor.decode(cursor_text, "search_nodes") if cursor_text else None
    digest = arguments_digest(asked.contexts, asked.query, asked.mode, asked.limit, asked.min_score)
    ranker = "." + (_short_digest(outcome.model) if outcome.model else "keywords")
    state = listing.fingerprint + ranker
    if cursor is not None:
        _check_search_cursor(cursor, digest, listing, state)
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
    cut_texts: dict[int, dict[str, str]] = {}  # id of an entity cut to fit -> its observations as shown

    def cut(pair: Labelled, room: float) -> tuple[Labelled, str]:
        label, record = pair
        if isinstance(record, Relation):
            return _cut_pair(pair, room)
        found = matches[(label, record.name)]
        entity, note, shown = _cut_entity(record, room, [h.hit.observation for h in found if h.hit.observation])
        cut_texts[id(entity)] = shown
        hidden = sum(1 for h in found if h.hit.observation is not None and h.hit.observation not in shown)
        if hidden:
            note += f"; {hidden} of its {len(found)} matches are in observations left out: a longer query finds fewer"
        return (label, entity), note

    def render(items: Sequence[Labelled], end: int, note: str | None) -> Shaped:
        shown = {(label, r.name): r for label, r in items if isinstance(r, Entity)}
        page_relations = [(label, r) for label, r in items if isinstance(r, Relation)]
        hits, ranks = [], []
        for rank, labelled in enumerate(outcome.hits, start=1):
            entity = shown.get((labelled.label, labelled.hit.entity.name))
            if entity is None:
                continue
            texts = cut_texts.get(id(entity))
            observation = labelled.hit.observation
            if texts is not None and observation is not None:
                if observation not in texts:
                    continue  # its observation was left out of the entity cut to fit
                labelled = replace(labelled, hit=replace(labelled.hit, observation=texts[observation]))
            hits.append(_with_entity(labelled, entity))
            ranks.append(rank)
        page = replace(outcome, hits=_attach(hits, page_relations))
        structured, text = present.search_result(page, ranks, len(outcome.hits))
        several = outcome.memories > 1
        structured["relations"] = [present.in_context(r.to_dict(), label, several) for label, r in page_relations]
        structured["total"] = {
            "entities": listing.entity_count,
            "relations": listing.relation_count,
            "matches": len(outcome.hits),
        }
        next_cursor = None
        if end < len(listing):
            next_cursor = structured["nextCursor"] = Cursor("search_nodes", digest, state, end).encode()
        if not hits and page_relations:
            text = present.as_json({"entities": [], "relations": structured["relations"]})
        lines = [
            present.range_line(listing, start, end, what="matching entities"),
            note,
            text,
            present.next_line(call, next_cursor, narrow),
        ]
        return structured, "\n".join(line for line in lines if line)

    return _page(listing, start, None, budget, render, size, cut)


def _check_search_cursor(cursor: Cursor, digest: str, listing: Listing, state: str) -> None:
    """A search's pages line up only while the same entities match in the same order, ranked the same way."""
    if cursor.arguments == digest and cursor.state.partition(".")[2] != state.partition(".")[2]:
        raise CursorError(
            "The search ranks differently since the first page (the embedding model finished loading, or became "
            "unavailable), so the next pages would skip or repeat matches. Call search_nodes again without cursor "
            "to start at the first page."
        )
    cursor.check(digest, listing, "search_nodes", _MATCHES_CHANGED, state)


_MATCHES_CHANGED = (
    "what matches the query is not the same as for the first page: an entity, observation or relation was added, "
    "changed or removed, by this session or another program"
)
_MATCH_TOKENS = 20  # a match's keys, score and context, besides its entity's name and its observation


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
    cut: Cut | None = None,
) -> Shaped:
    """The page of `listing` that starts at `start`: as many items as `limit` and the budget allow, at least
    one (cut to fit when it is too big alone), so paging always moves on."""
    end = max(listing.end(start, limit), min(start + 1, len(listing)))
    room = budget.fill - budget.tokens(*render([], start, None)) - SKELETON_RESERVE
    guess = prefix_fitting(lambda i: size(listing.items[start + i]), end - start, room)

    def build(n: int) -> Shaped:
        return render(listing.items[start : start + n], start + n, None)

    n, structured, text = largest_fitting(budget, build, guess, end - start)
    tries = 0
    while n == 1 and not budget.fits(structured, text) and tries < _CUT_TRIES:
        if tries:  # what the cut leaves costs more than its room (a match repeats its observation): less room
            room *= budget.fill / budget.tokens(structured, text) * 0.95
        tries += 1
        pair, note = (cut or _cut_pair)(listing.items[start], room)
        structured, text = render([pair], start + 1, f"Cut to fit this result: {note}.")
    return structured, text


_CUT_TRIES = 6


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


def _cut_pair(pair: Labelled, room: float) -> tuple[Labelled, str]:
    """A record too large for a page alone, cut to `room` tokens, and what was cut (read_graph, open_nodes)."""
    label, record = pair
    if isinstance(record, Entity):
        entity, note, shown = _cut_entity(record, room)
        if len(shown) < len(record.observations):
            note += "; search_nodes finds the others"
        return (label, entity), note
    item, note = cut_item(record.to_dict(), room)
    return (label, Relation(item["from"], item["to"], item["relationType"])), note or "relation clipped"


def _cut_entity(entity: Entity, room: float, first: Sequence[str] = ()) -> tuple[Entity, str, dict[str, str]]:
    """`entity` cut to about `room` tokens, the observations `first` (those a search matched) ahead of the
    others; with a note on what was cut, and each observation shown (as the entity had it -> as shown)."""
    name, kind = entity.name, entity.entity_type
    clipped_name = item_tokens(name) + item_tokens(kind) > room / 2  # a name or type longer than a result
    if clipped_name:
        name, kind = clip(name, room / 8), clip(kind, room / 8)
    position = {text: index for index, text in reversed(list(enumerate(entity.observations)))}
    wanted = list(dict.fromkeys(position[text] for text in first if text in position))
    order = wanted + sorted(set(range(len(entity.observations))) - set(wanted))
    head = {"name": name, "entityType": kind, "observations": []}
    fitted = fit_texts(entity.observations, room - item_tokens(head), order)
    parts = [fitted.describe("observations")]
    if wanted and fitted.describe("observations"):
        parts.append("the matching ones first")
    if clipped_name:
        parts.append("its name and type shortened")
    note = f"{', '.join(filter(None, parts)) or 'shortened'} of {quoted(entity.name)}"
    shown = {entity.observations[i]: text for i, text in zip(fitted.indexes, fitted.texts, strict=True)}
    return Entity(name, kind, fitted.texts), note, shown


def _short_digest(text: str) -> str:
    return arguments_digest(text)[:6]


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
