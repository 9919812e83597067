"""The answer to `initialize` sent before the SDK is loaded (handshake.py) is the SDK's answer, sent once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from test_stdio import INITIALIZED, start

from memory_server import handshake
from memory_server.contexts import ContextRegistry, Contexts
from memory_server.embeddings import EmbedderSlot
from memory_server.searcher import Searcher
from memory_server.server import build_server

PING = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'


def initialize(request_id: int | str, version: str, **client: str) -> bytes:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1", **client}}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}).encode()


def answers(folder: Path, lines: list[bytes]) -> list[dict]:
    """Every line the server writes for `lines` (sent at once, then stdin closed), in order."""
    folder.mkdir(exist_ok=True)
    server = start(folder)
    out, _ = server.communicate(b"".join(line + b"\n" for line in lines), timeout=60)
    return [json.loads(line) for line in out.splitlines()]


def test_the_negotiation_is_the_installed_sdks(tmp_path):
    # The capabilities are checked on the wire below, against the SDK's own answer.
    assert handshake.HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS
    assert handshake.HANDSHAKE_VERSIONS[-1] == LATEST_HANDSHAKE_VERSION
    contexts = Contexts(ContextRegistry(tmp_path / "cfg", tmp_path / "default.jsonl"))
    options = build_server(contexts, Searcher(EmbedderSlot("none")))._lowlevel_server.create_initialization_options()  # noqa: SLF001
    assert (options.server_name, options.server_version) == (handshake.SERVER_NAME, handshake.__version__)


@pytest.mark.parametrize("version", [*HANDSHAKE_PROTOCOL_VERSIONS, "2099-01-01", "2026-07-28"])
def test_initialize_is_answered_once_as_the_sdk_answers_it(tmp_path, version):
    # A clientInfo the early answer does not vouch for (an unknown field) leaves the answer to the SDK: the two
    # answers must be the same, and each request is answered exactly once.
    early = answers(tmp_path / "early", [initialize(1, version), INITIALIZED, PING])
    late = answers(tmp_path / "late", [initialize(1, version, icon="x"), INITIALIZED])
    assert [a.get("id") for a in early] == [1, 2] and [a.get("id") for a in late] == [1]
    late_result = late[0]["result"]
    late_result["instructions"] = late_result["instructions"].replace(str(tmp_path / "late"), str(tmp_path / "early"))
    assert early[0]["result"] == late_result
    granted = version if version in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
    assert early[0]["result"]["protocolVersion"] == granted
    assert "SDK answered initialize" not in (tmp_path / "early" / "stderr.log").read_text()


@pytest.mark.parametrize(
    "first",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',  # a request before initialize
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}',  # incomplete
        b"not json",
    ],
)
def test_a_first_line_that_is_not_a_plain_initialize_is_left_to_the_sdk(tmp_path, first):
    replies = answers(tmp_path, [first, initialize(5, "2025-11-25"), INITIALIZED, PING.replace(b'"id":2', b'"id":6')])
    assert "error" in replies[0]  # what the SDK (and our transport) said to it, as before
    assert [r.get("id") for r in replies[1:]] == [5, 6] and "result" in replies[1]
