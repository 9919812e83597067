"""MCP resources and live updates: the graphs as readable resources, and `notifications/resources/updated` when
a memory changes, whether through our tools or through another process or an editor.

- `memory://knowledge-graph`: the active context's graph (the official server's resource);
- `memory://contexts`: the contexts, as `list_contexts` shows them;
- `memory://contexts/{name}`: one context's graph.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import (
    INVALID_PARAMS,
    EmptyResult,
    ListResourcesResult,
    PaginatedRequestParams,
    Resource,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from memory_server.budget import Budget
from memory_server.context_list import DESCRIPTION_LIMIT, contexts_document
from memory_server.context_results import release_unused
from memory_server.contexts import Contexts
from memory_server.errors import MemoryServerError, shortened
from memory_server.results import graph_document
from memory_server.searcher import Searcher
from memory_server.store import GraphStore
from memory_server.watch import FolderWatcher

TRIM_EVERY = 60.0  # seconds between two looks for memories not used lately
GRAPH_URI = "memory://knowledge-graph"
CONTEXTS_URI = "memory://contexts"
CONTEXT_URI = "memory://contexts/{name}"
RESOURCES_PAGE = 100  # resources per page of resources/list: about 25,000 characters at most


class LiveUpdates:
    """Who subscribed to what, and telling them when a memory file changed."""

    def __init__(self, contexts: Contexts, searcher: Searcher, bus: Any) -> None:
        self.contexts = contexts
        self.searcher = searcher
        self.bus = bus
        self.watcher = FolderWatcher(self._files_changed)
        self._subscribed: dict[str, Any] = {}  # uri -> the session that asked
        self._active_path: Path | None = None  # the file memory://knowledge-graph showed when last looked at

    def watch(self, store: GraphStore) -> None:
        """Watch the folder of the store's file and, when the file is a symbolic link (a synced folder, a dotfile
        manager), the folder of the file it leads to: a save there changes no entry of the link's own folder."""
        self.watcher.watch(store.path.parent)
        real = _real(store.path)
        if real != store.path:
            self.watcher.watch(real.parent)

    async def changed(self, store: GraphStore) -> None:
        """Tell subscribers that `store`'s graph changed."""
        await self._publish(await anyio.to_thread.run_sync(self._uris_of, store.path))

    async def _publish(self, uris: list[str]) -> None:
        for uri in uris:
            await self.bus.publish(ResourceUpdated(uri=uri))
            session = self._subscribed.get(uri)
            if session is not None:
                with contextlib.suppress(Exception):  # a client gone away must not break the watcher
                    await session.send_resource_updated(uri)

    async def subscribe(self, ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        self._subscribed[str(params.uri)] = ctx.session
        await anyio.to_thread.run_sync(self._watch_subscribed)  # a memory no call has used yet is watched too
        return EmptyResult()

    async def follow(self) -> None:
        """After a call that may change what the resources show (a switch of the active context, a context added
        or removed): watch the files the subscriptions lead to now, and tell the subscriber of
        memory://knowledge-graph when it shows another memory than before."""
        before = self._active_path
        if await anyio.to_thread.run_sync(self._watch_subscribed) != before:
            await self._publish([GRAPH_URI])

    async def unsubscribe(self, ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        self._subscribed.pop(str(params.uri), None)
        return EmptyResult()

    async def _files_changed(self, paths: set[Path]) -> None:
        """Tell subscribers at once; read nothing (unless the file kept its size: see GraphStore.noticed_change). The
        store follows the file at the next call that needs its graph (usually only the new bytes), so an idle server
        spends a `stat` on another process's write."""
        if self.contexts.registry.file in paths:
            await self._publish([CONTEXTS_URI])
        for store in self.contexts.open_stores():
            named = store.path in paths or _real(store.path) in paths
            if named and await anyio.to_thread.run_sync(store.noticed_change):
                await self.changed(store)

    def trim(self) -> None:
        """Release the memories not in use (see Contexts.trim), and their search indexes."""
        release_unused(self.contexts, self.searcher)

    async def _trim_now_and_then(self) -> None:
        while True:
            await anyio.sleep(TRIM_EVERY)
            await anyio.to_thread.run_sync(self.trim)

    def _watch_subscribed(self) -> Path | None:
        """Watch the file of every graph subscribed to; return (and remember) the file of the active context."""
        self._active_path = self._active_store_path()
        for uri in list(self._subscribed):
            name = uri.removeprefix(CONTEXT_URI.format(name=""))
            if uri == GRAPH_URI or (name != uri and name):
                with contextlib.suppress(MemoryServerError):
                    self.watch(self.contexts.store(self.contexts.resolve(None if uri == GRAPH_URI else name)))
        return self._active_path

    def _active_store_path(self) -> Path | None:
        with contextlib.suppress(MemoryServerError):
            return self.contexts.store(self.contexts.resolve()).path
        return None

    def _uris_of(self, path: Path) -> list[str]:
        uris = []
        for config in self.contexts.registry.contexts():
            with contextlib.suppress(MemoryServerError):
                resolved = self.contexts.resolve_config(config)
                if self.contexts.store(resolved).path == path:
                    uris.append(CONTEXT_URI.format(name=config.name))
                    if config.name == self.contexts.active_name:
                        uris.append(GRAPH_URI)
        return uris

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Watch files for as long as the server runs; stop at once when it ends."""
        with contextlib.suppress(MemoryServerError):
            self.watch(self.contexts.store(self.contexts.resolve()))
        self._active_path = await anyio.to_thread.run_sync(self._active_store_path)
        for store in self.contexts.open_stores():  # memories read before the SDK was loaded (early.py)
            self.watch(store)
        self.watcher.watch(self.contexts.registry.directory)
        async with anyio.create_task_group() as group:
            group.start_soon(self.watcher.run)
            group.start_soon(self._trim_now_and_then)
            try:
                yield
            finally:
                # Let the watcher thread see its stop event and the model finish loading, so no thread is
                # still running while Python shuts down.
                self.watcher.stop()
                with anyio.CancelScope(shield=True):  # the server may be ending by cancellation
                    with anyio.move_on_after(3):
                        await self.watcher.finished.wait()
                    await anyio.to_thread.run_sync(self.searcher.embeddings.close)
                group.cancel_scope.cancel()


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def add_resources(server: MCPServer, live: LiveUpdates, budget: Budget) -> None:
    contexts = live.contexts

    def graph_json(name: str | None) -> str:
        """The graph as JSON, or its overview and first page when it is larger than the result budget."""
        try:
            resolved = contexts.resolve(name)
            store = contexts.store(resolved)
            with store.reading() as graph:
                return graph_document(graph, budget, resolved.name, resolved.name == contexts.active_name)
        except MemoryServerError as problem:
            raise ResourceError(str(problem)) from None

    @server.resource(
        GRAPH_URI,
        name="knowledge-graph",
        title="Knowledge Graph",
        description="The knowledge graph of the active memory context (an overview and the first page when large)",
        mime_type="application/json",
    )
    def knowledge_graph() -> str:
        return graph_json(None)

    @server.resource(
        CONTEXTS_URI,
        name="contexts",
        title="Memory Contexts",
        description="Every memory context with its file, whether it is active, and how much it holds",
        mime_type="application/json",
    )
    def all_contexts() -> str:
        return contexts_document(contexts, budget)

    @server.resource(
        CONTEXT_URI,
        name="context-graph",
        title="Context Knowledge Graph",
        description="The knowledge graph of one memory context",
        mime_type="application/json",
    )
    def context_graph(name: str) -> str:
        if not name:  # never the active context's graph under a name that is not its own
            raise ResourceError(
                f"{CONTEXT_URI} needs a context name, e.g. {CONTEXT_URI.format(name='default')}; "
                f"{CONTEXTS_URI} lists the contexts and {GRAPH_URI} is the active one's graph."
            )
        return graph_json(name)

    async def list_resources(_ctx: Any, params: PaginatedRequestParams | None) -> ListResourcesResult:
        """The fixed resources and one per context, as the registry holds them now, in pages of RESOURCES_PAGE
        (as the protocol pages lists: `nextCursor`, then `cursor`)."""
        per_context = [
            Resource(
                uri=CONTEXT_URI.format(name=config.name),
                name=f"context-{config.name}",
                title=f"Memory context '{config.name}'",
                description=shortened(config.description, DESCRIPTION_LIMIT)
                or f"The knowledge graph of the '{config.name}' context",
                mime_type="application/json",
            )
            for config in await anyio.to_thread.run_sync(contexts.registry.contexts)
        ]
        every = [*await server.list_resources(), *per_context]
        start = _resources_offset(params.cursor if params else None, len(every))
        end = start + RESOURCES_PAGE
        return ListResourcesResult(resources=every[start:end], next_cursor=str(end) if end < len(every) else None)

    # MCPServer has no public hook for resources/subscribe (which also advertises the capability), nor for a
    # resource list that changes with the registry.
    lowlevel = server._lowlevel_server  # noqa: SLF001
    lowlevel.add_request_handler("resources/list", PaginatedRequestParams, list_resources)
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, live.subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, live.unsubscribe)


def _resources_offset(cursor: str | None, count: int) -> int:
    """Where a page of resources/list starts: the cursor is the offset the previous page gave out."""
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > 9 or int(cursor) > count:
        raise MCPError(
            code=INVALID_PARAMS,
            message="This cursor is not one this server gave out for resources/list; list again without cursor.",
        )
    return int(cursor)
