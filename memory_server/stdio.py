"""MCP over stdin/stdout, answering every request, reading no faster than the client takes the answers.

The SDK's stdio transport drops a line it cannot parse without a word, so a request holding a lone surrogate
(`"\\ud800"`, which JavaScript writes) or nested past pydantic's limit never got an answer and the client hung;
and one result holding a lone surrogate killed its writer, after which nothing was answered. Here every line
is parsed with `json`, a request that cannot be read is answered with an error naming the problem (bytes that are
not UTF-8 and ids that are not a string or an integer included: nothing is guessed or altered), and output is
encoded like JavaScript's `JSON.stringify` (lone surrogates escaped), so it is always valid UTF-8.

Backpressure: a client that stops reading stdout would otherwise have every request read and every answer kept
(5 GiB in 80 s). Reading pauses while the client has more than OUTPUT_BUDGET bytes of output not taken, or while
MAX_IN_FLIGHT of its requests are unanswered; the kernel's pipe then blocks the client's writes. A client that
reads as it writes never notices, and one that writes a batch before reading gets every answer as long as the
batch's answers fit in the budget.

While serving, file descriptor 1 points at stderr, so a stray `print` anywhere cannot corrupt the protocol.

A first `initialize` answered before the SDK was loaded (handshake.py) is read again from what was read then and
handed to the SDK, with the notifications and the requests left unanswered while it loaded (early.py); the SDK's
answer to it is not sent a second time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from pydantic import ValidationError

from memory_server.errors import echo
from memory_server.graph import json_line
from memory_server.handshake import EarlyStart

logger = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
ANSWER_AFTER_CLOSE = 60.0  # seconds to finish answering once the client has closed stdin
MAX_IN_FLIGHT = 64  # requests read and not answered yet; tool calls run one at a time, so more only queue
OUTPUT_BUDGET = 16 << 20  # bytes of output the client has not read yet
CLIENT_ANSWER_WAIT = 30.0  # seconds one of our requests to the client keeps reading going past MAX_IN_FLIGHT


@contextlib.asynccontextmanager
async def stdio_transport(early: EarlyStart | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams of an MCP session on this process's stdin and stdout, after what `early`
    read and answered before the SDK was loaded."""
    stdin = anyio.wrap_file(os.fdopen(os.dup(0), "rb"))
    stdout = anyio.wrap_file(os.fdopen(early.output if early and early.output is not None else os.dup(1), "wb"))
    os.dup2(2, 1)  # from now on fd 1 is stderr: only this transport writes to the real stdout
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as group:
        pipes = _Pipes(_ReadAgain(stdin, early.read) if early else stdin, stdout, group.cancel_scope)
        pipes.answered = early.answer if early else None
        group.start_soon(pipes.read_messages, read_send)
        group.start_soon(pipes.write_messages, write_receive)
        group.start_soon(pipes.send_output)
        try:
            yield read_receive, write_send
        finally:
            group.cancel_scope.cancel()


class _Pipes:
    """The client's requests in, our messages out, and what the reader needs to know to wait for the client."""

    def __init__(self, stdin: Any, stdout: Any, scope: anyio.CancelScope) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.scope = scope
        self.pending: Counter[Any] = Counter()  # the client's requests not answered yet, by id
        self.asked: dict[Any, float] = {}  # our requests to the client not answered yet: id -> when sent
        self.output = bytearray()  # encoded lines not handed to the pipe yet
        self.unread = 0  # bytes of output the client has not taken: queued, or being written
        self.answered: dict[str, Any] | None = None  # a request answered before the SDK was loaded
        self._changed = anyio.Event()

    async def read_messages(self, read_send: Any) -> None:
        async with read_send:
            while True:
                await self._room_to_read()
                line = await self.stdin.readline()
                if not line:
                    break
                if line.strip():
                    await self._take(line, read_send)
            # The client closed stdin: answer what it already asked before the session ends (a client piping
            # requests and closing its end still gets every answer, and no write is left unacknowledged).
            with anyio.move_on_after(ANSWER_AFTER_CLOSE):
                while self.pending or self.unread:
                    await self._next_change()

    async def write_messages(self, write_receive: Any) -> None:
        async with write_receive:
            async for session_message in write_receive:
                message = session_message.message
                if isinstance(message, types.JSONRPCRequest):
                    self.asked[coerce_request_id(message.id)] = anyio.current_time()
                data = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
                if self._answered_already(message, data):
                    self._settle(message.id)
                    continue
                self._queue(data)
                if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)) and message.id is not None:
                    self._settle(message.id)
                while self.unread > OUTPUT_BUDGET:  # the client is not reading: hold the session's writers back
                    await self._next_change()

    async def send_output(self) -> None:
        while True:
            while not self.output:
                await self._next_change()
            data, self.output = self.output, bytearray()
            try:
                await self.stdout.write(data)
                await self.stdout.flush()
            except OSError as problem:  # the client closed its end of stdout: nobody can be answered any more
                logger.warning("The client closed the server's output (%s); ending the session", problem)
                self.scope.cancel()  # the session ends once the read under way returns (at the latest, at EOF)
                return
            self.unread -= len(data)
            self._changed_now()

    async def _take(self, line: bytes, read_send: Any) -> None:
        message, answer = parse_line(line)
        if isinstance(message, types.JSONRPCRequest):
            key = coerce_request_id(message.id)
            self.pending[key] += 1
            metadata = ServerMessageMetadata(on_request_unanswered=self._unanswered(message.id))
            await read_send.send(SessionMessage(message, metadata=metadata))
            return
        if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)) and message.id is not None:
            self.asked.pop(coerce_request_id(message.id), None)
        if message is not None:
            await read_send.send(SessionMessage(message))
        elif answer is not None:
            self._queue(answer)

    def _answered_already(self, message: Any, data: dict[str, Any]) -> bool:
        """Whether `message` is the SDK's answer to the request answered before it was loaded (sent once only)."""
        early = self.answered
        if early is None or not isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)) or message.id is None:
            return False
        if coerce_request_id(message.id) != coerce_request_id(early["id"]):
            return False
        self.answered = None
        if data.get("result") != early["result"]:
            logger.warning("The SDK answered initialize with %s, after the early answer %s", data, early["result"])
        return True

    async def _room_to_read(self) -> None:
        """Wait while answers are not being taken, or too many requests are unanswered. Our own request to the
        client (roots/list) lifts the second limit for a while: its answer can only come through stdin."""
        while self.unread > OUTPUT_BUDGET or (sum(self.pending.values()) >= MAX_IN_FLIGHT and not self._asking()):
            await self._next_change(timeout=1.0)

    def _asking(self) -> bool:
        now = anyio.current_time()
        self.asked = {key: sent for key, sent in self.asked.items() if now - sent < CLIENT_ANSWER_WAIT}
        return bool(self.asked)

    def _queue(self, data: dict[str, Any]) -> None:
        line = (json_line(data) + "\n").encode("utf-8")
        self.output += line
        self.unread += len(line)
        self._changed_now()

    def _settle(self, request_id: Any) -> None:
        key = coerce_request_id(request_id)  # the SDK treats "7" and 7 as one id
        if self.pending[key] > 0:
            self.pending[key] -= 1
        if self.pending[key] <= 0:
            del self.pending[key]
        self._changed_now()

    def _unanswered(self, request_id: Any) -> Callable[[], Awaitable[None]]:
        async def hook() -> None:  # a request that ends with no answer (cancelled) is settled too
            self._settle(request_id)

        return hook

    def _changed_now(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _next_change(self, timeout: float | None = None) -> None:
        event = self._changed
        with anyio.move_on_after(timeout if timeout is not None else float("inf")):
            await event.wait()


class _ReadAgain:
    """A file whose first bytes were already read (by handshake.py): they are read again first."""

    def __init__(self, file: Any, read: bytes) -> None:
        self.file = file
        self.read = read

    async def readline(self) -> bytes:
        if not self.read:
            return await self.file.readline()  # type: ignore[no-any-return]
        line, newline, self.read = self.read.partition(b"\n")
        if newline:
            return line + newline
        return line + await self.file.readline()


def parse_line(raw: bytes) -> tuple[Any, dict[str, Any] | None]:
    """`parse_message` for a line as read from the pipe: bytes that are not UTF-8 are refused, never replaced."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as problem:
        return None, _answer_not_utf8(raw, problem)
    return parse_message(line)


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
    if isinstance(data, dict) and "method" in data and "id" in data and as_request_id(data["id"]) is None:
        # JSON-RPC and MCP: a request id is a string or an integer. Read as a notification, it would go unanswered.
        reason = f"the id must be a string or an integer, not {echo(data['id'])}"
        return None, _error(None, INVALID_REQUEST, f"Invalid request: {reason}; nothing was done")
    try:
        return types.jsonrpc_message_adapter.validate_python(data, by_name=False), None
    except (ValidationError, RecursionError, ValueError) as problem:
        return None, _answer_unreadable(data, _reason(problem))


def _answer_not_utf8(raw: bytes, problem: UnicodeDecodeError) -> dict[str, Any] | None:
    """A parse error for a line that is not UTF-8, with the request's id when the rest of the line tells it."""
    where = f"byte 0x{raw[problem.start]:02x} at position {problem.start}"
    try:
        data = json.loads(raw.decode("utf-8", "surrogateescape"))  # only to find who is waiting for an answer
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and ("id" not in data or "method" not in data):
        logger.warning("Ignored a notification or response that is not valid UTF-8 (%s)", where)
        return None
    request_id = as_request_id(data.get("id")) if isinstance(data, dict) else None
    if isinstance(request_id, str) and any("\udc80" <= char <= "\udcff" for char in request_id):
        request_id = None  # the id itself holds the bytes that are not UTF-8: it cannot be sent back
    message = f"Parse error: the message is not valid UTF-8 ({where}); send JSON text encoded as UTF-8"
    return _error(request_id, PARSE_ERROR, message + ". Nothing was done.")


def _answer_unreadable(data: Any, reason: str) -> dict[str, Any] | None:
    """The answer to a message that parsed as JSON but not as MCP (None when nobody waits for one)."""
    if isinstance(data, dict) and ("id" not in data or "method" not in data):
        logger.warning("Ignored a notification or response that is not valid JSON-RPC: %s", reason)
        return None
    request_id = data.get("id") if isinstance(data, dict) else None
    if as_request_id(request_id) is None:
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
