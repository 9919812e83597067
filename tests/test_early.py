"""While the MCP SDK loads, the server answers the lists, ping and the first reads itself (early.py). Each of those
answers must be the SDK's own: the lists as the SDK-built server gives them (lists.json, for every protocol
version and with --no-context-admin), and the read tools' results byte for byte on the wire. Whatever early.py
cannot vouch for is left to the SDK, in order."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import connect, ok, server_env
from mcp_types import Icon, Implementation
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from test_live_updates import Updates

from memory_server import early
from memory_server.budget import Budget
from memory_server.cli import APP, embeddings, open_contexts, parse_options
from memory_server.early import EarlyAnswers, plain_arguments
from memory_server.searcher import Searcher

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("write_lists", ROOT / "scripts" / "write_lists.py")
write_lists = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(write_lists)  # type: ignore[union-attr]

SEED = (
    '{"type":"entity","name":"Ann","entityType":"person","observations":["drinks green tea","lives in Lisbon"]}\n'
    '{"type":"entity","name":"Bo","entityType":"dog","observations":["chases green balls"]}\n'
    '{"type":"entity","name":"Cy","entityType":"person","observations":["plays the cello","drinks tea at noon"]}\n'
    "{this line is not JSON\n"
    '{"type":"relation","from":"Ann","to":"Bo","relationType":"owns"}\n'
    '{"type":"relation","from":"Cy","to":"Ann","relationType":"knows"}\n'
)
WORK = '{"type":"entity","name":"Quarterly report","entityType":"task","observations":["due Friday"]}\n'
SERVER = ("--embedding-model", "none")

# First calls answered before the SDK is loaded. In this order, so that warnings given once (the line that is not
# JSON) fall on the same call.
EARLY_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_graph", {}),
    ("read_graph", {"detail": "summary", "entityType": "person"}),
    ("read_graph", {"detail": "names", "limit": 1}),
    ("read_graph", {"limit": 1, "cursor": "not-a-cursor"}),
    ("read_graph", {"context": None, "projectDir": None, "cursor": None}),
    ("open_nodes", {"names": ["Ann"]}),
    ("open_nodes", {"names": ["Bo", "nobody", ""], "depth": 2}),
    ("open_nodes", {"names": []}),
    ("search_nodes", {"query": "tea"}),
    ("search_nodes", {"query": "TEA", "mode": "keyword", "limit": 1}),
    ("search_nodes", {"query": "tea", "mode": "semantic", "minScore": 0}),
    ("search_nodes", {"query": "green", "minScore": 1}),
    ("search_nodes", {"query": "report", "context": "work"}),
    ("read_graph", {"context": "nope"}),
    ("open_nodes", {"names": ["Ann"], "projectDir": "/nowhere/at/all"}),
    ("read_graph", {"context": "project", "projectDir": "/nowhere/at/all"}),
]
# Calls the SDK must answer: it coerces or refuses these arguments, or the tool is not answered early at all.
SDK_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("read_graph", {"limit": "2"}),
    ("read_graph", {"limit": True}),
    ("read_graph", {"limit": 0}),
    ("read_graph", {"detail": "everything"}),
    ("read_graph", {"entityType": "null"}),
    ("read_graph", {"unknown": 1}),
    ("open_nodes", {"names": '["Ann"]'}),
    ("open_nodes", {"names": ["Ann"], "depth": None}),
    ("open_nodes", {"names": ["Ann"], "depth": 3}),
    ("open_nodes", {}),
    ("search_nodes", {"query": "tea", "context": "*"}),
    ("search_nodes", {"query": "tea", "mode": None}),
    ("list_contexts", {}),
    ("create_entities", {"entities": [{"name": "Dee", "entityType": "person", "observations": []}]}),
]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A default memory (with a line that is not JSON), a 'work' one, a project context and an entry that is not
    valid, in the registry; the test runs in a folder with no project."""
    (tmp_path / "memory.jsonl").write_text(SEED)
    (tmp_path / "work.jsonl").write_text(WORK)
    registry = {
        "contexts": [
            {"name": "default", "path": str(tmp_path / "memory.jsonl")},
            {"name": "work", "path": str(tmp_path / "work.jsonl"), "description": "Work"},
            {"name": "project", "path": "{projectDir}/.ai-memory.jsonl"},
            {"name": "bad name!", "path": str(tmp_path / "bad.jsonl")},  # a registry problem: every result warns
        ]
    }
    folder = tmp_path / "config" / APP
    folder.mkdir(parents=True)
    (folder / "contexts.json").write_text(json.dumps(registry))
    (tmp_path / "nowhere").mkdir()
    monkeypatch.chdir(tmp_path / "nowhere")
    return tmp_path


def message(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params is not None else {})}


def calls(pairs: list[tuple[str, dict[str, Any]]], first_id: int = 10) -> list[dict[str, Any]]:
    return [message(first_id + n, "tools/call", {"name": tool, "arguments": a}) for n, (tool, a) in enumerate(pairs)]


def spawn(folder: Path, requests: list[dict[str, Any]], *args: str, sdk: bool = False) -> dict[Any, dict[str, Any]]:
    """Every answer of a server given `requests` after initialize (sent at once, then stdin closed), by id. `sdk`:
    a clientInfo the early answers do not vouch for, so that the SDK answers everything."""
    client = {"name": "raw", "version": "1", **({"icon": "sdk"} if sdk else {})}
    hello = message(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client})
    lines = [hello, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *requests]
    with open(folder / "stderr.log", "ab") as log:
        done = subprocess.run(
            [sys.executable, "-m", "memory_server", *SERVER, *args],
            input=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
            stdout=subprocess.PIPE,
            stderr=log,
            env=server_env(),
            cwd=folder / "nowhere",
            timeout=120,
        )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(lines) - 1, answers  # every request answered once
    return {answer["id"]: answer for answer in answers}


def in_process(*args: str) -> EarlyAnswers:
    """The early answers of a server started with `args`, in this process."""
    options = parse_options([*SERVER, *args])
    contexts = open_contexts(options)
    return EarlyAnswers(contexts, Searcher(embeddings(options)), Budget(options.max_result_tokens))


# ---- the lists ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
def test_the_lists_are_what_the_sdk_answers(version):
    shipped = json.loads(early.LISTS.read_text(encoding="utf-8"))
    assert write_lists.sdk_lists(version) == shipped, (
        "memory_server/lists.json is not what the MCP SDK answers (a tool changed?): "
        "run .venv/bin/python scripts/write_lists.py"
    )


def test_without_context_admin_the_list_is_the_sdks_too(world):
    options = parse_options([*SERVER, "--no-context-admin"])
    answers = EarlyAnswers(open_contexts(options), Searcher(embeddings(options)), Budget(), context_admin=False)
    sdk = write_lists.sdk_lists("2025-11-25", "--no-context-admin")
    assert answers.lists["tools/list"] == sdk["tools/list"]
    assert {"add_context", "remove_context"}.isdisjoint(tool["name"] for tool in sdk["tools/list"]["tools"])


def test_every_read_tool_answered_early_knows_all_its_arguments():
    # A tool whose schema gains an argument is left to the SDK (correct, but slow): this says which to teach.
    schemas = {tool["name"]: tool["inputSchema"] for tool in in_process().lists["tools/list"]["tools"]}
    for name, known in early.ARGUMENTS.items():
        assert set(schemas[name]["properties"]) == set(known), name


# ---- the read tools ----------------------------------------------------------------------------------------------


def test_early_results_are_the_sdks_results(world):
    requests = calls(EARLY_CALLS)
    sdk = spawn(world, requests, sdk=True)
    answers = in_process()
    for request in requests:
        answer = answers.answer(request)
        assert answer is not None, request
        assert json.dumps(answer) == json.dumps(sdk[request["id"]]), request
    texts = [sdk[r["id"]]["result"]["content"][0]["text"] for r in requests]
    assert [n for n, text in enumerate(texts) if "Skipped 1 line" in text] == [0]  # the warning, once
    assert all("context #4" in text for text in texts)  # the registry's problem, every time
    assert [sdk[r["id"]]["result"]["isError"] for r in requests].count(True) == 3  # cursor, context, project


def test_what_the_sdk_would_read_otherwise_is_left_to_it(world):
    answers = in_process()
    for request in calls(SDK_CALLS):
        assert answers.answer(request) is None, request
    assert answers.answer(message(1, "tools/list", {"cursor": "x"})) is None
    assert answers.answer(message(2, "resources/list")) is None
    assert answers.answer(message(True, "ping")) is None  # type: ignore[arg-type]
    assert answers.answer(message(3, "ping", {"_meta": {"progressToken": 1}})) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {},
    }


def test_a_client_with_roots_gets_its_tools_from_the_sdk(world):
    answers = in_process()
    answers.client_has_roots = True  # its memory may be a project's, known once the SDK asked for the roots
    (request,) = calls([("read_graph", {})])
    assert answers.answer(request) is None
    assert answers.answer(message(1, "tools/list")) is not None


# ---- on the wire ---------------------------------------------------------------------------------------------------


def test_on_the_wire_the_early_answers_are_the_sdks_and_the_rest_follows_in_order(world):
    later = ("read_graph", {"detail": "names"})
    requests = [
        message(1, "tools/list"),
        message(2, "prompts/list"),
        message(3, "resources/templates/list"),
        message(4, "ping"),
        *calls([*EARLY_CALLS[:3], ("search_nodes", {"query": "tea"}), ("open_nodes", {"names": ["Cy"], "depth": 1})]),
        *calls([SDK_CALLS[-1], later, *EARLY_CALLS[3:6]], first_id=20),  # a write: the SDK from here on
        message(30, "resources/list"),
    ]
    sdk = spawn(world, requests, sdk=True)
    (world / "memory.jsonl").write_text(SEED)  # as it was before the SDK's server wrote Dee
    ours = spawn(world, requests, "--log-level", "debug")
    for request in requests:
        assert json.dumps(ours[request["id"]]) == json.dumps(sdk[request["id"]]), request
    assert "Dee" in ours[21]["result"]["content"][0]["text"]  # the read after the write saw it
    log = (world / "stderr.log").read_text()
    early_line = next(line for line in log.splitlines() if "Answered before the MCP SDK was loaded" in line)
    for what in ("tools/list", "prompts/list", "ping", "tools/call read_graph", "tools/call open_nodes"):
        assert what in early_line
    assert "1 tools/call search_nodes" in early_line and "create_entities" not in early_line


# ---- plain arguments -------------------------------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "names": {"type": "array", "items": {"type": "string"}},
        "depth": {"type": "integer", "minimum": 0, "maximum": 2, "default": 0},
        "score": {"type": "number", "minimum": 0},
        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
        "note": {"type": "string"},
    },
    "required": ["names"],
}
KNOWN = ("names", "depth", "score", "mode", "note")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"names": ["x"]}, {"names": ["x"], "depth": 0, "score": None, "mode": "a", "note": None}),
        ({"names": [], "depth": 2, "score": 1, "mode": "b", "note": None}, {"depth": 2, "score": 1.0, "mode": "b"}),
        ({"names": ["x"], "note": "plain [text"}, {"note": "plain [text"}),
        ({"names": ["x"], "note": '"quoted"'}, {"note": '"quoted"'}),  # JSON, but a string: kept as the SDK keeps it
        ({"names": ["x"], "note": "12"}, {"note": "12"}),
    ],
)
def test_plain_arguments_are_passed_as_the_sdk_passes_them(arguments, expected):
    values = plain_arguments(SCHEMA, arguments, KNOWN)
    assert values is not None
    assert {key: values[key] for key in expected} == expected
    assert type(values["score"]) in (float, type(None))


@pytest.mark.parametrize(
    "arguments",
    [
        {},  # a required argument missing
        {"names": "x"},
        {"names": ["x", 1]},
        {"names": ["x"], "depth": 3},
        {"names": ["x"], "depth": -1},
        {"names": ["x"], "depth": True},
        {"names": ["x"], "depth": 1.0},
        {"names": ["x"], "depth": None},  # not optional: it has a default
        {"names": ["x"], "score": -0.5},
        {"names": ["x"], "score": "1"},
        {"names": ["x"], "mode": "c"},
        {"names": ["x"], "note": '["a"]'},  # the SDK reads these strings as JSON
        {"names": ["x"], "note": '{"a": 1}'},
        {"names": ["x"], "note": "null"},
        {"names": ["x"], "other": 1},
        ["x"],
    ],
)
def test_arguments_the_sdk_might_read_otherwise_are_left_to_it(arguments):
    assert plain_arguments(SCHEMA, arguments, KNOWN) is None


def test_a_schema_with_an_unknown_argument_or_rule_is_left_to_the_sdk():
    assert plain_arguments(SCHEMA, {"names": ["x"]}, KNOWN[:-1]) is None
    longer = {**SCHEMA, "properties": {**SCHEMA["properties"], "note": {"type": "string", "maxLength": 3}}}
    assert plain_arguments(longer, {"names": ["x"], "note": "ab"}, KNOWN) is None
    assert plain_arguments(longer, {"names": ["x"]}, KNOWN) is not None  # the rule only matters when given


# ---- after the SDK is loaded ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_memory_read_before_the_sdk_was_loaded_is_watched_for_subscribers(world):
    # The first call is most likely answered before the SDK is loaded (it takes a second); whichever answers it,
    # a change another program makes to that memory reaches a subscriber afterwards.
    elsewhere = world / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "work.jsonl").write_text(WORK)
    registry = world / "config" / APP / "contexts.json"
    data = json.loads(registry.read_text())
    data["contexts"][1]["path"] = str(elsewhere / "work.jsonl")
    registry.write_text(json.dumps(data))
    updates = Updates()
    async with connect(server_env(), SERVER, cwd=world / "nowhere", message_handler=updates) as session:
        assert (await ok(session, "read_graph", context="work"))["entities"][0]["name"] == "Quarterly report"
        await session.subscribe_resource("memory://contexts/work")
        await anyio.sleep(0.5)  # let the watcher start
        with open(elsewhere / "work.jsonl", "a") as file:
            file.write('{"type":"entity","name":"Budget","entityType":"task","observations":[]}\n')
        await updates.wait("memory://contexts/work")


@pytest.mark.anyio
async def test_the_sdks_client_sees_the_same_tools_and_results_either_way(world):
    # A client whose clientInfo has icons is left to the SDK from initialize on (handshake.py); a plain one gets
    # the early answers. The SDK's own client reads both alike.
    sdk_client = Implementation(name="icons", version="1", icons=[Icon(src="https://example.org/icon.png")])
    seen = []
    for options in ({}, {"client_info": sdk_client}):
        async with connect(server_env(), SERVER, cwd=world / "nowhere", **options) as session:
            tools = [tool.model_dump() for tool in (await session.list_tools()).tools]
            found = [(await session.call_tool(tool, arguments)).model_dump() for tool, arguments in EARLY_CALLS[:9]]
            seen.append((tools, found))
    assert seen[0] == seen[1]
    assert len(seen[0][0]) == 14 and not any(result["is_error"] for result in seen[0][1][:3])
