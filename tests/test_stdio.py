"""Our stdio transport answers every request, including those the SDK's own transport dropped, and reads no faster
than the client takes the answers. Parsing is tested on its own; the rest drives the real server over raw pipes,
so that any bytes can be sent."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import connect, entity, ok, server_env

from memory_server.stdio import MAX_IN_FLIGHT, parse_line, parse_message

HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}).encode()
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def request(method: str, params_text: str, request_id: int | str = 7) -> str:
    return f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"method":"{method}","params":{params_text}}}'


def tool_call(request_id: int, tool: str, arguments: dict[str, Any]) -> bytes:
    params = {"name": tool, "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


def start(folder: Path, **env: str | Path) -> subprocess.Popen[bytes]:
    users = {name: folder / name.lower() for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")}
    env.setdefault("MEMORY_FILE_PATH", folder / "memory.jsonl")
    with open(folder / "stderr.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "memory_server", "--embedding-model", "none"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=server_env(**users, **env),
        )


def exchange(folder: Path, lines: list[bytes], **env: str | Path) -> dict[Any, dict[str, Any]]:
    """Send raw lines, close stdin, and return every answer by id (ids that are not hashable as they are, by repr).
    The server answers what was asked before stdin closed, then exits."""
    server = start(folder, **env)
    out, _ = server.communicate(b"".join(line + b"\n" for line in lines), timeout=60)
    answers = [json.loads(line) for line in out.splitlines()]
    return {json.dumps(a.get("id")) if not isinstance(a.get("id"), (int, str)) else a["id"]: a for a in answers}


# ---- parsing ---------------------------------------------------------------------------------------------------


def test_a_valid_request_passes_through_with_its_lone_surrogate():
    message, answer = parse_message(request("tools/call", '{"name":"search_nodes","arguments":{"query":"a\\ud800"}}'))
    assert answer is None
    assert message.params["arguments"]["query"] == "a\ud800"


def test_unparsable_json_gets_a_parse_error():
    message, answer = parse_message("{not json")
    assert message is None
    assert answer["id"] is None and answer["error"]["code"] == -32700


def test_a_tool_call_nested_too_deeply_gets_an_error_result_naming_the_argument():
    deep = "[" * 5000 + "]" * 5000
    message, answer = parse_message(
        request("tools/call", f'{{"name":"create_entities","arguments":{{"entities":{deep}}}}}')
    )
    assert message is None and answer["id"] == 7
    assert answer["result"]["isError"]
    assert "argument 'entities' is nested too deeply" in answer["result"]["content"][0]["text"]


def test_an_invalid_request_is_answered_with_its_id_and_a_notification_is_not():
    _, answer = parse_message('{"jsonrpc":"2.0","id":"x","method":42}')
    assert answer["id"] == "x" and answer["error"]["code"] == -32600 and "method" in answer["error"]["message"]
    assert parse_message('{"jsonrpc":"2.0","method":"notifications/initialized","params":3}') == (None, None)


def test_an_id_that_is_not_a_string_or_an_integer_makes_an_invalid_request():
    for bad in ("null", "1.5", "1.0", "true", "[1]", "{}", '{"a": 1}'):
        message, answer = parse_message(f'{{"jsonrpc":"2.0","id":{bad},"method":"ping"}}')
        assert message is None, bad  # never taken for a notification, which nobody answers
        assert answer["id"] is None and answer["error"]["code"] == -32600
        assert f"the id must be a string or an integer, not {bad}" in answer["error"]["message"]


def test_bytes_that_are_not_utf8_are_a_parse_error_never_replaced():
    line = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_graph","arguments":{"q":"a\xff"}}}'
    message, answer = parse_line(line)
    assert message is None
    assert answer["id"] == 5 and answer["error"]["code"] == -32700
    position = line.index(b"\xff")
    assert f"byte 0xff at position {position}" in answer["error"]["message"]
    assert parse_line(b'{"jsonrpc":"2.0","id":"\xc3","method":"ping"}')[1]["id"] is None  # the id is the bad part
    assert parse_line(b'{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"\xed\xa0\x80"}}') == (None, None)
    assert parse_line(b"\xfe\xff garbage")[1]["id"] is None
    assert parse_line(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')[0].id == 1


# ---- over the pipes ----------------------------------------------------------------------------------------------


def test_a_request_before_initialize_is_told_to_initialize_first(tmp_path):
    answers = exchange(
        tmp_path,
        [
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
            tool_call(2, "read_graph", {}),
            b'{"jsonrpc":"2.0","id":3,"method":"no/such/method"}',
            b'{"jsonrpc":"2.0","id":4,"method":"ping"}',
            INITIALIZE,
            INITIALIZED,
            b'{"jsonrpc":"2.0","id":5,"method":"tools/list"}',
        ],
    )
    for early in (1, 2):
        message = answers[early]["error"]["message"]
        assert "not initialized yet" in message and "'initialize' request first" in message, message
    assert answers[3]["error"]["code"] == -32601  # an unknown method is still "Method not found"
    assert answers[4]["result"] == {}
    assert any(tool["name"] == "read_graph" for tool in answers[5]["result"]["tools"])


def test_every_request_with_an_invalid_id_gets_an_invalid_request_error(tmp_path):
    bad_ids = ["null", "1.5", "true", "[1]", "{}"]
    lines = [INITIALIZE, INITIALIZED]
    lines += [f'{{"jsonrpc":"2.0","id":{bad},"method":"tools/list"}}'.encode() for bad in bad_ids]
    lines.append(b'{"jsonrpc":"2.0","id":9,"method":"ping"}')
    server = start(tmp_path)
    out, _ = server.communicate(b"".join(line + b"\n" for line in lines), timeout=60)
    answers = [json.loads(line) for line in out.splitlines()]
    refused = [a for a in answers if a.get("id") is None]
    assert len(refused) == len(bad_ids), answers
    for answer, bad in zip(refused, bad_ids):
        assert answer["error"]["code"] == -32600 and f"not {bad}" in answer["error"]["message"]
    assert answers[-1] == {"jsonrpc": "2.0", "id": 9, "result": {}}


def test_a_line_that_is_not_utf8_gets_a_parse_error_and_nothing_is_stored(tmp_path):
    memory = tmp_path / "memory.jsonl"
    memory.write_text('{"type":"entity","name":"kept","entityType":"t","observations":[]}\n')
    before = memory.read_bytes()
    bad = json.dumps({"name": "café", "entityType": "t", "observations": ["naïve"]}, ensure_ascii=False).encode(
        "latin-1"
    )
    create = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_entities","arguments":{"entities":[%s]}}}'
    answers = exchange(tmp_path, [INITIALIZE, INITIALIZED, create % bad, b"\xff\xfe{", tool_call(8, "read_graph", {})])
    assert answers[7]["error"]["code"] == -32700 and "not valid UTF-8" in answers[7]["error"]["message"]
    assert answers["null"]["error"]["code"] == -32700  # no id to be found in that one
    assert [e["name"] for e in answers[8]["result"]["structuredContent"]["entities"]] == ["kept"]
    assert memory.read_bytes() == before  # never stored with U+FFFD in place of the bytes


def test_a_client_that_stops_reading_stops_the_server_reading_and_loses_nothing(tmp_path):
    """A client writes requests and never reads: the server must stop taking them (its pipe then blocks the client)
    rather than keep every answer in memory. Once the client reads again, every request is answered."""
    memory = tmp_path / "memory.jsonl"
    big = "x" * 3000  # each read_graph answer holds about 120 kB: the output budget is reached in ~140 answers
    memory.write_text("".join(json.dumps(entity(f"e{i}", "t", big) | {"type": "entity"}) + "\n" for i in range(20)))
    total = 500  # far more than fit in the pipe's buffer (64 kB) with the padding below
    padding = {"_meta": {"padding": "p" * 1000}}
    server = start(tmp_path)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(INITIALIZE + b"\n" + INITIALIZED + b"\n")
    server.stdin.flush()
    assert json.loads(server.stdout.readline())["id"] == 0
    taken = [0]

    def flood() -> None:
        for i in range(1, total + 1):
            line = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "tools/call",
                    "params": {"name": "read_graph", "arguments": {}} | padding,
                }
            )
            server.stdin.write(line.encode() + b"\n")  # blocks once the server stops reading
            server.stdin.flush()
            taken[0] = i

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    try:
        deadline, last, still_since = time.monotonic() + 60, -1, time.monotonic()
        while writer.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
            if taken[0] != last:
                last, still_since = taken[0], time.monotonic()
            elif time.monotonic() - still_since > 3:
                break
        assert writer.is_alive(), f"the server took all {total} requests while nobody read its answers"
        assert taken[0] < total, taken[0]
        answered = set()
        while len(answered) < total:  # reading again: the rest are taken and every request is answered once
            answer = json.loads(server.stdout.readline())
            assert answer["id"] not in answered and "result" in answer
            answered.add(answer["id"])
        writer.join(10)
        server.stdin.close()
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def test_a_batch_written_whole_before_reading_is_answered_in_full(tmp_path):
    """A script that writes all its requests, closes stdin and only then reads, as long as the answers fit in the
    output budget (here 1,500 calls of ~400 bytes)."""
    server = start(tmp_path)
    assert server.stdin is not None and server.stdout is not None
    lines = [INITIALIZE, INITIALIZED]
    lines += [tool_call(i, "create_entities", {"entities": [entity(f"e{i}")]}) for i in range(1, 1501)]
    server.stdin.write(b"".join(line + b"\n" for line in lines))
    server.stdin.close()
    answers = [json.loads(line) for line in server.stdout.read().splitlines()]
    assert sorted(a["id"] for a in answers) == list(range(1501))
    assert all("error" not in a and not a["result"].get("isError") for a in answers)
    assert server.wait(timeout=30) == 0
    server.stdout.close()


@pytest.mark.anyio
async def test_more_calls_at_once_than_the_reader_takes_still_get_the_clients_roots(tmp_path):
    """Past MAX_IN_FLIGHT unanswered requests the server stops reading, but not while it waits for the client's
    answer to its own roots/list request: that answer arrives on stdin, and every call needs it."""
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    config = tmp_path / "config"
    (config / "mcp-memory-contexts").mkdir(parents=True)
    (config / "mcp-memory-contexts" / "contexts.json").write_text(
        json.dumps({"activeContext": "p", "contexts": [{"name": "p", "path": "{projectDir}/.ai-memory.jsonl"}]})
    )
    env = server_env(XDG_CONFIG_HOME=config, MEMORY_EMBEDDING_MODEL="none")
    async with connect(env, cwd=tmp_path, roots=[project]) as session:
        results: list[dict[str, Any]] = []

        async def ask() -> None:
            results.append(await ok(session, "get_active_context"))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for _ in range(MAX_IN_FLIGHT * 2):
                    group.start_soon(ask)
    assert len(results) == MAX_IN_FLIGHT * 2
    assert {r["active"]["projectDir"] for r in results} == {str(project.resolve())}
