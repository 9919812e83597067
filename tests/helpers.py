"""Helpers for end-to-end tests: a real MCP client (the SDK's) driving the real server over stdio."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult


def server_env(**extra: str | Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env["HF_HUB_OFFLINE"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


@contextlib.asynccontextmanager
async def connect(
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
    cwd: Path | None = None,
    roots: list[Path] | None = None,
    errlog: Any = None,
    **client_options: Any,
) -> AsyncIterator[ClientSession]:
    """Spawn `python -m memory_server` and yield an initialized SDK client session talking to it over stdio (its
    stderr goes to `errlog`, an open file, when given)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memory_server", *args], env=env or server_env(), cwd=cwd
    )
    if roots is not None:
        client_options["list_roots_callback"] = roots_callback(roots)
    transport = stdio_client(params, errlog=errlog) if errlog is not None else stdio_client(params)
    async with transport as (read, write), ClientSession(read, write, **client_options) as session:
        await session.initialize()
        yield session


def roots_callback(roots: list[Path]) -> Any:
    """A list_roots callback answering with whatever `roots` holds at the time it is asked."""
    from mcp_types import ListRootsResult, Root

    async def answer(_context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=root.as_uri()) for root in roots])

    return answer


async def call(session: ClientSession, tool: str, **arguments: Any) -> CallToolResult:
    return await session.call_tool(tool, arguments)


async def ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; return its structuredContent."""
    result = await call(session, tool, **arguments)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return result.structured_content


async def failure(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; return its error text."""
    result = await call(session, tool, **arguments)
    assert result.is_error, text_of(result)
    return text_of(result)


def text_of(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def entity(name: str, entity_type: str = "person", *observations: str) -> dict[str, Any]:
    return {"name": name, "entityType": entity_type, "observations": list(observations)}


def relation(source: str, target: str, relation_type: str) -> dict[str, str]:
    return {"from": source, "to": target, "relationType": relation_type}
