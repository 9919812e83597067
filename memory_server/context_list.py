"""The contexts as list_contexts and the `memory://contexts` resource show them: in pages that fit the result
budget, however many contexts the registry holds. No MCP in here.

A page describes only its own contexts (each description costs reading that context's file, for its counts),
descriptions are shortened in a list, and one context asked for by name is shown with its description whole. So is
why a project context finds no project: a list gives where the search started and the call that says the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memory_server import present
from memory_server.budget import Budget, clip, item_tokens, text_tokens
from memory_server.contexts import ContextConfig, Contexts
from memory_server.errors import MemoryServerError
from memory_server.paging import Cursor, arguments_digest, fingerprint_of
from memory_server.project import ProjectNotFoundError

TOOL = "list_contexts"
_RESERVE = 300  # tokens for what a page adds around its contexts: the header, warnings, the next step


@dataclass(frozen=True)
class ContextsPage:
    """One page of the contexts: the structured content (without the `context` object) and the text lines."""

    structured: dict[str, Any]
    lines: list[str]


class _Names:
    """The registry's context names in order, as a cursor sees them."""

    def __init__(self, configs: list[ContextConfig]) -> None:
        self.fingerprint = fingerprint_of(c.name for c in configs)
        self.count = len(configs)

    def __len__(self) -> int:
        return self.count


def contexts_page(
    contexts: Contexts,
    budget: Budget,
    project_dir: str | None = None,
    cursor_text: str | None = None,
    name: str | None = None,
) -> ContextsPage:
    """The contexts (sorted by name) from where `cursor_text` points, as many as fit `budget`; or only the
    context called `name`, with its whole description (as much of it as the budget holds)."""
    if name is not None:
        return _one(contexts, budget, project_dir, name)
    configs = contexts.registry.contexts()
    names = _Names(configs)
    digest = arguments_digest(project_dir)
    cursor = Cursor.decode(cursor_text, TOOL) if cursor_text else None
    if cursor is not None:
        cursor.check(digest, names, TOOL, "contexts were added or removed")
    start = cursor.offset if cursor else 0
    room = budget.fill - _RESERVE
    shown: list[dict[str, Any]] = []
    structured_used = text_used = 0.0
    for config in configs[start:]:
        info = _shortened(present.describe_context(contexts, config, project_dir, _listed_reason))
        structured_used += item_tokens(info)
        text_used += text_tokens(present.context_line(info)) + 1
        if max(structured_used, text_used) > room and shown:
            break
        shown.append(info)
    end = start + len(shown)
    structured: dict[str, Any] = {"activeContext": contexts.active_name, "contexts": shown}
    lines = [present.context_line(info) for info in shown]
    if start or end < len(configs):
        structured["total"] = {"contexts": len(configs)}
        lines.insert(0, f"Contexts {start + 1}–{end} of {len(configs)}, sorted by name:" if shown else "No context.")
    if end < len(configs):
        structured["nextCursor"] = Cursor(TOOL, digest, names.fingerprint, end).encode()
        lines.append(
            f"{len(configs) - end} more: {present.Call(TOOL)(cursor=structured['nextCursor'])}. "
            f"{TOOL}(name=...) shows one context whole."
        )
    return ContextsPage(structured, lines)


def contexts_document(contexts: Contexts, budget: Budget) -> str:
    """The `memory://contexts` resource: the contexts as JSON, or their first page and how to read on."""
    page = contexts_page(contexts, budget)
    if "nextCursor" not in page.structured:
        return present.as_json(page.structured)
    note = f"More contexts than one read may hold: here is the first page. {page.lines[-1]}"
    return present.as_json({"note": note, **page.structured})


def fitted(info: dict[str, Any], budget: Budget) -> dict[str, Any]:
    """One context's description (its whole description, as much of it as `budget` holds)."""
    room = budget.fill - _RESERVE
    if item_tokens(info) > room:
        info["description"] = clip(info["description"], max(room - item_tokens({**info, "description": ""}), 40))
    return info


def _one(contexts: Contexts, budget: Budget, project_dir: str | None, name: str) -> ContextsPage:
    config = contexts.registry.get(name)  # an unknown name: the error lists the names there are
    info = fitted(present.describe_context(contexts, config, project_dir), budget)
    return ContextsPage({"activeContext": contexts.active_name, "contexts": [info]}, [present.context_line(info)])


def _listed_reason(problem: MemoryServerError) -> str:
    """Why a context's file cannot be found, as a list says it. A project not found is one clause and the call
    that explains it: its whole explanation (the folders tried, the markers, every way to fix it) is ~500
    characters that every listing would repeat while the client has no project open; list_contexts(name=...) and
    the calls that fail or fall back give it whole."""
    if not isinstance(problem, ProjectNotFoundError):
        return str(problem)
    explained = present.Call(TOOL)(name=problem.context)
    return f"no project found from {problem.start} ({problem.origin}); {explained} says why"


def _shortened(info: dict[str, Any]) -> dict[str, Any]:
    """A context as a list shows it: a long description cut to its start (the context asked for by name shows
    it whole), and a long reason why its file cannot be found cut likewise."""
    description = info["description"]
    if len(description) > DESCRIPTION_LIMIT:
        info["description"] = clip(description, DESCRIPTION_LIMIT / 4) + f" ({TOOL}(name={info['name']!r}) shows all)"
    reason = info.get("unresolvedReason")
    if reason is not None and len(reason) > REASON_LIMIT:
        info["unresolvedReason"] = clip(reason, REASON_LIMIT / 4)
    return info


DESCRIPTION_LIMIT = 200  # characters of a context's description in a list
REASON_LIMIT = 600  # characters of the reason a context's file cannot be found, in a list
