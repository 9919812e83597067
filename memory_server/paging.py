"""Results in pages: a stable order for a set of entities and relations, opaque cursors into it, and the entities
around a few named ones. No MCP in here.

A listing puts the entities in order and, right after each, the relations whose later end (in that order) it is:
a page shows relations beside their entities, and every relation comes exactly once. A relation with one end
outside the listing comes after the end inside it; one with neither end inside (a whole graph whose relation
names entities that do not exist) comes last.

A cursor names the listing it points into by a digest of its order (entity names and relation keys), not of the
file: adding an observation keeps every cursor valid, while adding or removing an entity or a relation makes an
older cursor fail with an error that says to start again. Pages never skip or repeat silently.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from memory_server.errors import MemoryServerError
from memory_server.graph import Entity, KnowledgeGraph, Relation

Labelled = tuple[str, Entity | Relation]  # (label, record): the label tells contexts apart across contexts
T = TypeVar("T")


class CursorError(MemoryServerError, ValueError):
    """A cursor that cannot be used: not ours, made for other arguments, or older than the memory."""


class Paged(Protocol):
    """What a cursor pages through: its fingerprint and its length."""

    fingerprint: str

    def __len__(self) -> int: ...


class Listing:
    """Entities in a stable order with each relation placed once, as one list of items to cut into pages."""

    def __init__(self, entities: Sequence[tuple[str, Entity]], relations: Sequence[tuple[str, Relation]]) -> None:
        position = {(label, entity.name): number for number, (label, entity) in enumerate(entities)}
        last = len(entities)
        after: dict[int, list[Labelled]] = {}
        for pair in relations:
            label, relation = pair
            anchor = max(position.get((label, relation.source), -1), position.get((label, relation.target), -1))
            after.setdefault(anchor if anchor >= 0 else last, []).append(pair)
        self.items: list[Labelled] = []
        self._entity_at: list[int] = []  # where each entity is in `items`
        for number, pair in enumerate(entities):
            self._entity_at.append(len(self.items))
            self.items.append(pair)
            if number in after:
                self.items.extend(after[number])
        self.items.extend(after.get(last, ()))
        self.entity_count = len(entities)
        self.relation_count = len(self.items) - len(entities)
        # The order of the items follows from the order of the entities and of the relations given.
        self.fingerprint = fingerprint_of(
            [
                *(label + "\x1f" + entity.name for label, entity in entities),
                *(f"{label}\x1f{r.source}\x1f{r.target}\x1f{r.relation_type}" for label, r in relations),
            ]
        )

    def __len__(self) -> int:
        return len(self.items)

    def entities_before(self, offset: int) -> int:
        return bisect.bisect_left(self._entity_at, offset)

    def end(self, start: int, entities: int | None) -> int:
        """Where a page starting at `start` ends if it may hold at most `entities` entities (with the relations
        placed after the last of them)."""
        if entities is None:
            return len(self.items)
        after = self.entities_before(start) + entities
        return self._entity_at[after] if after < len(self._entity_at) else len(self.items)


@dataclass(frozen=True)
class Cursor:
    """Where the next page starts in a listing, which listing that is, and what the call that made it asked."""

    tool: str
    arguments: str  # digest of the arguments that chose the listing
    state: str  # the listing's fingerprint
    offset: int
    carry: dict[str, Any] = field(default_factory=dict)  # arguments a later call may leave out (see Carry)

    def encode(self) -> str:
        data = json.dumps([self.tool, self.arguments, self.state, self.offset, self.carry], separators=(",", ":"))
        return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, tool: str) -> Cursor:
        """The cursor `text` holds, checked field by field: anything but a cursor this server made (cut, edited,
        from elsewhere) gets one error saying to start again."""
        try:
            if len(text) > MAX_CURSOR:
                raise ValueError("longer than any cursor this server makes")
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            name, arguments, state, offset, carry = _CURSOR.validate_json(raw)
        except (ValueError, binascii.Error):  # pydantic's ValidationError is a ValueError
            raise CursorError(
                f"The cursor {_short(text)!r} is not one this server gave out (or it was changed on the way). Pass "
                f"nextCursor exactly as the previous page returned it, or call {tool} without cursor to start again "
                "at the first page."
            ) from None
        if name != tool:
            raise CursorError(
                f"This cursor continues {name}, not {tool}. Call {name} with it, or call {tool} without cursor to "
                "start at the first page."
            )
        return cls(name, arguments, state, offset, carry.model_dump(exclude_none=True))

    def check(self, arguments: str, listing: Paged, tool: str, changed: str = "", state: str | None = None) -> None:
        """Refuse this cursor for a listing other than the one it was made for. `changed` says what makes the
        listing change for this tool (by default: entities or relations added or removed); `state` is what the
        cursor's state must be (by default the listing's fingerprint)."""
        if arguments != self.arguments:
            raise CursorError(
                f"This cursor was made by a {tool} call with other arguments (or another context). Repeat the "
                f"arguments of the call that returned it, or call {tool} without cursor to start at the first page."
            )
        if (state or listing.fingerprint) != self.state:
            raise CursorError(
                f"The memory changed since this cursor was made ({changed or _LISTING_CHANGED}), so the next pages "
                f"would skip or repeat some. Call {tool} again without cursor to start at the first page, which "
                "shows the memory as it is now."
            )
        if self.offset > len(listing):  # same listing, an offset past its end: the cursor was edited
            raise CursorError(
                f"The cursor points past the end of what it pages through, so it is not one this server gave out. "
                f"Call {tool} without cursor to start again at the first page."
            )


MAX_CURSOR = 2_000  # characters: a cursor carries a few digests and short arguments
CARRY_LIMIT = 200  # characters of an entityType a cursor carries; a longer one is repeated by the caller instead
_LISTING_CHANGED = "entities or relations were added or removed"


class Carry(BaseModel):
    """The arguments a read_graph cursor carries, so the next call may leave them out."""

    model_config = ConfigDict(extra="forbid", strict=True)

    detail: Literal["full", "summary", "names"] | None = None
    entityType: Annotated[str, Field(max_length=CARRY_LIMIT)] | None = None
    limit: Annotated[int, Field(ge=1)] | None = None


_Text = Annotated[str, Field(max_length=64)]
_CURSOR = TypeAdapter(
    tuple[Annotated[str, Field(pattern=r"^[a-z_]{1,40}$")], _Text, _Text, Annotated[int, Field(ge=0, le=2**53)], Carry],
    config=ConfigDict(strict=True),
)


def cached(graph: KnowledgeGraph, key: Hashable, make: Callable[[], T]) -> T:
    """`make()`, remembered for this graph while no entity or relation was added or removed, so paging through
    a large graph orders it once. (Additions grow `records`, removals shrink the counts: the stamp below changes
    with every change of structure.)"""
    stamp = (len(graph.records), len(graph.entities), len(graph.relations))
    with _cache_lock:
        known = _cache.get(graph, {}).get(key)
    if known is not None and known[0] == stamp:
        return known[1]  # type: ignore[no-any-return]
    value = make()
    with _cache_lock:
        remembered = _cache.setdefault(graph, {})
        if len(remembered) >= _CACHED_PER_GRAPH:
            remembered.pop(next(iter(remembered)))
        remembered[key] = (stamp, value)
    return value


_CACHED_PER_GRAPH = 8
_cache_lock = threading.Lock()  # resources are read on the event loop while tools run in worker threads
# Weak keys: a graph replaced by a fresh read of its file takes what was remembered for it along.
_cache: weakref.WeakKeyDictionary[KnowledgeGraph, dict[Hashable, tuple[tuple[int, int, int], Any]]] = (
    weakref.WeakKeyDictionary()
)


def arguments_digest(*arguments: Any) -> str:
    return _digest(json.dumps(arguments, ensure_ascii=False, default=str))


def neighbourhood(graph: KnowledgeGraph, names: Iterable[str], depth: int) -> list[Entity]:
    """The named entities (in file order), then those one relation away from them, then two..., up to `depth`."""
    ring = sorted({n: graph.entities[n] for n in names if n in graph.entities}.values(), key=_slot)
    found = list(ring)
    seen = {entity.name for entity in ring}
    for _ in range(depth):
        reached: dict[str, Entity] = {}
        for relation in graph.relations_touching(entity.name for entity in ring):
            for end in (relation.source, relation.target):
                if end not in seen and end in graph.entities:
                    reached[end] = graph.entities[end]
        ring = sorted(reached.values(), key=_slot)
        if not ring:
            break
        seen.update(reached)
        found += ring
    return found


def neighbourhood_relations(graph: KnowledgeGraph, names: Iterable[str], entities: list[Entity]) -> list[Relation]:
    """The relations shown with a neighbourhood of `names` (`entities`), in file order: those between two of its
    entities, and every relation of a named one (as depth 0, the official answer, gives them, one to an entity the
    file lacks included). Not those from its outer ring to entities further out, which would read as edges to
    entities that do not exist: a larger depth, or open_nodes of that entity, shows them."""
    shown = {entity.name for entity in entities}
    named = shown.intersection(names)
    return [
        relation
        for relation in graph.relations_touching(shown)
        if (relation.source in shown and relation.target in shown) or not named.isdisjoint(relation.key[:2])
    ]


def fingerprint_of(keys: Iterable[str]) -> str:
    """A short digest of keys in order: what a cursor checks that its listing is still the same."""
    return _digest("\x1e".join(keys))


def _digest(text: str) -> str:
    raw = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=9).digest()
    return base64.urlsafe_b64encode(raw).decode()


def _short(text: str) -> str:
    return text if len(text) <= 24 else text[:21] + "..."


def _slot(entity: Entity) -> int:
    return entity.slot
