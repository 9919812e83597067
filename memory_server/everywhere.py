"""A search of every context (`context="*"`) as one result: the contexts searched, those left out and why, and
the warnings of their files, all of bounded size however many contexts the registry holds. No MCP in here.

A context whose file cannot be read now (a folder where the file should be, a link to something else, a lock
held too long) is left out with its reason; the others are searched: one broken file never hides all memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memory_server import present, results
from memory_server.budget import Budget, json_tokens, text_tokens
from memory_server.contexts import PROJECT_FILE_NOTE, Contexts, ResolvedContext
from memory_server.errors import MemoryServerError, listed, shortened
from memory_server.project import ProjectNotFoundError
from memory_server.searcher import Mode, Searcher, Target, every_target

EVERY_CONTEXT = "*"
SKIPPED_LISTED = 5  # contexts left out, each with its reason
SEARCHED_LISTED = 10  # contexts searched, in the header and in `searched`
STORE_WARNINGS = 3  # warnings about the files searched
REASON_LIMIT = 300  # characters of the reason a context was left out (its path may be long)


@dataclass(frozen=True)
class Everywhere:
    """What a search of every context was asked."""

    query: str
    mode: Mode
    limit: int | None
    min_score: float | None
    project_dir: str | None
    cursor: str | None
    project_boost: float


def searchable(
    contexts: Contexts, project_dir: str | None, project_boost: float
) -> tuple[list[ResolvedContext], list[Target], list[tuple[str, MemoryServerError]]]:
    """The contexts that can be searched now with their targets, and those left out, each with the error that
    says why (for each front end to word)."""
    resolved, unresolved = contexts.resolve_each(project_dir)
    searched: list[ResolvedContext] = []
    targets: list[Target] = []
    skipped = list(unresolved)
    for context in resolved:
        target = every_target(contexts, context, project_boost)
        problem = _unreadable(target)
        if problem is None:
            searched.append(context)
            targets.append(target)
        else:
            skipped.append((context.name, problem))
    return searched, targets, skipped


def search(contexts: Contexts, searcher: Searcher, budget: Budget, asked: Everywhere) -> tuple[dict[str, Any], str]:
    searched, targets, problems = searchable(contexts, asked.project_dir, asked.project_boost)
    skipped = [(name, _reason(problem)) for name, problem in problems]
    warnings = present.bounded_warnings([*contexts.problems(), *_store_warnings(searched, targets)])
    lines = [_header(searched), *_skipped_lines(skipped), *(f"Warning: {w}" for w in warnings)]
    around = {
        "context": {"name": EVERY_CONTEXT, "path": None, "readOnly": contexts.read_only},
        "searched": [r.summary() for r in searched[:SEARCHED_LISTED]],
        **({"warnings": warnings} if warnings else {}),
    }
    spent = max(text_tokens("\n".join(lines)), json_tokens(around) + json_tokens(skipped))
    outcome = searcher.search(targets, asked.query, asked.mode, asked.limit, asked.min_score, asked.cursor is not None)
    call = results.SearchCall(
        asked.query, asked.mode, asked.limit, asked.min_score, EVERY_CONTEXT, tuple(t.label for t in targets)
    )
    structured, body = results.search(outcome, budget.less(spent), asked.cursor, call)
    notes = [structured["search"]["note"]]
    if len(searched) > SEARCHED_LISTED:
        notes.append(f"searched {len(searched)} contexts; `searched` lists the first {SEARCHED_LISTED}")
    if skipped:
        structured["search"]["skipped"] = [{"context": n, "reason": r} for n, r in skipped[:SKIPPED_LISTED]]
        notes.append(f"{len(skipped)} contexts not searched (see skipped)")
    structured["search"]["note"] = "; ".join(filter(None, notes)) or None
    structured.update(around)
    return structured, "\n".join([*lines, body])


def _unreadable(target: Target) -> MemoryServerError | None:
    """Why this memory cannot be read now, if it cannot (reading it also loads it for the search)."""
    try:
        with target.store.reading():
            return None
    except MemoryServerError as problem:
        return problem


def _reason(problem: MemoryServerError) -> str:
    """An error's first sentence, short: the reason in a list of contexts left out."""
    text = problem.reason(brief=True) if isinstance(problem, ProjectNotFoundError) else str(problem)
    return shortened(text.split(". ")[0].rstrip("."), REASON_LIMIT)


def _header(searched: list[ResolvedContext]) -> str:
    header = f"[memory: {EVERY_CONTEXT} → {listed([r.name for r in searched], SEARCHED_LISTED) or 'no context'}]"
    shared = [r.name for r in searched if r.project_file]
    if shared:
        header += f" ({listed(shared, SEARCHED_LISTED)}: {PROJECT_FILE_NOTE})"
    return header


def _skipped_lines(skipped: list[tuple[str, str]]) -> list[str]:
    if not skipped:
        return []
    lines = [f"Not searched: {name}: {reason}." for name, reason in skipped[:SKIPPED_LISTED]]
    if len(skipped) > SKIPPED_LISTED:
        more = listed([name for name, _ in skipped[SKIPPED_LISTED:]])
        lines.append(f"Not searched either: {more} (list_contexts says why).")
    return lines


def _store_warnings(searched: list[ResolvedContext], targets: list[Target]) -> list[str]:
    """The files' warnings (lines they could not use...): the first few, then which other contexts have some."""
    found = [(r.name, w) for r, t in zip(searched, targets, strict=True) if (w := t.store.take_warning())]
    shown = [warning for _, warning in found[:STORE_WARNINGS]]
    if len(found) > STORE_WARNINGS:
        others = listed([name for name, _ in found[STORE_WARNINGS:]])
        shown.append(f"The files of {others} have warnings too: `mcp-memory-contexts check --context NAME` lists them.")
    return shown
