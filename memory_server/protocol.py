"""Answers at the protocol level, for every request before any tool or resource sees it: a request sent before
`initialize` is told what to do, and no error answer grows with what the client sent. Registered on the SDK's
low-level server as middleware; the transport's own checks (bytes, ids, backpressure) are in stdio.py."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from memory_server.errors import echo

ERROR_LIMIT = 1_000  # characters of an error message, and of its data, sent back to the client

CallNext = Callable[[Any], Awaitable[Any]]


def guard_requests(lowlevel: Any) -> None:
    """Add the guards to the SDK's low-level server (outermost first: a capped error is capped whoever raised it)."""
    lowlevel.middleware.extend([_bounded_errors, _initialize_first(lowlevel)])


def _initialize_first(lowlevel: Any) -> Callable[[Any, CallNext], Awaitable[Any]]:
    """Tell a client that calls before `initialize` what to do (the SDK answers only 'Invalid request parameters',
    with the same code, which clients keep)."""

    async def middleware(ctx: Any, call_next: CallNext) -> Any:
        connection = getattr(ctx.session, "_connection", None)  # the SDK keeps the handshake's state there
        if (
            ctx.request_id is not None
            and ctx.method not in ("initialize", "ping")
            and not getattr(connection, "initialize_accepted", True)
            and lowlevel.get_request_handler(ctx.method) is not None  # an unknown method stays "Method not found"
        ):
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"The server is not initialized yet, so {echo(ctx.method)} cannot be answered: send the "
                "'initialize' request first, then the 'notifications/initialized' notification (the MCP lifecycle). "
                "Only 'ping' works before that.",
            )
        return await call_next(ctx)

    return middleware


async def _bounded_errors(ctx: Any, call_next: CallNext) -> Any:
    """The SDK repeats what it could not find (a resource URI of a megabyte, in the message and again in `data`):
    cut both to ERROR_LIMIT characters."""
    try:
        return await call_next(ctx)
    except MCPError as problem:
        message, data = problem.error.message, problem.error.data
        if len(message) <= ERROR_LIMIT and len(json.dumps(data, default=str)) <= ERROR_LIMIT:
            raise
        raise MCPError(code=problem.error.code, message=_cut(message, ERROR_LIMIT), data=_bounded(data)) from None


def _bounded(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: _cut(value, ERROR_LIMIT // 4) if isinstance(value, str) else value for key, value in data.items()}
    return data if len(json.dumps(data, default=str)) <= ERROR_LIMIT else None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… (cut from {len(text):,} characters)"
