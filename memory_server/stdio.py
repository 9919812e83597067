"""MCP over stdin/stdout, answering every request.

The SDK's stdio transport drops a line it cannot parse without a word, so a request holding a lone surrogate
(`"\\ud800"`, which JavaScript writes) or nested past pydantic's limit never got an answer and the client hung;
and one result holding a lone surrogate killed its writer, after which nothing was answered. Here every line
is parsed with `json`, a request that cannot be read is answered with an error naming the problem, and output
is encoded like JavaScript's `JSON.stringify` (lone surrogates escaped), so it is always valid UTF-8.

While serving, file descriptor 1 points at stderr, so a stray `print` anywhere cannot corrupt the protocol.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from pydantic import ValidationError

from memory_server.graph import json_line

logger = logging.getLogger(__name__)

PARSE_ERROR = -32700
ANSWER_AFTER_CLOSE = 60.0  # seconds to finish answering once the client has closed stdin
INVALID_REQUEST = -32600


@contextlib.asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams of an MCP session on this process's stdin and stdout."""
    stdin = anyio.wrap_file(io.TextIOWrapper(os.fdopen(os.dup(0), "rb"), encoding="utf-8", errors="replace"))
    stdout = anyio.wrap_file(os.fdopen(os.dup(1), "wb"))
    os.dup2(2, 1)  # from now on fd 1 is stderr: only this transport writes to the real stdout
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)

    pending: Counter[Any] = Counter()  # the client's requests not answered yet, by id
    answered = anyio.Event()

    def settled(request_id: Any) -> None:
        key = coerce_request_id(request_id)  # the SDK treats "7" and 7 as one id
        if pending[key] > 0:
            pending[key] -= 1
        if pending[key] <= 0:
            del pending[key]
        answered.set()

    def unanswered(request_id: Any) -> Callable[[], Awaitable[None]]:
        async def hook() -> None:  # a request that ends with no answer (cancelled) is settled too
            settled(request_id)

        return hook

    async def write_line(data: dict[str, Any]) -> None:
        await stdout.write((json_line(data) + "\n").encode("utf-8"))
        await stdout.flush()

    async def read_messages() -> None:
        nonlocal answered
        async with read_send:
            async for line in stdin:
                if not line.strip():
                    continue
                message, answer = parse_message(line)
                if isinstance(message, types.JSONRPCRequest):
                    pending[coerce_request_id(message.id)] += 1
                    metadata = ServerMessageMetadata(on_request_unanswered=unanswered(message.id))
                    await read_send.send(SessionMessage(message, metadata=metadata))
                elif message is not None:
                    await read_send.send(SessionMessage(message))
                elif answer is not None:
                    await write_line(answer)
            # The client closed stdin: answer what it already asked before the session ends (a client piping
            # requests and closing its end still gets every answer, and no write is left unacknowledged).
            with anyio.move_on_after(ANSWER_AFTER_CLOSE):
                while pending:
                    await answered.wait()
                    answered = anyio.Event()

    async def write_messages() -> None:
        async with write_receive:
            async for session_message in write_receive:
                message = session_message.message
                await write_line(message.model_dump(mode="json", by_alias=True, exclude_unset=True))
                if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                    settled(message.id)

    async with anyio.create_task_group() as group:
        group.start_soon(read_messages)
        group.start_soon(write_messages)
        try:
            yield read_receive, write_send
        finally:
            group.cancel_scope.cancel()


def parse_message(line: str) -> tuple[Any, dict[str, Any] | None]:
    """A JSON-RPC message, or else the answer that tells the sender what was wrong (None for a notification)."""
    try:
        data = json.loads(line)
    except RecursionError:  # valid JSON, too deep for the parser: answer the request it came with, if any
        data = _envelope(line)
        if data is None:
            return None, _error(None, PARSE_ERROR, "Parse error: the JSON is nested too deeply")
        argument = _deep_argument(line)
        where = f"argument '{argument}'" if argument else "request"
        return None, _answer_unreadable(data, f"the {where} is nested too deeply to read")
    except ValueError as problem:
        return None, _error(None, PARSE_ERROR, f"Parse error: {problem}")
    try:
        return types.jsonrpc_message_adapter.validate_python(data, by_name=False), None
    except (ValidationError, RecursionError, ValueError) as problem:
        return None, _answer_unreadable(data, _reason(problem))


def _answer_unreadable(data: Any, reason: str) -> dict[str, Any] | None:
    """The answer to a message that parsed as JSON but not as MCP (None when nobody waits for one)."""
    if isinstance(data, dict) and ("id" not in data or "method" not in data):
        logger.warning("Ignored a notification or response that is not valid JSON-RPC: %s", reason)
        return None
    request_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
        return _error(None, INVALID_REQUEST, f"Invalid request: {reason}")
    if data.get("method") == "tools/call":  # tell the model, not only the client, what was wrong
        text = f"The arguments of this call could not be read: {reason}. Send plain JSON values, nested less deeply."
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": text}], "isError": True},
        }
    return _error(request_id, INVALID_REQUEST, f"Invalid request: {reason}")


_ENVELOPE_ID = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ENVELOPE_METHOD = re.compile(r'"method"\s*:\s*"([^"\\]*)"')


def _envelope(line: str) -> dict[str, Any] | None:
    """The id and method of a request too deeply nested to parse, found in its text (best effort)."""
    found_id, method = _ENVELOPE_ID.search(line), _ENVELOPE_METHOD.search(line)
    if found_id is None or method is None:
        return None
    return {"id": json.loads(found_id.group(1)), "method": method.group(1)}


_COLON = re.compile(r"\s*:")


def _deep_argument(line: str, too_deep: int = 100) -> str | None:
    """The name of the tool argument in which `line` nests deeper than `too_deep` levels (best effort)."""
    start = line.find('"arguments"')
    start = line.find("{", start) if start != -1 else -1
    if start == -1:
        return None
    depth, key, position = 0, None, start
    while position < len(line):
        char = line[position]
        if char == '"':
            end = position + 1
            while end < len(line) and line[end] != '"':
                end += 2 if line[end] == "\\" else 1
            if depth == 1 and _COLON.match(line, end + 1):
                key = line[position + 1 : end]
            position = end
        elif char in "[{":
            depth += 1
            if depth > too_deep:
                return key
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return None
        position += 1
    return None


def _reason(problem: Exception) -> str:
    if isinstance(problem, RecursionError):
        return "the JSON is nested too deeply"
    if isinstance(problem, ValidationError):
        error = problem.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}" if where else error["msg"]
    return str(problem)


def _error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
