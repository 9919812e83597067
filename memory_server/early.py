"""Requests answered while the MCP SDK loads: `ping`, the lists of tools, prompts and resource templates, and the
official read tools (read_graph, open_nodes, search_nodes in one context).

Importing the SDK takes a second and more (its protocol types are pydantic models built at import), longer than
node takes to start the whole official server and answer its first tool call. After the early `initialize`
(handshake.py) the server goes on reading stdin itself while the SDK loads in a background thread, and answers
what it can answer exactly as the SDK-built server would: the lists from lists.json, the SDK's own answers
(scripts/write_lists.py writes it, tests/test_early.py holds it equal to what the SDK says), and the read tools
through the core, as server.py runs them (tests/test_early.py compares the two answers on the wire).

Whatever it cannot vouch for ends this stage: a write, resources, a client that has workspace roots (the tools
ask for them first), arguments that are not plain JSON of the declared types (the SDK coerces or refuses them),
a tool whose schema names an argument this module does not know. That message and everything after it wait for
the SDK and reach it in order, after the `initialize` request and the notifications seen so far, as if this
stage had not been. The stage also ends as soon as the SDK is ready.

The SDK starts loading once the client pauses (IDLE), so that its import does not slow the first answers (both
are Python, sharing one interpreter lock), or at once where stdin cannot be polled (Windows). Meanwhile the active
context's memory is read in another thread, in the moments the client spends reading our answers and writing its
next request: most first calls need it, and parsing it is most of their time.
"""

from __future__ import annotations

import json
import logging
import os
import select
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from memory_server import results
from memory_server.budget import Budget
from memory_server.context_results import Work, in_context
from memory_server.contexts import Contexts, ResolvedContext
from memory_server.everywhere import EVERY_CONTEXT
from memory_server.handshake import EarlyStart
from memory_server.jsonl import json_line
from memory_server.searcher import Searcher, Target
from memory_server.store import GraphStore, call_arrived_at

logger = logging.getLogger(__name__)

LISTS = Path(__file__).with_name("lists.json")
ADMIN_TOOLS = ("add_context", "remove_context")  # left out of the list with --no-context-admin
IDLE = 0.1  # seconds without a message from the client before the SDK starts loading
POLL = 0.05  # seconds between two looks at whether the SDK is ready, while the client is quiet
LINE_LIMIT = 1 << 20  # a message longer than this is left to the SDK's transport
DEFAULT_LIMIT = 10  # search_nodes' default limit, as in server.py

T = TypeVar("T")


ARGUMENTS = {  # the arguments of the tools answered here; a schema that names others leaves the tool to the SDK
    "read_graph": ("detail", "entityType", "limit", "cursor", "context", "projectDir"),
    "open_nodes": ("names", "depth", "cursor", "context", "projectDir"),
    "search_nodes": ("query", "mode", "limit", "minScore", "cursor", "context", "projectDir"),
}


def serve_until_loaded(
    early: EarlyStart, answers: EarlyAnswers, load: Callable[[], T], stdin: int = 0
) -> tuple[EarlyStart, T]:
    """Answer what `answers` can while `load` (the SDK) runs in a background thread; return what the SDK's
    transport must read first (the initialize request, notifications, every message not answered) and what `load`
    returned. Without an early `initialize`, `load` just runs."""
    loader = _Loader(load)
    if early.answer is None:
        return early, loader.result()
    output = os.dup(1)
    os.dup2(2, 1)  # as stdio.py does: from now on a stray print cannot corrupt the protocol
    first, _, rest = early.read.partition(b"\n")
    answers.client_has_roots = "roots" in json.loads(first)["params"]["capabilities"]
    if not answers.client_has_roots:  # else the memory a call uses depends on the roots, which the SDK asks for
        threading.Thread(target=answers.read_active_memory, name="active-memory", daemon=True).start()
    if os.name == "nt":  # select cannot poll a pipe there: no telling when the client pauses
        loader.start()
    kept, pending = bytearray(first + b"\n"), bytearray(rest)
    answered: Counter[str] = Counter()
    while not loader.done:
        end = pending.find(b"\n")
        if end < 0:
            if len(pending) > LINE_LIMIT:
                break
            if not _readable(stdin, POLL if loader.started else IDLE):
                loader.start()
            elif chunk := os.read(stdin, 65536):
                pending += chunk
            else:
                break  # the client closed stdin: the SDK answers what is left and ends the session
            continue
        line = bytes(pending[: end + 1])
        message = _message(line) if line.strip() else {}
        answer = answers.answer(message) if message and "id" in message else None
        if message is None or ("id" in message and answer is None):
            break
        del pending[: end + 1]
        if answer is None:  # a notification: for the SDK (it must see notifications/initialized)
            kept += line
        else:
            _write(output, answer)
            answered[_what(message)] += 1
    logger.debug("Answered before the MCP SDK was loaded: %s", ", ".join(f"{n} {m}" for m, n in answered.items()))
    return EarlyStart(bytes(kept + pending), early.answer, output), loader.result()


class EarlyAnswers:
    """The answers given before the SDK is loaded, each exactly as the SDK-built server gives it (None: the SDK's
    to give)."""

    def __init__(self, contexts: Contexts, searcher: Searcher, budget: Budget, context_admin: bool = True) -> None:
        self.contexts = contexts
        self.searcher = searcher
        self.budget = budget
        self.client_has_roots = False
        self.lists = _lists(context_admin)
        self.schemas = {tool["name"]: tool["inputSchema"] for tool in self.lists.get("tools/list", {}).get("tools", [])}
        self.tools: dict[str, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
            "read_graph": self._read_graph,
            "open_nodes": self._open_nodes,
            "search_nodes": self._search_nodes,
        }

    def read_active_memory(self) -> None:
        """Read the active context's memory, which most first calls use, while the client is busy with its own
        start (it reads our answers, sends the next request)."""
        try:
            with self.contexts.store(self.contexts.resolve()).reading():
                pass
        except Exception as problem:  # the call that uses it will say what is wrong
            logger.debug("Could not read the active memory ahead of the first call: %s", problem)

    def answer(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The answer to `request`, or None when it is the SDK's to give."""
        request_id, method, params = request["id"], request["method"], request.get("params")
        if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            return None
        if method == "tools/call":
            plain = isinstance(params, dict) and params.keys() <= {"name", "arguments", "_meta"}
            result = self._call(params) if plain else None
        elif params is not None and not (isinstance(params, dict) and params.keys() <= {"_meta"}):
            result = None  # a cursor, or something else the SDK may read
        elif method == "ping":
            result = {}
        else:
            result = self.lists.get(method)
        return None if result is None else {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _call(self, params: dict[str, Any]) -> dict[str, Any] | None:
        name, arguments = params.get("name"), params.get("arguments")
        if self.client_has_roots or not isinstance(name, str) or name not in self.tools or name not in self.schemas:
            return None  # a client with roots is asked for them first (server.py), and only the SDK asks
        values = plain_arguments(self.schemas[name], arguments or {}, ARGUMENTS[name])
        if values is None:
            return None
        try:
            return self.tools[name](values)
        except Exception:  # a bug: the SDK runs the call again (it only reads) and says what went wrong
            logger.exception("%s failed before the MCP SDK was loaded; the SDK takes the call", name)
            return None

    # ---- the tools, as server.py runs them ----------------------------------------------------------------------

    def _read_graph(self, a: dict[str, Any]) -> dict[str, Any]:
        query = results.GraphQuery(a["detail"], a["entityType"], a["limit"], a["cursor"])

        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            with store.reading() as graph:
                return results.read_graph(graph, self.budget, query, resolved.name)

        return self._run(a["context"], a["projectDir"], work)

    def _open_nodes(self, a: dict[str, Any]) -> dict[str, Any]:
        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            with store.reading() as graph:
                return results.open_nodes(graph, self.budget, a["names"], a["depth"], a["cursor"], resolved.name)

        return self._run(a["context"], a["projectDir"], work)

    def _search_nodes(self, a: dict[str, Any]) -> dict[str, Any] | None:
        if a["context"] == EVERY_CONTEXT:
            return None
        query, mode, limit, min_score = a["query"], a["mode"], a["limit"], a["minScore"]
        if limit is None and mode != "keyword":
            limit = DEFAULT_LIMIT

        def work(resolved: ResolvedContext, store: GraphStore) -> tuple[dict[str, Any], str]:
            outcome = self.searcher.search([Target(resolved.name, store)], query, mode, limit, min_score)
            asked = results.SearchCall(query, mode, limit, min_score, a["context"], (resolved.name,))
            return results.search(outcome, self.budget, a["cursor"], asked)

        return self._run(a["context"], a["projectDir"], work)

    def _run(self, name: str | None, project_dir: str | None, work: Work) -> dict[str, Any]:
        """The call in its context (context_results.in_context, as server.py runs it), as the SDK puts it on the
        wire."""
        with call_arrived_at(time.monotonic()):
            called = in_context(self.contexts, self.searcher, name, project_dir, work)
        if called.changed and called.store is not None:
            called.store.announce()  # nobody can have subscribed yet: the state counts as told, as in server.py
        return _result(called.text, called.structured)


def plain_arguments(schema: dict[str, Any], arguments: Any, known: tuple[str, ...]) -> dict[str, Any] | None:
    """Every argument of `known` (defaults filled in) when `arguments` are plain JSON values of the types `schema`
    declares, as the SDK would pass them to the tool; None when the SDK might read them otherwise (coerce a string
    holding JSON, refuse a value) or the schema has an argument or a rule this module does not know."""
    properties, required = schema.get("properties", {}), schema.get("required", [])
    if not isinstance(arguments, dict) or set(properties) != set(known) or not set(arguments) <= set(known):
        return None
    if set(schema) - {"properties", "required", "type"} or not set(required) <= arguments.keys():
        return None
    values = {}
    for name in known:
        rule = properties[name]
        if name not in arguments:
            values[name] = rule.get("default")
        elif arguments[name] is None and name not in required and "default" not in rule:
            values[name] = None  # an optional argument given as null is left out
        elif _plain(arguments[name], rule):
            value = arguments[name]
            values[name] = float(value) if rule.get("type") == "number" else value
        else:
            return None
    return values


_UNDERSTOOD = {"type", "description", "default", "enum", "minimum", "maximum", "items"}


def _plain(value: Any, rule: dict[str, Any]) -> bool:
    """Whether `value` passes `rule` as it is, with nothing the SDK would coerce."""
    if set(rule) - _UNDERSTOOD:
        return False
    kind = rule.get("type")
    if kind == "string":
        ok = isinstance(value, str) and not _json_container(value)
    elif kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < float("inf")
    elif kind == "array":
        ok = isinstance(value, list) and "items" in rule and all(_plain(item, rule["items"]) for item in value)
    else:
        return False
    if ok and "enum" in rule:
        ok = value in rule["enum"]
    if ok and "minimum" in rule:
        ok = value >= rule["minimum"]
    if ok and "maximum" in rule:
        ok = value <= rule["maximum"]
    return ok


def _json_container(text: str) -> bool:
    """Whether the SDK would read `text` as JSON in place of the string (an array, an object or null: what it does
    for arguments that are not declared as plain strings, which Claude Desktop sends as strings)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return value is None or isinstance(value, (list, dict))


def _result(text: str, structured: dict[str, Any] | None = None) -> dict[str, Any]:
    """A CallToolResult as the SDK puts it on the wire (its keys in its order)."""
    result: dict[str, Any] = {"content": [{"text": text, "type": "text"}], "isError": structured is None}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def _message(line: bytes) -> dict[str, Any] | None:
    """The JSON-RPC request or notification on `line`, or None (anything else is for the SDK's transport)."""
    try:
        message = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        return None
    if isinstance(message, dict) and message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str):
        return message
    return None


def _what(request: dict[str, Any]) -> str:
    params = request.get("params") or {}
    return f"{request['method']} {params['name']}" if request["method"] == "tools/call" else request["method"]


def _lists(context_admin: bool) -> dict[str, Any]:
    """The SDK's answers to the lists (lists.json), without the admin tools unless `context_admin`."""
    try:
        lists: dict[str, Any] = json.loads(LISTS.read_text(encoding="utf-8"))
    except (OSError, ValueError) as problem:  # a damaged install: the SDK answers everything, a second later
        logger.warning("Cannot read %s (%s); every request waits for the MCP SDK", LISTS, problem)
        return {}
    if not context_admin:
        tools = lists["tools/list"]["tools"]
        lists["tools/list"] = {**lists["tools/list"], "tools": [t for t in tools if t["name"] not in ADMIN_TOOLS]}
    return lists


def _write(fd: int, message: dict[str, Any]) -> None:
    data = memoryview((json_line(message) + "\n").encode("utf-8"))
    while data:
        data = data[os.write(fd, data) :]


def _readable(fd: int, timeout: float) -> bool:
    """Whether `fd` has something to read (or is at its end) within `timeout` seconds."""
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    except (OSError, ValueError):
        return True  # cannot tell: read, which waits


class _Loader(Generic[T]):
    """`load` run once, in a background thread once started, else in the caller's."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load = load
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mcp-sdk-loader", daemon=True)
            self._thread.start()

    def result(self) -> T:
        if self._thread is None:
            self._run()
        self._finished.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def _run(self) -> None:
        try:
            self._value = self._load()
        except BaseException as problem:  # raised again in the thread that waits for the SDK
            self._error = problem
        finally:
            self._finished.set()
