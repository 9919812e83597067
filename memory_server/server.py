"""The MCP tools: their registration, and handlers that translate between MCP and the core. With resources.py,
the only MCP code (tool.py, roots.py, protocol.py and stdio.py are its helpers at the protocol's edge).

Each tool validates its input with pydantic, calls one core function in a worker thread (results.py, writes.py,
context_results.py, everywhere.py shape what it returns), and answers with the official memory server's
`structuredContent` plus a `context` object; the text starts with a line naming the context and file it used.
Core errors become `isError` results here, in one place.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp_types import CallToolResult, NotificationParams, TextContent, ToolAnnotations
from pydantic import Field

from memory_server import __version__, context_results, everywhere, present, results, writes
from memory_server.budget import DEFAULT_MAX_RESULT_TOKENS, Budget
from memory_server.contexts import Contexts, ResolvedContext, new_context
from memory_server.errors import MemoryServerError
from memory_server.graph import Entity, Relation
from memory_server.handshake import SERVER_NAME, EarlyStart
from memory_server.models import (
    EntitiesResult,
    EntityItem,
    GraphPage,
    ObservationAddition,
    ObservationDeletion,
    ObservationsResult,
    RelationItem,
    RelationKey,
    RelationsResult,
    SearchResult,
    SuccessResult,
)
from memory_server.protocol import guard_requests
from memory_server.resources import LiveUpdates, add_resources
from memory_server.results import Detail
from memory_server.roots import WorkspaceRoots
from memory_server.searcher import Mode, Searcher, Target
from memory_server.stdio import stdio_transport
from memory_server.store import GraphStore, call_arrived_at
from memory_server.tool import make_tool

ContextArg = Annotated[str | None, Field(description="Context for this call (default: active)")]
ProjectDirArg = Annotated[
    str | None,
    Field(description="Project folder: a path or file:// URI"),
]
CursorArg = Annotated[str | None, Field(description="nextCursor of the previous page")]

EVERY_CONTEXT = everywhere.EVERY_CONTEXT
DEFAULT_LIMIT = 10
PROJECT_BOOST = 0.05  # share by which the current project's relevant hits grow in a search of every context

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
CREATE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
DELETE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False)

Work = context_results.Work
T = TypeVar("T")


class MemoryTools:
    """The tools of one server process, bound to its contexts."""

    def __init__(
        self,
        contexts: Contexts,
        searcher: Searcher,
        live: LiveUpdates,
        project_boost: float = PROJECT_BOOST,
        budget: Budget | None = None,
    ) -> None:
        self.contexts = contexts
        self.searcher = searcher
        self.live = live
        self.project_boost = project_boost
        self.budget = budget or Budget()
        self.roots = WorkspaceRoots(contexts)
        self._turn = anyio.Lock()

    # ---- the nine tools of the official server --------------------------------------------------------------

    async def create_entities(
        self, entities: list[EntityItem], ctx: Context, context: ContextArg = None, projectDir: ProjectDirArg = None
    ) -> Annotated[CallToolResult, EntitiesResult]:
        new = [Entity(e.name, e.entityType, list(e.observations)) for e in entities]

        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            return writes.create_entities(resolved, store, new, self.budget)

        return await self._call(ctx, context, projectDir, work)

    async def create_relations(
        self, relations: list[RelationItem], ctx: Context, context: ContextArg = None, projectDir: ProjectDirArg = None
    ) -> Annotated[CallToolResult, RelationsResult]:
        new = [Relation(r.source, r.to, r.relationType) for r in relations]

        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            return writes.create_relations(resolved, store, new, self.budget)

        return await self._call(ctx, context, projectDir, work)

    async def add_observations(
        self,
        observations: list[ObservationAddition],
        ctx: Context,
        context: ContextArg = None,
        projectDir: ProjectDirArg = None,
    ) -> Annotated[CallToolResult, ObservationsResult]:
        additions = [(o.entityName, list(o.contents)) for o in observations]

        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            return writes.add_observations(resolved, store, additions, self.budget)

        return await self._call(ctx, context, projectDir, work)

    async def delete_entities(
        self,
        entityNames: Annotated[list[str], Field(description="An array of entity names to delete")],
        ctx: Context,
        context: ContextArg = None,
        projectDir: ProjectDirArg = None,
    ) -> Annotated[CallToolResult, SuccessResult]:
        return await self._call(
            ctx, context, projectDir, lambda resolved, store: writes.delete_entities(resolved, store, entityNames)
        )

    async def delete_observations(
        self,
        deletions: list[ObservationDeletion],
        ctx: Context,
        context: ContextArg = None,
        projectDir: ProjectDirArg = None,
    ) -> Annotated[CallToolResult, SuccessResult]:
        pairs = [(d.entityName, list(d.observations)) for d in deletions]
        return await self._call(
            ctx, context, projectDir, lambda resolved, store: writes.delete_observations(resolved, store, pairs)
        )

    async def delete_relations(
        self,
        relations: Annotated[list[RelationKey], Field(description="An array of relations to delete")],
        ctx: Context,
        context: ContextArg = None,
        projectDir: ProjectDirArg = None,
    ) -> Annotated[CallToolResult, SuccessResult]:
        keys = [(r.source, r.to, r.relationType) for r in relations]
        return await self._call(
            ctx, context, projectDir, lambda resolved, store: writes.delete_relations(resolved, store, keys)
        )

    async def read_graph(
        self,
        ctx: Context,
        detail: Annotated[
            Detail | None,
            Field(
                description="'full' (default), 'summary' (observation and relation counts) or 'names' (name, "
                "type); relations only with 'full'"
            ),
        ] = None,
        entityType: Annotated[
            str | None, Field(description="Only entities of this type, with the relations touching them")
        ] = None,
        limit: Annotated[int | None, Field(ge=1, description="Most entities per page")] = None,
        cursor: CursorArg = None,
        context: ContextArg = None,
        projectDir: ProjectDirArg = None,
    ) -> Annotated[CallToolResult, GraphPage]:
        query = results.GraphQuery(detail, entityType, limit, cursor)

        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            with store.reading() as graph:
                return results.read_graph(graph, self.budget, query, resolved.name)

        return await self._call(ctx, context, projectDir, work)

    async def search_nodes(
        self,
        query: Annotated[
            str, Field(description="The search query to match against entity names, types, and observation content")
        ],
        ctx: Context,
        mode: Annotated[
            Mode,
            Field(
                description="'hybrid': meaning and keywords; 'semantic': meaning; 'keyword': case-insensitive "
                "substring, as the official server"
            ),
        ] = "hybrid",
        limit: Annotated[
            int | None,
            Field(ge=1, description="Most matches, best first (default 10; keyword mode: all)"),
        ] = None,
        minScore: Annotated[float | None, Field(ge=0, description="Leave out matches scoring below this (0-1)")] = None,
        cursor: CursorArg = None,
        context: Annotated[str | None, Field(description="Context for this call; '*': every context")] = None,
        projectDir: ProjectDirArg = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        if limit is None and mode != "keyword":
            limit = DEFAULT_LIMIT

        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            again = cursor is not None
            outcome = self.searcher.search([Target(resolved.name, store)], query, mode, limit, minScore, again)
            asked = results.SearchCall(query, mode, limit, minScore, context, (resolved.name,))
            return results.search(outcome, self.budget, cursor, asked)

        if context == EVERY_CONTEXT:
            await self.roots.sync(ctx)
            return await self._in_order(self._search_everywhere, query, mode, limit, minScore, projectDir, cursor)
        return await self._call(ctx, context, projectDir, work)

    async def open_nodes(
        self,
        names: Annotated[list[str], Field(description="An array of entity names to retrieve")],
        ctx: Context,
        depth: Annotated[
            int, Field(ge=0, le=2, description="Also give the entities up to this many relations away")
        ] = 0,
        cursor: CursorArg = None,
        context: ContextArg = None,
        projectDir: ProjectDirArg = None,
    ) -> Annotated[CallToolResult, GraphPage]:
        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            with store.reading() as graph:
                return results.open_nodes(graph, self.budget, names, depth, cursor, resolved.name)

        return await self._call(ctx, context, projectDir, work)

    # ---- contexts ---------------------------------------------------------------------------------------------

    async def list_contexts(
        self,
        ctx: Context,
        name: Annotated[str | None, Field(description="Only this context, its description whole")] = None,
        cursor: CursorArg = None,
        projectDir: ProjectDirArg = None,
    ) -> CallToolResult:
        await self.roots.sync(ctx)
        return await self._in_order(self._answer, context_results.listing, projectDir, None, cursor, name)

    async def get_active_context(self, ctx: Context, projectDir: ProjectDirArg = None) -> CallToolResult:
        await self.roots.sync(ctx)
        return await self._in_order(self._answer, context_results.active, projectDir, None)

    async def set_active_context(
        self,
        name: Annotated[str, Field(description="Context to make active")],
        ctx: Context,
        persist: Annotated[bool, Field(description="Also make it the default at future starts")] = False,
        projectDir: ProjectDirArg = None,
    ) -> CallToolResult:
        await self.roots.sync(ctx)
        result = await self._in_order(self._answer, context_results.switch, name, persist, projectDir)
        await self.live.follow()  # memory://knowledge-graph now shows another memory
        return result

    async def add_context(
        self,
        name: Annotated[str, Field(description="Name: letters, digits, '_', '-'")],
        path: Annotated[
            str,
            Field(
                description="A .jsonl file, or a template: '{projectDir}/.ai-memory.jsonl' (per worktree), "
                "'{repoRoot}/...' (per repository), '~/.ai-memory/projects/{projectId}.jsonl'"
            ),
        ],
        ctx: Context,
        description: Annotated[str, Field(description="What this memory is for")] = "",
        markers: Annotated[list[str] | None, Field(description="Project markers, e.g. ['.git']")] = None,
        maxDepth: Annotated[int | None, Field(description="Folders to walk up for a marker (default 5)")] = None,
        readOnly: Annotated[bool, Field(description="Refuse every change")] = False,
        projectDir: ProjectDirArg = None,
    ) -> CallToolResult:
        def add() -> None:
            config = new_context(self.contexts, name, path, description, markers, maxDepth, readOnly, projectDir)
            self.contexts.registry.add(config)

        return await self._call_admin(ctx, projectDir, add, f"Added context '{name}'.")

    async def remove_context(
        self,
        name: Annotated[str, Field(description="Context to forget (its file is kept)")],
        ctx: Context,
    ) -> CallToolResult:
        return await self._call_admin(
            ctx, None, lambda: self.contexts.forget(name), f"Removed context '{name}'; its memory file is kept."
        )

    # ---- plumbing ---------------------------------------------------------------------------------------------

    async def _in_order(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` in a worker thread, one call at a time in the order the calls came: a client that pipelines
        a write and then a read gets the read after the write, as it would from the official server. The time
        spent waiting for the calls before counts in this one's lock timeout."""
        arrived = time.monotonic()
        async with self._turn:
            return await anyio.to_thread.run_sync(functools.partial(_arrived_at, arrived, fn), *args)

    async def _call(self, ctx: Context, name: str | None, project_dir: str | None, work: Work) -> CallToolResult:
        await self.roots.sync(ctx)
        result, store, changed = await self._in_order(self._run, name, project_dir, work)
        if store is not None:
            self.live.watch(store)
            if changed:
                await self.live.changed(store)
        return result

    async def _call_admin(
        self, ctx: Context, project_dir: str | None, change: Callable[[], Any], done: str
    ) -> CallToolResult:
        await self.roots.sync(ctx)
        result = await self._in_order(self._answer, context_results.changed, change, project_dir, done)
        await self.live.follow()  # a context added under a subscribed name, or the active one removed
        return result

    def _run(
        self, name: str | None, project_dir: str | None, work: Work
    ) -> tuple[CallToolResult, GraphStore | None, bool]:
        """The call in its context (context_results.in_context) as MCP's result; also the store it used and
        whether subscribers must hear that its graph changed."""
        called = context_results.in_context(self.contexts, self.searcher, name, project_dir, work)
        content = [TextContent(type="text", text=called.text)]
        if called.structured is None:
            return CallToolResult(content=content, is_error=True), called.store, False
        result = CallToolResult(content=content, structured_content=called.structured)
        return result, called.store, called.changed and called.store is not None and called.store.announce()

    def _search_everywhere(
        self,
        query: str,
        mode: Mode,
        limit: int | None,
        min_score: float | None,
        project_dir: str | None,
        cursor: str | None = None,
    ) -> CallToolResult:
        asked = everywhere.Everywhere(query, mode, limit, min_score, project_dir, cursor, self.project_boost)
        try:
            structured, text = everywhere.search(self.contexts, self.searcher, self.budget, asked)
        except MemoryServerError as problem:
            return self._failed(problem)
        finally:
            self.live.trim()  # memories not used lately are released (as after every call, see _run)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    def _answer(self, shape: Callable[..., tuple[dict[str, Any], str]], *args: Any) -> CallToolResult:
        """A contexts tool's result, or its error headed by the active context."""
        try:
            structured, text = shape(self.contexts, self.budget, *args)
        except MemoryServerError as problem:
            return self._failed(problem)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    def _failed(self, problem: Exception) -> CallToolResult:
        """An error result headed by the active context, for tools that are not about one memory file."""
        resolved = context_results.resolve_active(self.contexts, None)
        warnings = context_results.result_warnings(self.contexts, None, resolved)
        return _error(resolved, warnings, str(problem), self.contexts.active_name)


def build_server(
    contexts: Contexts,
    searcher: Searcher,
    *,
    context_admin: bool = True,
    project_boost: float = PROJECT_BOOST,
    max_result_tokens: int = DEFAULT_MAX_RESULT_TOKENS,
    instructions: str | None = None,
) -> MCPServer:
    budget = Budget(max_result_tokens)
    bus = InMemorySubscriptionBus()
    live = LiveUpdates(contexts, searcher, bus)
    tools = MemoryTools(contexts, searcher, live, project_boost, budget)
    specs: list[tuple[Callable[..., Any], str, str, ToolAnnotations]] = [
        (tools.create_entities, "Create Entities", "Create multiple new entities in the knowledge graph", CREATE),
        (
            tools.create_relations,
            "Create Relations",
            "Create multiple new relations between entities in the knowledge graph. "
            "Relations should be in active voice",
            CREATE,
        ),
        (
            tools.add_observations,
            "Add Observations",
            "Add new observations to existing entities in the knowledge graph",
            CREATE,
        ),
        (
            tools.delete_entities,
            "Delete Entities",
            "Delete multiple entities and their associated relations from the knowledge graph",
            DELETE,
        ),
        (
            tools.delete_observations,
            "Delete Observations",
            "Delete specific observations from entities in the knowledge graph",
            DELETE,
        ),
        (tools.delete_relations, "Delete Relations", "Delete multiple relations from the knowledge graph", DELETE),
        (tools.read_graph, "Read Graph", "Read the entire knowledge graph", READ),
        (tools.search_nodes, "Search Nodes", "Search for nodes in the knowledge graph based on a query", READ),
        (tools.open_nodes, "Open Nodes", "Open specific nodes in the knowledge graph by their names", READ),
        (
            tools.list_contexts,
            "List Contexts",
            "List the memory contexts: file, whether active, size",
            READ,
        ),
        (
            tools.get_active_context,
            "Get Active Context",
            "Show the active memory context, its file and detected project",
            READ,
        ),
        (
            tools.set_active_context,
            "Set Active Context",
            "Switch the memory context that the other tools use in this session",
            ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False),
        ),
    ]
    if context_admin:
        specs += [
            (
                tools.add_context,
                "Add Context",
                "Register a memory context: a .jsonl file, or a '{projectDir}/...' template for per-project memory",
                ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False),
            ),
            (
                tools.remove_context,
                "Remove Context",
                "Forget a memory context; its memory file is kept on disk",
                ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False),
            ),
        ]
    server = MCPServer(
        name=SERVER_NAME,
        version=__version__,
        instructions=instructions if instructions is not None else present.instructions(contexts),
        tools=[make_tool(fn, title, description, hints) for fn, title, description, hints in specs],
        subscriptions=bus,
        lifespan=lambda _server: live.running(),
    )
    add_resources(server, live, budget)
    guard_requests(server._lowlevel_server)  # noqa: SLF001

    async def on_roots_changed(_ctx: Any, _params: Any) -> None:
        tools.roots.changed()

    # MCPServer has no public hook for client notifications; the low-level server does.
    server._lowlevel_server.add_notification_handler(  # noqa: SLF001
        "notifications/roots/list_changed", NotificationParams, on_roots_changed
    )
    return server


def _arrived_at(moment: float, fn: Callable[..., T], *args: Any) -> T:
    with call_arrived_at(moment):
        return fn(*args)


async def serve_stdio(server: MCPServer, early: EarlyStart | None = None) -> None:
    """Serve `server` on stdin/stdout until the client closes them (our transport, see stdio.py), after what
    `early` read and answered before the SDK was loaded (handshake.py)."""
    lowlevel = server._lowlevel_server  # noqa: SLF001 - what MCPServer.run_stdio_async does, with our transport
    async with stdio_transport(early) as (read, write):
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def _error(
    resolved: ResolvedContext | None, warnings: list[str], message: str, unresolved_name: str | None = None
) -> CallToolResult:
    text = present.text(resolved, [w for w in warnings if w != message], message, unresolved_name)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
