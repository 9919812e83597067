"""The typed edge of the MCP tools: input items and results, shaped exactly like the official memory server's
(same property names and descriptions), plus our `context` and `warnings` keys."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def _not_blank(value: str) -> str:
    if all(_invisible(char) for char in value):
        raise ValueError("must not be empty or only spaces or invisible characters; give a real name")
    return value


# Shown as nothing although Unicode calls them letters, marks or symbols: Hangul fillers, the combining grapheme
# joiner, variation selectors, the braille blank.
_BLANK_GLYPHS = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u034f", "\u2800", *map(chr, range(0xFE00, 0xFE10))}


def _invisible(char: str) -> bool:
    """Whitespace, control and format characters (zero-width space, joiners, BOM, bidi marks...), and the few
    other characters that show as nothing."""
    return (
        unicodedata.category(char) in ("Zs", "Zl", "Zp", "Cc", "Cf")
        or char in _BLANK_GLYPHS
        or (0xE0100 <= ord(char) <= 0xE01EF)
    )


Name = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]


ENTITY_NAME = "The name of the entity"
ENTITY_TYPE = "The type of the entity"
OBSERVATIONS = "An array of observation contents associated with the entity"
RELATION_FROM = "The name of the entity where the relation starts"
RELATION_TO = "The name of the entity where the relation ends"
RELATION_TYPE = "The type of the relation"


class EntityItem(BaseModel):
    model_config = ConfigDict(title="Entity")

    name: Annotated[Name, Field(description=ENTITY_NAME)]
    entityType: Annotated[Name, Field(description=ENTITY_TYPE)]
    observations: Annotated[list[str], Field(description=OBSERVATIONS)]


class RelationItem(BaseModel):
    model_config = ConfigDict(title="Relation", populate_by_name=True)

    source: Annotated[Name, Field(alias="from", description=RELATION_FROM)]
    to: Annotated[Name, Field(description=RELATION_TO)]
    relationType: Annotated[Name, Field(description=RELATION_TYPE)]


class RelationKey(BaseModel):
    # A relation as stored: any strings. Deletions take these, so an odd name is simply not found.

    model_config = ConfigDict(title="Relation", populate_by_name=True)

    source: Annotated[str, Field(alias="from", description=RELATION_FROM)]
    to: Annotated[str, Field(description=RELATION_TO)]
    relationType: Annotated[str, Field(description=RELATION_TYPE)]


class EntityRecord(BaseModel):
    # An entity as stored, in results: whatever an older file holds is shown as it is.
    model_config = ConfigDict(title="Entity")

    name: Annotated[str, Field(description=ENTITY_NAME)]
    entityType: Annotated[str, Field(description=ENTITY_TYPE)]
    observations: Annotated[list[str], Field(description=OBSERVATIONS)]


class EntityShown(EntityRecord):
    # read_graph's detail='summary' and 'names' leave out the observations.
    observations: Annotated[list[str], Field(description=OBSERVATIONS)] = None  # type: ignore[assignment]
    observationCount: int = None  # type: ignore[assignment]
    relationCount: int = None  # type: ignore[assignment]


class ObservationAddition(BaseModel):
    entityName: Annotated[Name, Field(description="The name of the entity to add the observations to")]
    contents: Annotated[list[str], Field(description="An array of observation contents to add")]


class ObservationDeletion(BaseModel):
    entityName: Annotated[str, Field(description="The name of the entity containing the observations")]
    observations: Annotated[list[str], Field(description="An array of observations to delete")]


# ---- results -------------------------------------------------------------------------------------------------
# Optional keys are left out of a result rather than set to null, so their schemas say what they hold when present
# (a default of None that the type does not allow is never validated: these models only make schemas).

Counts = dict[str, Any]  # what a result holds in all, when it does not show it all: {"entities": 200, ...}


class _Result(BaseModel):
    context: dict[str, Any] = None  # type: ignore[assignment]  # name, path, projectDir, readOnly
    warnings: list = None  # type: ignore[assignment,type-arg]  # of strings


class EntitiesResult(_Result):
    entities: list[EntityRecord]
    total: Counts = None  # type: ignore[assignment]


class RelationsResult(_Result):
    relations: list[RelationKey]
    total: Counts = None  # type: ignore[assignment]


class AddedObservations(BaseModel):
    entityName: str
    addedObservations: list[str]


class ObservationsResult(_Result):
    results: list[AddedObservations]
    total: Counts = None  # type: ignore[assignment]


class SuccessResult(_Result):
    success: bool
    message: str


class _Paged(_Result):
    total: Counts = None  # type: ignore[assignment]
    nextCursor: str = None  # type: ignore[assignment]


class GraphResult(_Paged):
    entities: list[EntityRecord]
    relations: list[RelationKey]


class GraphPage(_Paged):
    overview: dict[str, Any] = None  # type: ignore[assignment]
    entities: list[EntityShown]
    relations: list[RelationKey]


class Match(BaseModel):
    entityName: str
    observation: str | None
    score: float
    context: str


class SearchResult(GraphResult):
    matches: list[Match]
    search: dict[str, Any]  # mode, model, semantic, note
    searched: list[dict[str, Any]] = None  # type: ignore[assignment]


def lean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema as few tokens as it takes: `$ref`s inlined (items read in place, as in the official
    server's schemas), no generated titles, optional arguments without `null` (leaving one out says the same),
    nullable values as `"type": [t, "null"]`."""
    return _lean(inline_refs(schema))


def _lean(node: Any) -> Any:
    if isinstance(node, list):
        return [_lean(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    node.pop("title", None)
    if node.get("additionalProperties") is True:
        del node["additionalProperties"]
    if node.get("items") == {}:
        del node["items"]
    variants = node.get("anyOf")
    if isinstance(variants, list) and {"type": "null"} in variants and len(variants) == 2:
        (kept,) = [v for v in variants if v != {"type": "null"}]
        del node["anyOf"]
        if node.get("default", ...) is None:  # an optional argument: leaving it out means None
            del node["default"]
            node = {**kept, **node}
        elif set(kept) == {"type"} and isinstance(kept["type"], str):
            node = {"type": [kept["type"], "null"], **node}
        else:
            node["anyOf"] = variants
    if node.get("default", ...) is None:
        del node["default"]
    lean = {}
    for key, value in node.items():
        if key == "properties":
            lean[key] = {name: _lean(schema) for name, schema in value.items()}
        else:
            lean[key] = _lean(value)
    return lean


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every `$ref` replaced by its definition, so the items' properties read in place, as in
    the official server's schemas."""
    definitions = schema.get("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                merged = {**definitions[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}}
                return inline(merged)
            return {k: inline(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    return inline(schema)
