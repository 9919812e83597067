"""How results read: the `structuredContent` shapes and the compact text the model sees. No MCP in here."""

from __future__ import annotations

import json
from typing import Any

from memory_server.contexts import ContextConfig, Contexts, ResolvedContext
from memory_server.errors import MemoryServerError
from memory_server.search import Outcome, ranked_entities
from memory_server.store import GraphStore


def search_result(outcome: Outcome) -> tuple[dict[str, Any], str]:
    hits = [labelled.hit for labelled in outcome.hits]
    relations = {(h.label, r.key): r for h in outcome.hits for r in h.relations}
    if outcome.mode == "keyword":
        relations = dict(sorted(relations.items(), key=lambda item: item[1].slot))  # file order, as upstream
    structured = {
        "entities": [e.to_dict() for e in ranked_entities(hits)],
        "relations": [r.to_dict() for r in relations.values()],
        "matches": [
            {
                "entityName": h.hit.entity.name,
                "observation": h.hit.observation,
                "score": round(h.hit.score, 4),
                "context": h.label,
            }
            for h in outcome.hits
        ],
        "search": {"mode": outcome.mode, "model": outcome.model, "semantic": outcome.semantic, "note": outcome.note},
    }
    if outcome.mode == "keyword":  # the official server's answer, unchanged
        return structured, as_json({"entities": structured["entities"], "relations": structured["relations"]})
    return structured, matches_text(outcome)


def matches_text(outcome: Outcome) -> str:
    how = f"{outcome.mode} search" + (f" with {outcome.model}" if outcome.model else ", keywords only")
    lines = [f"{len(outcome.hits)} matches ({how})" + (f". Note: {outcome.note}" if outcome.note else "")]
    labels = len({h.label for h in outcome.hits}) > 1
    for number, labelled in enumerate(outcome.hits, start=1):
        hit = labelled.hit
        where = f"[{labelled.label}] " if labels else ""
        said = f'"{hit.observation}"' if hit.observation is not None else "(name or type matched)"
        lines.append(f"{number}. {where}{hit.entity.name} ({hit.entity.entity_type}) {hit.score:.2f}: {said}")
    relations = {(h.label, r.key): r for h in outcome.hits for r in h.relations}
    if relations:
        lines.append(
            "Relations: " + "; ".join(f"{r.source} -{r.relation_type}-> {r.target}" for r in relations.values())
        )
    return "\n".join(lines)


def counts(store: GraphStore) -> dict[str, Any]:
    if not store.path.exists():
        return {"fileExists": False, "entities": 0, "relations": 0, "observations": 0}
    try:
        with store.reading() as graph:
            observations = sum(len(e.observations) for e in graph.entities.values())
            return {
                "fileExists": True,
                "entities": len(graph.entities),
                "relations": len(graph.relations),
                "observations": observations,
            }
    except MemoryServerError as problem:
        return {"fileExists": True, "error": str(problem)}


def context_line(item: dict[str, Any]) -> str:
    mark = "* " if item["active"] else "  "
    where = item["path"] or f"(unresolved: {item['unresolvedReason']})"
    extra = ""
    if "entities" in item:
        extra = f" [{item['entities']} entities, {item['relations']} relations, {item['observations']} observations]"
    flags = " read-only" if item["readOnly"] else ""
    description = f" - {item['description']}" if item["description"] else ""
    return f"{mark}{item['name']} → {where}{extra}{flags}{description}"


def header(resolved: ResolvedContext | None, unresolved_name: str | None = None) -> str:
    if resolved is not None:
        note = f" ({resolved.note})" if resolved.note else ""
        return f"[memory: {resolved.name} → {resolved.path}]{note}"
    return f"[memory: {unresolved_name} → (no file)]" if unresolved_name else ""


def text(resolved: ResolvedContext | None, warnings: list[str], body: str, unresolved_name: str | None = None) -> str:
    parts = [header(resolved, unresolved_name), *(f"Warning: {w}" for w in warnings), body]
    return "\n".join(p for p in parts if p)


def as_json(value: Any) -> str:
    """JSON with one item of each list per line: as readable as an indented dump, and written by the C encoder
    (an indented `json.dumps` runs in pure Python, seconds for a large graph)."""
    if isinstance(value, list):
        return "[\n" + ",\n".join(_compact(item) for item in value) + "\n]" if value else "[]"
    if isinstance(value, dict):
        parts = [f"{_compact(key)}: {as_json(item)}" for key, item in value.items()]
        return "{\n" + ",\n".join(parts) + "\n}"
    return _compact(value)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def contexts_listing(contexts: Contexts, project_dir: str | None = None) -> dict[str, Any]:
    """Every context, sorted by name, with where its file is now (or why it cannot be worked out)."""
    described = []
    for config in contexts.registry.contexts():
        try:
            resolved = contexts.resolve_config(config, project_dir)
        except MemoryServerError as problem:
            described.append(context_info(contexts, config, None, str(problem)))
            continue
        described.append(context_info(contexts, config, resolved, None))
    return {"activeContext": contexts.active_name, "contexts": described}


def context_info(
    contexts: Contexts, config: ContextConfig, resolved: ResolvedContext | None, problem: str | None
) -> dict[str, Any]:
    info: dict[str, Any] = {
        "name": config.name,
        "description": config.description,
        "pathTemplate": config.path,
        "path": str(resolved.path) if resolved else None,
        "isProjectBased": config.project_based,
        "readOnly": contexts.read_only or config.read_only,
        "active": config.name == contexts.active_name,
    }
    if resolved is None:
        info["unresolvedReason"] = problem or "cannot be resolved now"
        return info
    if resolved.project is not None:
        info["projectDir"] = str(resolved.project.root)
    info.update(counts(contexts.store(resolved)))
    return info


def argument_problems(tool: str, errors: list[Any]) -> str:
    """Say which arguments of a call were wrong and how, one line each, e.g. `entities[0].name: ...`."""
    lines = [f"Invalid arguments for {tool}:"]
    for error in errors[:_MAX_LISTED]:
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "missing; this argument is required"
        elif "input" in error:
            message += f" (got {_short(error['input'])})"
        lines.append(f"- {where or 'arguments'}: {message}")
    if len(errors) > _MAX_LISTED:
        lines.append(f"- and {len(errors) - _MAX_LISTED} more")
    lines.append(f"Fix these and call {tool} again; nothing was changed.")
    return "\n".join(lines)


_MAX_LISTED = 10


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except RecursionError:  # nested almost as deep as the parser allows: nothing short to show anyway
        return "a value nested too deeply to show"
    return text if len(text) <= 60 else text[:57] + "..."
