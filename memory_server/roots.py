"""The client's workspace roots, where project detection starts: asked for at the first call that needs them, and
again after the client says they changed (notifications/roots/list_changed)."""

from __future__ import annotations

import logging

import anyio
from mcp.server.mcpserver import Context

from memory_server.contexts import Contexts
from memory_server.project import file_uri_path

logger = logging.getLogger(__name__)


class WorkspaceRoots:
    """The roots of one client, kept in `contexts.roots`."""

    def __init__(self, contexts: Contexts) -> None:
        self.contexts = contexts
        self._stale = True
        self._lock = anyio.Lock()

    async def sync(self, ctx: Context) -> None:
        """Ask the client for its workspace roots when they may have changed (start, roots/list_changed)."""
        async with self._lock:  # concurrent calls wait for the answer rather than use stale roots
            if self._stale:
                self._stale = False  # asked once per change, even if the client cannot answer
                await self._read(ctx)

    def changed(self) -> None:
        self._stale = True

    async def _read(self, ctx: Context) -> None:
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.roots is None:
            return
        try:
            with anyio.fail_after(5):
                result = await ctx.session.list_roots()
        except Exception as problem:  # a client that cannot answer leaves detection to the other rules
            logger.warning("Could not read the client's workspace roots: %s", problem)
            return
        self.contexts.roots = [p for p in (file_uri_path(str(r.uri)) for r in result.roots) if p is not None]
