"""The commands for people and scripts: `contexts`, `search`, `show`, `stats`, `export`, `import`, `check`, `view`.

They run on the server's own core (the contexts registry, GraphStore with its lock, Searcher and the embedder), so
what they read is what the server reads. Only `import` writes a memory, through GraphStore.mutate under the same
lock as the server. Results go to stdout (text, or one JSON document with --json); warnings and errors to stderr.

Exit codes:
  0    done
  1    done, and the answer is a problem or nothing: `check` found unusable lines, `import` refused a file with
       unusable lines (and wrote nothing), `search` matched nothing, `show` did not find a name
  2    the command line is wrong
  3    could not be done: a file that cannot be read or written, a lock held too long, an unknown context, a
       read-only memory, no project found for a project context, a file to import that is not what it was said to be,
       an --out that would replace a memory
  130  interrupted
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
import webbrowser
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from memory_server import everywhere, interchange, present
from memory_server.contexts import Contexts, ResolvedContext
from memory_server.embeddings import EmbedderSlot
from memory_server.errors import MemoryServerError
from memory_server.graph import Entity, KnowledgeGraph, Relation, json_line
from memory_server.output import StdoutError, silence, write_output, write_stdout
from memory_server.present import counted, totals_text
from memory_server.project import DEFAULT_MARKERS, DEFAULT_MAX_DEPTH, ProjectNotFoundError, find_project
from memory_server.searcher import Searcher, Target, Wording
from memory_server.stats import dangling_relations, figures, totals
from memory_server.store import GraphStore
from memory_server.unusable import fixes
from memory_server.vector_cache import caches_of
from memory_server.view import render_page

OK, PROBLEMS, USAGE, FAILED, INTERRUPTED = 0, 1, 2, 3, 130
EVERY_CONTEXT = "*"
SEARCH_WORDS = Wording(  # what a search's note suggests, as options of `search`
    keyword="--mode keyword",
    other_context="another --context",
    every_context="--context '*'",
    empty_query="give the words to look for (`export --format markdown` shows everything)",
)


@dataclass
class Run:
    """One command: its options, the core it works on, and where it writes."""

    options: argparse.Namespace
    contexts: Contexts
    embeddings: Callable[[], EmbedderSlot]
    out: TextIO
    err: TextIO

    def write(self, text: str) -> None:
        write_stdout(self.out, text)

    def say(self, text: str = "") -> None:
        self.write(f"{text}\n")

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=self.err)

    def json(self, value: Any) -> None:
        self.write(json_line(value) + "\n")

    def context(self) -> ResolvedContext:
        """The context the command works on: --context, else the active one (which is 'default' when a memory file
        was named, see Contexts._initial_active), and when that is a project context that found no project,
        'default', which the command says as the server's results do (Contexts.resolve)."""
        resolved = self.contexts.resolve(self.options.context)
        if resolved.no_project is not None:
            self.warn(_used_instead(resolved, resolved.no_project, self.options))
        return resolved

    @contextlib.contextmanager
    def reading(self, resolved: ResolvedContext, warn: bool = True) -> Iterator[KnowledgeGraph]:
        """The context's graph, read under the server's lock; warns about lines it could not use."""
        store = self.contexts.store(resolved)
        with store.reading() as graph:
            yield graph
        self.store_warning(store, warn)

    def store_warning(self, store: GraphStore, warn: bool = True) -> None:
        note = store.take_warning()
        if note and warn:
            self.warn(note)


def run(
    options: argparse.Namespace,
    open_contexts: Callable[[], Contexts],
    embeddings: Callable[[], EmbedderSlot],
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the command `options.command`; return its exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    for stream in (out, err):  # a name with a lone surrogate must not stop the output
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        command = Run(options, open_contexts(), embeddings, out, err)
        for problem in command.contexts.registry.problems():
            command.warn(problem)
        return COMMANDS[options.command](command)
    except MemoryServerError as problem:
        if isinstance(problem, StdoutError):
            silence(out)
        print(f"error: {_for_people(problem, options)}", file=err)
        return FAILED
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return INTERRUPTED
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        silence(out)
        return OK


# ---- the commands ------------------------------------------------------------------------------------------------


def contexts_command(run: Run) -> int:
    listing = present.contexts_listing(run.contexts, word=lambda problem: _for_people(problem, run.options, True))
    project = _project_here(run.contexts, run.options)
    if run.options.json:
        run.json({**listing, "project": project})
        return OK
    for item in listing["contexts"]:
        run.say(present.context_line(item))
    if project["root"]:
        run.say(f"Project here: {project['root']} (found by its {project['marker']}, from {project['start']})")
    else:
        run.say(f"No project here: {project['reason']}")
    return OK


def search_command(run: Run) -> int:
    o = run.options
    slot = run.embeddings()
    if o.mode != "keyword":
        embedder, _ = slot.get(wait=600)
        if embedder is not None:
            embedder.on_progress = _ProgressBar(run.err, "Embedding the memory (once; kept in the vector cache)")
    if o.context == EVERY_CONTEXT:
        searched, targets, skipped = everywhere.searchable(run.contexts, None, o.project_boost)
        for name, problem in skipped:  # one broken file never hides the other memories
            run.warn(f"not searched: {name}: {_for_people(problem, o, brief=True)}")
        header = f"{EVERY_CONTEXT} → {', '.join(r.name for r in searched) or 'no context'}"
    else:
        searched = [run.context()]
        targets = [Target(searched[0].name, run.contexts.store(searched[0]))]
        header = f"{searched[0].name} → {searched[0].path}"
    searcher = Searcher(slot, words=SEARCH_WORDS)
    outcome = searcher.search(targets, o.query, o.mode, o.limit + 1, None)  # one more: is there more?
    more = len(outcome.hits) > o.limit
    outcome.hits = outcome.hits[: o.limit]
    for target in targets:
        run.store_warning(target.store)
    if o.json:
        structured, _ = present.search_result(outcome)
        structured["searched"] = [r.summary() for r in searched]
        structured["more"] = more
        run.json(structured)
    else:
        run.say(header)
        run.say(present.matches_text(outcome))
        if more:
            run.say(f"(the first {o.limit}; --limit N shows more)")
    return OK if outcome.hits else PROBLEMS


def show_command(run: Run) -> int:
    resolved = run.context()
    names = list(dict.fromkeys(run.options.names))
    with run.reading(resolved) as graph:
        entities, relations = graph.open_nodes(names)
        like = graph.names_like([name for name in names if name not in graph.entities], limit=3)
        missing = {name: meant or _spelled_like(graph, name) for name, meant in like.items()}
    if run.options.json:
        run.json(
            {
                "entities": [e.to_dict() for e in entities],
                "relations": [r.to_dict() for r in relations],
                "notFound": list(missing),
                "context": resolved.summary(),
            }
        )
    else:
        for number, entity in enumerate(entities):
            if number:
                run.say()
            run.say(_entity_text(entity, relations))
    for name, close in missing.items():
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        print(f"No entity named {name!r} in context '{resolved.name}' ({resolved.path}).{hint}", file=run.err)
    return PROBLEMS if missing else OK


def stats_command(run: Run) -> int:
    resolved = run.context()
    with run.reading(resolved) as graph:
        stats = figures(graph)
    size = resolved.path.stat().st_size if resolved.path.exists() else None
    folder = run.embeddings().cache_dir
    caches = caches_of(folder, resolved.path) if folder is not None else []
    if run.options.json:
        cache = [{"model": c.model, "bytes": c.bytes, "vectors": c.records, "path": str(c.path)} for c in caches]
        run.json({"context": resolved.summary(), "bytes": size, **stats, "vectorCaches": cache})
        return OK
    where = f"{resolved.path} ({_size(size)})" if size is not None else f"{resolved.path} (no file yet)"
    run.say(f"{resolved.name} → {where}")
    run.say(f"  {totals_text(stats)}")
    for label, key in (("Entity types", "entityTypes"), ("Relation types", "relationTypes")):
        if stats[key]:
            run.say(f"  {label}: " + ", ".join(f"{name} {count}" for name, count in stats[key]))
    if stats["mostConnected"]:
        run.say("  Most connected: " + ", ".join(f"{name} ({n})" for name, n in stats["mostConnected"]))
    if stats["mostObservations"]:
        run.say("  Most observations: " + ", ".join(f"{name} ({n})" for name, n in stats["mostObservations"]))
    run.say(f"  Entities without relations: {stats['withoutRelations']}")
    run.say(f"  Relations to a missing entity: {stats['danglingRelations']}")
    unusable = stats["unusableLines"]
    run.say(f"  Unusable lines: {unusable}" + (" (`check` lists them)" if unusable else ""))
    for cache in caches:
        run.say(f"  Vector cache: {_size(cache.bytes)}, {cache.records:,} vectors of {cache.model} ({cache.path})")
    if not caches:
        run.say("  Vector cache: none yet (made by the first search that embeds this memory)")
    return OK


def export_command(run: Run) -> int:
    o = run.options
    resolved = run.context()
    with run.reading(resolved, warn=False) as graph:  # says below what the lines it skips mean for the export
        text = interchange.export(graph, o.format, f"Memory: {resolved.name}")
        skipped = len(graph.skipped_lines())
        dangling = dangling_relations(graph) if o.format == "graphml" else 0
    if skipped:
        run.warn(f"{counted(skipped, 'unusable line')} of {resolved.path} not exported (`check` lists them).")
    if dangling:
        run.warn(f"{counted(dangling, 'relation')} to a missing entity left out: GraphML edges must join two nodes.")
    if o.out is None:
        run.write(text)
        return OK
    target = Path(os.path.abspath(o.out))
    data = _encoded(text)
    write_output(target, data, run.contexts)
    print(f"Wrote {target} ({o.format}, {_size(len(data))}).", file=run.err)
    return OK


def import_command(run: Run) -> int:
    o = run.options
    source = interchange.read_source(o.file, o.source)
    if source.problems:
        for problem in source.problems:
            print(f"{o.file} {problem.where}: {problem.reason}", file=run.err)
        print(
            f"Nothing was imported: {counted(len(source.problems), 'part')} of {o.file} cannot be read (above). "
            "Fix or delete them and import again: an import leaves nothing out silently.",
            file=run.err,
        )
        for fix in fixes(p.reason for p in source.problems):
            print(fix, file=run.err)
        return PROBLEMS
    resolved = run.context()
    resolved.require_writable()
    store = run.contexts.store(resolved)
    if o.dry_run:
        with run.reading(resolved) as graph:
            plan = interchange.plan_import(graph, source.records)
    else:
        plan = store.mutate(lambda graph: interchange.apply_import(graph, source.records))
        run.store_warning(store)
    summary = plan.summary()
    if o.json:
        run.json(
            {
                "file": str(o.file),
                "kind": source.kind,
                "records": len(source.records),
                "context": resolved.summary(),
                "dryRun": o.dry_run,
                **summary,
            }
        )
        return OK
    run.say(
        f"{'Dry run: ' if o.dry_run else ''}{o.file} ({source.kind}, {counted(len(source.records), 'record')}) "
        f"into context '{resolved.name}' ({resolved.path}):"
    )
    run.say("  " + _import_line(summary, o.dry_run))
    for conflict in plan.conflicts:
        run.say(f"  kept as it is: {conflict} (the file's observations are merged)")
    if plan.dangling:
        run.say(
            f"  {counted(plan.dangling, 'relation')} naming an entity that neither has: "
            f"{'would be ' if o.dry_run else ''}kept as the file has them."
        )
    if o.dry_run:
        run.say("  Nothing was written.")
    return OK


def _import_line(summary: dict[str, Any], dry_run: bool) -> str:
    parts = []
    if summary["entitiesAdded"]:
        observations = counted(summary["observationsOfNewEntities"], "observation")
        parts.append(f"{counted(summary['entitiesAdded'], 'entity')} ({observations})")
    if summary["observationsAdded"]:
        extended = counted(summary["entitiesExtended"], "entity")
        parts.append(f"{counted(summary['observationsAdded'], 'observation')} to {extended} already there")
    if summary["relationsAdded"]:
        parts.append(counted(summary["relationsAdded"], "relation"))
    there = f"{counted(summary['alreadyThere'], 'record')} already there"
    if not parts:
        return f"nothing new: {there}."
    return f"{'would add' if dry_run else 'added'} " + ", ".join(parts) + f"; {there}."


def check_command(run: Run) -> int:
    o = run.options
    if o.file is not None:
        path, graph, text = o.file, *_read_file(o.file)
    else:
        resolved = run.context()
        path = resolved.path
        with run.reading(resolved, warn=False) as graph:  # this command lists the lines itself
            pass
        text = ""
    skipped = graph.skipped_lines()
    report = {
        "path": str(path),
        "exists": path.exists(),
        **totals(graph),
        "unusable": [{"line": s.line_number, "reason": s.reason} for s in skipped],
        "duplicatesMerged": sum(1 for r in graph.records if r is None),
        "danglingRelations": dangling_relations(graph),
    }
    foreign = interchange.foreign_kind(text) if skipped else None
    if o.json:
        run.json({**report, "ok": not skipped, "looksLike": foreign})
        return PROBLEMS if skipped else OK
    if not report["exists"]:
        run.say(f"{path}: no file yet (an empty memory).")
        return OK
    unusable = counted(len(skipped), "unusable line") if skipped else "no unusable lines"
    run.say(f"{path}: {totals_text(report)}; {unusable}.")
    for line in skipped:
        run.say(f"  line {line.line_number}: {line.reason}")
    if duplicates := report["duplicatesMerged"]:
        are = "is" if duplicates == 1 else "are"
        run.say(f"  {counted(duplicates, 'duplicate line')} {are} merged into the first (on the next write).")
    if dangling := report["danglingRelations"]:
        name = "names" if dangling == 1 else "name"
        run.say(f"  {counted(dangling, 'relation')} {name} an entity the file does not have.")
    if foreign:
        run.say(f"  This is {foreign}, not a memory file: `import {path}` reads it.")
    elif skipped:
        run.say("  The server keeps these lines as they are; fix or delete them to bring them into the graph.")
        for fix in fixes(s.reason for s in skipped):
            run.say(f"  {fix}")
    return PROBLEMS if skipped else OK


def view_command(run: Run) -> int:
    from memory_server.cli import view_folder

    o = run.options
    resolved = run.context()
    with run.reading(resolved) as graph:
        page = render_page(graph, resolved.name, resolved.path)
        counts = f"{counted(len(graph.entities), 'entity')}, {counted(len(graph.relations), 'relation')}"
    target = Path(os.path.abspath(o.out or view_folder() / f"{resolved.name}.html"))
    write_output(target, _encoded(page), run.contexts)
    run.say(str(target))
    print(f"Wrote the graph of '{resolved.name}' ({counts}); open {target.as_uri()}", file=run.err)
    if o.open and not webbrowser.open(target.as_uri()):
        run.warn("no web browser could be started; open the file yourself.")
    return OK


COMMANDS: dict[str, Callable[[Run], int]] = {
    "contexts": contexts_command,
    "search": search_command,
    "show": show_command,
    "stats": stats_command,
    "export": export_command,
    "import": import_command,
    "check": check_command,
    "view": view_command,
}


# ---- helpers -----------------------------------------------------------------------------------------------------


class _ProgressBar:
    """A tqdm bar on stderr for long embeddings (tqdm: maintained, and it hides itself when stderr is no terminal)."""

    def __init__(self, stream: TextIO, description: str) -> None:
        self.stream = stream
        self.description = description
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, desc=self.description, unit=" texts", file=self.stream, disable=None)
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.bar.close()
            self.bar = None


def _project_here(contexts: Contexts, options: argparse.Namespace) -> dict[str, Any]:
    start = contexts.start()
    try:
        project = find_project(start.folder, DEFAULT_MARKERS, DEFAULT_MAX_DEPTH, origin=_origin(options))
    except ProjectNotFoundError as problem:
        tried = ", ".join(str(p) for p in problem.tried)
        reason = f"none of {tried} has a project marker ({', '.join(DEFAULT_MARKERS[:4])}, ...)"
        if not problem.tried:  # started in the home folder or at the root, where the search never looks
            reason = f"{problem.reason()}; run this in a project folder, or give --project-dir DIR"
        return {"start": str(start.folder), "root": None, "marker": None, "reason": reason}
    return {"start": str(start.folder), "root": str(project.root), "marker": project.marker}


def _for_people(problem: MemoryServerError, options: argparse.Namespace, brief: bool = False) -> str:
    """A core error as a person at the command line reads it. A project not found is said in the command's terms
    (the core's text speaks to a model calling tools: its projectDir argument, set_active_context); `brief`: the
    reason alone, in a list."""
    if not isinstance(problem, ProjectNotFoundError):
        return str(problem)
    reason = problem.reason(brief, origin=_origin(options))
    if brief:
        return reason
    return (
        f"No project found for context '{problem.context}': {reason}. Run the command in a project folder, give "
        "--project-dir DIR, or choose another context with --context NAME."
    )


def _used_instead(resolved: ResolvedContext, problem: ProjectNotFoundError, options: argparse.Namespace) -> str:
    """The warning of a command that used `resolved` because the active project context found no project."""
    return (
        f"this command used '{resolved.name}' ({resolved.path}): the active context '{problem.context}' found no "
        f"project ({problem.reason(brief=True, origin=_origin(options))}). For project memory, run the command in a "
        "project folder or give --project-dir DIR, or choose a context with --context NAME."
    )


def _origin(options: argparse.Namespace) -> str:
    """Where project detection starts for a command, as the person gave it (there are no workspace roots here)."""
    return "--project-dir" if getattr(options, "project_dir", None) is not None else "the current folder"


def _entity_text(entity: Entity, relations: list[Relation]) -> str:
    lines = [f"{entity.name} ({entity.entity_type})"]
    lines += [f"  - {o}" for o in entity.observations] or ["  (no observations)"]
    for relation in relations:
        if relation.source == entity.name:
            lines.append(f"  → {relation.relation_type} → {relation.target}")
        if relation.target == entity.name and relation.source != entity.name:
            lines.append(f"  ← {relation.relation_type} ← {relation.source}")
    return "\n".join(lines)


def _spelled_like(graph: KnowledgeGraph, name: str) -> list[str]:
    """Names a person may have meant when none is the same ignoring case or contains it: similar spellings."""
    return difflib.get_close_matches(name, list(graph.entities), n=3, cutoff=0.75)


def _read_file(path: Path) -> tuple[KnowledgeGraph, str]:
    """Any memory file, read as the server reads it but without its lock: checking a file never creates one."""
    data = interchange.read_input(path, "check")
    text = data.decode("utf-8", "surrogateescape")
    return KnowledgeGraph.parse(data), text


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")  # a lone surrogate in a name must not stop the output


def _size(size: int) -> str:
    if size < 1000:
        return f"{size} bytes"
    scaled = size / 1000
    for unit in ("kB", "MB"):
        if scaled < 1000:
            return f"{scaled:.1f} {unit}"
        scaled /= 1000
    return f"{scaled:.1f} GB"
