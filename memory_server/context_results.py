"""The contexts tools' results: list_contexts (also after add_context and remove_context), get_active_context,
set_active_context; what heads every tool's result: the `context` object and the warnings; and a graph tool's call
in its context (`in_context`), which server.py and early.py both put on the wire. No MCP in here: each function
returns the structured content and the text, or raises the core's error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memory_server import present
from memory_server.budget import Budget, json_tokens
from memory_server.context_list import contexts_page, fitted
from memory_server.contexts import Contexts, ResolvedContext
from memory_server.errors import MemoryServerError, ReadOnlyError
from memory_server.results import Shaped
from memory_server.store import GraphStore

if TYPE_CHECKING:
    from memory_server.searcher import Searcher

logger = logging.getLogger(__name__)
Work = Callable[[ResolvedContext, GraphStore], Shaped]


@dataclass(frozen=True)
class Called:
    """A graph tool's call done in its context, ready to be put on the wire."""

    text: str
    structured: dict[str, Any] | None  # None: the call failed, and `text` says why
    store: GraphStore | None  # the memory it used, if it got that far
    changed: bool  # whether that memory's graph changed during the call


def in_context(contexts: Contexts, searcher: Searcher, name: str | None, project_dir: str | None, work: Work) -> Called:
    """Resolve the context (`name`, else the active one), run `work` on its store, head the text with the context
    and the warnings; a core error is a failed call saying why. Memories not used lately are released after it."""
    resolved: ResolvedContext | None = None
    store: GraphStore | None = None
    try:
        resolved = contexts.resolve(name, project_dir)
        store = contexts.store(resolved)
        version = store.version
        structured, text = work(resolved, store)
    except MemoryServerError as problem:
        message = problem.explained()
        warnings = [w for w in result_warnings(contexts, store, resolved) if w != message]
        return Called(present.text(resolved, warnings, message, name or contexts.active_name), None, store, False)
    finally:
        release_unused(contexts, searcher)
    warnings = result_warnings(contexts, store, resolved)
    structured["context"] = resolved.summary()
    if warnings:
        structured["warnings"] = warnings
    return Called(present.text(resolved, warnings, text), structured, store, store.version != version)


def release_unused(contexts: Contexts, searcher: Searcher) -> None:
    """Release the memories not in use (see Contexts.trim), and their search indexes."""
    for store in contexts.trim():
        logger.debug("Released %s (not used lately)", store.path)
        searcher.forget(store.path)


def listing(
    contexts: Contexts,
    budget: Budget,
    project_dir: str | None,
    note: str | None = None,
    cursor: str | None = None,
    name: str | None = None,
) -> Shaped:
    """list_contexts: a page of the contexts (or the one called `name`), after `note` on what was just done."""
    resolved = resolve_active(contexts, project_dir)
    warnings = result_warnings(contexts, None, resolved)
    page = contexts_page(contexts, budget.less(json_tokens(warnings)), project_dir, cursor, name)
    structured = page.structured
    structured["context"] = context_object(contexts, resolved)
    if note:
        structured["message"] = note
    if warnings:
        structured["warnings"] = warnings
    body = "\n".join([*([note] if note else []), *page.lines])
    return structured, present.text(resolved, warnings, body, contexts.active_name)


def changed(
    contexts: Contexts, budget: Budget, change: Callable[[], Any], project_dir: str | None, done: str
) -> Shaped:
    """add_context, remove_context: `change` made to the registry, then the contexts as they are now."""
    require_writable_registry(contexts)
    change()
    return listing(contexts, budget, project_dir, note=done)


def active(contexts: Contexts, budget: Budget, project_dir: str | None, note: str | None) -> Shaped:
    """get_active_context: the active context and where its file is now (or why it cannot be worked out)."""
    config = contexts.active_config()
    resolved: ResolvedContext | None = None
    try:
        resolved = contexts.resolve_config(config, project_dir)
    except MemoryServerError as problem:
        info = fitted(present.context_info(contexts, config, None, str(problem)), budget)
        where = f"its file cannot be resolved now: {problem}"
        fallback = resolve_active(contexts, project_dir)
        if fallback is not None:
            where += f" Until it can, the other tools use the '{fallback.name}' context ({fallback.path})"
    else:
        info = fitted(present.context_info(contexts, config, resolved, None), budget)
        where = f"it uses {resolved.path}"
        if resolved.project is not None:
            info["projectMarker"] = resolved.project.marker
            where += f" (project {resolved.project.root}, found by its {resolved.project.marker})"
    structured: dict[str, Any] = {"active": info, "context": context_object(contexts, resolved)}
    warnings = result_warnings(contexts, None)
    if warnings:
        structured["warnings"] = warnings
    body = f"{note + ' ' if note else ''}Active context '{config.name}': {where}."
    return structured, present.text(resolved, warnings, body, config.name)


def switch(contexts: Contexts, budget: Budget, name: str, persist: bool, project_dir: str | None) -> Shaped:
    """set_active_context: switch to the context `name` (and save it as the default with `persist`)."""
    config = contexts.registry.get(name)
    if persist:  # first: a registry that cannot be saved leaves the switch undone
        require_writable_registry(contexts)
        contexts.registry.persist_active(config.name)
    contexts.set_active(config.name)
    saved = " and saved it in contexts.json" if persist else " for this session"
    if persist and contexts.memory_path is not None:  # a file named at launch wins over the saved context
        saved += " (a server started with --memory-path or MEMORY_FILE_PATH, as this one, starts in 'default')"
    return active(contexts, budget, project_dir, f"Switched to context '{config.name}'{saved}.")


def require_writable_registry(contexts: Contexts) -> None:
    if contexts.read_only:
        raise ReadOnlyError(f"{contexts.registry.file} (the server runs with --read-only)")


def context_object(contexts: Contexts, resolved: ResolvedContext | None) -> dict[str, Any]:
    """The `context` object of a result: the context used, or the active one with no path when it has none."""
    if resolved is not None:
        return resolved.summary()
    try:
        read_only = contexts.read_only or contexts.active_config().read_only
    except MemoryServerError:
        read_only = contexts.read_only
    return {"name": contexts.active_name, "path": None, "readOnly": read_only}


def result_warnings(contexts: Contexts, store: GraphStore | None, resolved: ResolvedContext | None = None) -> list[str]:
    """What a result warns about: the context's, the registry's, and the memory file's latest warning."""
    warnings = [*(resolved.warnings if resolved else ()), *contexts.problems()]
    note = store.take_warning() if store is not None else None
    return present.bounded_warnings([*warnings, note] if note else warnings)


def resolve_active(contexts: Contexts, project_dir: str | None) -> ResolvedContext | None:
    try:
        return contexts.resolve(None, project_dir)
    except MemoryServerError:
        return None
